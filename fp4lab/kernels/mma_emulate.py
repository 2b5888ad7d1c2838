"""Triton kernels that compute a block-scaled tensor-core GEMM ``D = A @ B.T (+ C)`` exactly as fp4lab's CPU
models (fp4lab/hwspec/mma_reference.py, mma_kernels.py) do: A [M, K] and B [N, K] element codes, block scales
along K, a chain of fused steps of L = min(K, fused_len) products in ascending K, each step's rounded output the
next step's C. Host side: mma_emulate_launch.py; the plan (every code's exact decomposition, the model's
parameters) comes from fp4lab/hwspec/mma_plan.py.

Exact arithmetic of one fused step, per output element (the CPU reference's, written in integers):

* C (the running accumulator, a float32 holding a value of the accumulator format) is split from its bits into
  an integer significand ``mc`` (24 bits, signed) and quantum ``qc``; its alignment exponent is
  e_c = max(floor(log2|C|), emin of the accumulator format), or ``e_zero`` (T/ST/GST) when C = 0.
* **GST-FDPA** (``_gst_kernel``): element values are ``grid * 2**grid_exp`` (int8 grid), scales
  ``sig * 2**(es - bits)``. Group g of G products: ``gsum`` = the int8 dot product of the group (``tl.dot``, int32
  accumulation: exact in any order), ``P_g = gsum * sig_a * sig_b``, value ``P_g * 2**(es_a + es_b + QOFF)`` with
  QOFF = grid_exp_a + grid_exp_b - 2 bits. The group's exponent is es_a + es_b if some product of the group is
  nonzero (the AND of the two operands' per-group nonzero bitmasks, zeroed on the host where the scale is 0),
  else ``e_zero``. e_max = max(e_c, group exponents). Each term, C's included, is cut toward zero to a multiple of
  2**(e_max - F) (``_align_trunc``: integer shifts of the magnitude) and the terms are summed in int64.
* **T/ST-FDPA** (``_fdpa_kernel``, TR = False): each element times its block scale is ``mant * sig * 2**(qexp + es
  - bits)`` with alignment exponent aexp + es; a product's exponent is the sum of its two (zero products: e_zero,
  raising e_max to at least e_zero); every product (and C, unless ``separate_c``) is cut to 2**(e_max - F).
* **TR-FDPA** (CDNA3 model, TR = True): products as above but Inf once |product| >= 2**128; the product sum is cut
  to F bits below its own largest exponent e_dot (zero products left out), then joined with C by floors
  (``_align_floor``: arithmetic shifts): the sum to F2 + 1 bits and C to F bits below max(e_dot, e_c), added,
  floored to F2 bits below the sum's own exponent (not below -126).
* The exact result S * 2**u (int64 S, |S| < 2**53) is rounded once to the output format (``_round_out``): RZ or
  RNE to ``MB`` fraction bits with gradual underflow below ``O_EMIN``, Inf once the magnitude reaches
  2**(O_EMAX + 1); a zero result is +0, or (``KEEP_SIGN``) a nonzero S that rounds to zero keeps its sign. The bits
  are assembled with integer operations (floor(log2|S|) is read from the exponent of S's exact float64 value).
* Specials: a NaN scale or element, 0 * Inf or Inf - Inf (among products and C) gives NaN; otherwise an Inf
  keeps its sign; every NaN is stored as the kind's canonical bits ``NAN_BITS``.

Only integer operations, exact int64 -> float64 conversions of |x| < 2**53 and bit casts touch the result, so the
GPU and the interpreter compute the same bits; every shift amount is clamped to the type's width.
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.tile import grouped_tile


@triton.jit
def _floor_log2(x):
    """floor(log2 x) of int64 1 <= x < 2**53, from the exponent of its exact float64 value."""
    return (((x.to(tl.float64).to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1023).to(tl.int32)


@triton.jit
def _align_trunc(p, d):
    """trunc(p * 2**d) as int64 for an int32 p: the magnitude shifted right in 32 bits (toward zero), the sign
    restored, then widened and shifted left (the launcher bounds |p| * 2**d below 2**62)."""
    t = tl.abs(p) >> tl.minimum(tl.maximum(-d, 0), 31)
    return tl.where(p < 0, -t, t).to(tl.int64) << tl.minimum(tl.maximum(d, 0), 62)


@triton.jit
def _align_floor(p, d):
    """floor(p * 2**d) for an int64 p (arithmetic right shift rounds toward -inf)."""
    return (p >> tl.minimum(tl.maximum(-d, 0), 63)) << tl.minimum(tl.maximum(d, 0), 62)


@triton.jit
def _split_acc(acc, C_EMIN: tl.constexpr):
    """(signed integer significand, quantum exponent, alignment exponent max(floor(log2|c|), C_EMIN), is zero,
    is Inf, is NaN) of a float32 accumulator value."""
    bits = acc.to(tl.int32, bitcast=True)
    e = (bits >> 23) & 0xFF
    man = bits & 0x7FFFFF
    mag = tl.where(e > 0, man | 0x800000, man)
    low = bits & 0x7FFFFFFF
    return (tl.where(bits < 0, -mag, mag), tl.maximum(e, 1) - 150, tl.maximum(e - 127, C_EMIN), low == 0,
            low == 0x7F800000, low > 0x7F800000)


@triton.jit
def _round_out(s, u, RNE: tl.constexpr, MB: tl.constexpr, O_EMIN: tl.constexpr, O_EMAX: tl.constexpr,
               FMB: tl.constexpr, KEEP_SIGN: tl.constexpr):
    """float32 value of the output-format rounding of s * 2**u (s int64, |s| < 2**53; module docstring); FMB is
    the output format's fraction width (23: f32, 10: f16)."""
    neg = s < 0
    x = tl.abs(s)
    q = tl.maximum(_floor_log2(tl.maximum(x, 1)) + u, O_EMIN) - MB  # quantum exponent of the result
    r = q - u
    rr = tl.minimum(tl.maximum(r, 0), 62)
    mant = (x >> rr) << tl.minimum(tl.maximum(-r, 0), 62)
    if RNE:
        one = tl.full(x.shape, 1, tl.int64)
        rem = x - ((x >> rr) << rr)
        half = one << tl.maximum(rr - 1, 0)
        up = (rr > 0) & ((rem > half) | ((rem == half) & ((mant & 1) == 1)))
        mant = mant + up.to(tl.int64)
    ob = ((q - (FMB - MB) - (O_EMIN - FMB)).to(tl.int64) << FMB) + (mant << (FMB - MB))
    ob = tl.where(ob >= ((O_EMAX - O_EMIN + 2) << FMB), (O_EMAX - O_EMIN + 2) << FMB, ob)  # overflow: Inf
    ob = tl.where(x == 0, 0, ob)
    if KEEP_SIGN:
        sign = neg
    else:
        sign = neg & (ob != 0)
    if FMB == 10:
        h = (ob | (sign.to(tl.int64) << 15)).to(tl.int16)
        return h.to(tl.float16, bitcast=True).to(tl.float32)
    return (ob | (sign.to(tl.int64) << 31)).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _store(out_ptr, acc, rm, rn, N, mask, NAN_BITS: tl.constexpr):
    bits = acc.to(tl.int32, bitcast=True)
    bits = tl.where((bits & 0x7FFFFFFF) > 0x7F800000, NAN_BITS, bits)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], bits, mask=mask)


@triton.jit
def _load_acc(c_ptr, rm, rn, N, mask, BM: tl.constexpr, BN: tl.constexpr, HAS_C: tl.constexpr):
    if HAS_C:
        return tl.load(c_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    return tl.zeros((BM, BN), tl.float32)


@triton.jit
def _gst_kernel(va_ptr, vb_ptr, ma_ptr, mb_ptr, sga_ptr, sea_ptr, sgb_ptr, seb_ptr, c_ptr, out_ptr, M, N, K,
                L: tl.constexpr, G: tl.constexpr, DK: tl.constexpr, F: tl.constexpr, E_ZERO: tl.constexpr,
                QOFF: tl.constexpr, C_EMIN: tl.constexpr, HAS_C: tl.constexpr, RNE: tl.constexpr, MB: tl.constexpr,
                O_EMIN: tl.constexpr, O_EMAX: tl.constexpr, FMB: tl.constexpr, KEEP_SIGN: tl.constexpr,
                NAN_BITS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """GST-FDPA GEMM. va/vb: int8 grid values [M, K] / [N, K]; ma/mb: per-group nonzero bitmasks [., K/G] (0 where
    the scale is 0); sga/sgb: scale significands [., K/G] (-1: NaN), sea/seb: scale exponents [., K/G]."""
    pid_m, pid_n = grouped_tile(M, N, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mm = rm < M
    mn = rn < N
    out_mask = mm[:, None] & mn[None, :]
    acc = _load_acc(c_ptr, rm, rn, N, out_mask, BM, BN, HAS_C)
    NGK = K // G
    kk = tl.arange(0, DK)
    a_rows = va_ptr + rm[:, None] * K
    b_rows = vb_ptr + rn[:, None] * K
    a_mask = mm[:, None] & (kk < G)[None, :]
    b_mask = mn[:, None] & (kk < G)[None, :]
    for k0 in range(0, K, L):
        g0 = k0 // G
        mc, qc, ec, c_zero, c_inf, c_nan = _split_acc(acc, C_EMIN)
        e_max = tl.where(c_zero, E_ZERO, ec)
        nan_a = tl.zeros((BM,), tl.int32)
        nan_b = tl.zeros((BN,), tl.int32)
        for g in range(L // G):  # pass 1: the largest exponent (runtime loops: no hoisted per-group pointers)
            ma = tl.load(ma_ptr + rm * NGK + g0 + g, mask=mm, other=0)
            mb = tl.load(mb_ptr + rn * NGK + g0 + g, mask=mn, other=0)
            ea = tl.load(sea_ptr + rm * NGK + g0 + g, mask=mm, other=0)
            eb = tl.load(seb_ptr + rn * NGK + g0 + g, mask=mn, other=0)
            some = (ma[:, None] & mb[None, :]) != 0
            e_max = tl.maximum(e_max, tl.where(some, ea[:, None] + eb[None, :], E_ZERO))
            nan_a = nan_a | (tl.load(sga_ptr + rm * NGK + g0 + g, mask=mm, other=0) < 0).to(tl.int32)
            nan_b = nan_b | (tl.load(sgb_ptr + rn * NGK + g0 + g, mask=mn, other=0) < 0).to(tl.int32)
        s = _align_trunc(mc, qc + F - e_max)
        for g in range(L // G):  # pass 2: exact group sums, cut to 2**(e_max - F)
            kg = k0 + g * G + kk
            a = tl.load(a_rows + kg[None, :], mask=a_mask, other=0)
            b = tl.load(b_rows + kg[None, :], mask=b_mask, other=0)
            gsum = tl.dot(a, tl.trans(b))
            sa = tl.load(sga_ptr + rm * NGK + g0 + g, mask=mm, other=0)
            sb = tl.load(sgb_ptr + rn * NGK + g0 + g, mask=mn, other=0)
            ea = tl.load(sea_ptr + rm * NGK + g0 + g, mask=mm, other=0)
            eb = tl.load(seb_ptr + rn * NGK + g0 + g, mask=mn, other=0)
            s += _align_trunc(gsum * (sa[:, None] * sb[None, :]), ea[:, None] + eb[None, :] + (QOFF + F) - e_max)
        y = _round_out(s, e_max - F, RNE, MB, O_EMIN, O_EMAX, FMB, KEEP_SIGN)
        y = tl.where(c_inf, acc, y)
        nan = ((nan_a[:, None] | nan_b[None, :]) != 0) | c_nan
        acc = tl.where(nan, tl.full((BM, BN), 0x7FC00000, tl.int32).to(tl.float32, bitcast=True), y)
    _store(out_ptr, acc, rm, rn, N, out_mask, NAN_BITS)


@triton.jit
def _scaled_elements(code_ptr, rows, rmask, kc, tm_ptr, tq_ptr, ta_ptr, tc_ptr, sg_ptr, se_ptr, K, NB,
                     BS: tl.constexpr, SBITS: tl.constexpr):
    """Element times block scale for codes at rows x kc: (mant, qexp, aexp, zero, nan, inf) (module docstring)."""
    msk = rmask[:, None] & (kc < K)[None, :]
    code = tl.load(code_ptr + rows[:, None] * K + kc[None, :], mask=msk, other=0).to(tl.int32)
    mant = tl.load(tm_ptr + code)
    qexp = tl.load(tq_ptr + code)
    aexp = tl.load(ta_ptr + code)
    cls = tl.load(tc_ptr + code)
    soff = rows[:, None] * NB + (kc // BS)[None, :]
    sig = tl.load(sg_ptr + soff, mask=msk, other=1)
    es = tl.load(se_ptr + soff, mask=msk, other=0)
    nan = (cls == 1) | (sig < 0) | ((cls == 2) & (sig == 0))
    inf = (cls == 2) & (sig > 0)
    m = mant * sig
    zero = (m == 0) & (cls == 0)
    return m, qexp + es - SBITS, aexp + es, zero, nan, inf


@triton.jit
def _fdpa_kernel(ca_ptr, cb_ptr, tma_ptr, tqa_ptr, taa_ptr, tca_ptr, tmb_ptr, tqb_ptr, tab_ptr, tcb_ptr,
                 sga_ptr, sea_ptr, sgb_ptr, seb_ptr, c_ptr, out_ptr, M, N, K,
                 L: tl.constexpr, KC: tl.constexpr, BS: tl.constexpr, SBITS: tl.constexpr, F: tl.constexpr,
                 F2: tl.constexpr, U: tl.constexpr, E_ZERO: tl.constexpr, C_EMIN: tl.constexpr, TR: tl.constexpr,
                 SEPARATE_C: tl.constexpr, HAS_C: tl.constexpr, RNE: tl.constexpr, MB: tl.constexpr,
                 O_EMIN: tl.constexpr, O_EMAX: tl.constexpr, FMB: tl.constexpr, KEEP_SIGN: tl.constexpr,
                 NAN_BITS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """T/ST-FDPA (TR = False) or TR-FDPA (TR = True) GEMM on element codes ca [M, K] / cb [N, K] with per-code
    tables (mant, qexp, aexp, cls) and block scales sg/se [., K/BS]; products formed per element in [BM, BN, KC]
    chunks (module docstring)."""
    pid_m, pid_n = grouped_tile(M, N, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mm = rm < M
    mn = rn < N
    out_mask = mm[:, None] & mn[None, :]
    acc = _load_acc(c_ptr, rm, rn, N, out_mask, BM, BN, HAS_C)
    NB = K // BS
    kr = tl.arange(0, KC)
    LOW: tl.constexpr = -(1 << 20)  # below every exponent: the max over no term
    for k0 in range(0, K, L):
        if SEPARATE_C:
            cin = tl.zeros((BM, BN), tl.float32)
        else:
            cin = acc
        mc, qc, ec, c_zero, c_inf, c_nan = _split_acc(cin, C_EMIN)
        e_max = tl.full((BM, BN), LOW, tl.int32)
        any_zero = tl.zeros((BM, BN), tl.int32)
        any_nan = c_nan.to(tl.int32)
        pos_inf = (c_inf & (cin > 0)).to(tl.int32)
        neg_inf = (c_inf & (cin < 0)).to(tl.int32)
        for c0 in range(0, L, KC):  # pass 1: exponents and specials
            kc = k0 + c0 + kr
            ma, qa, ea, za, na, ia = _scaled_elements(ca_ptr, rm, mm, kc, tma_ptr, tqa_ptr, taa_ptr, tca_ptr,
                                                      sga_ptr, sea_ptr, K, NB, BS, SBITS)
            mb, qb, eb, zb, nb, ib = _scaled_elements(cb_ptr, rn, mn, kc, tmb_ptr, tqb_ptr, tab_ptr, tcb_ptr,
                                                      sgb_ptr, seb_ptr, K, NB, BS, SBITS)
            zero = za[:, None, :] | zb[None, :, :]
            pnan = (na[:, None, :] | nb[None, :, :] | (ia[:, None, :] & zb[None, :, :])
                    | (za[:, None, :] & ib[None, :, :]))
            pinf = (ia[:, None, :] | ib[None, :, :]) & ~pnan
            p = ma[:, None, :] * mb[None, :, :]
            qp = qa[:, None, :] + qb[None, :, :]
            if TR:  # CDNA3: products of magnitude >= 2**128 are Inf
                t = 128 - qp
                big = (t <= 0) | ((t < 31) & (tl.abs(p).to(tl.int64) >= (tl.full(p.shape, 1, tl.int64)
                                                                           << tl.minimum(tl.maximum(t, 0), 30))))
                pinf = pinf | (big & ~zero & ~pnan)
            fin = ~zero & ~pnan & ~pinf
            e_max = tl.maximum(e_max, tl.max(tl.where(fin | pinf, ea[:, None, :] + eb[None, :, :], LOW), axis=2))
            any_zero = any_zero | tl.max(zero.to(tl.int32), axis=2)
            any_nan = any_nan | tl.max(pnan.to(tl.int32), axis=2)
            pos_inf = pos_inf | tl.max((pinf & (p > 0)).to(tl.int32), axis=2)
            neg_inf = neg_inf | tl.max((pinf & (p < 0)).to(tl.int32), axis=2)
        if TR:
            e_ref = tl.where(e_max == LOW, -999, e_max)
        else:
            e_max = tl.maximum(e_max, tl.where(any_zero != 0, E_ZERO, LOW))
            e_max = tl.maximum(e_max, tl.where(c_zero, E_ZERO, ec))
            e_ref = e_max
        s = tl.zeros((BM, BN), tl.int64)
        for c0 in range(0, L, KC):  # pass 2: every product cut to 2**(e_ref - F), summed exactly
            kc = k0 + c0 + kr
            ma, qa, ea, za, na, ia = _scaled_elements(ca_ptr, rm, mm, kc, tma_ptr, tqa_ptr, taa_ptr, tca_ptr,
                                                      sga_ptr, sea_ptr, K, NB, BS, SBITS)
            mb, qb, eb, zb, nb, ib = _scaled_elements(cb_ptr, rn, mn, kc, tmb_ptr, tqb_ptr, tab_ptr, tcb_ptr,
                                                      sgb_ptr, seb_ptr, K, NB, BS, SBITS)
            p = ma[:, None, :] * mb[None, :, :]
            d = qa[:, None, :] + qb[None, :, :] + F - e_ref[:, :, None]
            s += tl.sum(_align_trunc(p, d), axis=2)
        if TR:  # join with C by floors (module docstring)
            ej = tl.maximum(e_ref, ec)
            x = (_align_floor(s, e_ref - ej + F2 + 1 - F) << (U - F2 - 1)) + \
                (_align_floor(mc.to(tl.int64), qc - ej + F) << (U - F))
            e = tl.maximum(_floor_log2(tl.maximum(tl.abs(x), 1)) + ej - U, -126)
            x = _align_floor(x, ej - U + F2 - e)
            y = _round_out(x, e - F2, RNE, MB, O_EMIN, O_EMAX, FMB, KEEP_SIGN)
        else:
            s += _align_trunc(mc, qc + F - e_ref)
            y = _round_out(s, e_ref - F, RNE, MB, O_EMIN, O_EMAX, FMB, KEEP_SIGN)
        inf_bits = tl.where(pos_inf != 0, tl.full((BM, BN), 0x7F800000, tl.int32),
                            tl.full((BM, BN), -0x800000, tl.int32))  # +Inf, -Inf (0xFF800000)
        y = tl.where((pos_inf | neg_inf) != 0, inf_bits.to(tl.float32, bitcast=True), y)
        nan = (any_nan != 0) | ((pos_inf & neg_inf) != 0)
        y = tl.where(nan, tl.full((BM, BN), 0x7FC00000, tl.int32).to(tl.float32, bitcast=True), y)
        if SEPARATE_C:  # D = RN_f32(RZ(sum of products) + C): one IEEE fp32 addition, zeros +0
            y = (y + acc) + 0.0
        acc = y
    _store(out_ptr, acc, rm, rn, N, out_mask, NAN_BITS)
