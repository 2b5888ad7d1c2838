"""Training with hardware numerics (recipe field ``gemm_numerics``): a layer's three GEMMs equal, bit for bit, the
CPU model of the kind (``fp4lab.emulate_gemm``) on operands quantized independently with ``fp4lab.quantize`` and
the layer's stochastic-rounding keys, then the epilogue alpha = ts_a * ts_b, bias, one rounding; on the CPU
model path and on the Triton path (interpreter). The operands' codes and scales dequantize to the recipe's fake
quantization bit for bit. What the hardware does not take is refused in one line; torch.compile gives the eager
bits."""

import copy
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp4lab  # noqa: E402
from fp4lab.errors import InputError, SpecError  # noqa: E402
from fp4lab.formats.registry import get_format  # noqa: E402
from fp4lab.hwspec.mma import kind_params  # noqa: E402
from fp4lab.hwspec.registry import get_hw  # noqa: E402
from fp4lab.recipes import (  # noqa: E402
    QuantLinear,
    backend,  # noqa: E402
    get_recipe,
    load_recipe,
    quantize_model,
    streams,
)
from fp4lab.recipes import runtime as runtime_module  # noqa: E402
from fp4lab.recipes.config import Recipe  # noqa: E402
from fp4lab.testing.bits import same_bits  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NVFP4_HW = Recipe(**{**get_recipe("nvfp4").model_dump(), "name": "nvfp4-hw",
                     "gemm_numerics": "blackwell-sm100:tcgen05.mxf4nvf4"})
# UFP4's grid with hardware scales (the kind takes UE4M3/UE8M0 block scales, not ufp4's FP32 ones); SR and the RHT
# on every operand and GEMM, so every key and rotation of a layer is exercised
UFP4_HW = Recipe(name="ufp4-hw", format="ufp4-e4m3", rht=["fprop", "dgrad", "wgrad"], rht_size=16,
                 sr=["x", "w", "dy"], sr_bits=16, gemm_numerics="proposal-ufp4:bsmma.e1m2")
UFP4_F16 = str(ROOT / "examples" / "recipes" / "ufp4-proposal-f16.toml")


@pytest.fixture
def triton_path(monkeypatch):
    """Route CPU tensors through the Triton kernels (interpreter): quantize, emulated MMA, SR keys."""
    monkeypatch.setattr(backend, "TRITON_ON_CPU", True)


def _reference_operand(layer, t, op, gemm, along_m, step):
    """(operand for fp4lab.emulate_gemm [rows, R], tensor scale) built from fp4lab.quantize alone."""
    r = layer.recipe
    fmt = get_format(r.format_of(op))
    sr = op in r.sr
    seed = streams.sr_seed(layer.stream, step, f"{op}.{gemm}") if sr else 0
    axis = 0 if along_m and not fmt.block.is_2d else -1  # 2-D tiles block both axes at once
    qt = fp4lab.quantize(t.detach(), fmt, "sr" if sr else None, seed, axis, r.rht_size if gemm in r.rht else None,
                         layer.rht_seed, sr_bits=r.sr_bits)
    codes, scales = (qt.codes.T, qt.scales.T) if along_m else (qt.codes, qt.scales)
    return SimpleNamespace(codes=codes, scales=scales, fmt=fmt, tensor_scale=None), qt.tensor_scale


def _reference_gemm(layer, a, b, out_dtype, bias=None):
    """The CPU model's D, then alpha = fp32(ts_a * ts_b), fp32 multiply, fp32 bias add, one rounding."""
    hw, kind = layer.recipe.gemm_numerics.rsplit(":", 1)
    (qa, ts_a), (qb, ts_b) = a, b
    d = torch.from_numpy(np.asarray(fp4lab.emulate_gemm(qa, qb, hw, kind, scale_format=_scale_format(layer)),
                                    np.float32))
    if ts_a is not None or ts_b is not None:
        d = d * torch.tensor(np.float32(ts_a) * np.float32(ts_b))
    if bias is not None:
        d = d + bias.detach().float()
    return d.to(out_dtype)


def _scale_format(layer):
    return {"ue4m3": "ue4m3", "e8m0": "ue8m0"}[get_format(layer.recipe.format).scale.name]


def _layer(recipe, dtype, k=128, n=64):
    torch.manual_seed(0)
    layer = QuantLinear(k, n, recipe=recipe, name="blocks.0.mlp", dtype=dtype)
    layer.step = 3
    return layer


CASES = [(NVFP4_HW, torch.float32), (UFP4_HW, torch.bfloat16)]


@pytest.mark.parametrize("path", ["cpu-model", "triton"])
@pytest.mark.parametrize("recipe,dtype", CASES, ids=["nvfp4-tcgen05.mxf4nvf4", "ufp4-e4m3-bsmma.e1m2"])
def test_three_gemms_equal_the_cpu_model_on_reference_operands(recipe, dtype, path, request):
    if path == "triton":
        request.getfixturevalue("triton_path")
    layer = _layer(recipe, dtype)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 128, generator=g).to(dtype).requires_grad_(True)
    dy = torch.randn(64, 64, generator=g).to(dtype)
    y = layer(x)
    y.backward(dy)
    assert layer.step == (4 if recipe.sr else 3)
    w = layer.weight

    def ref(t, op, gemm, along_m):
        return _reference_operand(layer, t, op, gemm, along_m, step=3)

    want_y = _reference_gemm(layer, ref(x, "x", "fprop", False), ref(w, "w", "fprop", False), dtype, layer.bias)
    want_dx = _reference_gemm(layer, ref(dy, "dy", "dgrad", False), ref(w, "w", "dgrad", True), dtype)
    want_dw = _reference_gemm(layer, ref(dy, "dy", "wgrad", True), ref(x, "x", "wgrad", True), dtype)
    for got, want, what in ((y, want_y, "FPROP"), (x.grad, want_dx, "DGRAD"), (layer.weight.grad, want_dw, "WGRAD")):
        assert got.dtype == dtype and got.shape == want.shape, what
        assert same_bits(got.detach().float().numpy(), want.float().numpy()), what
    assert torch.equal(layer.bias.grad, dy.float().sum(0).to(dtype))
    assert torch.count_nonzero(layer.weight.grad) > 0.9 * layer.weight.numel()


def test_fewer_fraction_bits_are_the_cpu_model_of_that_kind_and_change_results(monkeypatch):
    """The example recipe on a user hwspec with F = 16 gives its kind's bits, which differ from F = 35's."""
    monkeypatch.chdir(ROOT)  # the example's hwspec path is relative to the working directory
    f16 = get_recipe(UFP4_F16)
    assert get_hw(f16.gemm_numerics.rsplit(":", 1)[0]).kind("bsmma.e1m2").accumulation.frac_bits.value == 16
    outs = {}
    for recipe in (f16, Recipe(**{**f16.model_dump(), "name": "f35", "gemm_numerics": "proposal-ufp4:bsmma.e1m2"})):
        layer = _layer(recipe, torch.float32, k=256)
        x = torch.randn(64, 256, generator=torch.Generator().manual_seed(2)) * torch.logspace(-3, 3, 256)
        with torch.no_grad():
            outs[recipe.name] = layer(x)
        want = _reference_gemm(layer, _reference_operand(layer, x, "x", "fprop", False, 3),
                               _reference_operand(layer, layer.weight, "w", "fprop", False, 3), torch.float32,
                               layer.bias)
        assert same_bits(outs[recipe.name].numpy(), want.numpy()), recipe.name
    assert not torch.equal(outs["f35"], outs[f16.name])


@pytest.mark.parametrize("path", ["emulator", "triton"])
@pytest.mark.parametrize("recipe", [NVFP4_HW, UFP4_HW], ids=["nvfp4", "ufp4-e4m3"])
def test_codes_and_scales_dequantize_to_the_fake_quant_bits(recipe, path, request):
    """Every GEMM operand the kind multiplies (codes x block scales, in the GEMM's [rows, R] layout) is the
    recipe's fake-quantized operand of that GEMM (the bf16 values in the rotated basis, tensor scale folded out),
    bit for bit, with the same tensor scale: quantize (numba on the CPU, the Triton kernel) and fake quantization
    draw the same SR bits from the same keys."""
    if path == "triton":
        request.getfixturevalue("triton_path")
    layer = _layer(recipe, torch.float32)
    rt = runtime_module.runtime(layer.layer_spec)
    keys = runtime_module.sr_keys(layer.sr_state, advance=False)
    g = torch.Generator().manual_seed(5)
    tensors = {"x": torch.randn(64, 128, generator=g), "w": layer.weight.detach(),
               "dy": torch.randn(64, 64, generator=g)}
    uses = [("x", "fprop", "k"), ("x", "wgrad", "m"), ("w", "fprop", "k"), ("w", "dgrad", "m"), ("dy", "dgrad", "k"),
            ("dy", "wgrad", "m")]
    for op, gemm, axis in uses:
        t = tensors[op]
        hw_op = rt.hw.operand(t, op, gemm, axis, keys)
        fq = rt.operands(t, op, gemm if axis == "k" else None, gemm if axis == "m" else None, keys)
        want, ts = (fq[0], fq[2]) if axis == "k" else (fq[1].T, fq[3])
        table = torch.from_numpy(np.asarray(get_format(recipe.format_of(op)).element.values, np.float32))
        block = hw_op.codes.shape[1] // hw_op.scales.shape[1]
        values = table[hw_op.codes.long()] * hw_op.scales.repeat_interleave(block, 1)
        assert same_bits(values.to(torch.bfloat16).view(torch.int16).numpy(),
                         want.contiguous().view(torch.int16).numpy()), (op, gemm)
        assert (ts is None) == (hw_op.tensor_scale is None) and (ts is None or float(ts) == float(hw_op.tensor_scale))


def test_compiled_steps_equal_eager_bit_for_bit():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.Linear(64, 8, bias=False))
    quantize_model(eager, NVFP4_HW, skip=("3",))
    compiled_src = copy.deepcopy(eager)
    compiled = torch.compile(compiled_src, fullgraph=True)
    g = torch.Generator().manual_seed(3)
    for _ in range(2):
        x, dy = torch.randn(64, 64, generator=g), torch.randn(64, 8, generator=g)
        got = []
        for model in (eager, compiled):
            model.zero_grad(set_to_none=True)
            xi = x.clone().requires_grad_(True)
            y = model(xi)
            y.backward(dy)
            got.append((y.detach(), xi.grad, [p.grad for p in model.parameters()]))
        (ya, xa, pa), (yb, xb, pb) = got
        assert torch.equal(ya, yb) and torch.equal(xa, xb) and all(torch.equal(p, q) for p, q in zip(pa, pb))
    assert [m.step for m in compiled_src.modules() if isinstance(m, QuantLinear)] == [2, 2]


BASE = 'name = "r"\nformat = "nvfp4"\nsr = ["dy"]\ngemm_numerics = "blackwell-sm100:tcgen05.mxf4nvf4"\n'
REFUSED = {
    "fp32 scales": ('name = "r"\nformat = "ufp4"\ngemm_numerics = "proposal-ufp4:bsmma.e1m2"\n',
                    "operand x (format 'ufp4'): its fp32 block scales per 16 elements are not a scale of kind"),
    "element grid": (BASE.replace("blackwell-sm100:tcgen05.mxf4nvf4", "proposal-ufp4:bsmma.e1m2"),
                     ("operand x (format 'nvfp4', element grid e2m1) is not an A operand of kind 'bsmma.e1m2', "
                      "which takes e1m2")),
    "block size": (BASE.replace("tcgen05.mxf4nvf4", "tcgen05.mxf4"),
                   ("its ue4m3 block scales per 16 elements are not a scale of kind 'tcgen05.mxf4', which takes "
                    "ue8m0/32")),
    "mixed scales": (BASE + 'weight_format = "mxfp4"\n', "FPROP multiplies x's ue4m3/16 block scales by w's e8m0/32"),
    "no block scales": (BASE.replace("tcgen05.mxf4nvf4", "tcgen05.f16"),
                        "kind 'tcgen05.f16' of 'blackwell-sm100' has no block scales"),
    "unknown kind": (BASE.replace("tcgen05.mxf4nvf4", "tcgen05.mxf5"),
                     "hw 'blackwell-sm100' has no kind 'tcgen05.mxf5'"),
    "no colon": (BASE.replace("blackwell-sm100:", ""), "expected '<hwspec name or .toml file>:<kind>'"),
    "gemm_dtype": (BASE.replace('format = "nvfp4"', 'format = "mxfp4"') + 'gemm_dtype = "fp8"\n',
                   "gemm_dtype must stay 'bf16'"),
    "unquantized operand": ('name = "r"\nsr = []\ngemm_numerics = "blackwell-sm100:tcgen05.mxf4nvf4"\n',
                            "operand x has no format"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_the_hardware_does_not_take_is_refused_at_load(case, tmp_path):
    text, message = REFUSED[case]
    path = tmp_path / "r.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_recipe(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: gemm_numerics: ") and message in msg, msg


def test_shapes_the_kind_does_not_take_are_refused_naming_the_layer():
    with pytest.raises(InputError, match=r"^blocks\.1\.attn: FPROP reduces over in_features = 96, not a multiple "
                                         r"of 64 \(the instruction K of gemm_numerics kind 'tcgen05.mxf4nvf4'\)"):
        QuantLinear(96, 64, recipe=NVFP4_HW, name="blocks.1.attn")
    with pytest.raises(InputError, match=r"^blocks\.1\.attn: DGRAD reduces over out_features = 32, not a multiple"):
        QuantLinear(64, 32, recipe=NVFP4_HW, name="blocks.1.attn")
    layer = QuantLinear(64, 64, recipe=NVFP4_HW, name="blocks.1.attn")
    with pytest.raises(InputError, match=r"^blocks\.1\.attn: 32 tokens .* not a multiple of 64, as WGRAD reduces "
                                         r"over the tokens on gemm_numerics kind 'tcgen05.mxf4nvf4'"):
        layer(torch.randn(32, 64))
    with torch.no_grad():  # no WGRAD: FPROP takes any number of tokens
        assert layer(torch.randn(48, 64)).shape == (48, 64)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32))
    with pytest.warns(UserWarning, match=r"1 \(64 -> 32\)"):
        quantize_model(model, NVFP4_HW)
    assert isinstance(model[0], QuantLinear) and not isinstance(model[1], QuantLinear)


def test_token_shards_are_refused():
    with pytest.raises(InputError, match="no data-parallel token shard"):
        runtime_module.LayerRuntime(NVFP4_HW, 0, shard=object())


def test_example_recipes_and_hwspecs_load(monkeypatch):
    """The example files: nvfp4 on Blackwell, ufp4-e4m3 on the proposal's E1M2 datapath with F = 35, 24 and 16
    (user hwspecs that inherit proposal-ufp4 and change frac_bits only)."""
    monkeypatch.chdir(ROOT)
    base = get_hw("proposal-ufp4")
    for f in (24, 16):
        spec = get_hw(str(ROOT / "examples" / "hwspec" / f"proposal-ufp4-f{f}.toml"))
        for kind in ("bsmma.e1m2", "bsmma.e2m1"):
            ours, theirs = kind_params(spec.kind(kind)), kind_params(base.kind(kind))
            assert ours.frac_bits == f and theirs.frac_bits == 35
            assert dataclasses.replace(ours, frac_bits=35) == theirs
            assert [(o.format, int(o.block)) for o in spec.kind(kind).scales] == \
                [(o.format, int(o.block)) for o in base.kind(kind).scales]
    hw = ROOT / "examples" / "hwspec"
    names = {"nvfp4-blackwell": "blackwell-sm100:tcgen05.mxf4nvf4", "ufp4-proposal": "proposal-ufp4:bsmma.e1m2",
             "ufp4-proposal-f24": f"{hw / 'proposal-ufp4-f24.toml'}:bsmma.e1m2",
             "ufp4-proposal-f16": f"{hw / 'proposal-ufp4-f16.toml'}:bsmma.e1m2",
             "nvfp4-proposal-f24": f"{hw / 'proposal-ufp4-f24.toml'}:bsmma.e2m1",
             "nvfp4-proposal-f16": f"{hw / 'proposal-ufp4-f16.toml'}:bsmma.e2m1"}
    monkeypatch.chdir(ROOT / "tests")  # a hwspec path in a recipe file is found from the file's folder
    for name, numerics in names.items():
        r = get_recipe(str(ROOT / "examples" / "recipes" / f"{name}.toml"))
        assert r.gemm_numerics == numerics and r.name == name


def test_layer_ops_pass_opcheck():
    """The layer ops' schemas and fake implementations agree with the gemm_numerics implementation (X itself is
    saved: forward's WGRAD operand output is empty)."""
    layer = QuantLinear(64, 64, recipe=NVFP4_HW)
    x = torch.randn(64, 64, requires_grad=True)
    args = (x, layer.weight, layer.bias, layer.sr_state, layer.fp8_counts, layer.layer_spec, True, torch.float32)
    torch.library.opcheck(torch.ops.fp4lab.quant_linear.default, args,
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    y, xm, ts, _ = torch.ops.fp4lab.quant_linear(*args)
    assert xm.numel() == 0 and ts.numel() == 0
    bargs = (torch.randn_like(y), x.detach(), layer.weight.detach(), ts, layer.sr_state.clone(),
             layer.fp8_counts.clone(), layer.layer_spec, True, True, True, torch.float32)
    torch.library.opcheck(torch.ops.fp4lab.quant_linear_backward.default, bargs,
                          test_utils=("test_schema", "test_faketensor"))


def test_accumulator_error_example(monkeypatch, capsys):
    """examples/accumulator_error.py: F = 35 (Blackwell) accumulates more accurately than fp32 sums of the same
    products, F = 16 less so, and no accumulator moves the total error off the quantization error."""
    import runpy
    import sys

    monkeypatch.setattr(sys, "argv", ["accumulator_error.py", "--k", "1024", "--rows", "16", "--dist", "normal"])
    runpy.run_path(str(ROOT / "examples" / "accumulator_error.py"), run_name="__main__")
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines()[2:]]
    assert [r[0] for r in rows] == ["nvfp4", "ufp4-e4m3"]
    for r in rows:  # format dist K quant, then "own / total" for fp32, F=35, F=24, F=16
        quant = float(r[3])
        own = [float(r[i]) for i in (4, 7, 10, 13)]
        total = [float(r[i]) for i in (6, 9, 12, 15)]
        assert own[1] < own[0] and own[1] <= own[2] < own[3] < 1e-3 * quant
        assert all(abs(t - quant) < 1e-3 for t in total)
