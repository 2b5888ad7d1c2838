"""njit building blocks of the numba emulator: element rounding over a run of values and one block's scale.

Both mirror ``ref_encode`` / ``ref_quantize`` operation for operation in float32 (no fastmath, so no
reassociation or FMA contraction); constants come from ``nb_tables.Tables``.
"""

from __future__ import annotations

import math

import numpy as np

from fp4lab.emulator.jit import njit
from fp4lab.emulator.nb_bits import f32_to_u32, u32_to_f32
from fp4lab.emulator.nb_tables import (
    CHOICE_AMAX,
    ENC_LINEAR,
    ENC_SEARCH,
    ENC_SYM,
    F_BUMP_S,
    F_LVMAX,
    F_LVMIN,
    F_MAX,
    F_MIN,
    F_OV_THR,
    F_SCLIP,
    F_SCRIT,
    F_SMAX,
    F_TARGETS,
    KIND_BF16,
    KIND_FLOAT_BITS,
    KIND_FLOAT_TABLE,
    KIND_FP32,
    OVERFLOW_NAN,
    OVERFLOW_SATURATE,
    P_BS,
    P_BUMP,
    P_BUMP_CODE,
    P_CHOICE,
    P_CODE_INF,
    P_CODE_NAN,
    P_CODE_ZERO,
    P_DIRECTED,
    P_DIVIDE_ELEMENTS,
    P_DIVIDE_IDEAL,
    P_EMAX_ELEM,
    P_ENC,
    P_ENCODE_ARITH,
    P_EVEN_ADD,
    P_EXP_RULE,
    P_FABS_MASK,
    P_FCODE_NEG,
    P_FCODE_POS,
    P_FUSED,
    P_HAS_MAX,
    P_HAS_MIN,
    P_KEEP_SIGN,
    P_KIND,
    P_M1,
    P_NAN_CODE,
    P_NAN_PROP,
    P_NLEV,
    P_NTARGETS,
    P_OV_NAN,
    P_OV_NINF,
    P_OV_PINF,
    P_OVERFLOW,
    P_RANGE,
    P_ROUNDING,
    P_SBIAS,
    P_SBKT_K,
    P_SBKT_SH,
    P_SMAXCODE,
    P_SNAN,
    P_SOFF,
    P_SOVF,
    P_ZERO_POLICY,
    ROUND_CEIL,
    ROUND_RTNE,
    RULE_CEIL,
    RULE_EVEN,
)

NJ = dict(cache=True, error_model="numpy")
# Per-block scalar helpers are inlined at the numba IR level: a real call would incref/decref every array
# argument (atomic operations), which costs more than the helper itself.
TWO24 = np.float32(16777216.0)
FLT_MAX = np.float32(np.finfo(np.float32).max)
ABS_MASK = np.uint32(0x7FFFFFFF)
SIGN_MASK = np.uint32(0x80000000)
U31 = np.uint32(31)
U23 = np.uint32(23)
U255 = np.uint32(255)
MANT_MASK = np.uint32(0x7FFFFF)


@njit(inline="always", **NJ)
def count_le(tab, v):
    """Number of entries of the ascending float32 ``tab`` that are <= v (0 for NaN). Binary search written
    without data-dependent branches (random block amaxes would mispredict every step)."""
    lo = 0
    n = tab.shape[0]
    while n > 0:
        half = n >> 1
        c = np.int64(tab[lo + half] <= v)
        lo += c * (half + 1)
        n = half + c * ((n & 1) - 1)
    return lo


@njit(**NJ)
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
    ov = ip[P_OVERFLOW]
    if ov != OVERFLOW_SATURATE:
        ov_thr = fp[F_OV_THR]
        for j in range(n):
            if abs(t[j]) >= ov_thr:
                if ov == OVERFLOW_NAN:
                    out[j] = ip[P_OV_NAN]
                elif f32_to_u32(t[j]) >> U31:
                    out[j] = ip[P_OV_NINF]
                else:
                    out[j] = ip[P_OV_PINF]
    nan_code = ip[P_NAN_CODE]
    for j in range(n):
        if t[j] != t[j]:
            out[j] = nan_code


@njit(inline="always", **NJ)
def _pow2_code(v, rounding, bias, maxcode, nancode, ovf_nan):
    """``ref_encode.pow2_exponent`` + bias, clipped to [0, maxcode]; NaN gives ``nancode``, and so does a code above
    ``maxcode`` when ``ovf_nan`` (``scale_overflow = "nan"``)."""
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
        if rounding == ROUND_RTNE:
            up = m > 0.75 or (m == 0.75 and floor_k % 2 != 0)
            k = floor_k + 1 if up else floor_k
        elif rounding == ROUND_CEIL:
            k = floor_k if m == 0.5 else floor_k + 1
        else:
            k = floor_k
    if ovf_nan and k + bias > maxcode:
        return np.int64(nancode)
    return min(max(k + bias, np.int64(0)), np.int64(maxcode))


@njit(**NJ)
def _ideal_scales(amax, nb, ti, ts, two_level, gmul, ip, fp, ideal):
    """float32 ideal scales of the amax rule (``scale_rule.block_scale_codes`` before the cast)."""
    if ip[P_ENCODE_ARITH]:  # min(amax * float32(g * float32(1/target)), FLT_MAX)
        g = gmul[ti]
        for bi in range(nb):
            v = amax[bi] * g
            ideal[bi] = FLT_MAX if v > FLT_MAX else v
    elif ip[P_DIVIDE_IDEAL]:
        tgt = fp[F_TARGETS + 2 * ti]
        for bi in range(nb):
            ideal[bi] = amax[bi] / tgt
    else:
        r = fp[F_TARGETS + 2 * ti + 1]
        for bi in range(nb):
            ideal[bi] = amax[bi] * r
    if two_level and not ip[P_ENCODE_ARITH]:
        for bi in range(nb):
            ideal[bi] = ideal[bi] / ts
    if ip[P_HAS_MIN]:  # np.maximum: NaN stays NaN
        lo = fp[F_MIN]
        for bi in range(nb):
            ideal[bi] = lo if ideal[bi] < lo else ideal[bi]
    if ip[P_HAS_MAX]:
        hi = fp[F_MAX]
        for bi in range(nb):
            ideal[bi] = hi if ideal[bi] > hi else ideal[bi]


@njit(**NJ)
def _encode_ideals(ideal, nb, ip, fp, sthr, scodes, sbkt, code):
    """Scale codes of non-negative float32 ideal scales (``ref_encode.encode_scale``), one straight loop per
    scale kind so that it vectorizes across blocks."""
    kind = ip[P_KIND]
    rounding = ip[P_ROUNDING]
    smax = fp[F_SMAX]
    if kind == KIND_FP32:  # saturating at the largest finite value (NaN stays NaN)
        for bi in range(nb):
            code[bi] = f32_to_u32(smax if ideal[bi] > smax else ideal[bi])
    elif kind == KIND_BF16:
        for bi in range(nb):
            b = np.int64(f32_to_u32(smax if ideal[bi] > smax else ideal[bi]))
            if rounding == ROUND_RTNE:
                b = b + 0x7FFF + ((b >> 16) & 1)
            elif rounding == ROUND_CEIL:
                b = b + 0x10000 * np.int64((b & 0xFFFF) != 0)
            code[bi] = (b >> 16) & 0xFFFF
        for bi in range(nb):
            if ideal[bi] != ideal[bi]:
                code[bi] = 0x7FC0
    elif kind == KIND_FLOAT_TABLE or kind == KIND_FLOAT_BITS:
        clip_hi = fp[F_SCLIP]
        off = ip[P_SOFF]
        top = ip[P_SMAXCODE]
        sh = np.uint32(ip[P_SBKT_SH])
        kk = ip[P_SBKT_K]
        last = sbkt.shape[0] - 1
        for bi in range(nb):  # count(sthr <= v) through the bucket index (nb_tables._bucket_index)
            v = min(max(ideal[bi], np.float32(0.0)), clip_hi)
            c = np.int64(sbkt[min(np.int64((f32_to_u32(v) & ABS_MASK) >> sh), last)])
            c0 = c
            for i in range(kk):
                c += np.int64(sthr[c0 + i] <= v)
            code[bi] = scodes[min(max(c + off, 0), top)]
        for bi in range(nb):
            if ideal[bi] != ideal[bi]:
                code[bi] = ip[P_SNAN]
    else:
        for bi in range(nb):
            code[bi] = _pow2_code(ideal[bi], rounding, ip[P_SBIAS], ip[P_SMAXCODE], ip[P_SNAN], ip[P_SOVF])


@njit(inline="always", **NJ)
def _decode_scale(code, kind, sdec):
    if kind == KIND_FP32:
        return u32_to_f32(np.uint32(code))
    if kind == KIND_BF16:
        return u32_to_f32(np.uint32(code << 16))
    return sdec[code]


@njit(inline="always", **NJ)
def decoded_caps(S, ip, fp):
    """``range_policy.decoded_caps`` of one block scale: (lo, hi), -Inf / +Inf where there is no cap (always for
    scales below F_SCRIT and formats without P_RANGE)."""
    lo = -np.float32(np.inf)
    hi = np.float32(np.inf)
    if ip[P_RANGE] and S >= fp[F_SCRIT] and not math.isinf(S):
        base = F_TARGETS + 2 * ip[P_NTARGETS]
        n = ip[P_NLEV]
        pos = np.float32(0.0)
        neg = np.float32(0.0)
        for k in range(n):
            v = fp[base + k]
            if not math.isinf(v * S):
                if v >= 0 and v > pos:
                    pos = v
                if v <= 0 and v < neg:
                    neg = v
        if math.isinf(fp[base] * S):
            lo = neg if neg < 0 else -np.float32(0.0)  # a capped negative value stays negative (-0)
        if math.isinf(fp[base + n - 1] * S):
            hi = pos
    return lo, hi


@njit(inline="always", **NJ)
def _cap(t, lo, hi):
    """``min(max(t, lo), hi)``, NaN staying NaN (numpy's minimum / maximum)."""
    if t > hi:
        return hi
    if t < lo:
        return lo
    return t


@njit(**NJ)
def chunk_scales(amax, hnan, hinf, nb, ti, ts, two_level, gmul, ip, fp, sthr, scodes, sdec, sbkt, code, S):
    """Scale codes and decoded float32 scales of nb blocks with finite float32 ``amax`` for target ``ti``:
    the scale rule (``scale_rule.block_scale_codes``), then the zero / Inf / NaN block overrides, then
    ``ScaleFormat.decode``. "encode" arithmetic: ``gmul[ti] = float32(g * float32(1/target))``."""
    if ip[P_CHOICE] == CHOICE_AMAX:
        ideal = np.empty(nb, np.float32)
        _ideal_scales(amax, nb, ti, ts, two_level, gmul, ip, fp, ideal)
        _encode_ideals(ideal, nb, ip, fp, sthr, scodes, sbkt, code)
    else:  # OCP MX exponent rules on the float32 bits of amax
        rule = ip[P_EXP_RULE]
        even_add = ip[P_EVEN_ADD]
        shift = ip[P_SBIAS] - ip[P_EMAX_ELEM] - 127
        top = ip[P_SMAXCODE]
        for bi in range(nb):
            bits = np.int64(f32_to_u32(amax[bi]))
            if rule == RULE_EVEN:
                bits = (bits + even_add) & 0x7F800000
            e = (bits >> 23) & 0xFF
            if rule == RULE_CEIL:
                e += np.int64((bits & 0x7FFFFF) != 0)
            code[bi] = min(max(e + shift, np.int64(0)), top)
    kind = ip[P_KIND]
    if ip[P_BUMP]:  # range_policy.multiplier_floor: a non-zero scale whose multiplier overflows takes F_BUMP_S
        smin = fp[F_BUMP_S]
        for bi in range(nb):
            if amax[bi] > 0:
                s0 = _decode_scale(code[bi], kind, sdec)
                if s0 > 0 and s0 < smin:
                    code[bi] = ip[P_BUMP_CODE]
    zero_policy = ip[P_ZERO_POLICY] != 0
    nan_prop = ip[P_NAN_PROP] != 0
    for bi in range(nb):
        nan = hnan[bi] and nan_prop
        if zero_policy and amax[bi] == 0 and not nan and not hinf[bi]:
            code[bi] = ip[P_CODE_ZERO]
        if hinf[bi]:
            code[bi] = ip[P_CODE_INF]
        if nan:
            code[bi] = ip[P_CODE_NAN]
    if kind == KIND_FP32:
        for bi in range(nb):
            S[bi] = u32_to_f32(np.uint32(code[bi]))
    elif kind == KIND_BF16:
        for bi in range(nb):
            S[bi] = u32_to_f32(np.uint32(code[bi] << 16))
    else:
        for bi in range(nb):
            S[bi] = sdec[code[bi]]


EXP_MASK = np.uint32(0x7F800000)


@njit(**NJ)
def _block_max_bits(xv, nb, bs, top):
    """``top[bi]`` = max over block bi of the float32 bits of ``|x|`` (as uint32). Power-of-two block sizes: a
    pairwise tree over the run (stride-2 loads, which vectorize), else a plain loop per block."""
    if bs & (bs - 1) == 0 and bs >= 2:
        n = nb * bs // 2
        for i in range(n):
            top[i] = max(f32_to_u32(xv[2 * i]) & ABS_MASK, f32_to_u32(xv[2 * i + 1]) & ABS_MASK)
        while n > nb:
            n //= 2
            for i in range(n):
                top[i] = max(top[2 * i], top[2 * i + 1])
        return
    for bi in range(nb):
        mx = np.uint32(0)
        for j in range(bi * bs, bi * bs + bs):
            mx = max(mx, f32_to_u32(xv[j]) & ABS_MASK)
        top[bi] = mx


@njit(**NJ)
def block_stats(xv, nb, bs, amax, hnan, hinf):
    """Per block of ``xv`` (nb blocks of bs, contiguous): float32 max of the finite |x| (from the bits), and
    whether the block holds a NaN / an Inf."""
    top = np.empty(max(nb, nb * bs // 2), np.uint32)
    _block_max_bits(xv, nb, bs, top)
    for bi in range(nb):
        t = top[bi]
        hnan[bi] = t > EXP_MASK
        hinf[bi] = False
        if t < EXP_MASK:
            amax[bi] = u32_to_f32(t)
            continue
        mx = np.uint32(0)  # rare: a NaN or an Inf in the block
        for j in range(bi * bs, bi * bs + bs):
            u = f32_to_u32(xv[j]) & ABS_MASK
            mx = max(mx, u if u < EXP_MASK else np.uint32(0))
            if u == EXP_MASK:
                hinf[bi] = True
        amax[bi] = u32_to_f32(mx)


@njit(**NJ)
def scale_elements(xv, t, S, nb, ts, inv_ts, two_level, ip, fp):
    """Scaled elements ``t`` of nb blocks (``ref_quantize.scale_elements``): ``x / S`` or ``x / float32(S*ts)``,
    ``x * float32(1/S)`` or ``x * float32(float32(1/ts)/S)``; a zero scale gives a signed zero (NaN stays);
    reciprocal: a zero x stays x where the reciprocal overflowed to Inf; "encode" arithmetic:
    ``x * min(float32(1/float32(S*ts)), FLT_MAX)``, no zero-scale case. rtp / rtm (``P_DIRECTED``): a non-zero x
    whose quotient underflowed to +-0 takes +-2^-149 (``ref_quantize.nonzero_quotients``). Tensor scale 1: ``t``
    beyond the block's ``decoded_caps`` takes the cap."""
    bs = ip[P_BS]
    if ip[P_ENCODE_ARITH]:
        for bi in range(nb):
            R = np.float32(1.0) / ((S[bi] * ts) if two_level else S[bi])
            if R > FLT_MAX:
                R = FLT_MAX
            for j in range(bi * bs, bi * bs + bs):
                t[j] = xv[j] * R
    elif not ip[P_DIVIDE_ELEMENTS]:
        for bi in range(nb):
            R = (inv_ts / S[bi]) if two_level else (np.float32(1.0) / S[bi])
            for j in range(bi * bs, bi * bs + bs):
                t[j] = xv[j] * R
            if math.isinf(R):  # 0 * inf (1/S overflowed) stays 0, with its sign
                for j in range(bi * bs, bi * bs + bs):
                    if xv[j] == 0:
                        t[j] = xv[j]
    else:
        for bi in range(nb):
            D = (S[bi] * ts) if two_level else S[bi]
            for j in range(bi * bs, bi * bs + bs):
                t[j] = xv[j] / D
    if not ip[P_ENCODE_ARITH]:
        for bi in range(nb):
            if S[bi] == 0:
                for j in range(bi * bs, bi * bs + bs):
                    v = xv[j]
                    if v == v:
                        t[j] = u32_to_f32(f32_to_u32(v) & SIGN_MASK)
    if ip[P_DIRECTED]:  # rtp / rtm: a quotient that underflowed to +-0 is +-2^-149 (ref_quantize.nonzero_quotients)
        for bi in range(nb):
            if S[bi] != 0:
                for j in range(bi * bs, bi * bs + bs):
                    if t[j] == 0 and xv[j] != 0:
                        t[j] = u32_to_f32((f32_to_u32(xv[j]) & SIGN_MASK) | np.uint32(1))
    if ip[P_RANGE] and (not two_level or ts == 1):
        for bi in range(nb):
            lo, hi = decoded_caps(S[bi], ip, fp)
            if hi != np.inf or lo != -np.inf:
                for j in range(bi * bs, bi * bs + bs):
                    t[j] = _cap(t[j], lo, hi)


@njit(**NJ)
def block_errors(xv, cand, S, nb, bs, ts, two_level, evals, err, errmode):
    """float32 sum over each block, in element order, of ``(float32(evals[code] * S [* ts]) - x)^2``;
    ``errmode`` bits (``nb_tables.P_ERR``): 1 absolute instead of squared errors, 2 ``evals[code] * (S * ts)``."""
    absolute = (errmode & 1) != 0
    product_first = two_level and (errmode & 2) != 0
    for bi in range(nb):
        e = np.float32(0.0)
        s = S[bi] * ts if product_first else S[bi]
        for j in range(bi * bs, bi * bs + bs):
            d = evals[cand[j]] * s
            if two_level and not product_first:
                d = d * ts
            d = d - xv[j]
            e = e + (abs(d) if absolute else d * d)
        err[bi] = e


K_MUL, K_DIV, K_EXACT, K_CAP = 0, 1, 2, 3  # per-block element scaling of the fused loop


def _make_fused(width: int):
    @njit(inline="always", **NJ)
    def code_of(t, amask, thr, d0, d1, keep, nan_code, code_pos, code_neg):
        """Code of scaled element t: ``code0 + sum_k (a >= thr_k) * delta_k`` per sign column, then NaN."""
        tb = f32_to_u32(t)
        a = u32_to_f32(tb & amask)
        cp = code_pos
        cn = code_neg
        for k in range(width):  # constant trip count: unrolled, one vector compare + masked add per threshold
            ind = np.int32(a >= thr[k])
            cp += ind * d0[k]
            cn += ind * d1[k]
        neg = (tb >> U31) & (np.uint32(t != 0) | keep)
        return nan_code if t != t else np.uint8(cn if neg else cp)

    @njit(**NJ)
    def _capped(xb, ob, m, lo, hi, bs, use_div, amask, thr, d0, d1, keep, nan_code, code_pos, code_neg):
        """One block with decoded-range caps (a large finite scale: no zero or Inf special case)."""
        for j in range(bs):
            t = _cap(xb[j] / m if use_div else xb[j] * m, lo, hi)
            ob[j] = code_of(t, amask, thr, d0, d1, keep, nan_code, code_pos, code_neg)

    @njit(**NJ)
    def fused(xv, out, mult, kind, S, nb, bs, use_div, amask, thr, d0, d1, keep, nan_code, code_pos, code_neg,
              caps):
        for bi in range(nb):
            m = mult[bi]
            xb = xv[bi * bs:bi * bs + bs]
            ob = out[bi * bs:bi * bs + bs]
            kb = kind[bi]
            if kb == K_MUL:  # one loop body per block kind, so that each loop vectorizes
                for j in range(bs):
                    ob[j] = code_of(xb[j] * m, amask, thr, d0, d1, keep, nan_code, code_pos, code_neg)
            elif kb == K_DIV:
                for j in range(bs):
                    ob[j] = code_of(xb[j] / m, amask, thr, d0, d1, keep, nan_code, code_pos, code_neg)
            elif kb == K_CAP:  # decoded-range caps: a separate kernel keeps this one small enough to vectorize
                _capped(xb, ob, m, caps[2 * bi], caps[2 * bi + 1], bs, use_div, amask, thr, d0, d1, keep, nan_code,
                        code_pos, code_neg)
            else:  # zero scale (signed zero, NaN stays) or a reciprocal that overflowed (0 * inf stays 0)
                for j in range(bs):
                    v = xb[j]
                    t = v / m if use_div else v * m
                    t = v if (not use_div and v == 0) else t
                    t = u32_to_f32(f32_to_u32(v) & SIGN_MASK) if (S[bi] == 0 and v == v) else t
                    ob[j] = code_of(t, amask, thr, d0, d1, keep, nan_code, code_pos, code_neg)

    return fused


_fused8 = _make_fused(8)
_fused16 = _make_fused(16)


@njit(**NJ)
def scale_encode_fused(xv, out, S, nb, ts, inv_ts, two_level, ip, fp, fthr, fdelta):
    """``scale_elements`` then ``encode_run`` in one pass without storing ``t`` (same float32 operations), for
    deterministic rounding, saturating overflow, blocks of a multiple of 16 and at most 16 thresholds
    (``nb_tables._fused_tables``). A divisor that is a normal power of two whose reciprocal is a float32
    (2^-126..2^127) becomes a multiplication by that exact reciprocal: ``x / 2^k`` and ``x * 2^-k`` are the same
    correctly rounded real number, subnormal results included. Blocks with ``decoded_caps`` clamp ``t``."""
    mult = np.empty(nb, np.float32)
    kind = np.empty(nb, np.int8)
    caps = np.empty(2 * nb if ip[P_RANGE] else 2, np.float32)
    encode_arith = ip[P_ENCODE_ARITH] != 0
    use_div = not encode_arith and ip[P_DIVIDE_ELEMENTS] != 0
    for bi in range(nb):
        k = K_MUL
        if ip[P_RANGE] and (not two_level or ts == 1):
            lo, hi = decoded_caps(S[bi], ip, fp)
            if hi != np.inf or lo != -np.inf:
                caps[2 * bi] = lo
                caps[2 * bi + 1] = hi
                if encode_arith:
                    r = np.float32(1.0) / S[bi]
                    mult[bi] = FLT_MAX if r > FLT_MAX else r
                elif use_div:
                    mult[bi] = S[bi]
                else:
                    mult[bi] = np.float32(1.0) / S[bi]
                kind[bi] = K_CAP
                continue
        if encode_arith:
            r = np.float32(1.0) / ((S[bi] * ts) if two_level else S[bi])
            m = FLT_MAX if r > FLT_MAX else r
        elif use_div:
            m = (S[bi] * ts) if two_level else S[bi]
            b = f32_to_u32(m)
            e = (b >> U23) & U255
            if (b & MANT_MASK) == 0 and e != 0 and e != U255:
                m = np.float32(1.0) / m
            else:
                k = K_EXACT if S[bi] == 0 else K_DIV
        else:
            m = (inv_ts / S[bi]) if two_level else (np.float32(1.0) / S[bi])
            if S[bi] == 0 or math.isinf(m):
                k = K_EXACT
        mult[bi] = m
        kind[bi] = k
    d0 = fdelta[0]
    d1 = fdelta[1]
    args = (xv, out, mult, kind, S, nb, ip[P_BS], use_div, np.uint32(ip[P_FABS_MASK]), fthr, d0, d1,
            np.uint32(ip[P_KEEP_SIGN]), np.uint8(ip[P_NAN_CODE]), np.int32(ip[P_FCODE_POS]),
            np.int32(ip[P_FCODE_NEG]), caps)
    if ip[P_FUSED] == 8:
        _fused8(*args)
    else:
        _fused16(*args)
