"""Readable scalar reference of the tensor-core accumulation models; it defines the bits that hwspec/mma.py's
numba kernels must reproduce. Pure Python floats: every product, scaled term and partial sum used here is
exact in float64 (inputs have at most 24 significant bits, sums stay below 2**53 units of the truncation
quantum), so ``math.trunc``/``math.floor`` of a power-of-two-scaled value is an exact integer operation.

Notation for one dot product of one instruction chunk (docs/tensor_cores.md, section 1):
a value x is ``s * 2**e`` with ``1 <= |s| < 2``, or ``e = emin`` of its format and ``|s| < 1`` (subnormal);
a product keeps the exponent ``ea + eb`` (not renormalised); zero terms take ``e_zero``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ModelParams:
    """Numeric parameters of one instruction kind, flattened from the hwspec (see hwspec/schema.py)."""

    algorithm: str  # t_fdpa | st_fdpa | gst_fdpa | tr_fdpa | gtr_fdpa
    fused_len: int  # L: products per fused step
    frac_bits: int  # F
    e_zero: int  # exponent of zero terms (t/st/gst)
    group: int  # G (gst)
    join_frac_bits: int  # F2 (tr/gtr)
    separate_c: bool  # D = RN_f32(RZ_f32(T-FDPA(products, C=0)) + C)
    c_emin: int  # emin of the accumulator format (-126 f32, -14 f16)
    out_rne: bool  # final rounding: RNE (True) or toward zero
    out_mbits: int  # fraction bits kept in the output
    out_emin: int  # output emin (gradual underflow below it)
    out_emax: int  # output emax (results of magnitude >= 2**(emax+1) become Inf)
    keep_zero_sign: bool = False  # zero_sign 'keep_underflow_sign': a nonzero result rounding to 0 keeps its sign


def exponent(x: float, emin: int) -> int:
    """Alignment exponent of a finite nonzero value: floor(log2|x|), but not below ``emin``."""
    return max(math.frexp(x)[1] - 1, emin)


def round_output(x: float, p: ModelParams) -> float:
    """Round an exact value to the output format (RZ or RNE, gradual underflow, overflow to Inf). Zero results
    are +0, except under ``keep_zero_sign`` where a nonzero x that rounds to zero gives a zero of x's sign."""
    if math.isnan(x) or math.isinf(x):
        return x
    if x == 0.0:
        return 0.0
    q = exponent(x, p.out_emin) - p.out_mbits  # quantum exponent
    t = math.ldexp(x, -q)
    r = float(round(t)) if p.out_rne else float(math.trunc(t))  # Python round(): half to even
    y = math.ldexp(r, q)
    if abs(y) >= 2.0 ** (p.out_emax + 1):
        return math.copysign(math.inf, y)
    if p.keep_zero_sign:
        return math.copysign(y, x)
    return y + 0.0


def special_sum(terms: list[float]) -> float | None:
    """IEEE-style result if any term is NaN or Inf (NaN for Inf - Inf), else None."""
    if any(math.isnan(t) for t in terms):
        return math.nan
    infs = {math.copysign(1.0, t) for t in terms if math.isinf(t)}
    if len(infs) == 2:
        return math.nan
    if infs:
        return math.copysign(math.inf, infs.pop())
    return None


def truncated_fused_sum(values: list[float], exps: list[int], F: int, rounding=math.trunc) -> tuple[float, int]:
    """Align every term to the largest exponent, cut each to F fraction bits below it, sum exactly.

    Returns (sum in units of 2**(e_max - F) as an integral float, e_max)."""
    e_max = max(exps)
    return float(sum(rounding(math.ldexp(v, F - e_max)) for v in values)), e_max


def t_fdpa(a: list[float], ea: list[int], b: list[float], eb: list[int], c: float, p: ModelParams) -> float:
    """One T-FDPA step: ``sum(a*b) + c`` with (ea, eb) the operands' alignment exponents (scales included)."""
    prods = [x * y for x, y in zip(a, b)]
    c_in = 0.0 if p.separate_c else c
    sp = special_sum(prods + [c_in])
    if sp is not None:
        r = sp
    else:
        exps = [p.e_zero if v == 0.0 else x + y for v, x, y in zip(prods, ea, eb)]
        exps.append(p.e_zero if c_in == 0.0 else exponent(c_in, p.c_emin))
        s, e_max = truncated_fused_sum(prods + [c_in], exps, p.frac_bits)
        r = round_output(math.ldexp(s, e_max - p.frac_bits), p)
    if p.separate_c:  # then an ordinary fp32 round-to-nearest-even addition of C
        return float(np.float32(r) + np.float32(c)) + 0.0
    return r


def gst_fdpa(a: list[float], b: list[float], c: float, sa: list[float], sb: list[float], p: ModelParams,
             s_emin: int) -> float:
    """One GST-FDPA step over len(a) = n*G products; sa/sb: one decoded scale per group of G.

    Group g: exact sum of its G products, times the scale significands, aligned by the scale exponents only;
    it takes e_zero if all its products are zero or its scale product is zero (cancellation keeps the scale
    exponent). Then T-FDPA with C."""
    G = p.group
    vals, exps = [], []
    for g in range(len(a) // G):
        prods = [a[k] * b[k] for k in range(g * G, (g + 1) * G)]
        gsum = sum(prods)  # exact: validated grids
        ssig_a = sa[g] if math.isnan(sa[g]) or sa[g] == 0 else math.ldexp(sa[g], -exponent(sa[g], s_emin))
        ssig_b = sb[g] if math.isnan(sb[g]) or sb[g] == 0 else math.ldexp(sb[g], -exponent(sb[g], s_emin))
        ssig = ssig_a * ssig_b
        all_zero = all(v == 0.0 for v in prods) or ssig == 0.0
        vals.append(gsum * sa[g] * sb[g])  # the scaled group sum (exact: scales have few significant bits)
        exps.append(p.e_zero if all_zero else exponent(sa[g], s_emin) + exponent(sb[g], s_emin))
    sp = special_sum(vals + [c])
    if sp is not None:
        return sp
    vals.append(c)
    exps.append(p.e_zero if c == 0.0 else exponent(c, p.c_emin))
    s, e_max = truncated_fused_sum(vals, exps, p.frac_bits)
    return round_output(math.ldexp(s, e_max - p.frac_bits), p)


def _tr_products(a, ea, b, eb) -> tuple[list[float], list[int]]:
    """CDNA3 products: exact, but Inf once |product| >= 2**128; zero products get a sentinel exponent."""
    vals, exps = [], []
    for x, y, ex, ey in zip(a, b, ea, eb):
        v = x * y
        if math.isfinite(v) and abs(v) >= 2.0**128:
            v = math.copysign(math.inf, v)
        vals.append(v)
        exps.append(-999 if v == 0.0 else ex + ey)
    return vals, exps


def _tr_join(s_dot: float, e_dot: int, c: float, p: ModelParams, drop_c: bool) -> float:
    """CDNA3 C join: floor-align the product sum (F2+1 bits) and C (F bits), normalise, floor to F2, RNE."""
    F, F2 = p.frac_bits, p.join_frac_bits
    e_c = exponent(c, -126) if c != 0.0 else -126
    e_max = max(e_dot, e_c)
    dot = math.ldexp(math.floor(math.ldexp(s_dot, e_dot - e_max + F2 + 1)), -(F2 + 1))
    cc = math.ldexp(math.floor(math.ldexp(c, F - e_max)), -F)
    if drop_c and e_c < e_max - F - 1:
        cc = 0.0
    x = math.ldexp(dot + cc, e_max)
    e = exponent(x, -126)
    x = math.ldexp(math.floor(math.ldexp(x, F2 - e)), e - F2)
    return round_output(x, p)


def tr_fdpa(a, ea, b, eb, c: float, p: ModelParams) -> float:
    """CDNA3 f16/bf16/xf32 step: truncated product sum (F below its own max), then the floor join with C."""
    vals, exps = _tr_products(a, ea, b, eb)
    sp = special_sum(vals + [c])
    if sp is not None:
        return sp
    s, e_dot = truncated_fused_sum(vals, exps, p.frac_bits)
    return _tr_join(math.ldexp(s, -p.frac_bits), e_dot, c, p, drop_c=False)


def gtr_fdpa(a, ea, b, eb, c: float, p: ModelParams) -> float:
    """CDNA3 fp8 step: even- and odd-indexed products summed separately (truncated), floored together, joined."""
    vals, exps = _tr_products(a, ea, b, eb)
    sp = special_sum(vals + [c])
    if sp is not None:
        return sp
    F = p.frac_bits
    s0, e0 = truncated_fused_sum(vals[0::2], exps[0::2], F)
    s1, e1 = truncated_fused_sum(vals[1::2], exps[1::2], F)
    e_dot = max(e0, e1)
    s_dot = sum(math.ldexp(math.floor(math.ldexp(s, e - e_dot)), -F) for s, e in ((s0, e0), (s1, e1)))
    return _tr_join(s_dot, e_dot, c, p, drop_c=True)


def mma_reference(a, ea, b, eb, c, p: ModelParams, sa=None, sb=None, s_emin: int = 0) -> np.ndarray:
    """D for a [M,K] x b [K,N] + c [M,N], chaining fused steps of ``p.fused_len`` in ascending K.

    a/b: float64 element values; ea/eb: int alignment exponents (exponent-add scales already folded into a/b and
    ea/eb by the caller); for gst_fdpa, a/b are unscaled and sa [M, K/G] / sb [K/G, N] are per-group scales.
    Returns float64 values of the output format (NaN not yet canonicalised)."""
    M, K = a.shape
    N = b.shape[1]
    L = min(K, p.fused_len)
    out = np.empty((M, N))
    for i in range(M):
        for j in range(N):
            acc = float(c[i, j])
            for k0 in range(0, K, L):
                ks = range(k0, k0 + L)
                av, bv = [float(a[i, k]) for k in ks], [float(b[k, j]) for k in ks]
                if p.algorithm == "gst_fdpa":
                    gs = range(k0 // p.group, (k0 + L) // p.group)
                    acc = gst_fdpa(av, bv, acc, [float(sa[i, g]) for g in gs], [float(sb[g, j]) for g in gs],
                                   p, s_emin)
                    continue
                eav, ebv = [int(ea[i, k]) for k in ks], [int(eb[k, j]) for k in ks]
                step = {"t_fdpa": t_fdpa, "st_fdpa": t_fdpa, "tr_fdpa": tr_fdpa, "gtr_fdpa": gtr_fdpa}[p.algorithm]
                acc = step(av, eav, bv, ebv, acc, p)
            out[i, j] = acc
    return out
