"""Differential tests against gfloat 0.5.2 (Graphcore's generic float model, an independent implementation).

Element rounding of E2M1, E1M2, E4M3 and INT4 in every rounding mode both libraries define (fp4lab ``rtne``,
``rtna``, ``rtz``, ``rtp``, ``rtm`` = gfloat ``TiesToEven``, ``TiesToAway``, ``TowardZero``, ``TowardPositive``,
``TowardNegative``), and OCP MX blocks (``quantize_block`` with ``compute_scale_amax``) in the same modes, compared
value for value (float32 bits, signed zeros included). Pinned disagreements: E8M0 ties (docs/numerics.md D4) and
the overflow decision of non-saturating formats under directed rounding (L1). gfloat has no ties-toward-zero
mode, and its stochastic modes take a different random-bit contract, so ``rtnz`` and ``sr`` are not compared.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

gfloat = pytest.importorskip("gfloat")
from gfloat import RoundMode  # noqa: E402
from gfloat.block import BlockFormatInfo, compute_scale_amax, quantize_block  # noqa: E402
from gfloat.formats import (  # noqa: E402
    format_info_ocp_e2m1,
    format_info_ocp_e4m3,
    format_info_ocp_e8m0,
)
from gfloat.types import Domain, FormatInfo  # noqa: E402

import fp4lab  # noqa: E402
from fp4lab import QuantizeOptions  # noqa: E402
from fp4lab.formats import THRESHOLD_MODES, QuantFormat, ScaleFormat  # noqa: E402
from fp4lab.formats.quant_format import NAMED_SCALES  # noqa: E402
from fp4lab.numerics.ref_encode import decode_elements, encode_elements, encode_scale  # noqa: E402
from fp4lab.testing import element_grids, float32_arrays  # noqa: E402
from fp4lab.testing.bits import same_bits  # noqa: E402

F32 = np.float32
MODES = {"rtne": RoundMode.TiesToEven, "rtna": RoundMode.TiesToAway, "rtz": RoundMode.TowardZero,
         "rtp": RoundMode.TowardPositive, "rtm": RoundMode.TowardNegative}
GF_E1M2 = FormatInfo(name="e1m2", k=4, precision=3, bias=1, has_nz=True, domain=Domain.Finite, num_high_nans=0,
                     has_subnormals=True, is_signed=True, is_twos_complement=False)
# two's-complement 4-bit integers k / 4 (gfloat scales integer formats by 2^-(precision-2))
GF_INT4 = FormatInfo(name="int4", k=4, precision=4, bias=0, has_nz=False, domain=Domain.Finite, num_high_nans=0,
                     has_subnormals=True, is_signed=True, is_twos_complement=True)
GRIDS = {"e2m1": (format_info_ocp_e2m1, 1.0), "e1m2": (GF_E1M2, 1.0), "e4m3": (format_info_ocp_e4m3, 1.0),
         "int4_twos_complement": (GF_INT4, 4.0)}


def probe_values(levels: np.ndarray, seed: int = 0) -> np.ndarray:
    """float32 inputs that exercise every rounding decision: each level and midpoint with its 2 float32
    neighbours either side, random values over 1.5x the range, tiny values, signed zeros and +-Inf."""
    lv = levels.astype(np.float64)
    pts = np.concatenate([lv, (lv[:-1] + lv[1:]) / 2]).astype(F32)
    near = [pts]
    for d in (np.inf, -np.inf):
        v = pts
        for _ in range(2):
            v = np.nextafter(v, F32(d)).astype(F32)
            near.append(v)
    rng = np.random.default_rng(seed)
    big = float(np.max(np.abs(lv)))
    rand = rng.uniform(-1.5 * big, 1.5 * big, 2000).astype(F32)
    tiny = (rng.choice([-1, 1], 200) * np.exp2(rng.uniform(-149, -2, 200))).astype(F32)
    special = F32([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45])
    return np.concatenate(near + [rand, tiny, special]).astype(F32)


def gfloat_values(fi: FormatInfo, t: np.ndarray, mode: str, sat: bool, step: float = 1.0) -> np.ndarray:
    """gfloat's rounding of float32 ``t`` (exact in float64), in fp4lab's units (``step``: gfloat's INT4 is k/4)."""
    return (gfloat.round_ndarray(fi, t.astype(np.float64) / step, MODES[mode], sat=sat) * step).astype(F32)

GFLOAT_LACKS = {"rtnz"}  # ties toward zero: gfloat 0.5.2 has no such RoundMode


def test_every_threshold_mode_is_compared_or_named_as_missing():
    """MODES covers fp4lab's deterministic modes (fp4lab.formats.THRESHOLD_MODES) but those gfloat lacks."""
    assert set(MODES) == set(THRESHOLD_MODES) - GFLOAT_LACKS and GFLOAT_LACKS <= set(THRESHOLD_MODES)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("grid", list(GRIDS))
def test_element_rounding_equals_gfloat(grid: str, mode: str) -> None:
    """Saturating element casts: fp4lab's threshold tables give gfloat's ``round_float(..., sat=True)`` value for
    every probe, ties, directed roundings of tiny values (-0 from rtp, -min from rtm) and +-Inf included."""
    fmt = QuantFormat(name=f"gf-{grid}", element=grid)
    fi, step = GRIDS[grid]
    t = probe_values(fmt.element.levels)
    ours = decode_elements(encode_elements(t, fmt.element, mode), fmt.element)
    assert same_bits(ours, gfloat_values(fi, t, mode, sat=True, step=step), nan="any")
    public = fp4lab.dequantize(fp4lab.quantize(t, fmt, rounding=mode))  # the emulator gives the same bits
    assert same_bits(public, ours, nan="any")


@pytest.mark.parametrize("mode", list(MODES))
def test_symmetric_int4_is_gfloat_int4_clipped_at_7(mode: str) -> None:
    """fp4lab's 'int4' (levels -7..7, symmetric) == gfloat's two's-complement INT4 clipped to [-7, 7] in every
    shared mode: the only difference is the code -8, which the symmetric grid never produces."""
    g = QuantFormat(name="gf-int4", element="int4").element
    t = probe_values(np.arange(-8.0, 8.0))
    ours = decode_elements(encode_elements(t, g, mode), g)
    theirs = np.clip(gfloat_values(GF_INT4, t, mode, sat=True, step=4.0), -7, 7) + F32(0.0)  # int4 has no -0
    assert same_bits(ours, theirs, nan="any")


@pytest.mark.parametrize("mode", ["rtne", "rtna"])
def test_e4m3_overflow_nan_equals_gfloat_unsaturated(mode: str) -> None:
    """E4M3 with ``overflow = "nan"`` under the nearest modes == gfloat ``sat=False``: above 464 (and +-Inf) NaN;
    464 itself stays 448 under rtne and becomes NaN under rtna (gfloat's tie-away result 480 overflows), which
    fp4lab's mode-independent threshold (D3) cannot express: that one value is excluded and pinned."""
    fmt = QuantFormat(name="gf-e4m3-nan", element="e4m3", overflow="nan")
    t = probe_values(fmt.element.levels)
    ours = decode_elements(encode_elements(t, fmt.element, mode, overflow="nan"), fmt.element)
    theirs = gfloat_values(format_info_ocp_e4m3, t, mode, sat=False)
    tie = np.abs(t) == F32(464.0)
    assert same_bits(ours[~tie], theirs[~tie], nan="any")
    assert np.all(np.abs(ours[tie]) == 448) and (np.all(np.isnan(theirs[tie])) if mode == "rtna" else
                                                 np.all(np.abs(theirs[tie]) == 448))


def test_directed_overflow_disagreement() -> None:
    """L1: with ``overflow = "nan"`` fp4lab's overflow decision is one magnitude threshold for every
    mode (|t| > 464 -> NaN for E4M3). gfloat follows IEEE 754 for directed modes: a finite value rounded toward the
    grid stays finite (rtm of +500, rtp of -500 and rtz of either give +-448)."""
    g = QuantFormat(name="gf-e4m3-nan2", element="e4m3", overflow="nan").element
    t = F32([500.0, -500.0])
    for mode, finite in (("rtm", [True, False]), ("rtp", [False, True]), ("rtz", [True, True])):
        ours = decode_elements(encode_elements(t, g, mode, overflow="nan"), g)
        theirs = gfloat_values(format_info_ocp_e4m3, t, mode, sat=False)
        assert np.isnan(ours).all()
        assert np.isfinite(theirs).tolist() == finite


# ---- OCP MX blocks -----------------------------------------------------------------------------------------------
def mx_blocks(seed: int = 1, n: int = 192, bs: int = 32) -> np.ndarray:
    """Gaussian blocks with magnitudes 2^-60 .. 2^60, blocks whose amax is 2^k - 1 ulp (where a float32 log2 rounds
    up), blocks of grid levels and midpoints (ties after scaling), an all-zero block."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, bs)) * np.exp2(rng.integers(-60, 61, (n, 1)))
    k = rng.integers(-60, 61, n // 4)
    x[: n // 4, 0] = np.nextafter(np.exp2(k).astype(F32), F32(0))
    ties = F32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0])
    x[n // 4: n // 2] = rng.choice(ties, (n // 4, bs)) * np.exp2(rng.integers(-20, 21, (n // 4, 1)))
    x[n // 4: n // 2, 0] = 6.0 * np.exp2(rng.integers(-20, 21, n // 4))
    x[-1] = 0.0
    return x.astype(F32)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("element,gf_elem", [("e2m1", format_info_ocp_e2m1), ("e4m3", format_info_ocp_e4m3)])
def test_mx_blocks_equal_gfloat_quantize_block(element: str, gf_elem: FormatInfo, mode: str) -> None:
    """OCP MX (1x32 blocks, E8M0 scale by the FLOOR rule): fp4lab's dequantized blocks == gfloat's
    ``quantize_block(BlockFormatInfo(etype, 32, ocp_e8m0), vals, compute_scale_amax, mode)`` on float64 input
    (where its log2 is exact), bit for bit, for E2M1 (mxfp4) and E4M3 (MXFP8) elements."""
    fmt = fp4lab.get_format("mxfp4") if element == "e2m1" else QuantFormat(
        name="gf-mxfp8", element="e4m3", block=32, scale="e8m0", scale_rule={"method": "floor"})
    x = mx_blocks()
    ours = fp4lab.dequantize(fp4lab.quantize(x, fmt, rounding=mode))
    bfi = BlockFormatInfo("mx", gf_elem, 32, format_info_ocp_e8m0)
    theirs = np.stack([quantize_block(bfi, row.astype(np.float64), compute_scale_amax, MODES[mode]) for row in x])
    assert same_bits(ours, theirs.astype(F32), nan="any")


@pytest.mark.parametrize("mode", list(MODES))
def test_mx_underflowing_quotients_equal_gfloat(mode: str) -> None:
    """Blocks holding +-3e38 beside tiny elements (``underflowing_quotients``): x / 2^125 underflows float32, and
    fp4lab rounds the exact quotient as gfloat does on float64 (rtp: +0.5 S above 0, -0 below; rtm mirrored)."""
    from fp4lab.testing import make_inputs

    x = make_inputs("underflowing_quotients", (8, 64), 5)
    ours = fp4lab.dequantize(fp4lab.quantize(x, "mxfp4", rounding=mode))
    bfi = BlockFormatInfo("mx", format_info_ocp_e2m1, 32, format_info_ocp_e8m0)
    blocks = x.reshape(-1, 32).astype(np.float64)
    theirs = np.stack([quantize_block(bfi, row, compute_scale_amax, MODES[mode]) for row in blocks])
    assert same_bits(ours, theirs.reshape(x.shape).astype(F32))


# ---- E8M0 ties (D4) ----------------------------------------------------------------------------------------------
def test_e8m0_tie_rule_differs_from_gfloat() -> None:
    """Disagreement D4: an ideal scale 1.5 * 2^k lies halfway between 2^k and 2^(k+1). fp4lab's 'rtne' picks the
    even exponent k (the odd E8M0 code); gfloat's TiesToEven picks the even code. Over the 254 float32-normal ties
    (k = -126 .. 127) they pick opposite neighbours on 253; they agree only at 1.5 * 2^127, where both give 2^127
    (fp4lab saturates, gfloat with ``sat=True``; ml_dtypes and torch give NaN there, L4)."""
    k = np.arange(-126, 128)
    ties = (1.5 * np.exp2(k)).astype(F32)
    ours = encode_scale(ties, ScaleFormat(**NAMED_SCALES["e8m0"]), "rtne").astype(np.int64)
    theirs = np.array([gfloat.encode_float(format_info_ocp_e8m0,
                                           gfloat.round_float(format_info_ocp_e8m0, float(v), sat=True))
                       for v in ties])
    assert np.array_equal(ours, np.minimum(np.where(k % 2 == 0, k, k + 1) + 127, 254))  # even exponent
    assert np.array_equal(theirs, np.minimum(np.where(k % 2 == 1, k, k + 1) + 127, 254))  # even code
    assert int(np.sum(ours != theirs)) == 253 and ours[-1] == theirs[-1] == 254
    assert ours[k == 0][0] == 127 and theirs[k == 0][0] == 128  # 1.5 -> fp4lab 1.0, gfloat 2.0


# ---- directed rounding on every backend --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["rtp", "rtm"])
def test_directed_modes_on_every_backend(mode: str) -> None:
    """rtp / rtm are threshold tables like the other deterministic modes: the numba emulator and the Triton quantize
    kernel (interpreter here, GPU via ``fp4lab verify``) give the reference's codes and scales, on adversarial data
    (ties, powers of two, zeros, subnormals, NaN/Inf) with single-level, two-level, integer and table grids."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from fp4lab.emulator.quantize import quantize_emulated
    from fp4lab.kernels.api import quantize_cuda
    from fp4lab.kernels.verify import make_input
    from fp4lab.numerics.ref_quantize import quantize_reference

    for name in ("mxfp4", "nvfp4", "int4-b32-e8m0", "nf4-b64-fp32"):
        fmt = fp4lab.get_format(name)
        x = make_input("adversarial", 32, 128, seed=3)
        with np.errstate(all="ignore"):
            ref = quantize_reference(x, fmt, QuantizeOptions(mode))
            emu = quantize_emulated(x, fmt, QuantizeOptions(mode))
            tri = quantize_cuda(torch.from_numpy(x), fmt, QuantizeOptions(mode))
        for q in (emu, tri):
            codes = q.codes.numpy() if hasattr(q.codes, "numpy") else q.codes
            sc = q.scale_codes.numpy() if hasattr(q.scale_codes, "numpy") else q.scale_codes
            assert np.array_equal(codes, ref.codes), name
            assert np.array_equal(sc.view(ref.scale_codes.dtype), ref.scale_codes), name


@settings(max_examples=60, deadline=None)
@given(grid=element_grids(), x=float32_arrays(allow_nan=False), pick=st.integers(0, 2**32 - 1))
def test_directed_modes_are_ceiling_and_floor(grid, x: np.ndarray, pick: int) -> None:
    """On any grid (float, int, table): rtp gives the smallest level >= t and rtm the largest level <= t, values
    beyond the grid saturating to the extreme level; checked exactly on every level, its float32 neighbours and
    adversarial float32 values."""
    lv = grid.levels.astype(F32)
    rng = np.random.default_rng(pick)
    near = np.concatenate([lv, np.nextafter(lv, F32(np.inf)), np.nextafter(lv, F32(-np.inf))]).astype(F32)
    x = x.reshape(-1)
    t = np.concatenate([x[~np.isnan(x)], rng.choice(near, 64)]).astype(F32)
    lv64 = grid.levels
    up = lv64[np.minimum(np.searchsorted(lv64, t.astype(np.float64), side="left"), lv64.size - 1)]
    down = lv64[np.maximum(np.searchsorted(lv64, t.astype(np.float64), side="right") - 1, 0)]
    assert np.array_equal(decode_elements(encode_elements(t, grid, "rtp"), grid).astype(np.float64), up)
    assert np.array_equal(decode_elements(encode_elements(t, grid, "rtm"), grid).astype(np.float64), down)
