"""Reference (plain numpy) rounding of float32 values onto element grids and scale formats.

This module *defines the bits*; the numba emulator and the Triton kernels must reproduce them exactly.
All inputs are float32; every arithmetic step is a single correctly rounded float32 operation.
"""

from __future__ import annotations

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.grids import _GridBase
from fp4lab.formats.scales import ScaleFormat

TWO24 = np.float32(16777216.0)


def f32_bits(x: np.ndarray) -> np.ndarray:
    """uint32 bit patterns of a float32 array."""
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def zero_codes(grid: _GridBase) -> tuple[int, int]:
    """(code of +0, code of the zero a negative input rounds to)."""
    z = int(np.searchsorted(grid.levels, 0.0))
    return int(grid.level_codes_pos[z]), int(grid.level_codes_neg[z])


def nan_element_code(grid: _GridBase, policy: str) -> int:
    """Code written for a NaN element: the grid's NaN code if it has one (policy 'nan'), else +0 or -0."""
    if policy == "nan" and grid.nan_code is not None:
        return grid.nan_code
    pos0, neg0 = zero_codes(grid)
    return neg0 if policy == "neg_zero" else pos0


def encode_elements(
    t: np.ndarray,
    grid: _GridBase,
    mode: str,
    rand24: np.ndarray | None = None,
    nan_policy: str = "nan",
    overflow: str = "saturate",
    signed_zero: str = "keep",
) -> np.ndarray:
    """Round float32 ``t`` onto ``grid`` and return codes (uint8 for grids of up to 8 bits).

    Deterministic modes: ``level = levels[count(t >= thresholds(mode))]``; values beyond the grid saturate.
    ``sr``: with neighbours ``a <= t < b``, ``p = float32(t - a) / float32(b - a)`` (float32, RTNE) and
    ``t`` rounds up iff ``floor(p * 2^24) > rand24`` (24 random bits per element, see ``philox.py``).
    A zero result takes the input's sign where the grid has -0 (``signed_zero = "positive"``: an input that is
    exactly -0 gets +0). NaN inputs get ``nan_element_code``.
    ``overflow`` 'nan'/'inf': magnitudes above ``grid.overflow_threshold`` map to the NaN / signed Inf code.
    """
    t = np.asarray(t, dtype=np.float32)
    levels32 = grid.levels.astype(np.float32)
    cpos, cneg = grid.level_codes_pos, grid.level_codes_neg
    if mode == "sr":
        if rand24 is None:
            raise InputError("encode_elements: mode 'sr' needs rand24 (24 random bits per element)")
        n = levels32.size
        k = np.clip(np.searchsorted(levels32, t, side="right") - 1, 0, n - 2)
        lo, hi = levels32[k], levels32[k + 1]
        with np.errstate(invalid="ignore", over="ignore"):
            frac = np.float32(t - lo) / np.float32(hi - lo)
            frac24 = np.floor(np.clip(frac, 0, 1) * TWO24).astype(np.uint32)
        idx = k + (frac24 > np.asarray(rand24, dtype=np.uint32)).astype(np.intp)
        idx = np.where(t >= levels32[-1], n - 1, np.where(t <= levels32[0], 0, idx))
    else:
        idx = np.searchsorted(grid.thresholds(mode), t, side="right")
    negative = np.signbit(t) if signed_zero == "keep" else t < 0
    codes = np.where(negative, cneg[idx], cpos[idx]).astype(cpos.dtype)
    if overflow != "saturate":
        over = np.abs(t) >= grid.overflow_threshold
        if overflow == "nan":
            codes[over] = grid.nan_code
        else:
            pinf, ninf = grid.inf_codes
            codes[over] = np.where(np.signbit(t[over]), ninf, pinf)
    nan = np.isnan(t)
    if nan.any():
        codes[nan] = nan_element_code(grid, nan_policy)
    return codes


def encode_scale(ideal: np.ndarray, sfmt: ScaleFormat, rounding: str, overflow: str = "saturate") -> np.ndarray:
    """Encode non-negative float32 ideal scales into ``sfmt`` codes with ``rounding`` in {rtne, ceil, floor}.

    Saturates at the largest finite scale and at the smallest (pow2 has no zero). NaN ideals give the NaN code.
    ``overflow = "nan"`` (pow2 only): an ideal whose rounded exponent is above the largest code, or Inf, gives the
    NaN code instead of the largest scale.
    """
    ideal = np.asarray(ideal, dtype=np.float32)
    nan = np.isnan(ideal)
    if not sfmt.tabulated:  # fp32 / bf16; saturate: +Inf (amax / target overflowed) becomes the largest finite scale
        ideal = np.where(ideal > np.float32(sfmt.max), np.float32(sfmt.max), ideal)
        return f32_bits(ideal).copy() if sfmt.kind == "fp32" else _encode_bf16(ideal, rounding)
    if sfmt.kind == "float":
        grid = sfmt.grid
        lv = grid.levels.astype(np.float32)
        lv_nonneg = lv[lv >= 0]
        cpos = grid.level_codes_pos[lv >= 0]
        clipped = np.clip(ideal, 0, lv_nonneg[-1])
        if rounding == "rtne":
            thr = grid.thresholds("rtne")[lv[:-1] >= 0]
            idx = np.searchsorted(thr, clipped, side="right")
        elif rounding == "ceil":
            idx = np.searchsorted(lv_nonneg, clipped, side="left")
        else:
            idx = np.searchsorted(lv_nonneg, clipped, side="right") - 1
        codes = cpos[np.clip(idx, 0, lv_nonneg.size - 1)].astype(sfmt.code_dtype)
        if nan.any():
            codes[nan] = grid.nan_code
        return codes
    # pow2: exponent-only
    e = pow2_exponent(ideal, rounding)
    codes = np.clip(e + sfmt.exponent_bias, 0, sfmt.pow2_nan_code - 1).astype(sfmt.code_dtype)
    if overflow == "nan":
        nan = nan | (e + sfmt.exponent_bias > sfmt.pow2_nan_code - 1)
    codes[nan] = sfmt.pow2_nan_code
    return codes


def special_scale_code(sfmt: ScaleFormat, which: str) -> int:
    """Scale code of ``sfmt`` for 'one', 'min' (smallest positive), 'zero', 'max' or 'nan' (RTNE encoding of
    the value; for power-of-two scales the code directly)."""
    if sfmt.kind == "pow2":
        return {"one": sfmt.exponent_bias, "min": 0, "max": sfmt.pow2_nan_code - 1, "nan": sfmt.pow2_nan_code}[which]
    if which == "nan":
        return int(encode_scale(np.array([np.nan], np.float32), sfmt, "rtne")[0])
    value = {"one": 1.0, "zero": 0.0, "min": sfmt.min_positive, "max": sfmt.max}[which]
    return int(encode_scale(np.array([value], np.float32), sfmt, "rtne")[0])


def pow2_exponent(v: np.ndarray, rounding: str) -> np.ndarray:
    """Integer exponent k of the power of two ``v`` rounds to (floor / ceil / rtne in the linear domain, ties to
    the even exponent). Exact for every float32 (computed from float64 frexp). Zero gives a very small k."""
    v64 = np.asarray(v, dtype=np.float64)
    m, ex = np.frexp(np.where(v64 > 0, v64, 2.0**-300))  # v = m * 2^ex, m in [0.5, 1)
    floor_k = ex - 1
    if rounding == "floor":
        k = floor_k
    elif rounding == "ceil":
        k = np.where(m == 0.5, floor_k, floor_k + 1)
    else:  # rtne between 2^k and 2^(k+1): midpoint m = 0.75; tie to even k
        up = (m > 0.75) | ((m == 0.75) & (floor_k % 2 != 0))
        k = np.where(up, floor_k + 1, floor_k)
    return np.where(np.isfinite(v64), k, 10**6).astype(np.int64)


def _encode_bf16(v: np.ndarray, rounding: str) -> np.ndarray:
    b = f32_bits(v).astype(np.uint64)
    low = b & 0xFFFF
    if rounding == "rtne":
        b = b + 0x7FFF + ((b >> 16) & 1)
    elif rounding == "ceil":
        b = b + np.where(low != 0, np.uint64(0x10000), np.uint64(0))
    out = (b >> 16).astype(np.uint16)
    out[np.isnan(v)] = 0x7FC0
    return out


def decode_elements(codes: np.ndarray, grid: _GridBase) -> np.ndarray:
    """float32 value of each element code."""
    return grid.values.astype(np.float32)[np.asarray(codes, dtype=np.intp)]
