"""Hypothesis properties of the numerics contract (docs/numerics.md), over built-in and random formats.

Properties about the *definition* call the numpy reference (``encode_elements``, ``quantize_reference``);
properties about the library call ``fp4lab.quantize`` / ``fp4lab.dequantize`` (the numba emulator on CPU).
Pack and RHT properties live in tests/test_pack.py and tests/test_rht.py.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fp4lab
from fp4lab import QuantizeOptions
from fp4lab.emulator.pack import unpack_nibbles
from fp4lab.formats import THRESHOLD_MODES, BlockLayout, QuantFormat, ScaleRule, model_to_toml
from fp4lab.formats.rules import AMAX_METHODS, OCP_METHODS
from fp4lab.formats.spec_io import load_model
from fp4lab.numerics.ref_encode import decode_elements, encode_elements, encode_scale
from fp4lab.numerics.ref_quantize import quantize_reference
from fp4lab.testing import block_inputs, element_grids, float32_arrays, quant_formats, rounding_modes
from fp4lab.testing.bits import same_bits

SCALING_METHODS = AMAX_METHODS + OCP_METHODS  # every rule that computes block scales

F32 = np.float32
BUILTIN_GRIDS = list({fp4lab.get_format(n).element.model_dump_json(): fp4lab.get_format(n).element
                      for n in fp4lab.list_formats()}.values())
grids = st.one_of(st.sampled_from(BUILTIN_GRIDS), element_grids())
small_grids = st.one_of(st.sampled_from(BUILTIN_GRIDS), element_grids(max_bits=5))
NEAREST = ("rtne", "rtna", "rtnz")

few = settings(max_examples=60, deadline=None)
some = settings(max_examples=100, deadline=None)


def element_only(grid, rounding: str = "rtne", **kw) -> QuantFormat:
    return QuantFormat(name="prop-elem", element=grid, rounding=rounding, **kw)


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kwargs)


def grid_values_f32(grid) -> np.ndarray:
    return grid.values.astype(F32)


@st.composite
def grid_and_inputs(draw, grid_strategy=grids, n=64):
    """A grid and float32 values that hit its levels, midpoints (ties), +-1 ulp of both, and random values."""
    grid = draw(grid_strategy)
    lv = grid.levels
    mids = (lv[:-1] + lv[1:]) / 2.0
    pool = np.concatenate([lv, mids]).astype(F32)  # midpoints that are not float32-exact round to a neighbour
    idx = draw(hnp.arrays(np.int32, n, elements=st.integers(0, pool.size - 1)))
    step = draw(hnp.arrays(np.int8, n, elements=st.sampled_from([-1, 0, 0, 1])))
    base = pool[idx]
    t = np.where(step > 0, np.nextafter(base, F32(np.inf)), np.where(step < 0, np.nextafter(base, F32(-np.inf)), base))
    extra = draw(hnp.arrays(F32, 8, elements=st.floats(width=32, allow_nan=False)))
    return grid, np.concatenate([t.astype(F32), extra, F32([0.0, -0.0])])


def oracle_codes(t: np.ndarray, grid, mode: str) -> np.ndarray:
    """Brute-force rounding definition with exact rational arithmetic (docs/numerics.md, "Element rounding")."""
    lv = [Fraction(float(v)) for v in grid.levels]
    cpos, cneg = grid.level_codes_pos, grid.level_codes_neg
    out = np.empty(t.shape, dtype=cpos.dtype)
    for i, v in enumerate(t.tolist()):
        neg = math.copysign(1.0, v) < 0
        if math.isinf(v):
            k = 0 if v < 0 else len(lv) - 1
        else:
            x = Fraction(v)
            if x >= lv[-1]:
                k = len(lv) - 1
            elif x <= lv[0]:
                k = 0
            else:
                hi = next(j for j, level in enumerate(lv) if level >= x)
                lo = hi if lv[hi] == x else hi - 1
                if lo == hi:
                    k = lo
                elif mode == "rtz":
                    k = lo if x > 0 else hi
                else:
                    d_lo, d_hi = x - lv[lo], lv[hi] - x
                    toward_zero = lo if x > 0 else hi
                    if d_lo != d_hi:
                        k = lo if d_lo < d_hi else hi
                    elif mode == "rtnz":
                        k = toward_zero
                    elif mode == "rtna":
                        k = hi if x > 0 else lo
                    else:
                        codes = cneg if neg else cpos
                        even_lo, even_hi = codes[lo] % 2 == 0, codes[hi] % 2 == 0
                        k = (lo if even_lo else hi) if even_lo != even_hi else toward_zero
        out[i] = cneg[k] if neg else cpos[k]
    return out


# ---- 1. element grids ----------------------------------------------------------------------------------------
@some
@given(grid=grids)
def test_decode_encode_every_code(grid):
    """decode(encode(v)) == v, bit for bit (signed zeros included), for every encodable code of every grid."""
    vals = grid.values
    levels = set(grid.levels.tolist())
    usable = np.array([np.isfinite(v) and v in levels for v in vals])
    v32 = vals[usable].astype(F32)
    back = decode_elements(encode_elements(v32, grid, "rtne"), grid)
    assert same_bits(back, v32)
    # every level is some code's value and rounding a level returns a code with exactly that value
    assert levels <= {float(v) for v in vals if np.isfinite(v)}
    if grid.nan_code is not None:
        assert np.isnan(decode_elements(encode_elements(F32([np.nan]), grid, "rtne"), grid)[0])


@some
@given(grid=grids, mode=rounding_modes(deterministic_only=True))
def test_thresholds_ascending_and_bracketed(grid, mode):
    """thresholds(mode) is float32, strictly ascending, and threshold i lies in (level i, level i+1]."""
    thr = grid.thresholds(mode)
    lv = grid.levels
    assert thr.dtype == F32 and thr.size == lv.size - 1
    assert np.all(np.diff(thr.astype(np.float64)) > 0)
    assert np.all(thr > lv[:-1]) and np.all(thr <= lv[1:])


@some
@given(gi=grid_and_inputs(), mode=rounding_modes(deterministic_only=True))
def test_deterministic_rounding_matches_definition(gi, mode):
    """Reference rounding == brute-force definition: nearest level (rtne: ties to the even code, toward zero if
    both codes share a parity; rtna: ties away; rtnz: ties toward zero), rtz truncates, out of range saturates."""
    grid, t = gi
    assert np.array_equal(encode_elements(t, grid, mode), oracle_codes(t, grid, mode))


@few
@given(gi=grid_and_inputs(small_grids, n=48), mode=rounding_modes(deterministic_only=True))
def test_api_element_rounding_matches_definition(gi, mode):
    """fp4lab.quantize with an element-only format gives the brute-force codes, and dequantize their values."""
    grid, t = gi
    qt = fp4lab.quantize(t, element_only(grid, mode))
    want = oracle_codes(t, grid, mode)
    assert np.array_equal(qt.codes, want)
    assert same_bits(fp4lab.dequantize(qt), decode_elements(want, grid))


@some
@given(grid=grids, t=hnp.arrays(F32, 64, elements=st.floats(width=32, allow_nan=False)),
       mode=rounding_modes(deterministic_only=True))
def test_encode_is_monotone(grid, t, mode):
    """Sorted inputs give non-decreasing decoded values (every deterministic mode)."""
    t = np.sort(t)
    v = decode_elements(encode_elements(t, grid, mode), grid).astype(np.float64)
    assert np.all(np.diff(v) >= 0)


@some
@given(gi=grid_and_inputs(), mode=rounding_modes(deterministic_only=True))
def test_sign_symmetry(gi, mode):
    """On sign-symmetric grids, rounding commutes with negation (as values). rtne needs sign-symmetric code
    parity: float and int grids and sign-magnitude tables have it; arbitrary value tables need not."""
    grid, t = gi
    assume(grid.is_sign_symmetric)
    if mode == "rtne" and getattr(grid, "table", None) is not None:
        c = grid.level_codes_pos
        assume(np.array_equal(c % 2, (c % 2)[::-1]))
    pos = decode_elements(encode_elements(t, grid, mode), grid).astype(np.float64)
    neg = decode_elements(encode_elements(-t, grid, mode), grid).astype(np.float64)
    assert np.array_equal(neg, -pos)


@some
@given(grid=grids, t=hnp.arrays(F32, 32, elements=st.floats(-(2.0**-10), 2.0**-10, width=32)), mode=rounding_modes())
def test_zero_results_keep_the_input_sign_where_the_grid_has_minus_zero(grid, t, mode):
    """A zero result has the input's sign bit when the grid has both +0 and -0 codes, else the grid's one zero."""
    t = np.concatenate([t, F32([0.0, -0.0])])
    rand = np.arange(t.size, dtype=np.uint32) * np.uint32(524287) % np.uint32(1 << 24)
    v = decode_elements(encode_elements(t, grid, mode, rand24=rand), grid)
    zeros = grid.values[grid.values == 0]
    z = v == 0
    if np.any(np.signbit(zeros)) and not np.all(np.signbit(zeros)):
        assert np.array_equal(np.signbit(v[z]), np.signbit(t[z]))
    else:  # the grid has a single zero: every zero result is that one
        assert np.all(np.signbit(v[z]) == np.signbit(zeros[0]))


# ---- 2. stochastic rounding ----------------------------------------------------------------------------------
@st.composite
def sr_cases(draw):
    """A grid and a float32 value strictly inside its range, not on a level; (lo, hi) its neighbours."""
    grid = draw(small_grids)
    lv = grid.levels
    i = draw(st.integers(0, lv.size - 2))
    frac = draw(st.floats(0.001, 0.999))
    t = F32(lv[i] + frac * (lv[i + 1] - lv[i]))
    assume(lv[i] < t < lv[i + 1])
    return grid, t, float(lv[i]), float(lv[i + 1])


@some
@given(gi=grid_and_inputs(), seed=st.integers(0, 2**64 - 1))
def test_sr_returns_one_of_the_two_neighbours(gi, seed):
    """SR gives the level below or above t (t itself if it is a level; the extreme level beyond the range)."""
    grid, t = gi
    qt = fp4lab.quantize(t, element_only(grid, "sr"), seed=seed)
    v = decode_elements(qt.codes, grid).astype(np.float64)
    lo = oracle_codes(t, grid, "rtz")  # rtz = the neighbour towards zero
    lo_v = decode_elements(lo, grid).astype(np.float64)
    lv = grid.levels
    t64 = t.astype(np.float64)
    below = lv[np.clip(np.searchsorted(lv, t64, side="right") - 1, 0, lv.size - 1)]
    above = lv[np.clip(np.searchsorted(lv, t64, side="left"), 0, lv.size - 1)]
    assert np.all((v == below) | (v == above))
    on_level = np.isin(t64, lv) | (t64 >= lv[-1]) | (t64 <= lv[0])
    assert np.array_equal(v[on_level], np.clip(t64, lv[0], lv[-1])[on_level])
    assert np.all(np.isfinite(lo_v))


@few
@given(case=sr_cases(), seed=st.integers(0, 2**64 - 1))
def test_sr_is_reproducible_for_a_seed(case, seed):
    """Same seed and input: the same codes (and the same as the numpy reference)."""
    grid, t, _, _ = case
    x = np.full(256, t, F32)
    fmt = element_only(grid, "sr")
    a = fp4lab.quantize(x, fmt, seed=seed).codes
    assert np.array_equal(a, fp4lab.quantize(x, fmt, seed=seed).codes)
    assert np.array_equal(a, quantize_reference(x, fmt, QuantizeOptions(seed=seed)).codes)


@few
@given(case=sr_cases(), seeds=st.lists(st.integers(0, 2**64 - 1), min_size=2, max_size=2, unique=True))
def test_sr_differs_across_seeds(case, seeds):
    """Two different seeds give different codes on 512 copies of a value with P(up) in [1/4, 3/4]
    (equal with probability <= (5/8)^512)."""
    grid, t, lo, hi = case
    p = (float(t) - lo) / (hi - lo)
    assume(0.25 <= p <= 0.75)
    x = np.full(512, t, F32)
    fmt = element_only(grid, "sr")
    a, b = (fp4lab.quantize(x, fmt, seed=s).codes for s in seeds[:2])
    assert not np.array_equal(a, b)


def bernstein_bound(n: int, p: float, delta: float) -> float:
    """a with P(|Binomial(n, p) - n p| >= a) <= delta (Bernstein's inequality)."""
    L = math.log(2.0 / delta)
    return L / 3.0 + math.sqrt((L / 3.0) ** 2 + 2.0 * n * p * (1.0 - p) * L)


@some
@given(case=sr_cases(), seed=st.integers(0, 2**64 - 1))
def test_sr_is_unbiased(case, seed):
    """Mean of N = 4096 SR results of t is t within the Bernstein bound at failure probability 1e-9 per example,
    plus the contract's deterministic bias: P(up) = floor(p * 2^24) / 2^24 with p computed in float32
    (|P(up) - p| <= 4 * 2^-24)."""
    grid, t, lo, hi = case
    n = 4096
    x = np.full(n, t, F32)
    q = fp4lab.dequantize(fp4lab.quantize(x, element_only(grid, "sr"), seed=seed)).astype(np.float64)
    assert set(np.unique(q)) <= {lo, hi}
    ups = int(np.sum(q == hi))
    p = (float(t) - lo) / (hi - lo)
    assert abs(ups - n * p) <= bernstein_bound(n, p, 1e-9) + n * 4 * 2.0**-24


# ---- 3. block scaling ----------------------------------------------------------------------------------------
symmetric_grids = st.one_of(st.sampled_from([g for g in BUILTIN_GRIDS if g.bits <= 4 and g.is_sign_symmetric]),
                            element_grids(max_bits=4).filter(lambda g: g.is_sign_symmetric))


def _nearest_unclamped(f: QuantFormat) -> QuantFormat | None:
    """``f`` with a nearest rounding (its own, else rtne) and no scale clamps (None if that is not a valid format):
    a map instead of a filter, so hypothesis rejects few draws (a filter here tripped its filter_too_much check)."""
    d = f.model_dump()
    d["rounding"] = d["rounding"] if d["rounding"] in NEAREST else "rtne"
    d["scale_rule"] = {**d["scale_rule"], "min_scale": None, "max_scale": None}
    try:
        return QuantFormat.model_validate(d)
    except ValueError:
        return None


fp32_formats = quant_formats(element=symmetric_grids, scale_kinds=("fp32",), methods=("amax",)).map(
    _nearest_unclamped).filter(lambda f: f is not None)


@few
@given(data=st.data())
def test_quantize_dequantize_is_idempotent_with_fp32_scales(data):
    """quantize(dequantize(q)) == q for FP32-scale formats on sign-symmetric grids, nearest rounding, finite data
    whose blocks are all-zero or have amax >= 2^-100 (scales stay normal): codes always; scale codes exactly with
    scale_division 'divide', within one ulp with 'reciprocal'."""
    fmt = data.draw(fp32_formats)
    x = data.draw(block_inputs(fmt, allow_nan=False, allow_inf=False, allow_huge=False, exp_range=(-30, 30)))
    assume(np.all((x == 0) | (np.abs(x) >= 2.0**-100)))
    q1 = fp4lab.quantize(x, fmt)
    q2 = fp4lab.quantize(fp4lab.dequantize(q1), fmt)
    assert np.array_equal(q2.codes, q1.codes)
    if fmt.scale_rule.scale_division == "divide":  # fl(fl(g * S) / g) == S in binary round-to-nearest
        assert np.array_equal(q2.scale_codes, q1.scale_codes)
    else:  # amax * fl(1/g) may move by one ulp
        d = q2.scale_codes.astype(np.int64) - q1.scale_codes.astype(np.int64)
        assert np.all(np.abs(d) <= 1)


@some
@given(data=st.data())
def test_fp32_scales_map_block_amax_onto_the_grid_maximum(data):
    """amax rule, FP32 scales, one target, nearest rounding: the element holding the block amax gets the code of
    the grid's largest magnitude (on the side where the grid reaches it)."""
    fmt = data.draw(fp32_formats.filter(lambda f: f.scale_rule.targets is None and f.tensor_scale == "none"))
    x = data.draw(block_inputs(fmt, allow_nan=False, allow_inf=False, allow_huge=False, exp_range=(-30, 30)))
    qt = fp4lab.quantize(x, fmt)
    lv = fmt.element.levels
    xb = x.reshape(-1, fmt.block_size) if not fmt.block.is_2d else None
    assume(xb is not None)
    codes = np.asarray(qt.codes).reshape(-1, fmt.block_size)
    for row, crow in zip(xb, codes):
        j = int(np.argmax(np.abs(row)))
        amax = abs(float(row[j]))
        if amax < 2.0**-100:
            continue
        want = lv[-1] if row[j] > 0 else lv[0]
        if abs(want) != fmt.element.amax:  # this side of the grid does not reach the amax: it saturates
            continue
        assert fmt.element.values[crow[j]] == want


@st.composite
def mx_case(draw, method):
    grid = draw(element_grids(max_bits=4).filter(lambda g: g.amax >= 1.0 and g.is_sign_symmetric))
    fmt = QuantFormat(name="prop-mx", element=grid, block=BlockLayout(shape=[draw(st.sampled_from([4, 16, 32]))]),
                      scale="e8m0", scale_rule=ScaleRule(method=method), rounding=draw(rounding_modes(True)))
    x = draw(block_inputs(fmt, allow_nan=False, allow_inf=False, allow_huge=False, exp_range=(-100, 100)))
    return fmt, x


@some
@given(case=mx_case("floor"))
def test_floor_rule_clipping_bound(case):
    """OCP FLOOR: S = 2^(floor(log2 amax) - emax), so amax / S lies in [2^emax, 2^(emax+1)): elements are
    clipped to the grid maximum only in that window, and the block amax element decodes to at least
    min(2^emax, grid max) * S. Exact for blocks whose exponent is not clamped (amax >= 2^(emax-126))."""
    fmt, x = case
    qt = fp4lab.quantize(x, fmt)
    S = np.asarray(qt.scales, np.float64).reshape(-1)
    xb = x.reshape(-1, fmt.block_size).astype(np.float64)
    amax = np.abs(xb).max(axis=1)
    ok = amax >= 2.0 ** (fmt.emax_elem - 126)
    r = amax[ok] / S[ok]
    assert np.all((r >= 2.0**fmt.emax_elem) & (r < 2.0 ** (fmt.emax_elem + 1)))
    deq = np.abs(np.asarray(fp4lab.dequantize(qt), np.float64)).reshape(-1, fmt.block_size).max(axis=1)
    if fmt.rounding != "rtz":
        lower = min(2.0**fmt.emax_elem, fmt.element.max)
        assert np.all(deq[ok] >= np.minimum(lower, _nearest_below(fmt.element.levels, r)) * S[ok])


def _nearest_below(levels: np.ndarray, r: np.ndarray) -> np.ndarray:
    return levels[np.clip(np.searchsorted(levels, r, side="right") - 1, 0, levels.size - 1)]


@some
@given(case=mx_case("rceil"))
def test_rceil_never_clips(case):
    """RCEIL: S = 2^ceil(log2(amax / g)) (float32 division), so |x| / S <= g for every element: nothing clips.
    Holds for every float32 g as long as amax / g is a normal float32 and the exponent is not clamped."""
    fmt, x = case
    g = fmt.element.amax
    qt = fp4lab.quantize(x, fmt)
    S = np.asarray(qt.scales, np.float64).reshape(-1)
    xb = np.abs(x.reshape(-1, fmt.block_size).astype(np.float64))
    amax = xb.max(axis=1)
    ok = (amax / g >= 2.0**-126) & (amax / g <= 2.0**127)
    assert np.all(xb[ok] / S[ok, None] <= g)
    assert np.all(amax[ok] / S[ok] > g / 2)  # and S is the smallest such power of two


@some
@given(data=st.data())
def test_scale_codes_decode_to_the_stored_scales(data):
    """qt.scales == scale_format.decode(qt.scale_codes), bit for bit (NaN scales included), any format."""
    fmt = data.draw(quant_formats(methods=SCALING_METHODS))
    x = data.draw(block_inputs(fmt))
    qt = quiet(fp4lab.quantize, x, fmt)
    assert qt.scale_codes.dtype == fmt.scale.code_dtype
    assert same_bits(qt.scales, fmt.scale.decode(qt.scale_codes))


@few
@given(data=st.data(), name=st.sampled_from(["nvfp4", "nvfp4-torchao", "ufp4-e4m3", "nvfp4-2d"]))
def test_two_level_reconstruction_bound(data, name):
    """Two-level formats: |deq - x| <= (D/2) * S * ts * (1 + 2^-20) + 2^-20 |x| per element, where D is the largest
    gap between grid levels, for finite blocks whose amax is at least 2^-8 of the tensor amax (block scales in
    the E4M3 normal range). The E4M3 rounding of the block scale lets amax / (S ts) exceed the grid maximum by at
    most g 2^-4 <= D/2, so clipping stays inside the same bound."""
    fmt = fp4lab.get_format(name)
    x = data.draw(block_inputs(fmt, allow_nan=False, allow_inf=False, allow_huge=False, exp_range=(-6, 6)))
    bs = fmt.block.shape
    blocks = x.reshape(x.shape[0] // bs[0], bs[0], -1, bs[-1]) if len(bs) == 2 else x.reshape(-1, bs[0])
    t_amax = float(np.abs(x).max())
    # the tensor scale amax/(6*smax) must not underflow: its fallback ts = 1 puts the block scales below the E4M3
    # range, the zero-scale case the policy tests cover
    assume(t_amax > 2.0**-100)
    qt = fp4lab.quantize(x, fmt)
    deq = np.asarray(fp4lab.dequantize(qt), np.float64)
    S = np.asarray(qt.scales, np.float64)
    S_full = np.kron(S, np.ones((bs[0], bs[1]))) if len(bs) == 2 else np.repeat(S, bs[0], axis=-1)
    amax_full = np.kron(np.abs(blocks).max(axis=(1, 3)), np.ones((bs[0], bs[1]))) if len(bs) == 2 \
        else np.repeat(np.abs(blocks).max(axis=1).reshape(S.shape), bs[0], axis=-1)
    ok = amax_full >= t_amax * 2.0**-8
    D = float(np.max(np.diff(fmt.element.levels)))
    err = np.abs(deq - x.astype(np.float64))
    bound = D / 2 * S_full * float(qt.tensor_scale) * (1 + 2.0**-20) + 2.0**-20 * np.abs(x)
    assert np.all(err[ok] <= bound[ok])


@few
@given(data=st.data())
def test_packed_codes_unpack_to_codes(data):
    """qt.packed() holds element 2i in the low nibble and 2i+1 in the high nibble of byte i."""
    fmt = data.draw(quant_formats(element=element_grids(max_bits=4)))
    x = data.draw(block_inputs(fmt))
    assume(x.shape[-1] % 2 == 0)
    qt = quiet(fp4lab.quantize, x, fmt)
    p = np.asarray(qt.packed())
    assert np.array_equal(p & 0xF, qt.codes[..., 0::2]) and np.array_equal(p >> 4, qt.codes[..., 1::2])
    assert np.array_equal(unpack_nibbles(p), qt.codes)


# ---- 4. layouts, axes, arithmetic equivalences ---------------------------------------------------------------
def _with(fmt: QuantFormat, **changes) -> QuantFormat:
    return QuantFormat.model_validate({**fmt.model_dump(), "name": "prop-variant", **changes})


@few
@given(data=st.data(), r=st.sampled_from([1, 2, 4, 8]), c=st.sampled_from([1, 2, 4, 8]))
def test_2d_tiles_with_a_unit_extent_equal_1d_blocks(data, r, c):
    """A 1 x c tile is a 1-D block of c along the last axis; an r x 1 tile is a 1-D block of r along axis -2."""
    assume((r == 1) != (c == 1))
    fmt1 = data.draw(quant_formats(two_d=False, methods=("amax", "rceil", "floor")).filter(
        lambda f: f.tensor_scale == "none"))
    fmt2 = _with(fmt1, block={"shape": [r, c]})
    fmt1 = _with(fmt1, block={"shape": [max(r, c)]})
    x = data.draw(block_inputs(fmt2))
    q2 = quiet(fp4lab.quantize, x, fmt2, seed=7)
    axis = -1 if r == 1 else -2
    q1 = quiet(fp4lab.quantize, x, fmt1, axis=axis, seed=7)
    assert np.array_equal(q2.codes, q1.codes)
    assert np.array_equal(q2.scale_codes, q1.scale_codes)


@few
@given(data=st.data())
def test_blocking_axis_is_a_transpose(data):
    """quantize(x, axis=0) == quantize(x.T, axis=-1).T for deterministic rounding (codes and scales)."""
    fmt = data.draw(quant_formats(two_d=False).filter(lambda f: f.rounding != "sr"))
    x = data.draw(block_inputs(fmt))
    a = quiet(fp4lab.quantize, np.ascontiguousarray(x.T), fmt, axis=0)
    b = quiet(fp4lab.quantize, x, fmt, axis=-1)
    assert np.array_equal(a.codes, b.codes.T)
    assert np.array_equal(a.scale_codes, np.asarray(b.scale_codes).T)


@some
@given(amax=hnp.arrays(F32, 64, elements=st.floats(2.0**-120, 2.0**120, width=32)),
       k=hnp.arrays(np.int32, 64, elements=st.integers(-100, 100)), ulps=st.integers(-64, 64),
       target=st.sampled_from([6.0, 7.5, 28.0, 448.0, 57344.0]))
def test_rceil_division_equals_reciprocal_multiply(amax, k, ulps, target):
    """RCEIL scale codes from amax / g and from amax * float32(1/g) agree for g in {6, 7.5, 28, 448, 57344},
    on random amax and within 64 ulp of g * 2^k."""
    edge = (np.float64(target) * np.ldexp(1.0, k)).astype(F32)
    edge = edge.view(np.int32) + np.int32(ulps)
    a = np.concatenate([amax, edge.view(F32)])
    a = a[np.isfinite(a) & (a > 0)]
    e8m0 = fp4lab.get_format("mxfp4").scale
    div = encode_scale(a / F32(target), e8m0, "ceil")
    rec = encode_scale(a * (F32(1) / F32(target)), e8m0, "ceil")
    assert np.array_equal(div, rec)


@few
@given(data=st.data())
def test_pow2_scales_make_divide_and_reciprocal_identical(data):
    """With power-of-two scales in float32's normal range, x / S == x * (1/S): both element_scaling options give
    the same codes."""
    fmt = data.draw(quant_formats(scale_kinds=("pow2",), methods=("rceil", "floor", "ceil")).filter(
        lambda f: f.tensor_scale == "none"))
    x = data.draw(block_inputs(fmt, allow_huge=False, exp_range=(-60, 60)))
    a = quiet(fp4lab.quantize, x, _with(fmt, scale_rule={**fmt.scale_rule.model_dump(), "element_scaling": "divide"}))
    S = np.asarray(a.scales)
    assume(np.all(np.isnan(S) | ((S >= 2.0**-126) & (S <= 2.0**126))))
    reciprocal = {**fmt.scale_rule.model_dump(), "element_scaling": "reciprocal"}
    b = quiet(fp4lab.quantize, x, _with(fmt, scale_rule=reciprocal))
    assert np.array_equal(a.codes, b.codes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data(), k=st.integers(-20, 20))
def test_power_of_two_equivariance(data, k):
    """Scaling a tensor by 2^k leaves the element codes unchanged and multiplies the scales by 2^k, for FP32 and
    pow2 scale rules (single level, no min/max clamp, block scales strictly inside the scale format's range and
    away from float32's limits)."""
    fmt = data.draw(quant_formats(scale_kinds=("fp32", "pow2"), methods=SCALING_METHODS)
                    .filter(lambda f: f.tensor_scale == "none" and f.scale_rule.min_scale is None
                            and f.scale_rule.max_scale is None and f.rounding != "sr"
                            and f.scale_rule.zero_block == "as_computed"))
    x = data.draw(block_inputs(fmt, allow_nan=False, allow_inf=False, allow_huge=False, exp_range=(-8, 8)))
    a = quiet(fp4lab.quantize, x, fmt)
    b = quiet(fp4lab.quantize, (x.astype(np.float64) * 2.0**k).astype(F32), fmt)
    Sa, Sb = np.asarray(a.scales, np.float64), np.asarray(b.scales, np.float64)
    lo, hi = max(fmt.scale.min_positive, 2.0**-90), min(fmt.scale.max, 2.0**90)
    assume(np.all((Sa > lo) & (Sa < hi) & (Sb > lo) & (Sb < hi)))  # no clamp at either end of the scale range
    assume(np.all((x == 0) | (np.abs(x) >= 2.0**-100)))
    assert np.array_equal(a.codes, b.codes)
    assert np.array_equal(Sb, Sa * 2.0**k)


@some
@given(data=st.data())
def test_block_scale_is_monotone_in_amax(data):
    """For a single-target, single-level format the decoded block scale never decreases as the block amax grows."""
    fmt = data.draw(quant_formats(two_d=False, methods=SCALING_METHODS).filter(
        lambda f: f.tensor_scale == "none" and f.scale_rule.targets in (None, []) and f.scale_rule.zero_block ==
        "as_computed" and (f.scale_rule.targets is None or len(f.scale_rule.targets) == 1)))
    amax = np.sort(data.draw(hnp.arrays(F32, 16, elements=st.floats(0, 2.0**127, width=32))))
    x = np.zeros((16, fmt.block_size), F32)
    x[:, 0] = amax
    S = np.asarray(quiet(fp4lab.quantize, x, fmt).scales, np.float64).reshape(-1)
    assert np.all(S[1:] >= S[:-1])


@some
@given(data=st.data())
def test_block_policies(data):
    """All-zero blocks give zero codes and the zero_block scale; with nan_policy 'propagate' a block holding a NaN
    gets the NaN scale code; with inf_policy 'propagate'/'saturate' a block holding an Inf (and no NaN) gets the
    NaN / largest scale."""
    fmt = data.draw(quant_formats(two_d=False, methods=("amax", "rceil", "floor", "ceil")).filter(
        lambda f: f.tensor_scale == "none"))
    bs = fmt.block_size
    x = np.zeros((3, bs), F32)
    x[1, 0], x[1, -1] = np.nan, 1.0
    x[2, 0], x[2, -1] = -np.inf, 1.0
    qt = quiet(quantize_reference, x.reshape(1, -1), fmt)
    S = np.asarray(qt.scales).reshape(-1)
    codes = np.asarray(qt.codes).reshape(3, bs)
    zero_vals = fmt.element.values[codes[0]]
    assert np.all(zero_vals == 0)
    zb = fmt.scale_rule.zero_block
    expect = {"one": 1.0, "zero": 0.0, "min": fmt.scale.min_positive}.get(zb)
    if expect is not None:
        assert S[0] == np.float32(expect)
    if fmt.scale_rule.nan_policy == "propagate":
        assert np.isnan(S[1])
    if fmt.scale_rule.inf_policy == "propagate":
        assert np.isnan(S[2])
    else:
        assert S[2] == np.float32(fmt.scale.max)


# ---- 5. spec files -------------------------------------------------------------------------------------------
@some
@given(fmt=quant_formats())
def test_spec_toml_round_trip(fmt, tmp_path_factory):
    """load(dump(fmt)) == fmt for random formats, and the reloaded grid decodes to the same bits."""
    path = tmp_path_factory.mktemp("spec") / "fmt.toml"
    path.write_text(model_to_toml(fmt))
    back = load_model(QuantFormat, path)
    assert back == fmt
    assert same_bits(grid_values_f32(back.element), grid_values_f32(fmt.element))
    for mode in THRESHOLD_MODES:
        assert np.array_equal(back.element.thresholds(mode), fmt.element.thresholds(mode))


@some
@given(x=float32_arrays(allow_nan=False), name=st.sampled_from(["e2m1", "e1m2", "int4"]), mode=rounding_modes())
def test_element_formats_through_api_equal_reference(x, name, mode):
    """fp4lab.quantize == quantize_reference on adversarial float32 arrays for the element-only built-ins."""
    a = quiet(fp4lab.quantize, x, name, rounding=mode, seed=3)
    b = quiet(quantize_reference, x, fp4lab.get_format(name), QuantizeOptions(mode, seed=3))
    assert np.array_equal(a.codes, b.codes)


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
