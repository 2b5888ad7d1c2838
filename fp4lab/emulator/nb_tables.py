"""Constant tables the numba emulator needs, derived from a ``QuantFormat`` (no format is special-cased by name).

Everything is computed from the same model properties the numpy reference reads (``levels``,
``level_codes_pos/neg``, ``thresholds(mode)``, scale ``decode``, ``special_scale_code``), and packed into a few typed
arrays so that every njit kernel has exactly one compiled signature:

* ``ip``  int64 parameters (indices ``P_*``), ``fp`` float32 parameters (indices ``F_*``, then two per target);
* element tables ``ethr`` (float32 thresholds or levels), ``ecodes`` (int32 codes by [sign, level index]),
  ``evals`` (float32 value of every code);
* scale tables ``sthr`` (float32 search table), ``scodes`` (int32 scale code by search index), ``sdec``
  (float32 value of every scale code), ``sbkt`` (bucket index into ``sthr``, see ``_bucket_index``).

Element encoders (``P_ENC``):
  ``ENC_SYM``    sign-symmetric grid whose thresholds mirror exactly about zero: ``j = count(|t| >= mthr)``
                 over the M positive thresholds, code ``ecodes[sign * (M + 1) + j]``;
  ``ENC_LINEAR`` ``i = count(t >= thr)`` over all thresholds (small grids), code ``ecodes[sign * n + i]``;
  ``ENC_SEARCH`` the same count by binary search (grids with more than ``LINEAR_MAX`` thresholds);
  ``ENC_SR``     stochastic rounding between the two neighbouring levels (``ethr`` holds the levels).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fp4lab.emulator.ref_encode import nan_element_code
from fp4lab.emulator.range_policy import multiplier_floor, range_clamp_scale
from fp4lab.emulator.ref_encode import special_scale_code
from fp4lab.formats.quant_format import QuantFormat

F32 = np.float32
LINEAR_MAX = 32  # up to this many thresholds a branchless linear count beats a binary search

ENC_SYM, ENC_LINEAR, ENC_SEARCH, ENC_SR = 0, 1, 2, 3
OV_SATURATE, OV_NAN, OV_INF = 0, 1, 2
RULE_NONE, RULE_AMAX, RULE_FLOOR, RULE_CEIL, RULE_EVEN = 0, 1, 2, 3, 4
SK_FP32, SK_BF16, SK_TABLE, SK_POW2 = 0, 1, 2, 3
SR_RTNE, SR_CEIL, SR_FLOOR = 0, 1, 2

# int64 parameter slots
(P_ENC, P_NLEV, P_M1, P_NAN_CODE, P_OV, P_OV_NAN, P_OV_PINF, P_OV_NINF, P_RULE, P_EVEN_ADD, P_EMAX_ELEM, P_SKIND,
 P_SROUND, P_SBIAS, P_SMAXCODE, P_SOFF, P_SNAN, P_SDIV, P_ESCALE, P_HAS_MIN, P_HAS_MAX, P_ZERO_POLICY, P_NAN_PROP,
 P_CODE_ZERO, P_CODE_INF, P_CODE_NAN, P_NTARGETS, P_BS, P_KEEP_SIGN, P_ENCODE_ARITH, P_FUSED, P_FCODE_POS,
 P_FCODE_NEG, P_FABS_MASK, P_SBKT_SH, P_SBKT_K, P_BUMP, P_BUMP_CODE, P_RANGE, P_ERR, P_SOVF) = range(41)
N_IP = 41
ERR_ABS, ERR_SCALE_PRODUCT = 1, 2  # P_ERR bits: select_by "sae"; dequantize_order "scale_product_first"
SBKT_MAX = 4096  # most buckets of the scale search index
FUSED_WIDTHS = (8, 16)  # padded threshold counts of the fused scale+encode loops
# float32 parameter slots; targets follow as (target, float32(1/target)) pairs from F_TARGETS, then (P_RANGE) the
# grid's levels. P_BUMP / P_BUMP_CODE / F_BUMP_S: the multiplier floor of one call (``with_multiplier_floor``);
# P_RANGE / F_SCRIT: decoded-range caps for blocks with scale >= F_SCRIT (``range_policy``)
F_OV_THR, F_MIN, F_MAX, F_SCLIP, F_LVMIN, F_LVMAX, F_SMAX, F_BUMP_S, F_SCRIT, F_TARGETS = range(10)

_ROUND = {"rtne": SR_RTNE, "ceil": SR_CEIL, "floor": SR_FLOOR}
_RULE = {"none": RULE_NONE, "amax": RULE_AMAX, "rceil": RULE_AMAX, "floor": RULE_FLOOR, "ceil": RULE_CEIL,
         "even": RULE_EVEN}


@dataclass(frozen=True)
class Tables:
    ip: np.ndarray
    fp: np.ndarray
    ethr: np.ndarray
    ecodes: np.ndarray
    evals: np.ndarray
    sthr: np.ndarray
    scodes: np.ndarray
    sdec: np.ndarray
    fthr: np.ndarray
    fdelta: np.ndarray
    sbkt: np.ndarray

    def args(self) -> tuple[np.ndarray, ...]:
        return (self.ip, self.fp, self.ethr, self.ecodes, self.evals, self.sthr, self.scodes, self.sdec, self.fthr,
                self.fdelta, self.sbkt)


def _fused_tables(fmt: QuantFormat, mode: str, ip: np.ndarray, ethr: np.ndarray, ecodes: np.ndarray):
    """Tables of the fused scale+encode loop, which needs no table lookup (so that it vectorizes): with the
    ascending thresholds padded with +Inf to a fixed width W, the code of a value whose threshold indicators are
    ``ind_k = (a >= thr_k)`` is ``code0 + sum_k ind_k * (code[k+1] - code[k])`` (the indicators of an ascending
    table are 1..1 0..0, so the sum telescopes to ``code[count] - code[0]``). ``fdelta`` rows: [pos, neg]."""
    enc = int(ip[P_ENC])
    n = ethr.size
    width = next((w for w in FUSED_WIDTHS if n <= w), 0)
    if mode == "sr" or fmt.overflow != "saturate" or enc not in (ENC_SYM, ENC_LINEAR) or width == 0 \
            or fmt.block_size % 16 or fmt.scale_rule.method == "none":
        return np.zeros(1, F32), np.zeros((2, 1), np.int32)
    m1 = int(ip[P_M1])
    table = ecodes.reshape(2, m1).astype(np.int32)
    delta = np.zeros((2, width), np.int32)
    delta[:, :n] = np.diff(table, axis=1)
    ip[P_FUSED] = width
    ip[P_FCODE_POS], ip[P_FCODE_NEG] = table[0, 0], table[1, 0]
    ip[P_FABS_MASK] = 0x7FFFFFFF if enc == ENC_SYM else 0xFFFFFFFF
    return np.concatenate([ethr, np.full(width - n, np.inf, F32)]).astype(F32), delta


def _bucket_index(thr: np.ndarray, top: np.float32, ip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Search index for ``count(thr <= v)`` over ascending non-negative float32 ``thr``, v in [0, top]: bucket
    ``b = bits(v) >> sh`` (the smallest shift giving at most ``SBKT_MAX`` buckets); ``start[b]`` = number of
    thresholds in lower buckets (all of them < v); at most ``K`` thresholds share a bucket, so
    ``count = start[b] + sum_{i<K} (thr[start[b] + i] <= v)`` with ``thr`` padded by K times +Inf.
    Returns (padded thr, start) and sets ``ip[P_SBKT_SH]``, ``ip[P_SBKT_K]``."""
    bits = (thr.astype(F32) + F32(0.0)).view(np.uint32).astype(np.int64)  # -0 -> +0
    top_bits = int(np.array(top, F32).view(np.uint32))
    sh = next(s for s in range(32) if (top_bits >> s) < SBKT_MAX)
    keys = bits >> sh
    start = np.searchsorted(keys, np.arange((top_bits >> sh) + 1), side="left").astype(np.int32)
    k = int(np.bincount(keys).max()) if keys.size else 0
    ip[P_SBKT_SH], ip[P_SBKT_K] = sh, k
    return np.concatenate([thr.astype(F32), np.full(k, np.inf, F32)]), start


def _next_up(v: np.ndarray) -> np.ndarray:
    return np.nextafter(v.astype(F32), F32(np.inf)).astype(F32)


def _element_tables(fmt: QuantFormat, mode: str, ip: np.ndarray, fp: np.ndarray):
    grid = fmt.element
    lv = grid.levels
    cpos, cneg = grid.level_codes_pos.astype(np.int32), grid.level_codes_neg.astype(np.int32)
    n = lv.size
    fp[F_LVMIN], fp[F_LVMAX] = F32(lv[0]), F32(lv[-1])
    if mode == "sr":
        enc, thr, codes, m1 = ENC_SR, lv.astype(F32), np.concatenate([cpos, cneg]), n
    else:
        thr_all = grid.thresholds(mode).astype(F32)
        enc, thr, codes, m1 = (ENC_LINEAR if thr_all.size <= LINEAR_MAX else ENC_SEARCH), thr_all, \
            np.concatenate([cpos, cneg]), n
        if n % 2 == 1 and grid.is_sign_symmetric:
            m = n // 2
            mthr, neg = thr_all[m:], thr_all[:m][::-1]
            if np.array_equal(neg.view(np.uint32), _next_up(-mthr).view(np.uint32)) and mthr.size <= LINEAR_MAX:
                j = np.arange(m + 1)
                enc, thr, codes, m1 = ENC_SYM, mthr.copy(), np.concatenate([cpos[m + j], cneg[m - j]]), m + 1
    ip[P_ENC], ip[P_NLEV], ip[P_M1] = enc, n, m1
    ip[P_NAN_CODE] = nan_element_code(grid, fmt.nan_element)
    ip[P_KEEP_SIGN] = int(fmt.signed_zero == "keep")  # else only t < 0 takes the negative code column
    ip[P_OV] = {"saturate": OV_SATURATE, "nan": OV_NAN, "inf": OV_INF}[fmt.overflow]
    fp[F_OV_THR] = grid.overflow_threshold
    if fmt.overflow == "nan":
        ip[P_OV_NAN] = grid.nan_code
    if fmt.overflow == "inf":
        ip[P_OV_PINF], ip[P_OV_NINF] = grid.inf_codes
    return thr, codes.astype(np.int32), grid.values.astype(F32)


def _scale_tables(fmt: QuantFormat, ip: np.ndarray, fp: np.ndarray):
    rule, sfmt = fmt.scale_rule, fmt.scale
    empty_f, empty_i = np.zeros(1, F32), np.zeros(1, np.int32)
    ip[P_RULE] = _RULE[rule.method]
    if rule.method == "none":
        return empty_f, empty_i, empty_f, empty_i
    ip[P_SKIND] = {"fp32": SK_FP32, "bf16": SK_BF16, "float": SK_TABLE, "pow2": SK_POW2}[sfmt.kind]
    fp[F_SMAX] = F32(sfmt.max)  # fp32 / bf16 ideal scales saturate here
    ip[P_SROUND] = _ROUND[rule.effective_rounding]
    ip[P_SDIV] = int(rule.scale_division == "reciprocal")
    ip[P_ESCALE] = int(rule.element_scaling == "reciprocal")
    ip[P_HAS_MIN], ip[P_HAS_MAX] = rule.min_scale is not None, rule.max_scale is not None
    fp[F_MIN] = F32(rule.min_scale) if rule.min_scale is not None else 0
    fp[F_MAX] = F32(rule.max_scale) if rule.max_scale is not None else 0
    ip[P_ENCODE_ARITH] = int(rule.scale_arithmetic == "encode")
    ip[P_NAN_PROP] = int(rule.nan_policy == "propagate")
    ip[P_ERR] = ERR_ABS * (rule.select_by == "sae") + ERR_SCALE_PRODUCT * (rule.dequantize_order == "scale_product_first")
    ip[P_SOVF] = int(rule.scale_overflow == "nan")
    ip[P_ZERO_POLICY] = int(rule.zero_block != "as_computed")
    if rule.zero_block != "as_computed":  # the reference asks for it on every call: same errors
        ip[P_CODE_ZERO] = special_scale_code(sfmt, rule.zero_block)
    ip[P_CODE_INF] = special_scale_code(sfmt, "nan" if rule.inf_policy == "propagate" else "max")
    if rule.nan_policy == "propagate":
        ip[P_CODE_NAN] = special_scale_code(sfmt, "nan")
    if rule.method == "even":
        ip[P_EVEN_ADD] = 1 << (22 - fmt.element.mantissa_bits)
    ip[P_EMAX_ELEM] = fmt.emax_elem
    sthr, scodes, sdec, sbkt = empty_f, empty_i, empty_f, empty_i
    if sfmt.kind == "pow2":
        ip[P_SBIAS], ip[P_SNAN] = sfmt.exponent_bias, sfmt.pow2_nan_code
        ip[P_SMAXCODE] = sfmt.pow2_nan_code - 1
        sdec = sfmt.decode(np.arange(1 << sfmt.exponent_bits)).astype(F32)
    elif sfmt.kind == "float":
        grid = sfmt.grid
        lv = grid.levels.astype(F32)
        keep = lv >= 0
        lv_nonneg = lv[keep]
        scodes = grid.level_codes_pos[keep].astype(np.int32)
        fp[F_SCLIP] = lv_nonneg[-1]
        r = rule.effective_rounding
        if r == "rtne":  # index = count(thr <= v)
            sthr, ip[P_SOFF] = grid.thresholds("rtne")[lv[:-1] >= 0].astype(F32), 0
        elif r == "ceil":  # searchsorted(levels, v, 'left') = count(levels < v) = count(nextup(levels) <= v)
            sthr, ip[P_SOFF] = _next_up(lv_nonneg), 0
        else:  # searchsorted(levels, v, 'right') - 1
            sthr, ip[P_SOFF] = lv_nonneg.copy(), -1
        ip[P_SMAXCODE] = lv_nonneg.size - 1
        ip[P_SNAN] = -1 if grid.nan_code is None else grid.nan_code
        sdec = sfmt.decode(np.arange(1 << sfmt.bits)).astype(F32)
        sthr, sbkt = _bucket_index(sthr, fp[F_SCLIP], ip)
    return sthr, scodes, sdec, sbkt


@lru_cache(maxsize=256)
def tables_for(fmt: QuantFormat, mode: str) -> Tables:
    """All numba parameters for quantizing with ``fmt`` under rounding ``mode`` (cached per format and mode)."""
    targets = fmt.targets if fmt.scale_rule.method != "none" else []
    scrit = range_clamp_scale(fmt)
    ip = np.zeros(N_IP, np.int64)
    fp = np.zeros(F_TARGETS + 2 * len(targets) + (fmt.element.levels.size if scrit is not None else 0), F32)
    if scrit is not None:
        ip[P_RANGE], fp[F_SCRIT] = 1, scrit
        fp[F_TARGETS + 2 * len(targets):] = fmt.element.levels.astype(F32)
    ethr, ecodes, evals = _element_tables(fmt, mode, ip, fp)
    sthr, scodes, sdec, sbkt = _scale_tables(fmt, ip, fp)
    ip[P_NTARGETS] = len(targets)
    ip[P_BS] = fmt.block_size
    for k, tgt in enumerate(targets):
        fp[F_TARGETS + 2 * k] = F32(tgt)
        fp[F_TARGETS + 2 * k + 1] = F32(1.0) / F32(tgt)
    fthr, fdelta = _fused_tables(fmt, mode, ip, ethr, ecodes)
    for a in (ip, fp, ethr, ecodes, evals, sthr, scodes, sdec, fthr, fdelta, sbkt):
        a.setflags(write=False)
    return Tables(ip, fp, ethr, ecodes, evals, sthr, scodes, sdec, fthr, fdelta, sbkt)


def with_multiplier_floor(tab: Tables, fmt: QuantFormat, ts: np.float32 | None) -> Tables:
    """``tab`` with the multiplier floor of one call (``range_policy.multiplier_floor(fmt, ts)``) filled in."""
    floor = multiplier_floor(fmt, ts)
    if floor is None:
        return tab
    ip, fp = tab.ip.copy(), tab.fp.copy()
    ip[P_BUMP], ip[P_BUMP_CODE], fp[F_BUMP_S] = 1, floor[0], floor[1]
    return dataclasses.replace(tab, ip=ip, fp=fp)
