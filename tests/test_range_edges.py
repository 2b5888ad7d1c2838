"""Range edges (docs/numerics.md, "Range edges"): tensors near float32's maximum and tiny tensors.

Policies (``fp4lab.numerics.range_policy``): finite inputs never decode to +-Inf (tensor-scale cap, decoded-range
caps), two-level reciprocal formats keep ``1/ts`` and every block multiplier finite (tensor-scale floor,
multiplier floor), and the RHT of blocks beyond FLT_MAX/n gives IEEE non-finite values. Checked in the reference,
the numba twin and the Triton kernels (interpreter), on the issue's tensors, on ``fp4lab.testing``'s
``range_edge_inputs`` and on verify's ``edges`` inputs; and the policies move no bit of an input the arithmetic
without them handled (finite decode, finite multipliers)."""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fp4lab
import fp4lab.numerics.ref_quantize as rq
from fp4lab import QuantizeOptions
from fp4lab.emulator.nb_rht import rht
from fp4lab.emulator.quantize import dequantize_emulated, quantize_emulated
from fp4lab.kernels.api import dequantize_cuda, quantize_cuda
from fp4lab.kernels.fakequant_launch import fake_quantize_triton
from fp4lab.kernels.verify import make_input, range_edge_input
from fp4lab.numerics.fakequant import fake_quantize_reference
from fp4lab.numerics.options import Blocking
from fp4lab.numerics.range_policy import (
    RECIP_TS_FLOOR,
    decoded_caps,
    kernel_constants,
    multiplier_floor,
    positive_scales,
    range_clamp_scale,
    tensor_scale_bounds,
)
from fp4lab.numerics.rht import rht_reference
from fp4lab.testing import make_inputs, quant_formats, range_edge_inputs, rounding_modes
from fp4lab.testing.bits import same_bits

F32 = np.float32
FLT_MAX = np.finfo(F32).max
ALL = fp4lab.list_formats()
TWO_LEVEL = [n for n in ALL if fp4lab.get_format(n).tensor_scale != "none"]
RECIP_TWO_LEVEL = [n for n in TWO_LEVEL if fp4lab.get_format(n).scale_rule.scale_arithmetic != "encode"]
CHECKS = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


def issue_huge() -> np.ndarray:
    """A tensor at the range edges: 16 x 64 of N(0,1) * 1e37 with +-FLT_MAX in every 7th column."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 64)) * 1e37
    x[:, ::7] = np.where(rng.random((16, 10)) < 0.5, FLT_MAX, -FLT_MAX)
    return x.astype(F32)


def tiny(amax: float, seed: int = 1) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((16, 64)) * amax).astype(F32)


def same_quantized(a, b) -> bool:
    return (np.array_equal(a.codes, b.codes) and np.array_equal(np.asarray(a.scale_codes), np.asarray(b.scale_codes))
            and same_bits(np.asarray(a.tensor_scale, F32), np.asarray(b.tensor_scale, F32)))


def _np(a) -> np.ndarray:
    return np.ascontiguousarray(a.float().numpy() if isinstance(a, torch.Tensor) else a, dtype=F32)


def assert_kernel_equals_reference(x: np.ndarray, fmt, mode: str, axis: int = -1) -> None:
    """quantize_cuda (interpreter) == quantize_reference: codes, scale codes, scales, tensor scale, dequantized."""
    with np.errstate(all="ignore"):
        qt = quantize_cuda(torch.from_numpy(x), fmt, QuantizeOptions(mode, seed=8, axis=axis))
        ref = rq.quantize_reference(x, fmt, QuantizeOptions(mode, seed=8, axis=axis))
        want = rq.dequantize_reference(ref)
    label = (fmt.name, mode, axis, float(np.abs(x).max()))
    assert np.array_equal(qt.codes.numpy(), ref.codes), label
    sc = qt.scale_codes.view(torch.int16) if qt.scale_codes.dtype == torch.uint16 else qt.scale_codes
    assert np.array_equal(sc.numpy().view(np.asarray(ref.scale_codes).dtype), np.asarray(ref.scale_codes)), label
    assert same_bits(_np(qt.scales), _np(np.asarray(ref.scales))), label
    assert (qt.tensor_scale is None) == (ref.tensor_scale is None), label
    if ref.tensor_scale is not None:
        assert same_bits(_np(qt.tensor_scale.reshape(1)), _np(np.array([ref.tensor_scale], F32))), label
    got = _np(dequantize_cuda(qt))
    assert np.array_equal(np.isnan(got), np.isnan(want)), label  # NaN payloads are not part of the contract
    assert same_bits(_np(got)[~np.isnan(want)], _np(want)[~np.isnan(want)]), label


def assert_fakequant_equals_reference(x: np.ndarray, fmt, mode: str, along_m: bool) -> None:
    """fake_quantize_triton == fake_quantize_reference (fp32 outputs and tensor scales) along K (and M)."""
    res = fake_quantize_triton(torch.from_numpy(x), fmt, mode, along_k=Blocking(seed=1),
                               along_m=Blocking(seed=2) if along_m else None, out_dtype=torch.float32)
    for y, ts, seed, axis in ((res[0], res[2], 1, -1), (res[1], res[3], 2, 0))[:1 + along_m]:
        with np.errstate(all="ignore"):
            want, want_ts = fake_quantize_reference(x, fmt, mode, seed, axis, None, 0, 24, "fp32", True)
        assert same_bits(_np(y), _np(want)), (fmt.name, mode, axis)
        if want_ts is not None:
            assert same_bits(_np(ts.reshape(1)), _np(np.array([want_ts], F32))), (fmt.name, mode, axis)


# ---- the issue's cases: every built-in, reference and numba ------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_finite_huge_inputs_decode_finite(name):
    fmt = fp4lab.get_format(name)
    for x in (issue_huge(), range_edge_input(32, 64, seed=1)):
        for mode in ("rtne", "sr"):
            ref = rq.quantize_reference(x, fmt, QuantizeOptions(mode, seed=2))
            assert np.isfinite(rq.dequantize_reference(ref)).all(), (name, mode)
            emu = quantize_emulated(x, fmt, QuantizeOptions(mode, seed=2))
            assert same_quantized(emu, ref), (name, mode)
            assert same_bits(dequantize_emulated(emu), rq.dequantize_reference(ref))


@pytest.mark.parametrize("name", RECIP_TWO_LEVEL)
def test_tiny_tensors_of_two_level_formats(name):
    """amax from 3e-39 (float32-subnormal blocks) to 1e-30: no sign-only saturation (96-97% error before), the
    error of a normal-range tensor; below the representable range (1e-40) elements flush to signed zeros."""
    fmt = fp4lab.get_format(name)
    for amax in (1e-30, 1e-33, 8e-36, 1e-36, 1e-37, 1e-38, 3e-39, 1e-40):
        x = tiny(amax)
        q = rq.quantize_reference(x, fmt)
        d = rq.dequantize_reference(q)
        assert np.all((d == 0) | (np.sign(d) == np.sign(x))), (name, amax)
        err = np.abs(d - x).max() / np.abs(x).max()
        assert err <= (0.2 if amax >= 3e-39 else 1.0), (name, amax, err)
        assert F32(q.tensor_scale) >= RECIP_TS_FLOOR and np.isfinite(F32(1) / F32(q.tensor_scale))
        assert same_quantized(quantize_emulated(x, fmt), q)


def test_nvfp4_te_keeps_transformer_engine_clamps():
    """nvfp4-te follows TE: g = min(2688/amax, FLT_MAX) and the element multiplier min(1/(S*ts), FLT_MAX), so it
    stays finite at tiny amaxes, with TE's (larger) error where the multiplier clamps."""
    fmt = fp4lab.get_format("nvfp4-te")
    assert multiplier_floor(fmt, F32(2.0**-128)) is None
    for amax in (1e-37, 1e-38, 3e-39):
        d = rq.dequantize_reference(rq.quantize_reference(tiny(amax), fmt))
        assert np.isfinite(d).all() and np.abs(d - tiny(amax)).max() <= 0.5 * np.abs(tiny(amax)).max()


# ---- the definitions ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TWO_LEVEL)
def test_tensor_scale_bounds_are_tight(name):
    fmt = fp4lab.get_format(name)
    lo, hi = tensor_scale_bounds(fmt)
    grid_max = F32(np.abs(fmt.element.levels).max())
    with np.errstate(over="ignore", divide="ignore"):
        d = F32(grid_max * F32(fmt.scale_rule.max_scale or fmt.scale.max))
        assert np.isfinite(F32(d * hi)) and not np.isfinite(F32(d * np.nextafter(hi, F32(np.inf))))
        if fmt.scale_rule.scale_arithmetic == "encode":
            assert lo == 0
        else:
            assert lo == RECIP_TS_FLOOR and np.isfinite(F32(1) / lo)
            assert not np.isfinite(F32(1) / np.nextafter(lo, F32(0)))



@pytest.mark.parametrize("element,scale", [("e2m1", "e8m0"), ("e4m3", "e8m0"),
                                           ({"kind": "table", "bits": 2, "magnitudes": [0.0, 2.0**-10]}, "ue4m3")])
def test_tensor_scale_bound_of_scale_product_first(element, scale):
    """scale_product_first: ts_hi is the largest float32 t with float32(L * float32(S * t)) finite. With E8M0
    scales L * 2^127 overflows although that bound is positive (about FLT_MAX / (L 2^127)); with L < 1 the bound is
    set by S * t alone. The bounds are found by bisecting float32 bit patterns (a walk of one ulp at a time from
    FLT_MAX / float32(L * S), or from 0, took minutes to hours: found by random formats), and every backend gives
    the same bits."""
    fmt = fp4lab.QuantFormat(name="pf", element=element, block=dict(shape=[16]), scale=scale,
                             scale_rule=dict(method="amax", dequantize_order="scale_product_first"),
                             tensor_scale="amax")
    lo, hi = tensor_scale_bounds(fmt)
    L = F32(np.abs(fmt.element.levels).max())
    S = F32(2.0**127) if scale == "e8m0" else F32(448)
    with np.errstate(over="ignore"):
        assert lo == 0 and (L > 1) == (not np.isfinite(F32(L * S)))  # (divide element scaling: no floor)
        assert np.isfinite(F32(L * F32(S * hi))) and not np.isfinite(F32(L * F32(S * np.nextafter(hi, F32(np.inf)))))
    x = issue_huge()
    opts = QuantizeOptions("sr", seed=5)
    ref = rq.quantize_reference(x, fmt, opts)
    assert np.isfinite(rq.dequantize_reference(ref)).all()
    assert same_quantized(quantize_emulated(x, fmt, opts), ref)

@pytest.mark.parametrize("ts", [RECIP_TS_FLOOR, F32(2.0**-127), F32(1e-37), F32(3.7e-36), F32(2.0**-100)])
def test_multiplier_floor_is_the_smallest_finite_multiplier(ts):
    fmt = fp4lab.get_format("nvfp4")
    code, value = multiplier_floor(fmt, ts)
    values, codes = positive_scales(fmt.scale)
    i = int(np.flatnonzero(codes == code)[0])
    m = F32(F32(1) / ts)
    with np.errstate(over="ignore"):
        assert values[i] == value and np.isfinite(F32(m / value))
        assert i == 0 or not np.isfinite(F32(m / values[i - 1]))


def test_decoded_caps_and_kernel_constants():
    fmt = fp4lab.get_format("mxfp4-rceil")
    assert range_clamp_scale(fmt) == F32(2.0**126)  # 6 * 2^125 is finite, 6 * 2^126 is not
    lo, hi = decoded_caps(fmt, np.array([2.0**125, 2.0**126, 2.0**127, np.nan], F32))
    assert list(hi) == [np.inf, 3.0, 1.5, np.inf] and list(lo) == [-np.inf, -3.0, -1.5, -np.inf]
    assert range_clamp_scale(fp4lab.get_format("mxfp4")) is None  # FLOOR never picks a scale above 2^125
    assert kernel_constants(fmt).S_CRIT == 2.0**126 and kernel_constants(fmt).BUMP_HI == 0
    k = kernel_constants(fp4lab.get_format("nvfp4"))
    assert (k.BUMP_LO, k.BUMP_HI, k.S_CRIT) == (1, 0x7E, 0.0)
    assert k.TS_LO == int(RECIP_TS_FLOOR.view(np.uint32))


def test_rht_overflow_is_ieee_and_documented():
    """Blocks with max |x| <= FLT_MAX / n rotate to finite values; beyond, the butterflies overflow (Inf - Inf =
    NaN) in every backend and quantize applies the block's NaN/Inf policy."""
    for n in (16, 32, 64, 128, 256):
        x = np.full((2, n), FLT_MAX / n, F32)
        x[1, ::3] *= -1
        assert np.isfinite(rht_reference(x, size=n)).all() and np.array_equal(rht(x, size=n), rht_reference(x, size=n))
    big = np.full((1, 16), 3e38, F32)
    y = rht_reference(big, size=16)
    assert np.isnan(y).any() and same_bits(rht(big, size=16), y)
    q = rq.quantize_reference(big, fp4lab.get_format("nvfp4"), QuantizeOptions(rht=16))
    assert np.isnan(np.asarray(q.scales)).all()


# ---- properties: random formats at the range edges ------------------------------------------------------------------
@contextmanager
def policies_off():
    """The reference without the range-edge policies (the arithmetic before them)."""
    def no_caps(fmt, S):
        S = np.asarray(S, F32)
        return np.full(S.shape, -np.inf, F32), np.full(S.shape, np.inf, F32)

    with mock.patch.object(rq, "clamp_tensor_scale", lambda ts, fmt: F32(ts)), \
            mock.patch.object(rq, "multiplier_floor", lambda fmt, ts: None), \
            mock.patch.object(rq, "decoded_caps", no_caps):
        yield


def broken(x: np.ndarray, q, fmt) -> bool:
    """Whether a result of the arithmetic without the policies is wrong: a finite input decoding to +-Inf, an Inf
    input decoding to +-Inf where ``inf_policy = "saturate"`` promises the largest finite value, a tensor scale
    above ``ts_hi`` (some code decodes to +-Inf at some scale the format stores: the bound is the format's, not the
    input's), or a reciprocal multiplier (1/ts, or (1/ts)/S of a block with a non-zero scale) that overflowed."""
    with np.errstate(all="ignore"):
        d = rq.dequantize_reference(q)
        if np.isinf(d[np.isfinite(x)]).any():
            return True
        if fmt.scale_rule.inf_policy == "saturate" and np.isinf(d[np.isinf(x)]).any():
            return True
        rule = fmt.scale_rule
        if q.tensor_scale is not None and F32(q.tensor_scale) > tensor_scale_bounds(fmt)[1]:
            return True
        if rule.element_scaling != "reciprocal" or rule.scale_arithmetic == "encode":
            return False
        m = F32(1) if q.tensor_scale is None else F32(F32(1) / F32(q.tensor_scale))
        S = np.asarray(q.scales, F32)
        return bool(np.isinf(m)) or bool((np.isinf(m / S) & (S > 0)).any())


@settings(max_examples=80, suppress_health_check=CHECKS)
@given(st.data())
def test_policies_move_only_broken_results(data):
    fmt = data.draw(quant_formats(two_d=False))
    x = data.draw(st.one_of(range_edge_inputs(fmt), st.just(None)))
    if x is None:
        x = data.draw(fp4lab.testing.block_inputs(fmt))
    assert_policies_move_only_broken_results(x, fmt, data.draw(rounding_modes()))


def test_policies_move_a_tensor_scale_whose_largest_code_overflows():
    """Target 0.5 of a grid up to 1.5, E8M0 scales, amax 2^127: without the bound ts = 2, the block scale 2^127 and
    the divisor S * ts overflows (x / Inf = 0, the element is lost); the bound (4/3, where the largest code 1.5
    decodes finite at 2^127) moves that result, which no decoded value flagged as broken (found by random draws)."""
    fmt = fp4lab.QuantFormat(name="t05", element=dict(kind="int", int_bits=3, range="symmetric", step=0.5),
                             block=dict(shape=[4]), scale="e8m0", tensor_scale="amax",
                             scale_rule=dict(method="amax", targets=[0.5], min_scale=1.0))
    x = np.array([[2.0**127, 0.0, 0.0, 0.0]], F32)
    assert_policies_move_only_broken_results(x, fmt, "rtne")
    q = rq.quantize_reference(x, fmt)
    assert F32(q.tensor_scale) == tensor_scale_bounds(fmt)[1] and rq.dequantize_reference(q)[0, 0] > 2.0**127


def assert_policies_move_only_broken_results(x: np.ndarray, fmt, mode: str) -> None:
    """The reference with and without the range-edge policies gives the same bits unless the latter is ``broken``;
    with them no finite input decodes to +-Inf (saturating formats); the numba twin equals the reference."""
    with np.errstate(all="ignore"):
        new = rq.quantize_reference(x, fmt, QuantizeOptions(mode, seed=4))
        if fmt.overflow == "saturate":  # ("inf" maps overflow to Inf codes on purpose; NaN blocks hold finite x)
            assert not np.isinf(rq.dequantize_reference(new)[np.isfinite(x)]).any()
        with policies_off():
            old = rq.quantize_reference(x, fmt, QuantizeOptions(mode, seed=4))
        assert same_quantized(new, old) or broken(x, old, fmt)
        emu = quantize_emulated(x, fmt, QuantizeOptions(mode, seed=4))
    assert same_quantized(emu, new)


@settings(max_examples=6, suppress_health_check=CHECKS)
@given(st.data())
def test_triton_matches_reference_at_range_edges(data):
    fmt = data.draw(quant_formats(two_d=False, element=None).filter(lambda f: f.element.bits <= 8
                                                                    and f.block is not None
                                                                    and f.block_size >= 2))
    x = data.draw(range_edge_inputs(fmt, max_blocks=2))
    assert_kernel_equals_reference(x, fmt, data.draw(st.sampled_from(["rtne", "sr"])))


# ---- Triton (interpreter): built-ins on range-edge tensors ---------------------------------------------------------
EDGE_FORMATS = ["nvfp4", "nvfp4-4over6", "ufp4-e4m3", "nvfp4-te", "mxfp4-rceil", "int4-b32-e8m0"]


@pytest.mark.parametrize("name", EDGE_FORMATS)
def test_triton_quantize_and_fakequant_at_range_edges(name):
    fmt = fp4lab.get_format(name)
    inputs = [issue_huge(), np.concatenate([tiny(1e-38), tiny(3e-39, seed=2)]),
              np.concatenate([tiny(1e-36), tiny(1e-40, seed=3)])]
    for i, x in enumerate(inputs):  # input 1 (32 rows) also blocked along axis 0
        assert_kernel_equals_reference(x, fmt, ("rtne", "sr")[i % 2], axis=0 if i == 1 else -1)
    x = np.concatenate([tiny(1e-38), range_edge_input(16, 64, seed=0), range_edge_input(32, 64, seed=1)])
    assert_fakequant_equals_reference(x[:32], fmt, "sr", True)
    assert_fakequant_equals_reference(x[16:], fmt, "rtne", False)


def test_verify_edges_inputs():
    tiny_t, huge_t = make_input("edges", 64, 64, seed=0), make_input("edges", 64, 64, seed=1)
    assert 0 < np.abs(tiny_t).max() < 7.9e-36 and (np.abs(tiny_t[tiny_t != 0]) < 2.0**-126).any()
    assert np.abs(huge_t).max() == FLT_MAX and np.isfinite(huge_t).all()


def test_decoded_cap_keeps_the_sign_of_zero():
    """A table grid whose most negative finite level under a huge scale is 0 (magnitudes {0, 128}, e8m0 ceil, amax
    FLT_MAX: -128 * 2^121 overflows). A negative value capped there, and a -0.0 input, stay -0 (code 2) with
    signed_zero "keep", on the reference, the numba emulator and the Triton kernel; before the fix the reference's
    np.maximum(t, +0.0) made both +0 (code 0), a policy moving a result that was not broken (found 2026-12-01).
    Under rtp / rtm the cap comes after the underflow rule: a capped -0 (or +0) stays a zero, where the kernel, capping
    first, turned it into -2^-149 and rtm into -128 (decoding to -Inf; found by random draws)."""
    fmt = fp4lab.QuantFormat.model_validate(dict(
        name="zero-cap", element=dict(kind="table", table_bits=2, magnitudes=[0.0, 128.0]), block=dict(shape=[4]),
        scale="e8m0", scale_rule=dict(method="ceil"), nan_element="nan", overflow="saturate", signed_zero="keep"))
    big = np.finfo(np.float32).max
    x = np.array([[-0.0, -big, -big, -big], [0.0, big, -big, -0.0]], np.float32)
    lo, hi = decoded_caps(fmt, np.array([2.0 ** 121], np.float32))
    assert lo[0] == 0 and np.signbit(lo[0]) and hi[0] == 0 and not np.signbit(hi[0])  # -0 below, +0 above
    for mode in ("rtne", "rtz", "sr", "rtp", "rtm"):  # (rtp / rtm: the cap after the underflow rule)
        opts = QuantizeOptions(mode, seed=4)
        with np.errstate(all="ignore"):
            ref = rq.quantize_reference(x, fmt, opts)
            emu = quantize_emulated(x, fmt, opts)
            tri = quantize_cuda(torch.from_numpy(x), fmt, opts)
        assert np.asarray(ref.codes)[0].tolist() == [2, 2, 2, 2], mode
        assert np.asarray(ref.codes)[1, [0, 3]].tolist() == [0, 2], mode  # +0 stays +0, -0 stays -0
        for other in (emu, tri):
            assert np.array_equal(np.asarray(other.codes), np.asarray(ref.codes)), mode
            assert np.array_equal(np.asarray(other.scale_codes), np.asarray(ref.scale_codes)), mode


# ---- directed rounding of quotients that underflow float32 ------------------------------------------------------
@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "nvfp4-te", "ufp4", "int4-b32-e8m0"])
@pytest.mark.parametrize("mode", ["rtp", "rtm"])
def test_directed_rounding_of_underflowing_quotients(name, mode):
    """rtp / rtm round the exact quotient x / S: a non-zero element whose quotient underflows float32 to 0 rounds
    to the smallest level of its direction (rtp: +smallest for x > 0, -0 for x < 0), as gfloat does; the numpy
    reference, the numba twin and the Triton kernels (interpreter) give the same bits."""
    fmt = fp4lab.get_format(name)
    x = make_inputs("underflowing_quotients", (16, 64), 3)
    opts = QuantizeOptions(mode, seed=8)
    ref = rq.quantize_reference(x, fmt, opts)
    y = rq.dequantize_reference(ref)
    S = np.repeat(np.asarray(ref.scales, F32).reshape(16, -1), fmt.block_size, axis=1)
    ts = F32(1.0) if ref.tensor_scale is None else F32(ref.tensor_scale)
    levels = fmt.element.levels
    step = levels[levels > 0].min() if mode == "rtp" else -levels[levels > 0].min()
    tiny = np.abs(x) < 1e-10
    want = np.where((x > 0) == (mode == "rtp"), step, 0.0) * S * ts
    assert np.array_equal(y[tiny] != 0, want[tiny] != 0), (name, mode)
    assert np.all(np.sign(y[tiny]) * np.sign(x[tiny]) >= 0)
    assert same_quantized(quantize_emulated(x, fmt, opts), ref)
    assert_kernel_equals_reference(x, fmt, mode)
    assert_fakequant_equals_reference(x, fmt, mode, along_m=False)
