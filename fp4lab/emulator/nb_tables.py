"""The numba emulator's constants for a ``QuantFormat``: the element and scale plans (``plan.py``) packed into a
few typed arrays, so that every njit kernel has exactly one compiled signature:

* ``ip``  int64 parameters (indices ``P_*``), ``fp`` float32 parameters (indices ``F_*``, then two per target);
* element tables ``ethr`` (float32 thresholds or levels), ``ecodes`` (int32 codes by [sign, level index]),
  ``evals`` (float32 value of every code);
* scale tables ``sthr`` (float32 search table), ``scodes`` (int32 scale code by search index), ``sdec``
  (float32 value of every scale code), ``sbkt`` (bucket index into ``sthr``, see ``_bucket_index``).

Element encoders (``P_ENC``):
  ``ENC_SYM``    magnitude tables (``Encoder.MAGNITUDE`` / ``SIGN_MAGNITUDE``) of at most ``LINEAR_MAX``
                 thresholds: ``j = count(|t| >= mthr)`` over the M positive thresholds, code
                 ``ecodes[sign * (M + 1) + j]``;
  ``ENC_LINEAR`` ``i = count(t >= thr)`` over all thresholds (small grids), code ``ecodes[sign * n + i]``;
  ``ENC_SEARCH`` the same count by binary search (grids with more than ``LINEAR_MAX`` thresholds);
  ``ENC_SR``     stochastic rounding between the two neighbouring levels (``ethr`` holds the levels).
The plan's choices travel as their enums' ``code`` (``numerics.plan.Coded``, the numbering the Triton kernels
use too), compared with the constants below that derive from them. njit code compiles these constants in;
``jit.sources_digest`` covers this module and ``numerics/plan.py``, so a renumbering compiles afresh.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.plan import (
    ElementPlan,
    Encoder,
    ExponentRule,
    Overflow,
    ScaleChoice,
    ScaleKind,
    ScalePlan,
    ScaleRounding,
    cached_per_format,
    element_plan,
    scale_plan,
)
from fp4lab.numerics.range_policy import multiplier_floor, range_clamp_scale

F32 = np.float32
LINEAR_MAX = 32  # up to this many thresholds a branchless linear count beats a binary search

ENC_SYM, ENC_LINEAR, ENC_SEARCH, ENC_SR = 0, 1, 2, 3
OVERFLOW_SATURATE, OVERFLOW_NAN, OVERFLOW_INF = (m.code for m in Overflow)
CHOICE_NONE, CHOICE_AMAX, CHOICE_EXPONENT = (m.code for m in ScaleChoice)
RULE_FLOOR, RULE_CEIL, RULE_EVEN = (m.code for m in ExponentRule)
ROUND_RTNE, ROUND_CEIL, ROUND_FLOOR = (m.code for m in ScaleRounding)
KIND_POW2, KIND_FLOAT_TABLE, KIND_FP32, KIND_BF16, KIND_FLOAT_BITS = (m.code for m in ScaleKind)

# int64 parameter slots
(P_ENC, P_NLEV, P_M1, P_NAN_CODE, P_OVERFLOW, P_OV_NAN, P_OV_PINF, P_OV_NINF, P_CHOICE, P_EXP_RULE, P_EVEN_ADD,
 P_EMAX_ELEM, P_KIND, P_ROUNDING, P_SBIAS, P_SMAXCODE, P_SOFF, P_SNAN, P_DIVIDE_IDEAL, P_DIVIDE_ELEMENTS, P_HAS_MIN,
 P_HAS_MAX, P_ZERO_POLICY, P_NAN_PROP, P_CODE_ZERO, P_CODE_INF, P_CODE_NAN, P_NTARGETS, P_BS, P_KEEP_SIGN,
 P_ENCODE_ARITH, P_FUSED, P_FCODE_POS, P_FCODE_NEG, P_FABS_MASK, P_SBKT_SH, P_SBKT_K, P_BUMP, P_BUMP_CODE, P_RANGE,
 P_ERR, P_SOVF, P_DIRECTED) = range(43)
N_IP = 43
ERR_ABS, ERR_SCALE_PRODUCT = 1, 2  # P_ERR bits: select_by "sae"; dequantize_order "scale_product_first"
SBKT_MAX = 4096  # most buckets of the scale search index
FUSED_WIDTHS = (8, 16)  # padded threshold counts of the fused scale+encode loops
# float32 parameter slots; targets follow as (target, float32(1/target)) pairs from F_TARGETS, then (P_RANGE) the
# grid's levels. P_BUMP / P_BUMP_CODE / F_BUMP_S: the multiplier floor of one call (``with_multiplier_floor``);
# P_RANGE / F_SCRIT: decoded-range caps for blocks with scale >= F_SCRIT (``range_policy``)
F_OV_THR, F_MIN, F_MAX, F_SCLIP, F_LVMIN, F_LVMAX, F_SMAX, F_BUMP_S, F_SCRIT, F_TARGETS = range(10)



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


def _fused_tables(ep: ElementPlan, sp: ScalePlan, block_size: int, ip: np.ndarray, ethr: np.ndarray,
                  ecodes: np.ndarray):
    """Tables of the fused scale+encode loop, which needs no table lookup (so that it vectorizes): with the
    ascending thresholds padded with +Inf to a fixed width W, the code of a value whose threshold indicators are
    ``ind_k = (a >= thr_k)`` is ``code0 + sum_k ind_k * (code[k+1] - code[k])`` (the indicators of an ascending
    table are 1..1 0..0, so the sum telescopes to ``code[count] - code[0]``). ``fdelta`` rows: [pos, neg]."""
    enc = int(ip[P_ENC])
    n = ethr.size
    width = next((w for w in FUSED_WIDTHS if n <= w), 0)
    if ep.stochastic or ep.mode in ("rtp", "rtm") or ep.overflow != Overflow.SATURATE \
            or enc not in (ENC_SYM, ENC_LINEAR) or width == 0 \
            or block_size % 16 or sp.choice == ScaleChoice.NONE:
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


def _element_tables(ep: ElementPlan, ip: np.ndarray, fp: np.ndarray):
    fp[F_LVMIN], fp[F_LVMAX] = ep.levels[0], ep.levels[-1]
    n = ep.levels.size
    if ep.stochastic:
        enc, thr, codes, m1 = ENC_SR, ep.levels, ep.codes, n
    elif ep.encoder != Encoder.SIGNED and ep.table_thr.size <= LINEAR_MAX:
        enc, thr, codes, m1 = ENC_SYM, ep.table_thr, ep.table_codes, ep.half
    else:
        enc = ENC_LINEAR if ep.thresholds.size <= LINEAR_MAX else ENC_SEARCH
        thr, codes, m1 = ep.thresholds, ep.codes, n
    ip[P_ENC], ip[P_NLEV], ip[P_M1] = enc, n, m1
    ip[P_NAN_CODE] = ep.nan_code
    ip[P_KEEP_SIGN] = int(ep.keep_sign)  # else only t < 0 takes the negative code column
    ip[P_OVERFLOW] = ep.overflow.code
    fp[F_OV_THR] = ep.overflow_thr
    if ep.overflow == Overflow.NAN:
        ip[P_OV_NAN] = ep.grid_nan_code
    if ep.overflow == Overflow.INF:
        ip[P_OV_PINF], ip[P_OV_NINF] = ep.inf_codes
    return thr, codes, ep.values


def _scale_tables(sp: ScalePlan, ip: np.ndarray, fp: np.ndarray):
    empty_f, empty_i = np.zeros(1, F32), np.zeros(1, np.int32)
    ip[P_CHOICE] = sp.choice.code
    if sp.choice == ScaleChoice.NONE:
        return empty_f, empty_i, empty_f, empty_i
    if sp.choice == ScaleChoice.EXPONENT:
        ip[P_EXP_RULE] = sp.exponent_rule.code
    ip[P_KIND] = sp.kind.code
    fp[F_SMAX] = sp.max_value  # fp32 / bf16 ideal scales saturate here
    ip[P_ROUNDING] = sp.rounding.code
    ip[P_DIVIDE_IDEAL] = int(sp.divide_ideal)
    ip[P_DIVIDE_ELEMENTS] = int(sp.divide_elements)
    ip[P_HAS_MIN], ip[P_HAS_MAX] = sp.min_scale is not None, sp.max_scale is not None
    fp[F_MIN] = sp.min_scale if sp.min_scale is not None else 0
    fp[F_MAX] = sp.max_scale if sp.max_scale is not None else 0
    ip[P_ENCODE_ARITH] = int(sp.encode_arith)
    ip[P_NAN_PROP] = int(sp.nan_propagate)
    ip[P_ERR] = ERR_ABS * sp.select_abs + ERR_SCALE_PRODUCT * sp.scale_product_first
    ip[P_SOVF] = int(sp.overflow_nan)
    ip[P_ZERO_POLICY] = int(sp.zero_code is not None)
    if sp.zero_code is not None:
        ip[P_CODE_ZERO] = sp.zero_code
    ip[P_CODE_INF] = sp.inf_code
    if sp.nan_propagate:
        ip[P_CODE_NAN] = sp.nan_code
    ip[P_EVEN_ADD] = sp.even_add
    ip[P_EMAX_ELEM] = sp.emax_elem
    sthr, scodes, sdec, sbkt = empty_f, empty_i, empty_f, empty_i
    if sp.kind == ScaleKind.POW2:
        ip[P_SBIAS], ip[P_SNAN], ip[P_SMAXCODE] = sp.bias, sp.table_nan, sp.table_nan - 1
        sdec = sp.values
    elif sp.float_scale:
        lv, scodes = sp.levels, sp.level_codes
        fp[F_SCLIP] = lv[-1]
        if sp.rounding == ScaleRounding.RTNE:  # index = count(thr <= v)
            sthr, ip[P_SOFF] = sp.thresholds, 0
        elif sp.rounding == ScaleRounding.CEIL:  # searchsorted(levels, v, 'left') = count(nextup(levels) <= v)
            sthr, ip[P_SOFF] = _next_up(lv), 0
        else:  # searchsorted(levels, v, 'right') - 1
            sthr, ip[P_SOFF] = lv, -1
        ip[P_SMAXCODE] = lv.size - 1
        ip[P_SNAN] = -1 if sp.table_nan is None else sp.table_nan
        sdec = sp.values
        sthr, sbkt = _bucket_index(sthr, fp[F_SCLIP], ip)
    return sthr, scodes, sdec, sbkt


def _tables_for(fmt: QuantFormat, mode: str) -> Tables:
    """All numba parameters for quantizing with ``fmt`` under rounding ``mode`` (cached per format and mode)."""
    ep, sp = element_plan(fmt, mode), scale_plan(fmt)
    n_tg = 0 if sp.choice == ScaleChoice.NONE else sp.targets.size
    scrit = range_clamp_scale(fmt)
    ip = np.zeros(N_IP, np.int64)
    fp = np.zeros(F_TARGETS + 2 * n_tg + (ep.levels.size if scrit is not None else 0), F32)
    if scrit is not None:
        ip[P_RANGE], fp[F_SCRIT] = 1, scrit
        fp[F_TARGETS + 2 * n_tg:] = ep.levels
    ethr, ecodes, evals = _element_tables(ep, ip, fp)
    sthr, scodes, sdec, sbkt = _scale_tables(sp, ip, fp)
    ip[P_NTARGETS] = n_tg
    ip[P_BS] = fmt.block_size
    if n_tg:
        fp[F_TARGETS:F_TARGETS + 2 * n_tg:2] = sp.targets
        fp[F_TARGETS + 1:F_TARGETS + 2 * n_tg:2] = sp.inv_targets
    ip[P_DIRECTED] = int(mode in ("rtp", "rtm"))  # ref_quantize.nonzero_quotients
    fthr, fdelta = _fused_tables(ep, sp, fmt.block_size, ip, ethr, ecodes)
    for a in (ip, fp, ethr, ecodes, evals, sthr, scodes, sdec, fthr, fdelta, sbkt):
        a.setflags(write=False)
    return Tables(ip, fp, ethr, ecodes, evals, sthr, scodes, sdec, fthr, fdelta, sbkt)


tables_for = cached_per_format(_tables_for)


def with_multiplier_floor(tab: Tables, fmt: QuantFormat, ts: np.float32 | None) -> Tables:
    """``tab`` with the multiplier floor of one call (``range_policy.multiplier_floor(fmt, ts)``) filled in."""
    floor = multiplier_floor(fmt, ts)
    if floor is None:
        return tab
    ip, fp = tab.ip.copy(), tab.fp.copy()
    ip[P_BUMP], ip[P_BUMP_CODE], fp[F_BUMP_S] = 1, floor[0], floor[1]
    return dataclasses.replace(tab, ip=ip, fp=fp)
