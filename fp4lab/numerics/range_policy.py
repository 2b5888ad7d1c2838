"""Range edges of quantization: tensor amaxes near float32's maximum and near its smallest values.

The numpy definitions (the numba twin and the Triton kernels reproduce them; docs/numerics.md, "Range edges"):

* ``tensor_scale_bounds``: two-level formats clamp the tensor scale to ``[lo, hi]``. ``hi`` is the largest
  float32 ``t`` with ``float32(float32(L * S) * t)`` (``float32(L * float32(S * t))`` for ``dequantize_order =
  "scale_product_first"``) finite, ``L`` the grid's largest magnitude and ``S`` the largest scale the format
  stores, so no code decodes to Inf. ``lo`` (reciprocal element scaling only) is ``RECIP_TS_FLOOR``, the smallest
  float32 whose
  reciprocal is finite, so ``float32(1/ts)`` never overflows.
* ``multiplier_floor``: with reciprocal element scaling, a block with a non-zero amax whose non-zero scale ``S``
  has an infinite multiplier ``float32(float32(1/ts) / S)`` (``float32(1/S)`` single-level) takes the smallest
  positive scale of the format whose multiplier is finite.
* ``decoded_caps``: where the tensor scale is 1 (single-level formats; two-level ones whose ts fell back to 1) and
  the rule can pick a scale at which some level decodes to +-Inf, the scaled elements of such blocks are clamped
  to the largest-magnitude levels that decode finite (``value * S``), on each side (NaN stays NaN).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from fp4lab.formats.quant_format import QuantFormat
from fp4lab.formats.scales import ScaleFormat
from fp4lab.numerics.scale_rule import FLT_MAX, block_scale_codes

F32 = np.float32
RECIP_TS_FLOOR = np.array(0x00200001, np.uint32).view(F32)  # 2^-128 + 2^-149: float32(1/ts) finite from here up


def _finite_f32(v) -> np.ndarray:
    return np.isfinite(np.asarray(v, F32))


def positive_scales(sfmt: ScaleFormat) -> tuple[np.ndarray, np.ndarray]:
    """(ascending float32 values, codes) of the positive finite scales of a pow2 / float / bf16 format."""
    if sfmt.kind == "pow2":
        codes = np.arange(sfmt.pow2_nan_code)
    elif sfmt.kind == "float":
        lv = sfmt.grid.levels
        return lv[lv > 0].astype(F32), sfmt.grid.level_codes_pos[lv > 0].astype(np.int64)
    else:
        codes = np.arange(1, 0x7F80)
    return sfmt.decode(codes).astype(F32), codes.astype(np.int64)


def _largest_scale(fmt: QuantFormat) -> np.float32:
    """Largest decoded finite scale stored for any input and tensor scale (the rule at amax = FLT_MAX, and the
    largest scale where Inf blocks saturate)."""
    tiny = np.array(1, np.uint32).view(F32)
    top = F32(fmt.scale.max) if fmt.scale_rule.inf_policy == "saturate" else F32(0)
    for target in fmt.targets:
        codes = block_scale_codes(np.array([FLT_MAX], F32), fmt, target, tiny if fmt.tensor_scale != "none" else None,
                                  FLT_MAX if fmt.scale_rule.scale_arithmetic == "encode" else None)
        s = F32(fmt.scale.decode(codes)[0])
        top = max(top, s if np.isfinite(s) else F32(fmt.scale.max))  # a NaN overflow code: smaller scales are kept
    return top


def _largest_level(fmt: QuantFormat) -> np.float32:
    lv = fmt.element.levels
    return F32(max(lv[-1], -lv[0]))


@lru_cache(maxsize=256)
def tensor_scale_bounds(fmt: QuantFormat) -> tuple[np.float32, np.float32]:
    """(lo, hi) of the tensor scale of a two-level format (see the module docstring)."""
    lmax, smax = _largest_level(fmt), _largest_scale(fmt)
    product_first = getattr(fmt.scale_rule, "dequantize_order", "value_scale_first") == "scale_product_first"

    def finite(t: np.float32) -> bool:  # the largest code's decoded value, in the format's order of products
        return bool(_finite_f32(lmax * F32(smax * t) if product_first else F32(lmax * smax) * t))

    # finite(t) is monotone in t >= 0 (products of float32 roundings), and float32 bit patterns of t >= 0 are
    # ordered as the values: bisect the patterns (finite(0) holds, +Inf does not)
    ok, bad = 0, 0x7F800000
    with np.errstate(over="ignore"):
        while bad - ok > 1:
            mid = (ok + bad) // 2
            ok, bad = (mid, bad) if finite(np.array(mid, np.uint32).view(F32)) else (ok, mid)
    hi = np.array(ok, np.uint32).view(F32)
    hi = hi if hi > 0 else F32(FLT_MAX)  # no finite tensor scale keeps every code finite: no cap
    rule = fmt.scale_rule
    lo = RECIP_TS_FLOOR if rule.element_scaling == "reciprocal" and rule.scale_arithmetic != "encode" else F32(0)
    return F32(lo), F32(hi)


def clamp_tensor_scale(ts: np.float32, fmt: QuantFormat) -> np.float32:
    """``ts`` clamped to ``tensor_scale_bounds(fmt)``."""
    lo, hi = tensor_scale_bounds(fmt)
    return F32(min(max(F32(ts), lo), hi))


@lru_cache(maxsize=256)
def uses_multiplier_floor(fmt: QuantFormat) -> bool:
    """Whether a block's reciprocal multiplier can overflow: reciprocal element scaling with a tensor scale, or with
    a scale format whose smallest positive scale has an infinite float32 reciprocal."""
    rule = fmt.scale_rule
    if rule.method == "none" or rule.element_scaling != "reciprocal" or rule.scale_arithmetic == "encode":
        return False
    if fmt.tensor_scale != "none":
        return True
    smallest = F32(2.0**-149) if fmt.scale.kind == "fp32" else positive_scales(fmt.scale)[0][0]
    with np.errstate(divide="ignore", over="ignore"):
        return not _finite_f32(F32(1) / smallest)


def _multiplier(m: np.float32, s: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore"):
        return (m / np.asarray(s, F32)).astype(F32)


def multiplier_floor(fmt: QuantFormat, ts: np.float32 | None) -> tuple[int, np.float32] | None:
    """(code, value) of the smallest positive scale whose element multiplier ``float32(float32(1/ts) / S)``
    (``float32(1/S)`` without a tensor scale) is finite; None if the format never needs it or no scale has one."""
    if not uses_multiplier_floor(fmt):
        return None
    with np.errstate(divide="ignore", over="ignore"):
        m = F32(1) if ts is None else F32(F32(1) / F32(ts))
    if fmt.scale.kind == "fp32":  # bisect the positive bit patterns: the multiplier falls as S grows
        lo, hi = 1, 0x7F7FFFFF
        if not _finite_f32(_multiplier(m, np.array(hi, np.uint32).view(F32))):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            ok = _finite_f32(_multiplier(m, np.array(mid, np.uint32).view(F32)))
            lo, hi = (lo, mid) if ok else (mid + 1, hi)
        return lo, np.array(lo, np.uint32).view(F32)
    values, codes = positive_scales(fmt.scale)
    ok = np.flatnonzero(_finite_f32(_multiplier(m, values)))
    if ok.size == 0:
        return None
    return int(codes[ok[0]]), F32(values[ok[0]])


@lru_cache(maxsize=256)
def range_clamp_scale(fmt: QuantFormat) -> np.float32 | None:
    """Smallest positive scale at which some level decodes to +-Inf when the tensor scale is 1, if the rule can pick
    such a scale for finite inputs; else None (no clamp ever). Two-level formats need it only where a ts of 1 (the
    fallback, e.g. when ``target * smax`` overflows) lets a code decode to Inf."""
    if fmt.scale_rule.method == "none":
        return None
    top = _largest_scale(fmt)
    lmax = _largest_level(fmt)
    with np.errstate(over="ignore"):
        if _finite_f32(lmax * top):
            return None
        if fmt.scale.kind == "fp32":
            lo, hi = 1, int(np.array(top, F32).view(np.uint32))
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (mid + 1, hi) if _finite_f32(lmax * np.array(mid, np.uint32).view(F32)) else (lo, mid)
            return np.array(lo, np.uint32).view(F32)
        values = positive_scales(fmt.scale)[0]
        return F32(values[np.flatnonzero(~_finite_f32(lmax * values))[0]])


def decoded_caps(fmt: QuantFormat, S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per scale in ``S``: (most negative, most positive) grid level whose ``float32(level * S)`` is finite (-0.0 /
    +0.0 if none: a capped value keeps its sign) where the grid's extreme level on that side decodes to +-Inf;
    -Inf / +Inf (no cap) where it decodes finite or ``S`` is not finite. Only values beyond a cap move."""
    lv = fmt.element.levels.astype(F32)
    S = np.asarray(S, F32)
    with np.errstate(over="ignore", invalid="ignore"):
        fin = _finite_f32(lv * S[..., None])
    pos = np.max(np.where(fin & (lv >= 0), lv, F32(0)), axis=-1).astype(F32)
    neg = np.min(np.where(fin & (lv <= 0), lv, F32(0)), axis=-1).astype(F32)
    neg = np.where(neg < 0, neg, F32(-0.0)).astype(F32)
    ok = _finite_f32(S)
    return (np.where(ok & ~fin[..., 0], neg, F32(-np.inf)).astype(F32),
            np.where(ok & ~fin[..., -1], pos, F32(np.inf)).astype(F32))


class RangeEdges(NamedTuple):
    """The Triton kernels' constexprs for these policies: ``TS_LO`` / ``TS_HI`` (two-level tensor-scale bounds as
    fp32 bit patterns), ``BUMP_LO`` / ``BUMP_HI`` (the multiplier floor's search range of positive scale codes,
    ascending in value, ``BUMP_HI = 0``: no floor) and ``S_CRIT`` (decoded-range caps for block scales >= S_CRIT;
    0: none)."""

    TS_LO: int = 0
    TS_HI: int = 0x7F7FFFFF
    BUMP_LO: int = 0
    BUMP_HI: int = 0
    S_CRIT: float = 0.0


@lru_cache(maxsize=256)
def kernel_constants(fmt: QuantFormat) -> RangeEdges:
    """The ``RangeEdges`` of ``fmt``."""
    if fmt.scale_rule.method == "none":
        return RangeEdges()
    ts_lo, ts_hi, bump_lo, bump_hi, s_crit = RangeEdges()
    if fmt.tensor_scale != "none":
        lo, hi = tensor_scale_bounds(fmt)
        ts_lo, ts_hi = int(np.array(lo, F32).view(np.uint32)), int(np.array(hi, F32).view(np.uint32))
    if uses_multiplier_floor(fmt):
        sfmt = fmt.scale
        if sfmt.kind == "fp32":
            bump_lo, bump_hi = 1, 0x7F7FFFFF
        else:
            codes = positive_scales(sfmt)[1]
            bump_lo, bump_hi = (0 if sfmt.kind == "pow2" else 1), int(codes[-1])
    crit = range_clamp_scale(fmt)
    if crit is not None:
        s_crit = float(crit)
    return RangeEdges(ts_lo, ts_hi, bump_lo, bump_hi, s_crit)
