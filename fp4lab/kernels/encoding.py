"""Triton device functions that encode and decode: element codes (table counts, deterministic and stochastic
rounding, the bit-arithmetic ExMy encoders), the element policies (overflow, NaN), and block scales (the scale
rule's ideal scale, power-of-two exponents, ExMy and table scale formats). ``fp4lab.kernels.params`` says which
encoder a format takes; the bit-exactness rules are in ``tile``'s docstring.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from fp4lab.kernels.codes import (
    CHOICE_EXPONENT,
    DECODE_FLOAT,
    DECODE_INT,
    ENCODER_SIGN_MAGNITUDE,
    ENCODER_SIGNED,
    KIND_FLOAT_BITS,
    KIND_FLOAT_TABLE,
    KIND_FP32,
    KIND_POW2,
    OVERFLOW_INF,
    OVERFLOW_NAN,
    ROUND_CEIL,
    ROUND_FLOOR,
    ROUND_RTNE,
    RULE_CEIL,
    RULE_EVEN,
)
from fp4lab.kernels.tile import FLT_MAX, INTERPRETED, bits_of, f32_of, is_finite, negative, sign_bit

SR_MAGIC: tl.constexpr = tl.constexpr(12582912.0)  # 1.5 * 2^23: ulp 1 over [2^23, 2^24), so M + k keeps k in its bits


@triton.jit
def count_tab(v, tab_ptr, N: tl.constexpr, STRICT: tl.constexpr, LOG: tl.constexpr):
    """int32 count of j < N with v >= tab[j] (STRICT: v > tab[j]) for an ascending table; NaN counts nothing.
    Up to 32 entries: unrolled compares (independent scalar loads); larger tables: binary search by gathers
    (LOG = bit length of N)."""
    c = tl.full(v.shape, 0, tl.int32)
    if N <= 32:
        for j in tl.static_range(N):
            th = tl.load(tab_ptr + j)
            if STRICT:
                c += (v > th).to(tl.int32)
            else:
                c += (v >= th).to(tl.int32)
    else:
        for s in tl.static_range(LOG):
            cand = c + (1 << (LOG - 1 - s))
            ok = cand <= N
            th = tl.load(tab_ptr + tl.minimum(cand, N) - 1)
            if STRICT:
                c = tl.where(ok & (v > th), cand, c)
            else:
                c = tl.where(ok & (v >= th), cand, c)
    return c


@triton.jit
def encode_det(t, thr_ptr, ctab_ptr, half, ELEM: tl.constexpr):
    """Element codes of fp32 ``t`` for a deterministic mode (see params.py for the three encoders)."""
    neg = negative(t, ELEM.SZ_POS)
    if ELEM.ENCODER == ENCODER_SIGNED:
        idx = count_tab(t, thr_ptr, ELEM.N_THR, False, ELEM.L_THR)
        code = tl.load(ctab_ptr + idx + neg * half)
    else:
        m = count_tab(tl.abs(t), thr_ptr, ELEM.N_THR, False, ELEM.L_THR)
        if ELEM.ENCODER == ENCODER_SIGN_MAGNITUDE:
            code = m | (neg * ELEM.SIGN_OR)
        else:
            code = tl.load(ctab_ptr + m + neg * half)
    return code


@triton.jit
def encode_sr(t, rand24, lvl_ptr, ctab_ptr, igap_ptr, ELEM: tl.constexpr):
    """Stochastic rounding: neighbours lo <= t < hi, p = div_rn(t - lo, hi - lo); up iff floor(p * 2^24) > rand24.
    Level index k and the neighbours by unrolled compare/select over the levels (up to 32), else by gathers.
    Sign-magnitude grids give the code as |idx - z| | sign * SIGN_OR (z = index of level 0), others by table.
    POW2_GAPS: every hi - lo is a power of two, so the quotient is the exact product with its reciprocal."""
    N_LVL: tl.constexpr = ELEM.N_LVL
    POW2_GAPS: tl.constexpr = ELEM.POW2_GAPS
    neg = negative(t, ELEM.SZ_POS)
    if N_LVL <= 32:
        cnt = tl.full(t.shape, 0, tl.int32)
        lo = tl.full(t.shape, 0.0, tl.float32) + tl.load(lvl_ptr)
        hi = tl.full(t.shape, 0.0, tl.float32) + tl.load(lvl_ptr + 1)
        ig = tl.full(t.shape, 0.0, tl.float32) + tl.load(igap_ptr)
        for j in tl.static_range(N_LVL):
            lv = tl.load(lvl_ptr + j)
            ge = t >= lv
            cnt += ge.to(tl.int32)
            if j <= N_LVL - 2:
                lo = tl.where(ge, lv, lo)
                if POW2_GAPS:
                    ig = tl.where(ge, tl.load(igap_ptr + j), ig)
            if j >= 2:
                hi = tl.where(t >= tl.load(lvl_ptr + j - 1), lv, hi)
        k = tl.minimum(tl.maximum(cnt - 1, 0), N_LVL - 2)
    else:
        k = count_tab(t, lvl_ptr, N_LVL, False, ELEM.L_LVL) - 1
        k = tl.minimum(tl.maximum(k, 0), N_LVL - 2)
        lo = tl.load(lvl_ptr + k)
        hi = tl.load(lvl_ptr + k + 1)
        ig = tl.load(igap_ptr + k)
    if POW2_GAPS:
        p = (t - lo) * ig
    else:
        p = tl.div_rn(t - lo, hi - lo)
    p = tl.where(p > 1.0, 1.0, tl.where(p > 0.0, p, 0.0))
    f24 = (p * 16777216.0).to(tl.int32)
    idx = k + (f24 > rand24).to(tl.int32)
    idx = tl.where(t >= tl.load(lvl_ptr + N_LVL - 1), N_LVL - 1, tl.where(t <= tl.load(lvl_ptr), 0, idx))
    if ELEM.ENCODER == ENCODER_SIGN_MAGNITUDE:
        z = (N_LVL - 1) // 2
        return tl.abs(idx - z) | (neg * ELEM.SIGN_OR)
    else:
        return tl.load(ctab_ptr + idx + neg * N_LVL)


@triton.jit
def encode_fbits_det(t, ELEM: tl.constexpr):
    """RTNE codes of fp32 ``t`` on an ExMy float grid, the minimum over binades of magic-number roundings
    (numerics.fbits.fbits_det is the numpy twin and states the argument): magnitude code | sign * SIGN_OR. NaN/overflow
    policies are applied by the caller. ``tl.fma`` is safe in the interpreter here: its product is exact (a
    power-of-two multiple), so one rounding equals the interpreter's two."""
    FB_M: tl.constexpr = ELEM.FB_M
    FB_EMIN: tl.constexpr = ELEM.FB_EMIN
    FB_CMAX: tl.constexpr = ELEM.FB_CMAX
    NB: tl.constexpr = (FB_CMAX + 1) >> FB_M
    U: tl.constexpr = 2.0 ** (FB_EMIN - FB_M)
    BIG: tl.constexpr = 2.0 ** (FB_EMIN - FB_M + 23)
    a = tl.abs(t)
    base = bits_of(tl.full(t.shape, BIG, tl.float32))
    if NB == 2:
        c = tl.minimum(bits_of(a + BIG), base + FB_CMAX)
    else:
        c = bits_of(a + BIG)
        cj = base + FB_CMAX
        for j in tl.static_range(1, NB - 1):
            cj = tl.minimum(cj, bits_of(tl.fma(a, 2.0 ** -j, BIG + j * (1 << FB_M) * U)))
        c = tl.minimum(c, cj)
    code = c - base
    return code | (negative(t, ELEM.SZ_POS) * ELEM.SIGN_OR)


@triton.jit
def _floor_fma(a, b, c):
    """fp32 whose floor is floor(a * b + c) (exact): on the GPU the FMA rounded toward -inf (``fma.rm.f32``, which
    keeps the floor of its exact result); in the interpreter that floor, in float64 (exact for the encoder's
    operands: ``numerics.fbits._floor_sum``)."""
    if INTERPRETED:
        return tl.floor(a.to(tl.float64) * b + c.to(tl.float64)).to(tl.float32)
    else:
        return libdevice.fma_rd(a, b, c)


@triton.jit
def encode_fbits_sr(t, v, ELEM: tl.constexpr):
    """Stochastic-rounding codes of fp32 ``t`` on an ExMy float grid for draws given as fp32 v = (2^24 - 1 - c) /
    2^24 of their comparands c (``_sr_draw``): per binade j the candidate |floor(t * s_j + v)| + o_j, each floor
    an FMA rounded down and then rounded down onto sign * (SR_MAGIC + o_j), whose bits hold the candidate; binade
    0 as the reference rounds it for t < 0 (p = fl(1 + t * s_0)). The code is the smallest candidate and FB_CMAX
    (``numerics.fbits.fbits_sr`` is the numpy twin and states the argument); | sign * SIGN_OR."""
    FB_M: tl.constexpr = ELEM.FB_M
    FB_EMIN: tl.constexpr = ELEM.FB_EMIN
    FB_CMAX: tl.constexpr = ELEM.FB_CMAX
    NB: tl.constexpr = (FB_CMAX + 1) >> FB_M
    sig = f32_of((bits_of(t) & -2147483648) | 0x3F800000)  # +-1 by the sign bit
    s1 = tl.fma(sig, -0.5, 0.5)  # 1 for t < 0, else 0
    y0 = tl.fma(t, 2.0 ** (FB_M - FB_EMIN), s1)  # exact product, one rounding
    c = bits_of(_floor_fma(sig, SR_MAGIC, _floor_fma(y0, 1.0, v - s1))).to(tl.uint32, bitcast=True)
    c = tl.minimum(c, bits_of(sig * (SR_MAGIC + FB_CMAX)).to(tl.uint32, bitcast=True))
    for j in tl.static_range(1, NB - 1):
        cj = _floor_fma(sig, SR_MAGIC + j * (1 << FB_M), _floor_fma(t, 2.0 ** (FB_M - FB_EMIN - j), v))
        c = tl.minimum(c, bits_of(cj).to(tl.uint32, bitcast=True))
    code = c.to(tl.int32, bitcast=True) & 0x3FFFFF
    return code | (negative(t, ELEM.SZ_POS) * ELEM.SIGN_OR)


@triton.jit
def element_policies(code, t, nan_code, ovf_thr, ovf_nan, inf_pos, inf_neg, OVERFLOW: tl.constexpr,
                     NAN_T: tl.constexpr):
    """Overflow policy (``Overflow``: the NaN code or the signed Inf codes at |t| >= ovf_thr) and, when NAN_T (t
    may be NaN), the NaN element code."""
    if OVERFLOW == OVERFLOW_NAN:
        code = tl.where(tl.abs(t) >= ovf_thr, ovf_nan, code)
    elif OVERFLOW == OVERFLOW_INF:
        code = tl.where(tl.abs(t) >= ovf_thr, tl.where(sign_bit(t) == 1, inf_neg, inf_pos), code)
    if NAN_T:
        code = tl.where(t != t, nan_code, code)
    return code


@triton.jit
def decode_elements(code, vals_ptr, DEC: tl.constexpr):
    """fp32 value of element codes (``DEC``: params.DecodeCx): FLOAT, a sign-magnitude ExMy (fields placed in fp32
    bits, then one exact power-of-two multiply; fp32 subnormals carry the grid's subnormals); INT, two's-complement
    int * step; TABLE."""
    EB: tl.constexpr = DEC.EB
    MB: tl.constexpr = DEC.MB
    if DEC.KIND == DECODE_FLOAT:
        mag = code & ((1 << (EB + MB)) - 1)
        sgn = (code >> (EB + MB)) & 1
        v = f32_of((mag << (23 - MB)) | (sgn << 31))
        if DEC.BIAS < 0:  # 2^(127 - bias) is beyond float32: two exact multiplies (each result <= the value's)
            return (v * (2.0 ** 127)) * (2.0 ** (-DEC.BIAS))
        return v * (2.0 ** (127 - DEC.BIAS))
    elif DEC.KIND == DECODE_INT:
        k = (code << (32 - EB)) >> (32 - EB)
        return k.to(tl.float32) * DEC.STEP
    else:
        return tl.load(vals_ptr + code)


@triton.jit
def pow2_exponent(v, ROUNDING: tl.constexpr):
    """int32 exponent k of the power of two that v >= 0 rounds to (``ScaleRounding``: rtne, ceil or floor);
    zero -> -100000, +Inf -> 100000 (NaN: caller's business)."""
    sub = v < 1.1754943508222875e-38
    w = tl.where(sub, v * 18446744073709551616.0, v)
    b = bits_of(w)
    fk = ((b >> 23) & 0xFF) - 127 - tl.where(sub, 64, 0)
    mant = b & 0x7FFFFF
    if ROUNDING == ROUND_CEIL:
        k = fk + (mant != 0).to(tl.int32)
    elif ROUNDING == ROUND_FLOOR:
        k = fk
    else:
        up = (mant > 0x400000) | ((mant == 0x400000) & ((fk & 1) != 0))
        k = fk + up.to(tl.int32)
    k = tl.where(v == 0.0, -100000, k)
    return tl.where(is_finite(v), k, 100000)


@triton.jit
def encode_float_scale(c, MB: tl.constexpr, SBIAS: tl.constexpr, ROUNDING: tl.constexpr):
    """Code of finite 0 <= c <= max of an unsigned ExMy scale format with subnormals, rounded (``ScaleRounding``)
    rtne (ties to the even code), ceil or floor, by integer arithmetic on c's bits: target biased exponent
    em = e + bias, the 24-bit significand shifted right by 23 - MB (+ 1 - em below the normal range), remainder
    decides."""
    b = bits_of(c)
    ef = (b >> 23) & 0xFF
    m24 = (b & 0x7FFFFF) | tl.where(ef != 0, 1 << 23, 0)
    em = tl.maximum(ef, 1) - 127 + SBIAS
    sh = tl.minimum((23 - MB) + tl.maximum(1 - em, 0), 26)
    q = m24 >> sh
    r = m24 & ((1 << sh) - 1)
    half = 1 << (sh - 1)
    down = (tl.maximum(em - 1, 0) << MB) + q
    if ROUNDING == ROUND_RTNE:
        up = (r > half) | ((r == half) & ((down & 1) != 0))
    elif ROUNDING == ROUND_CEIL:
        up = r != 0
    else:
        up = r < 0
    return down + up.to(tl.int32)


@triton.jit
def decode_scale(code, svals_ptr, SCALE: tl.constexpr):
    """fp32 value of scale codes (``SCALE``: params.ScaleCx; ``ScaleKind``): POW2 2^(code - bias) built from bits
    (NaN code / exponent > 127 -> NaN), FLOAT_TABLE a table lookup, FLOAT_BITS the ExMy fields placed in fp32 bits
    times 2^(127 - bias) (NaN at ``SCALE.NAN``, -1 for none), FP32 / BF16 bits."""
    KIND: tl.constexpr = SCALE.KIND
    if KIND == KIND_POW2:
        e = code - SCALE.BIAS
        sh = tl.minimum(tl.maximum(e + 149, 0), 30)
        b = tl.where(e >= -126, (e + 127) << 23, tl.where(e >= -149, 1 << sh, 0))
        b = tl.where((code == SCALE.NAN) | (e > 127), 0x7FC00000, b)
        return f32_of(b)
    elif KIND == KIND_FLOAT_TABLE:
        return tl.load(svals_ptr + code)
    elif KIND == KIND_FLOAT_BITS:
        v = f32_of(code << (23 - SCALE.MB)) * (2.0 ** (127 - SCALE.BIAS))
        return tl.where(code == SCALE.NAN, float("nan"), v)
    elif KIND == KIND_FP32:
        return f32_of(code)
    else:
        return f32_of(code << 16)


@triton.jit
def block_scale_codes(amax, target, inv_target, ts, g, min_s, max_s, stab_ptr, scpos_ptr, SCALE: tl.constexpr):
    """int32 scale codes of finite block amaxes (policies applied by the caller; ``SCALE``: params.ScaleCx)."""
    KIND: tl.constexpr = SCALE.KIND
    ROUNDING: tl.constexpr = SCALE.ROUNDING
    SBIAS: tl.constexpr = SCALE.BIAS
    SNAN: tl.constexpr = SCALE.NAN
    SMAXV: tl.constexpr = SCALE.MAXV
    if SCALE.CHOICE == CHOICE_EXPONENT:
        b = bits_of(amax)
        if SCALE.EXP_RULE == RULE_EVEN:
            b = (b + SCALE.EVEN_ADD) & 0x7F800000
        e = ((b >> 23) & 0xFF) - 127
        if SCALE.EXP_RULE == RULE_CEIL:
            e += ((b & 0x7FFFFF) != 0).to(tl.int32)
        code = tl.minimum(tl.maximum(e - SCALE.EMAX + SBIAS, 0), SNAN - 1)
    else:
        if SCALE.ENCODE_ARITH:
            ideal = tl.minimum(amax * (g * inv_target), FLT_MAX, propagate_nan=tl.PropagateNan.ALL)
        else:
            if SCALE.DIVIDE_IDEAL:
                ideal = tl.div_rn(amax, tl.full(amax.shape, 1.0, tl.float32) * target)
            else:
                ideal = amax * inv_target
            if SCALE.TWO_LEVEL:
                ideal = tl.div_rn(ideal, tl.full(amax.shape, 1.0, tl.float32) * ts)
        if SCALE.HAS_MIN:
            ideal = tl.where(ideal < min_s, min_s, ideal)
        if SCALE.HAS_MAX:
            ideal = tl.where(ideal > max_s, max_s, ideal)
        if KIND == KIND_POW2:
            k = pow2_exponent(ideal, ROUNDING)
            code = tl.minimum(tl.maximum(k + SBIAS, 0), SNAN - 1)
            if SCALE.OVF_NAN:  # a code above SNAN - 1 is NaN (scale_overflow "nan")
                code = tl.where(k + SBIAS > SNAN - 1, SNAN, code)
            code = tl.where(ideal != ideal, SNAN, code)
        elif KIND == KIND_FLOAT_BITS:
            c = tl.where(ideal > SMAXV, SMAXV, tl.where(ideal > 0.0, ideal, 0.0))
            code = encode_float_scale(c, SCALE.MB, SBIAS, ROUNDING)
            code = tl.where(ideal != ideal, SNAN, code)
        elif KIND == KIND_FLOAT_TABLE:
            c = tl.where(ideal > SMAXV, SMAXV, tl.where(ideal > 0.0, ideal, 0.0))
            idx = count_tab(c, stab_ptr, SCALE.N_TAB, SCALE.STRICT, SCALE.L_TAB)
            code = tl.load(scpos_ptr + tl.minimum(idx, SCALE.N_POS - 1))
            code = tl.where(ideal != ideal, SNAN, code)
        elif KIND == KIND_FP32:
            code = bits_of(tl.where(ideal > SMAXV, SMAXV, ideal))
        else:
            b = bits_of(tl.where(ideal > SMAXV, SMAXV, ideal))
            if ROUNDING == ROUND_RTNE:
                b = b + 0x7FFF + ((b >> 16) & 1)
            elif ROUNDING == ROUND_CEIL:
                b = b + tl.where((b & 0xFFFF) != 0, 0x10000, 0)
            code = tl.where(ideal != ideal, 0x7FC0, (b >> 16) & 0xFFFF)
    return code
