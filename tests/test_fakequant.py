"""The fused fake-quantize Triton kernel (``fake_quantize_triton``, in the interpreter) against
``fake_quantize_reference``, bit for bit: every built-in format, along K / along M / both in one read, RHT on
either, rtne and SR at every random-bit width, bf16 / fp16 / fp32 inputs, bf16 and fp32 outputs, with and
without the tensor scale, explicit tiles (several tiles per axis, partial edge tiles), the fallback cases (2-D
tiles along M, blocks of width 1, odd K), tensor scales, the numba twin, refused inputs, and the bf16-exactness
claim behind a recipe's ``gemm_dtype``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fp4lab
from fp4lab.emulator.quantize import fake_quantize_emulated
from fp4lab.errors import InputError
from fp4lab.kernels.fakequant_launch import fake_quantize_triton
from fp4lab.kernels.params import block_extents
from fp4lab.kernels.verify import _bits, make_input
from fp4lab.numerics.fakequant import bf16_rtne, fake_quantize_reference
from fp4lab.numerics.options import Blocking

ALL = fp4lab.list_formats()
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32


def _np(y) -> np.ndarray:
    return np.ascontiguousarray(y.float().numpy() if isinstance(y, torch.Tensor) else y, dtype=np.float32)


def assert_bits_equal(got, want, what: str) -> None:
    """float32 bit patterns equal (every NaN one pattern); the first mismatch in full otherwise."""
    g, w = _bits(_np(got)), _bits(_np(want))
    assert g.shape == w.shape, (what, g.shape, w.shape)
    bad = g != w
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} differ; first at {idx}: got "
                             f"0x{int(g[idx]):08x} ({_np(got)[idx]!r}), want 0x{int(w[idx]):08x} ({_np(want)[idx]!r})")


def run_and_compare(fmt, x: np.ndarray, rounding: str, along_k: Blocking | None, along_m: Blocking | None,
                    *, dtype=F32, sr_bits: int = 24, out=BF16, apply_ts: bool = True, tile=None) -> tuple:
    """fake_quantize_triton on x (converted to ``dtype``) against fake_quantize_reference on the same values,
    both outputs and both tensor scales; returns the kernel's (y_k, y_m, ts_k, ts_m)."""
    xt = torch.from_numpy(x).to(dtype)
    xf = xt.float().numpy()
    d = "bf16" if out == BF16 else "fp32"
    with np.errstate(all="ignore"):
        res = fake_quantize_triton(xt, fmt, rounding, along_k=along_k, along_m=along_m, sr_bits=sr_bits,
                                   out_dtype=out, apply_tensor_scale=apply_ts, tile=tile)
    label = f"{fmt.name} {rounding} sr_bits={sr_bits} {tuple(x.shape)} {dtype} out={d} apply_ts={apply_ts} tile={tile}"
    for y, ts, spec, axis, name in ((res[0], res[2], along_k, -1, "y_k"), (res[1], res[3], along_m, 0, "y_m")):
        if spec is None:
            assert y is None and ts is None
            continue
        assert y.dtype == out and tuple(y.shape) == tuple(x.shape)
        with np.errstate(all="ignore"):
            want, want_ts = fake_quantize_reference(xf, fmt, rounding, spec.seed, axis, spec.rht, spec.rht_seed,
                                                    sr_bits, d, apply_ts)
        assert_bits_equal(y, want, f"{label} {name} {spec}")
        if want_ts is None:
            assert ts is None, label
        else:
            assert ts is not None and ts.dtype == F32 and ts.numel() == 1
            assert_bits_equal(ts.reshape(1), np.array([want_ts], np.float32), f"{label} ts of {name}")
    return res


def _tile_for(fmt, rk: int | None, rm: int | None, along_m: bool) -> tuple[int, int]:
    """A small explicit tile: several tiles along both axes of a 64 x 128 input where the block allows."""
    tr, tc = block_extents(fmt)
    return max(32, tr, rm or 1, tc if along_m else 1), max(64, tc, rk or 1)


# ---------------------------------------------------------------------------------------------------------
# every built-in format


@pytest.mark.parametrize("name", ALL)
def test_fused_matches_reference_all_formats(name):
    fmt = fp4lab.get_format(name)
    k = Blocking
    # (kind, along_k, along_m, rounding, sr_bits, in dtype, out dtype, apply_ts, tile?)
    configs = [
        ("adversarial", k(None, 1, 2), None, "rtne", 24, BF16, BF16, True, False),
        ("random", None, k(16, 3, 4), "sr", 16, F32, F32, True, False),
        ("adversarial", k(16, 5, 6), k(32, 7, 8), "sr", 8, BF16, F32, False, False),
        ("random", k(32, 9, 10), k(None, 11, 12), "rtne", 24, F32, BF16, True, True),
        ("adversarial", k(None, 13, 14), k(None, 15, 16), "sr", 4, F16, BF16, True, True),
        ("random", k(16, 17, 18), k(16, 19, 20), "sr", 24, BF16, BF16, False, True),
    ]
    for i, (kind, ak, am, rounding, bits, dt, out, apply_ts, tiled) in enumerate(configs):
        x = make_input(kind, 64, 128, seed=10 + i)
        tile = _tile_for(fmt, ak and ak.rht, am and am.rht, am is not None) if tiled else None
        run_and_compare(fmt, x, rounding, ak, am, dtype=dt, sr_bits=bits, out=out, apply_ts=apply_ts, tile=tile)


# ---------------------------------------------------------------------------------------------------------
# SR widths, tiles, fallbacks


@pytest.mark.parametrize("name", ["ufp4", "nvfp4", "mxfp4", "int4-b32-e8m0"])
def test_sr_every_width_both_blockings(name):
    fmt = fp4lab.get_format(name)
    x = make_input("random", 64, 128, seed=3)
    outs = {}
    for bits in (24, 16, 8, 4):
        res = run_and_compare(fmt, x, "sr", Blocking(16, 1, 21), Blocking(None, 2, 22), dtype=BF16, sr_bits=bits)
        outs[bits] = (_bits(_np(res[0])), _bits(_np(res[1])))
    for bits in (16, 8, 4):  # the width reaches the kernel: each gives other roundings than 24 bits
        assert not np.array_equal(outs[bits][0], outs[24][0]) and not np.array_equal(outs[bits][1], outs[24][1])
    # the two blockings draw from their own seeds: along K and along M round differently
    assert not np.array_equal(outs[8][0], outs[8][1])


@pytest.mark.parametrize("name", ["ufp4", "mxfp4", "nvfp4"])
def test_explicit_tiles_with_partial_edge_tiles(name):
    """96 x 192 with tiles that do not divide it (the last tile row / column is partial): masking and the
    per-tile indexing of the SR counters, RHT chunks and M-blocks."""
    fmt = fp4lab.get_format(name)
    x = make_input("adversarial", 96, 192, seed=5)
    xr = make_input("random", 96, 192, seed=6)
    run_and_compare(fmt, x, "sr", Blocking(16, 1, 2), Blocking(32, 3, 4), dtype=BF16, sr_bits=8, tile=(64, 128))
    run_and_compare(fmt, xr, "sr", Blocking(None, 1, 2), Blocking(16, 3, 4), dtype=F32, sr_bits=16, out=F32,
                    tile=(32, 64))
    run_and_compare(fmt, x, "rtne", Blocking(32, 1, 2), None, dtype=BF16, tile=(16, 256))
    run_and_compare(fmt, xr, "sr", None, Blocking(None, 3, 4), dtype=BF16, sr_bits=4, tile=(64, 64, 4))
    if fmt.block_size == 16:  # the 16-row tiles the GPU takes for nvfp4's fused passes and ufp4's column passes
        run_and_compare(fmt, x, "sr", Blocking(None, 1, 2), Blocking(16, 3, 4), dtype=BF16, sr_bits=16,
                        tile=(16, 128, 2))
        run_and_compare(fmt, xr, "rtne", None, Blocking(16, 3, 4), dtype=BF16, tile=(16, 128, 2))


def test_gpu_tiles_follow_the_measured_rule():
    """The default (BM, BK, warps) on the GPU (the bits do not depend on it; the speed does, BENCHMARKS.md)."""
    from fp4lab.kernels.fakequant_launch import _tile

    big = dict(K=4096, M=16384, interp=False, tile=None)
    assert _tile(16, 1, 0, 16, True, True, coded_scales=True, **big) == (16, 128, 2)  # nvfp4 X / dY
    assert _tile(16, 1, 0, 16, True, True, coded_scales=False, **big) == (32, 64, 4)  # e2m1-b16-fp32
    assert _tile(32, 1, 0, 16, True, True, coded_scales=False, **big) == (32, 64, 4)  # mxfp4
    assert _tile(16, 1, 0, 16, False, True, coded_scales=False, **big) == (16, 128, 2)  # ufp4 column pass
    assert _tile(32, 1, 0, 16, False, True, coded_scales=False, **big) == (32, 64, 2)  # mxfp4 column pass
    assert _tile(16, 1, 16, 0, True, False, coded_scales=True, **big) == (16, 256, 4)  # K only


def test_sr_rows_not_a_multiple_of_one_philox_call():
    """K = 208 and K = 48 (blocks of 16): at 4 bits one Philox call serves 32 elements, so the calls straddle
    rows and the kernel takes its general random-bit path; so does a tile narrower than one call (4 and 8 bits)."""
    fmt = fp4lab.get_format("nvfp4")
    for K in (208, 48):
        x = make_input("random", 64, K, seed=K)
        run_and_compare(fmt, x, "sr", Blocking(16, 1, 2), Blocking(16, 3, 4), dtype=BF16, sr_bits=4)
    x = make_input("adversarial", 32, 48, seed=1)
    for bits in (4, 8):  # tiles 16 wide: at 4 and 8 bits one call serves more columns than a tile holds
        run_and_compare(fmt, x, "sr", Blocking(None, 1, 2), Blocking(None, 3, 4), dtype=F32, sr_bits=bits,
                        out=F32, tile=(32, 16))


@pytest.mark.parametrize("name", ["e2m1", "int4", "e1m2"])
def test_fallback_odd_k_and_width_one_blocks(name):
    """Element-only grids (blocks of width 1) and odd K go through the quantize + dequantize kernels."""
    fmt = fp4lab.get_format(name)
    for dt in (BF16, F32, F16):
        x = make_input("adversarial", 64, 63, seed=1)
        run_and_compare(fmt, x, "sr", Blocking(None, 1, 2), Blocking(16, 3, 4), dtype=dt, sr_bits=8)
        run_and_compare(fmt, make_input("random", 32, 63, seed=2), "rtne", Blocking(None, 1, 2), None, dtype=dt,
                        out=F32)


def test_fallback_2d_tiles_along_m():
    fmt = fp4lab.get_format("nvfp4-2d")
    for kind, out, apply_ts in (("adversarial", BF16, True), ("random", F32, False)):
        x = make_input(kind, 64, 128, seed=2)
        res = run_and_compare(fmt, x, "sr", Blocking(16, 1, 2), Blocking(16, 3, 4), dtype=BF16, sr_bits=16,
                              out=out, apply_ts=apply_ts)
        assert res[2] is not None and res[3] is not None


@pytest.mark.parametrize("name", ["nvfp4", "ufp4-e4m3", "nvfp4-te", "nvfp4-4over6"])
def test_tensor_scales_per_rotated_view(name):
    """Two-level formats: each output has the tensor scale of its own rotated view (RHT along K for y_k, along M
    for y_m), so the two differ with RHT on; without RHT they are one and the same value."""
    fmt = fp4lab.get_format(name)
    x = make_input("random", 64, 128, seed=9)
    res = run_and_compare(fmt, x, "rtne", Blocking(16, 1, 2), Blocking(32, 3, 4), dtype=F32)
    assert float(res[2]) != float(res[3])
    res = run_and_compare(fmt, x, "rtne", Blocking(None, 1, 2), Blocking(None, 3, 4), dtype=BF16, apply_ts=False)
    assert float(res[2]) == float(res[3]) > 0
    zeros = np.zeros((64, 128), np.float32)
    res = run_and_compare(fmt, zeros, "sr", Blocking(16, 1, 2), Blocking(None, 3, 4), dtype=F32)
    assert float(res[2]) == 1.0 == float(res[3]) and not _np(res[0]).any()


def test_one_level_formats_have_no_tensor_scale():
    for name in ("mxfp4", "ufp4", "e2m1"):
        res = run_and_compare(fp4lab.get_format(name), make_input("random", 64, 64, seed=0), "rtne",
                              Blocking(None, 0, 0), Blocking(None, 0, 0))
        assert res[2] is None and res[3] is None


# ---------------------------------------------------------------------------------------------------------
# the numba twin


@pytest.mark.parametrize("name", ALL)
def test_emulated_twin_equals_reference(name):
    fmt = fp4lab.get_format(name)
    two_d = fmt.block is not None and fmt.block.is_2d
    for i, (kind, axis, rht, rounding, bits, d, apply_ts) in enumerate([
            ("adversarial", -1, None, "rtne", 24, "bf16", True), ("random", 0, 16, "sr", 8, "fp32", True),
            ("adversarial", 0, None, "sr", 4, "bf16", False), ("random", -1, 32, "sr", 16, "fp32", False)]):
        if two_d:
            axis = -1
        x = make_input(kind, 64, 128, seed=i)
        with np.errstate(all="ignore"):
            want = fake_quantize_reference(x, fmt, rounding, 7, axis, rht, 8, bits, d, apply_ts)
            got = fake_quantize_emulated(x, fmt, rounding, 7, axis, rht, 8, bits, d, apply_ts)
        assert_bits_equal(got[0], want[0], f"{name} {i}")
        assert (got[1] is None) == (want[1] is None)
        if want[1] is not None:
            assert_bits_equal(np.array([got[1]], np.float32), np.array([want[1]], np.float32), f"{name} ts")


def test_reference_bf16_is_the_rounded_fp32():
    """dtype "bf16" is bf16_rtne of dtype "fp32" (NaN kept NaN), for every format's values."""
    x = make_input("adversarial", 64, 128, seed=4)
    for name in ("ufp4", "nvfp4", "e2m1-b16-fp32", "nf4-b64-fp32"):
        fmt = fp4lab.get_format(name)
        with np.errstate(all="ignore"):
            f = fake_quantize_reference(x, fmt, "sr", 1, -1, 16, 2, 8, "fp32")[0]
            b = fake_quantize_reference(x, fmt, "sr", 1, -1, 16, 2, 8, "bf16")[0]
        assert_bits_equal(b, bf16_rtne(f), name)
        assert not np.any(_bits(b) & np.uint32(0xFFFF))


# ---------------------------------------------------------------------------------------------------------
# the gemm_dtype claim: bf16 operands are exact where element x block-scale products are bf16 numbers


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "ufp4-e4m3", "int4-b32-e8m0"])
def test_bf16_output_is_exact_without_the_tensor_scale(name):
    """nvfp4 / ufp4-e4m3 with the tensor scale folded into the GEMM output (apply_tensor_scale=False), mxfp4 and
    int4 with E8M0 scales: every product value * S is a bf16 number, so the bf16 output equals the fp32 one."""
    fmt = fp4lab.get_format(name)
    normal = np.random.default_rng(6).standard_normal((64, 128)).astype(np.float32)
    for kind, x in (("normal", normal), ("adversarial", make_input("adversarial", 64, 128, seed=6))):
        res = {}
        for out in (F32, BF16):
            res[out] = run_and_compare(fmt, x, "sr", Blocking(16, 1, 2), Blocking(None, 3, 4), dtype=BF16,
                                       sr_bits=16, out=out, apply_ts=False)
        for j in (0, 1):
            f = _np(res[F32][j])
            assert_bits_equal(res[BF16][j], f, f"{name} {kind} bf16 vs fp32 output {j}")
            assert not np.any(_bits(f) & np.uint32(0xFFFF)), "fp32 values are bf16 numbers"
            if kind == "normal":
                assert np.count_nonzero(f) > f.size // 2  # not vacuous


@pytest.mark.parametrize("name", ["ufp4", "e2m1-b16-fp32"])
def test_bf16_output_rounds_fp32_scaled_formats(name):
    """FP32 block scales: value * S is not a bf16 number in general, so gemm_dtype="bf16" is one extra rounding
    (RTNE) of each operand: bf16 differs from fp32 on many elements, and equals bf16_rtne of it everywhere."""
    fmt = fp4lab.get_format(name)
    x = make_input("random", 64, 128, seed=6)
    f = run_and_compare(fmt, x, "rtne", Blocking(16, 1, 2), None, dtype=F32, out=F32)[0]
    b = run_and_compare(fmt, x, "rtne", Blocking(16, 1, 2), None, dtype=F32, out=BF16)[0]
    fb, bb = _bits(_np(f)), _bits(_np(b))
    assert np.count_nonzero(fb != bb) > fb.size // 10
    assert_bits_equal(b, bf16_rtne(_np(f)), name)
    rel = np.abs(_np(b) - _np(f)) / np.maximum(np.abs(_np(f)), np.float32(1e-38))
    assert np.nanmax(rel[_np(f) != 0]) <= 2.0**-8  # one bf16 rounding: half an ulp of 8 significant bits


# ---------------------------------------------------------------------------------------------------------
# refused inputs


def _raises_one_line(fn, *words: str) -> None:
    with pytest.raises(InputError) as err:
        fn()
    msg = str(err.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_errors():
    nv, mx = fp4lab.get_format("nvfp4"), fp4lab.get_format("mxfp4")
    x = torch.from_numpy(make_input("random", 64, 128, seed=0))
    kb, mb = Blocking(), Blocking()
    _raises_one_line(lambda: fake_quantize_triton(x.reshape(2, 32, 128), nv, along_k=kb), "2-D", "(2, 32, 128)")
    _raises_one_line(lambda: fake_quantize_triton(x.reshape(-1), nv, along_k=kb), "2-D")
    _raises_one_line(lambda: fake_quantize_triton(x.to(torch.int32), nv, along_k=kb), "dtype", "int32")
    _raises_one_line(lambda: fake_quantize_triton(x.to(torch.float64), nv, along_k=kb), "dtype")
    _raises_one_line(lambda: fake_quantize_triton(x, nv), "along_k", "along_m")
    _raises_one_line(lambda: fake_quantize_triton(x[:, :120].contiguous(), nv, along_k=kb), "120", "16")
    _raises_one_line(lambda: fake_quantize_triton(x[:, :48].contiguous(), mx, along_k=kb), "48", "32")
    _raises_one_line(lambda: fake_quantize_triton(x[:48].contiguous(), mx, along_m=mb), "48", "32")
    _raises_one_line(lambda: fake_quantize_triton(x[:, :48].contiguous(), nv, along_k=Blocking(32)), "48",
                     "size=32")
    _raises_one_line(lambda: fake_quantize_triton(x[:48].contiguous(), nv, along_m=Blocking(32)), "48", "size=32")
    _raises_one_line(lambda: fake_quantize_triton(x, nv, along_k=Blocking(24)), "24")
    _raises_one_line(lambda: fake_quantize_triton(x, nv, "sr", along_k=kb, sr_bits=7), "sr_bits")
    _raises_one_line(lambda: fake_quantize_triton(x, nv, "sr", along_k=kb, sr_bits=True), "sr_bits")
    _raises_one_line(lambda: fake_quantize_triton(x, nv, along_k=kb, out_dtype=torch.float16), "out_dtype")
    with pytest.raises(ValueError, match="rounding 'nearest' is unknown"):  # a ValueError, as for quantize
        fake_quantize_triton(x, nv, "nearest", along_k=kb)
    _raises_one_line(lambda: fake_quantize_triton(x, mx, along_k=kb, along_m=mb, tile=(16, 64)), "tile")
    _raises_one_line(lambda: fake_quantize_triton(x, mx, along_k=kb, tile=(16, 48)), "tile")
    _raises_one_line(lambda: fake_quantize_reference(x.numpy(), nv, dtype="fp16"), "dtype")
    _raises_one_line(lambda: fake_quantize_emulated(x.numpy(), nv, dtype="fp16"), "dtype")
