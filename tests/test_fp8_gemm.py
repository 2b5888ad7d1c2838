"""FP8 GEMMs of power-of-two-scaled recipes (``gemm_dtype = "fp8"``): the exact per-row E4M3 decision and
conversion (torch twin and Triton kernel, in the interpreter), the bf16 path of unfit rows, and ``QuantLinear``
on the CPU against the bf16 recipe."""

from __future__ import annotations

import pytest
import torch

from fp4lab.errors import SpecError
from fp4lab.kernels.fp8_convert_launch import to_e4m3_rows_triton
from fp4lab.recipes import QuantLinear, Recipe, backend, fake_quantize, get_recipe, load_recipe
from fp4lab.recipes.fp8_gemm import R_MIN, E4M3Rows, e4m3_rows_reference, fp8_gemm

E4M3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
E4M3 = E4M3[torch.isfinite(E4M3)]  # the 254 finite values (both zeros)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def mixed_rows(seed: int = 0, cols: int = 32) -> torch.Tensor:
    """bf16 rows that fit, rows that miss by one binade or one bit, random bit patterns and special values."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(160):
        v = E4M3[torch.randint(0, E4M3.numel(), (cols,), generator=g)]
        v = v * 2.0 ** float(torch.randint(-120, 115, (1,), generator=g))
        if i % 4 == 1:  # widen the span by up to 2 binades either way: some still fit, some not
            v = v * 2.0 ** torch.randint(-2, 3, (cols,), generator=g).double()
        if i % 4 == 2:  # one element with a 5th significant bit
            v[int(torch.randint(0, cols, (1,), generator=g))] *= 1.0 + 2.0 ** -4 * float(i % 8 == 2)
        rows.append(v)
    t = torch.stack(rows).to(torch.bfloat16)
    noise = torch.randint(-2**15, 2**15, (24, cols), generator=g, dtype=torch.int32).to(torch.int16)
    t = torch.cat([t, noise.view(torch.bfloat16)])
    t[3, 5], t[7, 1], t[11, 2] = float("nan"), float("inf"), -float("inf")
    t[9] = 0.0
    t[10, ::2] = -0.0
    t[13] = 2.0 ** -126 * torch.arange(cols)  # reaches the bf16 subnormals
    t[14] = 448.0 * 2.0 ** 60  # the E4M3 maximum at an offset
    t[15] = torch.tensor([60.0, 1.0, -2.0, 0.25] * (cols // 4))  # 60 = 1.875 * 2^5: needs the larger exponent
    return t


def fits_by_search(t: torch.Tensor) -> torch.Tensor:
    """Per row: is there an r >= R_MIN with every value exactly an E4M3 number times 2^r (torch's conversion)?"""
    v = t.double()
    fits = torch.zeros(t.shape[0], dtype=torch.bool)
    for r in range(R_MIN, 122):
        w = v / 2.0 ** r
        back = w.to(torch.float8_e4m3fn).double()
        fits |= (torch.isfinite(w) & (w.abs() <= 448) & (back == w)).all(dim=1)
    return fits


def check_operand(op: E4M3Rows, rows: torch.Tensor) -> None:
    """Fitting rows: codes * 2^r equal the values bit for bit, and the codes are torch's E4M3 of v / 2^r."""
    ok = op.unfit == 0
    assert torch.equal(bits(op.decode()[ok]), bits(rows[ok].float()))
    assert torch.equal(bits(op.codes[ok]), bits((rows[ok].float() / op.scale[ok, None]).to(torch.float8_e4m3fn)))
    assert torch.equal(op.scale, torch.exp2(torch.log2(op.scale).round()))  # powers of two


def test_reference_decision_is_exact_and_optimal():
    t = mixed_rows()
    op = e4m3_rows_reference(t)
    fits = fits_by_search(t)
    assert torch.equal(op.unfit == 0, fits)
    assert 60 < int(fits.sum()) < t.shape[0] - 40  # both outcomes well represented
    assert op.unfit[[3, 7, 11, 13]].tolist() == [1, 1, 1, 1] and op.unfit[[9, 10, 14, 15]].tolist() == [0, 0, 0, 0]
    check_operand(op, t)
    assert bits(op.codes[10, ::2]).tolist() == [0x80] * 16  # -0 stays -0


def test_transposed_reference_is_the_reference_of_the_transpose():
    t = mixed_rows(1, cols=48)[:, :48]
    a, b = e4m3_rows_reference(t, transpose=True), e4m3_rows_reference(t.t().contiguous())
    assert all(torch.equal(bits(x), bits(y)) for x, y in ((a.codes, b.codes), (a.scale, b.scale), (a.unfit, b.unfit)))


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("shape", [(184, 32), (64, 512), (40, 72)])
def test_triton_kernel_matches_reference(shape, transpose):
    g = torch.Generator().manual_seed(shape[1])
    t = mixed_rows(shape[1], cols=shape[1])[torch.randperm(184, generator=g)[:shape[0]]]
    if transpose:  # columns of one magnitude so that most of them fit, a few spoiled
        t = (E4M3[torch.randint(0, E4M3.numel(), shape, generator=g)] * 2.0 ** -40).to(torch.bfloat16)
        t[:, 1] *= 2.0 ** 90
        t[5, 3], t[7, 4], t[0, 6] = float("nan"), 1.0, 1.0 + 2.0 ** -5
    q, scale, unfit = to_e4m3_rows_triton(t, transpose)
    ref = e4m3_rows_reference(t, transpose)
    assert torch.equal(bits(q), bits(ref.codes)) and torch.equal(bits(scale), bits(ref.scale))
    assert torch.equal(unfit, ref.unfit)
    assert 0 < int(unfit.sum()) < unfit.numel()


def test_every_e4m3_value_at_extreme_offsets_fits():
    for r in (R_MIN, -9, 0, 113):
        t = (E4M3.reshape(2, 127) * 2.0 ** r).to(torch.bfloat16)
        q, scale, unfit = to_e4m3_rows_triton(t)
        assert unfit.tolist() == [0, 0]
        assert torch.equal(bits((q.float() * scale[:, None]).to(torch.bfloat16)), bits(t))


@pytest.mark.parametrize("fmt", ["mxfp4", "int4-b32-e8m0", "ufp4-e8m0"])
def test_power_of_two_scaled_operands_are_exact_e4m3(fmt):
    """The dequantized operands of qualifying formats (SR and RHT included) fit row by row on normal data, and
    decode to the emulator's values bit for bit; MXFP4 rows fit while their block exponents span 15 binades."""
    torch.manual_seed(0)
    r = Recipe(name="t", format=fmt, rht=["wgrad"], rht_size=32, sr=["dy"], sr_bits=16, gemm_dtype="fp8")
    x = torch.randn(64, 128) * torch.logspace(-3, 3, 64)[:, None]
    for operand, gemm, axis in (("x", "fprop", -1), ("dy", "wgrad", 0), ("dy", "dgrad", -1)):
        v = fake_quantize(x, r, operand, gemm, axis, seed=7)
        op = e4m3_rows_reference(v, transpose=axis == 0)
        assert int(op.unfit.sum()) == 0
        check_operand(op, v.t() if axis == 0 else v)
    if fmt == "mxfp4":  # blocks with exponents 0 and -k holding E2M1's largest (6) and smallest (0.5) values
        for k, fit in ((14, 1), (15, 0)):
            row = torch.zeros(1, 64)
            row[0, 0], row[0, 32], row[0, 33] = 6.0, 4.0 * 2.0 ** -k, 0.5 * 2.0 ** -k
            v = fake_quantize(row, r, "x", "fprop", -1)
            assert v[0, [0, 32, 33]].tolist() == row[0, [0, 32, 33]].tolist()
            assert e4m3_rows_reference(v).unfit.tolist() == [1 - fit]


def _unfit_case(k: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 A [48, k] and B [32, k] of E4M3 values; rows 2 and 17 of A and row 5 of B do not fit."""
    g = torch.Generator().manual_seed(3)
    a = (E4M3[torch.randint(0, 254, (48, k), generator=g)] * 2.0 ** -5).to(torch.bfloat16)
    b = (E4M3[torch.randint(0, 254, (32, k), generator=g)] * 2.0 ** 3).to(torch.bfloat16)
    a[[2, 17], 9] = 1.0 + 2.0 ** -6  # 7 significant bits: unfit
    b[5, 0] = 3.0 * 2.0 ** -40  # 17 binades below the row's largest magnitude: unfit
    return a, b


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_fp8_gemm_takes_the_bf16_path_for_unfit_rows_and_columns(path, monkeypatch):
    """Through torch._scaled_mm (CPU here): unfit rows of A and columns of B equal the fp32-accumulated product
    of the bf16 operands (plus the bias, rounded once), the rest the FP8 product of the same values; the counts
    add up. ``triton``: the bf16 path by the device kernel (``fp4lab.kernels.unfit_mm``) in the interpreter."""
    monkeypatch.setattr(backend, "TRITON_ON_CPU", path == "triton")
    a, b = _unfit_case()
    a8, b8 = e4m3_rows_reference(a), e4m3_rows_reference(b)
    assert a8.unfit.nonzero().flatten().tolist() == [2, 17] and b8.unfit.nonzero().flatten().tolist() == [5]
    counts = torch.zeros(2, dtype=torch.int64)
    y = fp8_gemm(a8, b8, a, b, torch.float32, False, counts=counts)
    assert counts.tolist() == [48 + 32, 3]
    exact = a.double() @ b.double().t()
    bound = 2.0 ** -16 * (a.double().abs() @ b.double().abs().t())  # fp32 accumulation over K = 64
    assert ((y.double() - exact).abs() <= bound).all()
    rows, col = a[[2, 17]].float() @ b.float().t(), a.float() @ b[[5]].float().t()
    if path == "torch":
        assert torch.equal(y[[2, 17], :5], rows[:, :5]) and torch.equal(y[:, 5:6], col)
    fp8_only = a8.decode().double() @ b8.decode().double().t()
    keep = torch.ones_like(y, dtype=torch.bool)
    keep[[2, 17]] = False
    keep[:, 5] = False
    assert not torch.equal(y.double()[~keep], fp8_only[~keep])  # the unfit rows' codes are not their values
    bias = torch.randn(32)
    yb = fp8_gemm(a8, b8, a, b, torch.bfloat16, True, bias=bias, counts=counts)
    assert yb.dtype == torch.bfloat16 and counts.tolist() == [2 * 80, 6]
    ref = (exact + bias.double()).to(torch.bfloat16).double()
    ulp = 2.0 ** (torch.floor(torch.log2(ref.abs().clamp(min=2.0 ** -100))) - 7)
    assert ((yb.double() - ref).abs() <= ulp + bound).all()  # one bf16 rounding of an fp32-accumulated sum
    if path == "torch":
        assert torch.equal(yb[:, 5:6], (col + bias[5]).to(torch.bfloat16))


def test_unfit_kernel_leaves_fit_tiles_alone_and_handles_strides(monkeypatch):
    """The device kernel writes only the flagged rows and columns (a sentinel elsewhere survives), reads
    transposed operands and outputs, and counts without writing when no flag is set."""
    from fp4lab.kernels.unfit_mm_launch import unfit_mm_triton

    a, b = _unfit_case(k=40)
    ua = torch.zeros(48, dtype=torch.int32)
    ub = torch.zeros(32, dtype=torch.int32)
    counts = torch.zeros(2, dtype=torch.int64)
    y = torch.full((32, 48), 7.0).t()  # a column-major [48, 32] output
    unfit_mm_triton(y, a.t().contiguous().t(), b, ua, ub, counts)
    assert counts.tolist() == [80, 0] and bool((y == 7.0).all())
    ua[[0, 33]] = 1
    ub[[31]] = 1
    unfit_mm_triton(y, a, b.t().contiguous().t(), ua, ub, counts)
    assert counts.tolist() == [160, 3]
    exact = a.double() @ b.double().t()
    bound = 2.0 ** -16 * (a.double().abs() @ b.double().abs().t())  # fp32 accumulation over K = 40
    mask = torch.zeros_like(y, dtype=torch.bool)
    mask[[0, 33]] = True
    mask[:, 31] = True
    assert bool((y[~mask] == 7.0).all())
    assert bool(((y.double() - exact).abs() <= bound)[mask].all())


def _layer_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """x [64, 96] with row 5 spanning 40 binades (its fprop row and the wgrad columns it reaches cannot fit E4M3
    times one power of two) and dy [64, 128]."""
    torch.manual_seed(0)
    x = torch.randn(64, 96, dtype=torch.bfloat16)
    x[5, :32] *= 2.0 ** 20
    x[5, 32:] *= 2.0 ** -20
    return x, torch.randn(64, 128, dtype=torch.bfloat16)


def _layer_results(recipe: str, x: torch.Tensor, dy: torch.Tensor) -> tuple:
    """((y, dx, dw, db), fp8_stats or None) of one bf16 QuantLinear step with fixed parameters."""
    layer = QuantLinear(x.shape[1], dy.shape[1], recipe=recipe, seed=3, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.manual_seed(1)
        layer.weight.normal_()
        layer.bias.normal_()
    xx = x.clone().requires_grad_()
    y = layer(xx)
    y.backward(dy)
    return (y, xx.grad, layer.weight.grad, layer.bias.grad), layer.fp8_stats


def test_quantlinear_fp8_on_cpu_equals_the_bf16_recipe():
    """Same operand values, rebuilt from E4M3 codes and row scales: forward and both gradients bit for bit equal
    to the mxfp4 recipe; an input row spanning 40 binades goes the bf16 path and is counted."""
    x, dy = _layer_inputs()
    ref, _ = _layer_results("mxfp4", x, dy)
    got, st = _layer_results("mxfp4-fp8", x, dy)
    for a, b in zip(ref, got):
        assert torch.equal(bits(a), bits(b))
    assert st["fprop"] == {"rows": 64 + 128, "bf16_rows": 1}
    assert st["dgrad"]["rows"] == 64 + 96 and st["wgrad"]["rows"] == 128 + 96
    assert st["dgrad"]["bf16_rows"] == 0


def test_quantlinear_fp8_device_path_in_the_interpreter(monkeypatch):
    """The CUDA path of an FP8 layer, in the interpreter: the fake-quant and E4M3 conversion kernels,
    torch._scaled_mm, the unfit kernel for the bf16 path with its device-side counts. The counts equal the CPU
    path's, and the results agree with the mxfp4 recipe's within fp32 accumulation."""

    x, dy = _layer_inputs()
    _, cpu_stats = _layer_results("mxfp4-fp8", x, dy)
    ref, _ = _layer_results("mxfp4", x, dy)
    monkeypatch.setattr(backend, "TRITON_ON_CPU", True)
    got, dev_stats = _layer_results("mxfp4-fp8", x, dy)
    assert dev_stats == cpu_stats and cpu_stats["fprop"]["bf16_rows"] == 1 and cpu_stats["wgrad"]["bf16_rows"] > 0
    for g, want, k in zip(got[:3], ref[:3], (96, 64, 64)):
        err = (g.double() - want.double()).abs()
        assert bool((err <= 2.0 ** -7 * want.double().abs() + 2.0 ** -20 * k * want.double().abs().max()).all())
    assert torch.equal(got[3], ref[3])  # db: the sum of dY


def test_fp8_recipes_need_power_of_two_scaled_formats(tmp_path):
    assert get_recipe("mxfp4-fp8").gemm_dtype == "fp8"
    assert Recipe(name="i", format="int4-b32-e8m0", gemm_dtype="fp8-fast").gemm_dtype == "fp8-fast"
    for fmt, why in (("ufp4", "block scale is 'fp32'"), ("nvfp4", "block scale is 'ue4m3'")):
        p = tmp_path / f"{fmt}.toml"
        p.write_text(f'name = "x"\nformat = "{fmt}"\ngemm_dtype = "fp8"\n')
        with pytest.raises(SpecError) as e:
            load_recipe(p)
        assert "\n" not in str(e.value) and why in str(e.value) and "operand x" in str(e.value)
    p = tmp_path / "w.toml"
    p.write_text('name = "x"\nformat = "mxfp4"\nweight_format = "nvfp4-2d"\ngemm_dtype = "fp8"\n')
    with pytest.raises(SpecError, match="operand w"):
        load_recipe(p)
