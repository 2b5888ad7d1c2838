"""Triton device helpers shared by the kernels: tile indices, bit tricks, table counts, element/scale encoding, RHT.

Everything here is bit-exact between the GPU and ``TRITON_INTERPRET=1``: integer/bit operations, IEEE fp32
add/mul/compare, ``tl.div_rn`` (never ``/``), table lookups with ``tl.load``; no ``.to(bf16/fp8)``, no
``tl.sum``/``tl.dot`` on inexact data. Kernels are launched with ``enable_fp_fusion=False`` so no ``a*b+c`` is
contracted to an FMA; an explicit ``tl.fma`` appears only where its product is exact (a power-of-two multiple),
so the GPU's single rounding equals the interpreter's mul-then-add, or goes through ``fma_rn``, which is one
correct rounding in both. The GPU-only operations have interpreter twins: dequantize's fp32 -> bf16 conversion
(IEEE round-to-nearest-even in hardware) an integer one; the SR encoder's FMAs rounded toward -inf (libdevice
``fma_rd``), of which it uses only the floor, that floor in float64; ``fma_rn`` the exact sum rounded to odd in
float64, then to fp32.
Float ``tl.minimum``/``tl.maximum`` take ``propagate_nan=ALL``: the GPU's default ``min.f32`` returns the non-NaN
operand, numpy (the reference and the interpreter) returns NaN.
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
    INPUT_BF16,
    INPUT_F16,
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
from fp4lab.kernels.host import interpreting

FLT_MAX: tl.constexpr = tl.constexpr(3.4028234663852886e38)
SR_MAGIC: tl.constexpr = tl.constexpr(12582912.0)  # 1.5 * 2^23: ulp 1 over [2^23, 2^24), so M + k keeps k in its bits
# how triton.jit decorated this module's functions (it reads TRITON_INTERPRET at decoration, as this does at import)
INTERPRETED: tl.constexpr = tl.constexpr(interpreting())


@triton.jit
def bits_of(x):
    return x.to(tl.int32, bitcast=True)


@triton.jit
def f32_of(b):
    return b.to(tl.float32, bitcast=True)


@triton.jit
def fma_rn(a, b, c):
    """fp32 ``a * b + c`` with one rounding to nearest-even: ``fma.rn.f32`` on the GPU. In the interpreter (whose
    ``tl.fma`` rounds twice) the product is exact in float64, the sum is rounded to odd (TwoSum error, then the
    last bit set where the sum was inexact) and that 53-bit value rounded to fp32, which is the correctly rounded
    result (53 >= 24 + 2). Normal-range operands (a subnormal result may round differently)."""
    if INTERPRETED:
        p = a.to(tl.float64) * b.to(tl.float64)
        c64 = c.to(tl.float64)
        s = p + c64
        sp = s - c64
        err = (p - sp) + (c64 - (s - sp))
        sb = s.to(tl.int64, bitcast=True)
        away = tl.where((err > 0.0) == (s > 0.0), 1, -1).to(tl.int64)  # one ulp toward the exact sum
        sb = tl.where((err != 0.0) & ((sb & 1) == 0), sb + away, sb)
        return sb.to(tl.float64, bitcast=True).to(tl.float32)
    else:
        return tl.fma(a, b, c)


@triton.jit
def div_by_reciprocal(x, d, r):
    """fp32 ``x / d`` rounded to nearest-even (``tl.div_rn(x, d)``) from ``r = tl.div_rn(1, d)`` computed once per
    block: ``q = x * r``, then twice ``q += (x - d * q) * r`` with FMAs, and a zero quotient takes x's sign. 6
    instructions per element against about 10 for a division. Exact (Markstein's theorem: r is within half an ulp
    of 1 / d, the first correction leaves q within one ulp of x / d, so the second remainder is exact and the
    second correction rounds correctly) when d is in [2^-60, 2^100], |x / d| <= 2^100 and |x / d| >= 2^-42
    (then the exponents of d and q add up to at least -103 and every remainder is an fp32). Below 2^-42 the
    quotient may differ by an ulp or be a signed zero where the division gives 2^-149, with x's sign always:
    callers use it only for grids on which such a quotient rounds as zero does (``ElementParams.fast_division``)."""
    q = x * r
    q = fma_rn(fma_rn(-d, q, x), r, q)
    q = fma_rn(fma_rn(-d, q, x), r, q)
    return f32_of(bits_of(q) | (bits_of(x) & -2147483648))


@triton.jit
def is_finite(x):
    return (bits_of(x) & 0x7F800000) != 0x7F800000


@triton.jit
def sign_bit(x):
    """int32 0/1: the sign bit of fp32 ``x`` (1 for -0.0 and negative NaN too)."""
    return (bits_of(x) >> 31) & 1


@triton.jit
def negative(t, SZ_POS: tl.constexpr):
    """int32 0/1: which code column (negative side) a result takes; SZ_POS: t < 0, else the sign bit."""
    if SZ_POS:
        return (t < 0.0).to(tl.int32)
    else:
        return sign_bit(t)


@triton.jit
def view_offsets(rows, cols, K, INNER, INNER1: tl.constexpr):
    """Flat offsets of elements (rows[:, None], cols[None, :]) of a C-contiguous tensor seen as [M, K] with K the
    blocked axis: ``(r // INNER) * K * INNER + k * INNER + r % INNER`` (INNER1: the plain row-major ``r * K + k``)."""
    if INNER1:
        return rows[:, None] * K + cols[None, :]
    else:
        return (rows // INNER)[:, None] * (K * INNER) + cols[None, :] * INNER + (rows % INNER)[:, None]


@triton.jit
def pair_tile(M, K, K2, INNER, BM: tl.constexpr, C2: tl.constexpr, INNER1: tl.constexpr):
    """Indices of this program's [BM, 2 * C2] tile held as even/odd column halves: rows, pair (word) indices kw
    (contiguous, so loads and stores coalesce and vectorize), even columns, flat offsets of the even and odd
    elements, and masks for rows, even elements, odd elements and whole words (== even for even K)."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    kw = tl.program_id(1) * C2 + tl.arange(0, C2)
    ce = 2 * kw
    addr_e = view_offsets(rows, ce, K, INNER, INNER1)
    if INNER1:
        addr_o = addr_e + 1
    else:
        addr_o = addr_e + INNER
    rmask = (rows < M)[:, None]
    return (rows, kw, ce, addr_e, addr_o, rmask, rmask & (ce < K)[None, :], rmask & (ce + 1 < K)[None, :],
            rmask & (kw < K2)[None, :])


@triton.jit
def scale_tile(rows, rmask, M, K, INNER, BM: tl.constexpr, BK: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr,
               TWO_D: tl.constexpr, INNER1: tl.constexpr):
    """Flat offsets and mask of the block scales of this program's tile: [BM // TR, BK // TC] for 2-D tiles (scale
    array [M // TR, K // TC]), else [BM, BK // TC] in the tensor's own layout with the blocked axis shortened."""
    scols = tl.program_id(1) * (BK // TC) + tl.arange(0, BK // TC)
    if TWO_D:
        srows = tl.program_id(0) * (BM // TR) + tl.arange(0, BM // TR)
        return (srows[:, None] * (K // TC) + scols[None, :],
                (srows < M // TR)[:, None] & (scols < K // TC)[None, :])
    else:
        return view_offsets(rows, scols, K // TC, INNER, INNER1), rmask & (scols < K // TC)[None, :]


@triton.jit
def grouped_tile(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of this program for a 1-D grid over [M / BM, N / BN] output tiles, GROUP_M tile rows at a
    time so that consecutive programs share operand tiles in L2."""
    pid = tl.program_id(0)
    n_n = tl.cdiv(N, BN)
    group = pid // (GROUP_M * n_n)
    first_m = group * GROUP_M
    gsize = tl.minimum(tl.cdiv(M, BM) - first_m, GROUP_M)
    return first_m + (pid % (GROUP_M * n_n)) % gsize, (pid % (GROUP_M * n_n)) // gsize


@triton.jit
def load_f32(ptr, offs, mask, IN_KIND: tl.constexpr):
    """Load as fp32 (``IN_KIND``: ``params.InputKind``): fp32, bf16 (read as int16 bit patterns, widened by a
    shift: exact, also for subnormals, unlike the interpreter's bf16 cast), fp16."""
    if IN_KIND == INPUT_BF16:
        b = tl.load(ptr + offs, mask=mask, other=0)
        return f32_of(b.to(tl.int32) << 16)
    elif IN_KIND == INPUT_F16:
        return tl.load(ptr + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        return tl.load(ptr + offs, mask=mask, other=0.0)


@triton.jit
def load_tile(x_ptr, M, K, INNER, BM: tl.constexpr, BK: tl.constexpr, IN_KIND: tl.constexpr, INNER1: tl.constexpr):
    """This program's [BM, BK] tile of the [M, K] view as fp32, with its columns, offsets and mask."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BK + tl.arange(0, BK)
    addr = view_offsets(rows, cols, K, INNER, INNER1)
    mask = (rows < M)[:, None] & (cols < K)[None, :]
    return load_f32(x_ptr, addr, mask, IN_KIND), cols, addr, mask


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


@triton.jit
def butterfly(v, R: tl.constexpr, C: tl.constexpr, H: tl.constexpr):
    """One FWHT stage on v [R, C]: in each group of 2H consecutive columns, (a_j, a_{j+H}) -> (a + b, a - b)."""
    w = tl.reshape(v, [R, C // (2 * H), 2, H])
    w = tl.permute(w, [0, 1, 3, 2])
    a, b = tl.split(w)
    w = tl.join(a + b, a - b)
    w = tl.permute(w, [0, 1, 3, 2])
    return tl.reshape(w, [R, C])


@triton.jit
def fwht(v, R: tl.constexpr, C: tl.constexpr, N: tl.constexpr):
    """Unnormalized Walsh-Hadamard transform of every N-column chunk of v [R, C]; stages H = 1, 2, ..., N/2."""
    for s in tl.static_range(N.bit_length() - 1):
        v = butterfly(v, R, C, 1 << s)
    return v


@triton.jit
def rht_tile(v, signs_ptr, cols, rscale, R: tl.constexpr, C: tl.constexpr, N: tl.constexpr, INVERSE: tl.constexpr):
    """Forward ``c * FWHT(s * v)`` or inverse ``s * (c * FWHT(v))`` of the N-chunks of v along columns ``cols``."""
    s = tl.load(signs_ptr + (cols % N))[None, :]
    if INVERSE:
        return (fwht(v, R, C, N) * rscale) * s
    else:
        return fwht(v * s, R, C, N) * rscale


@triton.jit
def rht_pairs(e, o, signs_ptr, cols_e, rscale, R: tl.constexpr, C2: tl.constexpr, N: tl.constexpr,
              INVERSE: tl.constexpr):
    """RHT on a tile held as even/odd column halves e, o [R, C2] (cols_e: global even column indices).
    Stage h = 1 pairs (even, odd) elementwise; stages h >= 2 act within each half with h/2."""
    se = tl.load(signs_ptr + (cols_e % N))[None, :]
    so = tl.load(signs_ptr + ((cols_e + 1) % N))[None, :]
    if not INVERSE:
        e = e * se
        o = o * so
    e, o = e + o, e - o
    if N >= 4:
        e = fwht(e, R, C2, N // 2)
        o = fwht(o, R, C2, N // 2)
    e = e * rscale
    o = o * rscale
    if INVERSE:
        e = e * se
        o = o * so
    return e, o


@triton.jit
def _sr_comparand(r, SRW: tl.constexpr):
    """int32 24-bit comparand of a SRW-bit draw r: ``r << (24 - SRW) | (2^(24 - SRW) - 1)``."""
    return (r << (24 - SRW)) | ((1 << (24 - SRW)) - 1)


@triton.jit
def _sr_draw(r, SRW: tl.constexpr, AS_V: tl.constexpr):
    """A SRW-bit draw r (int32) as the encoders take it: the 24-bit comparand c = ``r << (24 - SRW) | (2^(24 -
    SRW) - 1)``, or with AS_V the fp32 v = (2^24 - 1 - c) / 2^24 = (2^SRW - 1 - r) / 2^SRW (exact: at most 24
    bits), for ``encode_fbits_sr`` (``numerics.fbits.sr_v``)."""
    if AS_V:
        return (r ^ ((1 << SRW) - 1)).to(tl.float32) * (2.0 ** -SRW)
    else:
        return _sr_comparand(r, SRW)


@triton.jit
def _interleave4(a, b, c, d):
    """[..., 4 * n] from four [..., n]: a0 b0 c0 d0 a1 b1 ... along a new minor axis, flattened by the caller."""
    return tl.join(tl.join(a, c), tl.join(b, d))


@triton.jit
def _narrow_fields(w0, w1, w2, w3, R: tl.constexpr, C2: tl.constexpr, SRW: tl.constexpr, AS_V: tl.constexpr):
    """Even/odd-half draws [R, C2] (``_sr_draw``) of the elements served by calls w0..w3 [R, C2 // (2 * PER)] of one
    row, PER = 32 // SRW: call element o takes field o % PER of word o // PER, so the even elements of a call
    are (word j, even fields) in (j, field) order and the odd ones the odd fields."""
    M: tl.constexpr = (1 << SRW) - 1
    if SRW == 16:  # per call: even elements = low halves of w0..w3, odd elements = high halves
        re = _interleave4(w0 & M, w1 & M, w2 & M, w3 & M)
        ro = _interleave4(w0 >> 16, w1 >> 16, w2 >> 16, w3 >> 16)
    elif SRW == 8:  # even: bytes 0 and 2 of each word; odd: bytes 1 and 3
        re = tl.join(_interleave4(w0 & M, w1 & M, w2 & M, w3 & M),
                     _interleave4((w0 >> 16) & M, (w1 >> 16) & M, (w2 >> 16) & M, (w3 >> 16) & M))
        ro = tl.join(_interleave4((w0 >> 8) & M, (w1 >> 8) & M, (w2 >> 8) & M, (w3 >> 8) & M),
                     _interleave4(w0 >> 24, w1 >> 24, w2 >> 24, w3 >> 24))
    else:  # 4 bits: even: nibbles 0, 2, 4, 6; odd: 1, 3, 5, 7
        re = tl.join(tl.join(_interleave4(w0 & M, w1 & M, w2 & M, w3 & M),
                             _interleave4((w0 >> 16) & M, (w1 >> 16) & M, (w2 >> 16) & M, (w3 >> 16) & M)),
                     tl.join(_interleave4((w0 >> 8) & M, (w1 >> 8) & M, (w2 >> 8) & M, (w3 >> 8) & M),
                             _interleave4((w0 >> 24) & M, (w1 >> 24) & M, (w2 >> 24) & M, (w3 >> 24) & M)))
        ro = tl.join(tl.join(_interleave4((w0 >> 4) & M, (w1 >> 4) & M, (w2 >> 4) & M, (w3 >> 4) & M),
                             _interleave4((w0 >> 20) & M, (w1 >> 20) & M, (w2 >> 20) & M, (w3 >> 20) & M)),
                     tl.join(_interleave4((w0 >> 12) & M, (w1 >> 12) & M, (w2 >> 12) & M, (w3 >> 12) & M),
                             _interleave4(w0 >> 28, w1 >> 28, w2 >> 28, w3 >> 28)))
    re = tl.reshape(re, [R, C2]).to(tl.int32)
    ro = tl.reshape(ro, [R, C2]).to(tl.int32)
    return _sr_draw(re, SRW, AS_V), _sr_draw(ro, SRW, AS_V)


@triton.jit
def _draw_at(seed, addr, SRW: tl.constexpr, AS_V: tl.constexpr):
    """Draws (``_sr_draw``) of the elements at flat offsets ``addr`` (one Philox call per element)."""
    if SRW == 24:
        a0, a1, a2, a3 = tl.randint4x(seed, addr // 4)
        j = addr % 4
        return _sr_draw((tl.where(j == 0, a0, tl.where(j == 1, a1, tl.where(j == 2, a2, a3))) >> 8).to(tl.int32), 24,
                        AS_V)
    else:
        PER: tl.constexpr = 32 // SRW
        a0, a1, a2, a3 = tl.randint4x(seed, addr // (4 * PER))
        j = (addr // PER) % 4
        w = tl.where(j == 0, a0, tl.where(j == 1, a1, tl.where(j == 2, a2, a3)))
        r = (w >> ((addr % PER) * SRW).to(tl.uint32)) & ((1 << SRW) - 1)
        return _sr_draw(r.to(tl.int32), SRW, AS_V)


@triton.jit
def philox_pairs(seed, addr_e, addr_o, rows, k0, K, R: tl.constexpr, C2: tl.constexpr, FAST: tl.constexpr,
                 SRW: tl.constexpr = 24, FBITS: tl.constexpr = False):
    """SR draws for the even and odd halves at random-bit width SRW (the contract of
    ``fp4lab.numerics.philox.sr_random_bits_reference``; SRW = 24: word (i % 4) of randint4x(seed, i // 4) >> 8,
    i = address): 24-bit comparands (int32), or with FBITS (the element encoder is the bit-arithmetic one) the
    fp32 v that ``encode_fbits_sr`` takes (``_sr_draw``). FAST (rows contiguous, K and k0 multiples of the
    elements per call): one Philox call per 4 (SRW = 24) or 4 * 32 / SRW consecutive elements."""
    if FAST:
        if SRW == 24:
            g = rows[:, None] * (K // 4) + (k0 // 4 + tl.arange(0, C2 // 2))[None, :]
            w0, w1, w2, w3 = tl.randint4x(seed, g)
            re = tl.reshape(tl.join(w0, w2), [R, C2])
            ro = tl.reshape(tl.join(w1, w3), [R, C2])
            return _sr_draw((re >> 8).to(tl.int32), 24, FBITS), _sr_draw((ro >> 8).to(tl.int32), 24, FBITS)
        else:
            E: tl.constexpr = 4 * (32 // SRW)
            g = rows[:, None] * (K // E) + (k0 // E + tl.arange(0, (2 * C2) // E))[None, :]
            w0, w1, w2, w3 = tl.randint4x(seed, g)
            return _narrow_fields(w0, w1, w2, w3, R, C2, SRW, FBITS)
    else:
        return _draw_at(seed, addr_e, SRW, FBITS), _draw_at(seed, addr_o, SRW, FBITS)


@triton.jit
def butterfly_rows(v, R: tl.constexpr, C: tl.constexpr, H: tl.constexpr):
    """One FWHT stage on v [R, C] along rows: in each group of 2H consecutive rows, (a_j, a_{j+H}) -> (a + b, a - b)."""
    w = tl.permute(tl.reshape(v, [R // (2 * H), 2, H, C]), [0, 2, 3, 1])
    a, b = tl.split(w)
    w = tl.permute(tl.join(a + b, a - b), [0, 3, 1, 2])
    return tl.reshape(w, [R, C])


@triton.jit
def rht_row_pairs(e, o, signs_ptr, rows_e, rscale, R: tl.constexpr, C: tl.constexpr, N: tl.constexpr):
    """Forward RHT along rows of a tile held as even/odd row halves e, o [R, C] (rows_e: global even row indices):
    ``c * FWHT(s * v)`` over each N-row chunk. Stage h = 1 pairs (even, odd) elementwise; stages h >= 2 act within
    each half with h/2 (the same butterflies, in the same order, as ``rht_pairs`` along columns)."""
    e = e * tl.load(signs_ptr + (rows_e % N))[:, None]
    o = o * tl.load(signs_ptr + ((rows_e + 1) % N))[:, None]
    e, o = e + o, e - o
    for s in tl.static_range((N // 2).bit_length() - 1):
        e = butterfly_rows(e, R, C, 1 << s)
        o = butterfly_rows(o, R, C, 1 << s)
    return e * rscale, o * rscale
