"""Numba kernels of the accumulation models; bit-for-bit twins of hwspec/mma_reference.py.

All kernels take float64 operand values (exact), int64 alignment exponents and the flattened ModelParams
fields, chain fused steps of ``L`` products in ascending K, and return float64 output-format values (NaN not
canonicalised). The T-FDPA kernel is the fast one (vectorised over N, parallel over M); powers of two are built
from exponent bits, so every multiply by them is exact.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fp4lab.emulator.jit import njit

_NB = dict(cache=True, nogil=True)


@njit(**_NB)
def round_output(x, rne, mbits, emin, emax, keep_sign=False):
    """Scalar twin of mma_reference.round_output (keep_sign: zero_sign rule 'keep_underflow_sign')."""
    if x != x or x == np.inf or x == -np.inf:
        return x
    if x == 0.0:
        return 0.0
    q = max(math.frexp(x)[1] - 1, emin) - mbits
    t = math.ldexp(x, -q)
    r = np.rint(t) if rne else np.trunc(t)
    y = math.ldexp(r, q)
    if abs(y) >= math.ldexp(1.0, emax + 1):
        y = math.copysign(np.inf, y)
    if keep_sign:
        return math.copysign(y, x)
    return y + 0.0


ZERO_EXP = -(1 << 29)  # alignment exponent given to zero operands by the T-FDPA kernel's caller


@njit(parallel=True, **_NB)
def t_fdpa_gemm(a, ea, b, eb, c, L, F, e_zero, c_emin, separate_c, rne, mbits, o_emin, o_emax, keep_sign=False):
    """T-FDPA (and ST-FDPA with scales folded into a/ea, b/eb) chained over K: a [M,K], b [K,N], c [M,N].

    ea/eb: int32 alignment exponents, ZERO_EXP where the operand is zero, so that a product is zero exactly when
    ea + eb < ZERO_EXP / 2 and the step's largest exponent is raised to e_zero if any product is zero."""
    M, K = a.shape
    N = b.shape[1]
    out = np.empty((M, N))
    lim = math.ldexp(1.0, o_emax + 1)
    for i in numba.prange(M):
        acc = c[i, :].copy()
        cin = np.empty(N)
        cin_b = cin.view(np.int64)
        emx = np.empty(N, np.int32)
        emn = np.empty(N, np.int32)
        s = np.empty(N)
        pw_b = np.empty(N, np.int64)
        pw = pw_b.view(np.float64)
        x = np.empty(N)
        x_b = x.view(np.int64)
        for k0 in range(0, K, L):
            for j in range(N):
                cin[j] = 0.0 if separate_c else acc[j]
            for j in range(N):  # exponent of C (its own format's emin), e_zero if C == 0
                e = max(((cin_b[j] >> 52) & 0x7FF) - 1023, c_emin)
                emx[j] = e_zero if cin[j] == 0.0 else e
                emn[j] = 0
            for k in range(k0, k0 + L):  # pass 1: largest exponent, and whether any product is zero
                eav = ea[i, k]
                ebk = eb[k]
                for j in range(N):
                    e = eav + ebk[j]
                    emx[j] = max(emx[j], e)
                    emn[j] = min(emn[j], e)
            for j in range(N):
                m = max(emx[j], e_zero) if emn[j] < ZERO_EXP // 2 else emx[j]
                emx[j] = m
                pw_b[j] = np.int64(F - m + 1023) << 52
            for j in range(N):
                s[j] = np.trunc(cin[j] * pw[j])
            for k in range(k0, k0 + L):  # pass 2: truncated terms, exact sum (0 * Inf gives NaN here)
                av = a[i, k]
                bk = b[k]
                for j in range(N):
                    s[j] += np.trunc(av * bk[j] * pw[j])
            for j in range(N):  # exact value of the sum
                pw_b[j] = np.int64(emx[j] - F + 1023) << 52
            for j in range(N):
                x[j] = s[j] * pw[j]
            for j in range(N):  # quantum exponent of the output
                q = max(((x_b[j] >> 52) & 0x7FF) - 1023, o_emin) - mbits
                emx[j] = q
                pw_b[j] = np.int64(1023 - q) << 52
            for j in range(N):
                t = x[j] * pw[j]
                r = np.rint(t) if rne else np.trunc(t)
                if keep_sign:  # an exact zero sum is +0; a nonzero one that rounds to zero keeps its sign
                    r = math.copysign(r, t) if x[j] != 0.0 else 0.0
                x[j] = r
            for j in range(N):
                pw_b[j] = np.int64(emx[j] + 1023) << 52
            for j in range(N):
                y = x[j] * pw[j]
                if abs(y) >= lim:
                    y = math.copysign(np.inf, y)
                if not keep_sign:
                    y = y + 0.0
                if separate_c:
                    y = np.float64(np.float32(y) + np.float32(acc[j])) + 0.0
                acc[j] = y
        out[i, :] = acc
    return out


@njit(parallel=True, **_NB)
def gst_fdpa_gemm(a, b, c, ssa, esa, ssb, esb, L, G, F, e_zero, c_emin, rne, mbits, o_emin, o_emax,
                  keep_sign=False):
    """GST-FDPA chained over K. ssa/esa [M, K/G]: scale significand/exponent per group (ssb/esb [K/G, N])."""
    M, K = a.shape
    N = b.shape[1]
    ng = L // G
    out = np.empty((M, N))
    for i in numba.prange(M):
        vals = np.empty(ng + 1)
        exps = np.empty(ng + 1, np.int64)
        for j in range(N):
            acc = c[i, j]
            for k0 in range(0, K, L):
                special = False
                for g in range(ng):
                    g0 = k0 + g * G
                    gs = 0.0
                    all_zero = True
                    for k in range(g0, g0 + G):
                        pr = a[i, k] * b[k, j]
                        gs += pr
                        if pr != 0.0:
                            all_zero = False
                    gi = g0 // G
                    ss = ssa[i, gi] * ssb[gi, j]
                    es = esa[i, gi] + esb[gi, j]
                    vals[g] = math.ldexp(gs * ss, es)  # scaled group sum; aligned by the scale exponents only
                    exps[g] = e_zero if (all_zero or ss == 0.0) else es
                    if not np.isfinite(vals[g]):
                        special = True
                vals[ng] = acc
                exps[ng] = e_zero if acc == 0.0 else max(math.frexp(acc)[1] - 1, c_emin)
                if special or not np.isfinite(acc):
                    tot = 0.0
                    for g in range(ng + 1):
                        tot += vals[g]
                    acc = tot  # NaN, or Inf of one sign
                    continue
                e_max = exps[0]
                for g in range(1, ng + 1):
                    e_max = max(e_max, exps[g])
                tot = 0.0
                for g in range(ng + 1):
                    tot += np.trunc(math.ldexp(vals[g], F - e_max))
                acc = round_output(math.ldexp(tot, e_max - F), rne, mbits, o_emin, o_emax, keep_sign)
            out[i, j] = acc
    return out


@njit(**_NB)
def _trunc_sum(vals, exps, lo, hi, step, F):
    """(integral sum in units 2**(e_max-F), e_max) of vals[lo:hi:step], each truncated toward zero."""
    e_max = exps[lo]
    for k in range(lo, hi, step):
        e_max = max(e_max, exps[k])
    tot = 0.0
    for k in range(lo, hi, step):
        tot += np.trunc(math.ldexp(vals[k], F - e_max))
    return tot, e_max


@njit(parallel=True, **_NB)
def tr_fdpa_gemm(a, ea, b, eb, c, L, F, F2, parity, rne, mbits, o_emin, o_emax, keep_sign=False):
    """CDNA3 TR-FDPA (parity=False) / GTR-FDPA (parity=True) chained over K; twin of the reference."""
    M, K = a.shape
    N = b.shape[1]
    out = np.empty((M, N))
    big = math.ldexp(1.0, 128)
    for i in numba.prange(M):
        vals = np.empty(L)
        exps = np.empty(L, np.int64)
        for j in range(N):
            acc = c[i, j]
            for k0 in range(0, K, L):
                tot_special = acc
                for k in range(L):
                    v = a[i, k0 + k] * b[k0 + k, j]
                    if np.isfinite(v) and abs(v) >= big:
                        v = math.copysign(np.inf, v)
                    vals[k] = v
                    exps[k] = -999 if v == 0.0 else ea[i, k0 + k] + eb[k0 + k, j]
                    tot_special += v
                if not np.isfinite(tot_special):
                    acc = tot_special
                    continue
                if parity:
                    s0, e0 = _trunc_sum(vals, exps, 0, L, 2, F)
                    s1, e1 = _trunc_sum(vals, exps, 1, L, 2, F)
                    e_dot = max(e0, e1)
                    s_dot = math.ldexp(np.floor(math.ldexp(s0, e0 - e_dot)), -F)
                    s_dot += math.ldexp(np.floor(math.ldexp(s1, e1 - e_dot)), -F)
                else:
                    s, e_dot = _trunc_sum(vals, exps, 0, L, 1, F)
                    s_dot = math.ldexp(s, -F)
                e_c = max(math.frexp(acc)[1] - 1, -126) if acc != 0.0 else -126
                e_max = max(e_dot, e_c)
                dot = math.ldexp(np.floor(math.ldexp(s_dot, e_dot - e_max + F2 + 1)), -(F2 + 1))
                cc = math.ldexp(np.floor(math.ldexp(acc, F - e_max)), -F)
                if parity and e_c < e_max - F - 1:
                    cc = 0.0
                xv = math.ldexp(dot + cc, e_max)
                e = max(math.frexp(xv)[1] - 1, -126)
                xv = math.ldexp(np.floor(math.ldexp(xv, F2 - e)), e - F2)
                acc = round_output(xv, rne, mbits, o_emin, o_emax, keep_sign)
            out[i, j] = acc
    return out
