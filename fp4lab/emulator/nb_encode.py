"""njit building blocks of the numba emulator: element rounding over a run of values and one block's scale.

Both mirror ``ref_encode`` / ``ref_quantize`` operation for operation in float32 (no fastmath, so no
reassociation or FMA contraction); constants come from ``nb_tables.Tables``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fp4lab.emulator.nb_bits import f32_to_u32, u32_to_f32
from fp4lab.emulator.nb_tables import (
    ENC_LINEAR, ENC_SEARCH, ENC_SYM, F_LVMAX, F_LVMIN, F_MAX, F_MIN, F_OV_THR, F_SCLIP, F_TARGETS, OV_NAN,
    OV_SATURATE, P_CODE_INF, P_CODE_NAN, P_CODE_ZERO, P_EMAX_ELEM, P_ENC, P_EVEN_ADD, P_HAS_MAX, P_HAS_MIN, P_M1,
    P_NAN_CODE, P_NAN_PROP, P_OV, P_OV_NAN, P_OV_NINF, P_OV_PINF, P_RULE, P_SBIAS, P_SDIV, P_SKIND, P_SMAXCODE,
    P_SNAN, P_SOFF, P_SROUND, P_ZERO_POLICY, P_KEEP_SIGN, P_ENCODE_ARITH, RULE_AMAX, RULE_CEIL, RULE_EVEN, SK_BF16, SK_FP32, SK_POW2, SK_TABLE,
    SR_CEIL, SR_RTNE,
)

NJ = dict(cache=True, error_model="numpy")
TWO24 = np.float32(16777216.0)
FLT_MAX = np.float32(np.finfo(np.float32).max)
ABS_MASK = np.uint32(0x7FFFFFFF)
SIGN_MASK = np.uint32(0x80000000)
U31 = np.uint32(31)


@numba.njit(**NJ)
def count_le(tab, v):
    """Number of entries of the ascending float32 ``tab`` that are <= v (binary search; 0 for NaN)."""
    lo = 0
    hi = tab.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if tab[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(**NJ)
def encode_run(t, out, rnd, n, ip, fp, ethr, ecodes, cnt):
    """Round float32 ``t[:n]`` onto the element grid; codes into ``out[:n]`` (``rnd``: 24-bit SR draws).

    Deterministic modes count thresholds (see ``nb_tables``); SR follows ``ref_encode.encode_elements``:
    ``p = float32(t - lo) / float32(hi - lo)``, up iff ``floor(p * 2^24) > rnd``. Then overflow and NaN codes.
    ``cnt`` is int32 scratch of at least n.
    """
    enc = ip[P_ENC]
    m1 = ip[P_M1]
    keep = ip[P_KEEP_SIGN]  # 1: the sign bit picks the code column; 0: only t < 0 does (-0 -> +0 code)
    nthr = ethr.shape[0]
    if enc == ENC_SYM:
        for j in range(n):
            cnt[j] = 0
        for k in range(nthr):
            th = ethr[k]
            for j in range(n):
                cnt[j] += np.int32(abs(t[j]) >= th)
        for j in range(n):
            s = np.int64(f32_to_u32(t[j]) >> U31) & (np.int64(t[j] != 0) | keep)
            out[j] = ecodes[s * m1 + cnt[j]]
    elif enc == ENC_LINEAR:
        for j in range(n):
            cnt[j] = 0
        for k in range(nthr):
            th = ethr[k]
            for j in range(n):
                cnt[j] += np.int32(t[j] >= th)
        for j in range(n):
            s = np.int64(f32_to_u32(t[j]) >> U31) & (np.int64(t[j] != 0) | keep)
            out[j] = ecodes[s * m1 + cnt[j]]
    elif enc == ENC_SEARCH:
        for j in range(n):
            s = np.int64(f32_to_u32(t[j]) >> U31) & (np.int64(t[j] != 0) | keep)
            out[j] = ecodes[s * m1 + count_le(ethr, t[j])]
    else:  # stochastic rounding; ethr holds the levels
        lvmin = fp[F_LVMIN]
        lvmax = fp[F_LVMAX]
        for j in range(n):
            v = t[j]
            s = np.int64(f32_to_u32(v) >> U31) & (np.int64(v != 0) | keep)
            if v != v or v <= lvmin:
                idx = 0
            elif v >= lvmax:
                idx = nthr - 1
            else:
                k = min(max(count_le(ethr, v) - 1, 0), nthr - 2)
                lo = ethr[k]
                frac = (v - lo) / (ethr[k + 1] - lo)
                frac = min(max(frac, np.float32(0.0)), np.float32(1.0))
                f24 = np.uint32(np.int64(frac * TWO24))
                idx = k + np.int64(f24 > rnd[j])
            out[j] = ecodes[s * m1 + idx]
    ov = ip[P_OV]
    if ov != OV_SATURATE:
        ov_thr = fp[F_OV_THR]
        for j in range(n):
            if abs(t[j]) >= ov_thr:
                if ov == OV_NAN:
                    out[j] = ip[P_OV_NAN]
                elif f32_to_u32(t[j]) >> U31:
                    out[j] = ip[P_OV_NINF]
                else:
                    out[j] = ip[P_OV_PINF]
    nan_code = ip[P_NAN_CODE]
    for j in range(n):
        if t[j] != t[j]:
            out[j] = nan_code


@numba.njit(**NJ)
def _pow2_code(v, rounding, bias, maxcode, nancode):
    """``ref_encode.pow2_exponent`` + bias, clipped to [0, maxcode]; NaN gives ``nancode``."""
    if v != v:
        return np.int64(nancode)
    if math.isinf(v):
        k = np.int64(10**6)
    else:
        v64 = np.float64(v)
        if v64 > 0:
            m, ex = math.frexp(v64)
        else:
            m, ex = 0.5, -299
        floor_k = np.int64(ex) - 1
        if rounding == SR_RTNE:
            up = m > 0.75 or (m == 0.75 and floor_k % 2 != 0)
            k = floor_k + 1 if up else floor_k
        elif rounding == SR_CEIL:
            k = floor_k if m == 0.5 else floor_k + 1
        else:
            k = floor_k
    return min(max(k + bias, np.int64(0)), np.int64(maxcode))


@numba.njit(**NJ)
def _encode_ideal(ideal, ip, fp, sthr, scodes):
    """Scale code of a non-negative float32 ideal scale (``ref_encode.encode_scale``)."""
    kind = ip[P_SKIND]
    rounding = ip[P_SROUND]
    if kind == SK_FP32:
        return np.int64(f32_to_u32(ideal))
    if kind == SK_BF16:
        if ideal != ideal:
            return np.int64(0x7FC0)
        b = np.int64(f32_to_u32(ideal))
        if rounding == SR_RTNE:
            b = b + 0x7FFF + ((b >> 16) & 1)
        elif rounding == SR_CEIL:
            if b & 0xFFFF:
                b = b + 0x10000
        return (b >> 16) & 0xFFFF
    if kind == SK_TABLE:
        if ideal != ideal:
            return ip[P_SNAN]
        v = min(max(ideal, np.float32(0.0)), fp[F_SCLIP])
        idx = min(max(count_le(sthr, v) + ip[P_SOFF], 0), ip[P_SMAXCODE])
        return np.int64(scodes[idx])
    return _pow2_code(ideal, rounding, ip[P_SBIAS], ip[P_SMAXCODE], ip[P_SNAN])


@numba.njit(**NJ)
def decode_scale(code, ip, sdec):
    """float32 value of a scale code (bit casts for fp32/bf16, the decode table otherwise)."""
    kind = ip[P_SKIND]
    if kind == SK_FP32:
        return u32_to_f32(np.uint32(code))
    if kind == SK_BF16:
        return u32_to_f32(np.uint32(code << 16))
    return sdec[code]


@numba.njit(**NJ)
def block_scale(amax, has_nan, has_inf, target_index, ts, two_level, gmul, ip, fp, sthr, scodes):
    """Scale code of one block with finite float32 ``amax`` under the scale rule, policies applied
    (``ref_quantize.block_scale_codes`` then the zero / Inf / NaN overrides). "encode" arithmetic:
    ``ideal = min(amax * gmul[target_index], FLT_MAX)`` with ``gmul = float32(g * float32(1/target))``."""
    rule = ip[P_RULE]
    if rule == RULE_AMAX:
        if ip[P_ENCODE_ARITH]:
            ideal = amax * gmul[target_index]
            if ideal > FLT_MAX:
                ideal = FLT_MAX
        elif ip[P_SDIV]:
            ideal = amax * fp[F_TARGETS + 2 * target_index + 1]
        else:
            ideal = amax / fp[F_TARGETS + 2 * target_index]
        if two_level and not ip[P_ENCODE_ARITH]:
            ideal = ideal / ts
        if ip[P_HAS_MIN] and ideal < fp[F_MIN]:
            ideal = fp[F_MIN]
        if ip[P_HAS_MAX] and ideal > fp[F_MAX]:
            ideal = fp[F_MAX]
        code = _encode_ideal(ideal, ip, fp, sthr, scodes)
    else:  # OCP MX exponent rules on the float32 bits of amax
        bits = np.int64(f32_to_u32(amax))
        if rule == RULE_EVEN:
            bits = (bits + ip[P_EVEN_ADD]) & 0x7F800000
        e_amax = ((bits >> 23) & 0xFF) - 127
        if rule == RULE_CEIL and (bits & 0x7FFFFF) != 0:
            e_amax += 1
        code = min(max(e_amax - ip[P_EMAX_ELEM] + ip[P_SBIAS], np.int64(0)), ip[P_SMAXCODE])
    nan = has_nan and ip[P_NAN_PROP] != 0
    if ip[P_ZERO_POLICY] and amax == 0 and not nan and not has_inf:
        code = ip[P_CODE_ZERO]
    if has_inf:
        code = ip[P_CODE_INF]
    if nan:
        code = ip[P_CODE_NAN]
    return code
