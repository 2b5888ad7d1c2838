"""Bit-arithmetic encoders of ExMy float grids: the numpy twins of the Triton kernels' ``tile.encode_fbits_det``
and ``tile.encode_fbits_sr``, and the check that qualifies a grid for them.

The kernels round onto a float grid (signed, subnormals, no specials, sign-magnitude codes) with a few integer
and float operations instead of threshold tables. These functions compute the same codes the same way in numpy,
so the formulas can be checked against the reference encoder (``ref_encode.encode_elements``) on the host:
``fbits_ok`` does that for one format before a kernel may take the fast path, and tests/test_kernel_params.py
does it exhaustively for the built-in grids. Element codes only: NaN and overflow policies apply afterwards.
"""

from __future__ import annotations

import numpy as np

from fp4lab.emulator.ref_encode import encode_elements
from fp4lab.formats.quant_format import QuantFormat

F32 = np.float32


def _u32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, F32).view(np.uint32).astype(np.int64)


def fbits_det(t: np.ndarray, m: int, emin: int, cmax: int) -> np.ndarray:
    """Magnitude code of RTNE(|t|) on an ExMy grid (m mantissa bits, smallest normal 2^emin), saturated at cmax,
    as the kernel computes it. With u = 2^(emin - m) (the finest spacing) and B = 2^(emin - m + 23) (an fp32
    whose ulp is u), each binade j = 0 .. nb - 2 of spacing u * 2^j (j = 0 also covers the subnormals) gives a
    candidate: the fp32 sum |t| * 2^-j + (B + j * 2^m * u) rounds (RTNE, once: the product is exact) to a whole
    number of u, and its bits minus B's are the code that rounding |t| at that binade's spacing gives. Every
    candidate is >= the true (unsaturated) code and the one of |t|'s own binade equals it; above the largest
    level every candidate is >= cmax. So the code is min(candidates, cmax)."""
    a = np.abs(np.asarray(t, F32))
    u = 2.0 ** (emin - m)
    big = F32(2.0 ** (emin - m + 23))
    nb = (cmax + 1) >> m
    code = _u32(big) + cmax
    with np.errstate(invalid="ignore", over="ignore"):
        for j in range(nb - 1):
            c = _u32((a * F32(2.0 ** -j)).astype(F32) + F32(big + j * (1 << m) * u))
            code = np.minimum(code, c)
    return code - _u32(big)


def fbits_sr(t: np.ndarray, rand24: np.ndarray, m: int, emin: int, cmax: int) -> np.ndarray:
    """Magnitude code of SR(t) on an ExMy grid, as the kernel computes it from |t|'s bits: lo_m = |t| truncated
    to the grid (0 below the smallest step), gap = 2^(E - m) with E = max(exponent(|t|), emin), the signed
    neighbours (lo_m, lo_m + gap) or (-(lo_m + gap), -lo_m), p = (t - lo) * (1 / gap) (exact: gap is a power of
    two), up iff floor(p * 2^24) > rand24; |t| >= the largest level (lo_m's code >= cmax) gives cmax."""
    t = np.asarray(t, F32)
    a = np.abs(t)
    b = _u32(a)
    eb = b >> 23
    E = np.maximum(eb, 127 + emin)
    sh = np.minimum(23 - m + (E - eb), 31)
    sp = F32(2.0 ** (emin - m))
    lo_bits = np.where(a < sp, 0, (b >> sh) << sh)
    lo_m = lo_bits.astype(np.uint32).view(F32)
    gap = ((E - m) << 23).astype(np.uint32).view(F32)
    ig = ((254 - E + m) << 23).astype(np.uint32).view(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        hi_m = (lo_m + gap).astype(F32)
        neg = t < 0
        lo = np.where(neg, -hi_m, lo_m).astype(F32)
        p = ((t - lo).astype(F32) * ig).astype(F32)
        f24 = np.where(np.isfinite(p), p * F32(16777216.0), 0).astype(np.int64)
    up = f24 > np.asarray(rand24, np.int64)
    sub = a < F32(2.0 ** emin)
    w = np.where(sub, (lo_m + F32(2.0 ** emin)).astype(F32), lo_m)
    c_lo = (_u32(w) >> (23 - m)) - ((127 + emin - 1) << m) - np.where(sub, 1 << m, 0)
    return np.where(c_lo >= cmax, cmax, c_lo + (up != neg))


MAGIC = F32(1.5 * 2.0 ** 23)  # fp32 with ulp 1 over [2^23, 2^24): M + k for |k| < 2^22 keeps k in its low bits


def sr_unit(r: np.ndarray, bits: int) -> np.ndarray:
    """fp32 ``1 + v`` of w-bit draws r (w = ``bits`` < 24), v = (2^w - 1 - r) / 2^w: the kernels' form of a
    narrow draw, built from bits as ``(r << (23 - w)) ^ (mask << (23 - w) | 0x3F800000)``."""
    m = (1 << bits) - 1
    b = (np.asarray(r, np.int64) << (23 - bits)) ^ ((m << (23 - bits)) | 0x3F800000)
    return b.astype(np.uint32).view(F32)


def _floor_sum(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """floor(a * b + c) of fp32 operands, exact for the encoder's operands (b a power of two, c a multiple of
    2^-24 in [-1, 1) or an integer): the value the GPU's ``fma.rm`` rounds down to keeps this floor."""
    return np.floor(a.astype(np.float64) * np.float64(b) + c.astype(np.float64))


def fbits_sr_unit(t: np.ndarray, unit: np.ndarray, m: int, emin: int, cmax: int) -> np.ndarray:
    """Magnitude code of SR(t) on an ExMy grid for narrow draws (``unit`` = ``sr_unit(r, w)``, w < 24), as the
    kernels' ``tile.encode_fbits_sr_unit`` computes it with directed-rounding FMAs instead of truncating |t|.

    In code space the grid is the concave function C(a) = min_j (a * s_j + o_j) over the binades j (s_j =
    2^(m - emin - j), o_j = j * 2^m), and the reference's rule ``up iff floor(p * 2^w) > r`` is, with v = (2^w -
    1 - r) / 2^w, the code floor(C(a) + v) for t >= 0 and ceil(C(a) - v) for t < 0; floor and ceil commute with
    the minimum, and for signed t both are |floor(t * s_j + v)| + o_j. One exception follows the reference's
    rounding: for t < 0 in binade 0 it computes p = fl(1 - a * s_0), which rounds when a < u / 2, so that binade
    takes floor(fl(1 + t * s_0) + v - 1). Each floor is an FMA rounded down (its floor is the exact one), then an
    FMA rounded down onto sign * (MAGIC + o_j), whose bits then hold the candidate; the code is the smallest
    candidate and cmax."""
    t = np.asarray(t, F32)
    v = (np.asarray(unit, F32) - F32(1.0)).astype(F32)
    neg = np.signbit(t)
    s1 = np.where(neg, F32(1.0), F32(0.0)).astype(F32)
    nb = (cmax + 1) >> m
    with np.errstate(invalid="ignore", over="ignore"):
        y0 = (t * F32(2.0 ** (m - emin)) + s1).astype(F32)  # exact product, one rounding: fma.rn
        best = np.abs(_floor_sum(y0, 1.0, (v - s1).astype(F32)))
        for j in range(1, nb - 1):
            best = np.minimum(best, np.abs(_floor_sum(t, 2.0 ** (m - emin - j), v)) + (j << m))
    best = np.where(np.isnan(best), cmax, best)  # NaN t: any code (the NaN policy replaces it)
    return np.minimum(best, cmax).astype(np.int64)


def fbits_ok(fmt: QuantFormat, m: int, emin: int, cmax: int, vmax: float, thr: np.ndarray) -> bool:
    """True when fbits_det (rtne), fbits_sr and fbits_sr_unit (at 4, 8 and 16 random bits) give encode_elements'
    codes on levels, thresholds, their fp32 neighbours and random data, both signs (NaN/overflow policies apply
    afterwards in both)."""
    g = fmt.element
    rng = np.random.default_rng(0)
    pts = np.concatenate([g.levels.astype(F32), thr.astype(F32), [F32(2.0 ** (emin - m - 1)), F32(1e-30), 0.0]])
    pts = np.abs(pts).astype(F32)
    near = [pts]
    for _ in range(3):
        near.append(np.nextafter(near[-1], F32(np.inf)).astype(F32))
    down = [pts]
    for _ in range(3):
        down.append(np.nextafter(down[-1], F32(0)).astype(F32))
    rnd = (rng.standard_normal(4000) * np.exp2(rng.integers(-12, 6, 4000))).astype(F32)
    mags = np.concatenate(near + down + [np.abs(rnd), np.abs(rng.uniform(0, 2 * vmax, 4000)).astype(F32)]).astype(F32)
    t = np.concatenate([mags, -mags]).astype(F32)
    sign = np.where(np.signbit(t), 1 << (g.bits - 1), 0)
    kw = dict(nan_policy="zero", overflow="saturate", signed_zero="keep")
    if not np.array_equal(fbits_det(t, m, emin, cmax) | sign, encode_elements(t, g, "rtne", **kw).astype(np.int64)):
        return False
    for r in (np.zeros(t.size), np.full(t.size, (1 << 24) - 1), rng.integers(0, 1 << 24, t.size)):
        r = r.astype(np.int64)
        got = fbits_sr(t, r, m, emin, cmax) | sign
        if not np.array_equal(got, encode_elements(t, g, "sr", r.astype(np.uint32), **kw).astype(np.int64)):
            return False
    for w in (4, 8, 16):  # the narrow-draw encoder, its draws as the kernels build them
        for r in (np.zeros(t.size, np.int64), np.full(t.size, (1 << w) - 1), rng.integers(0, 1 << w, t.size)):
            comparand = ((r << (24 - w)) | ((1 << (24 - w)) - 1)).astype(np.uint32)
            got = fbits_sr_unit(t, sr_unit(r, w), m, emin, cmax) | sign
            if not np.array_equal(got, encode_elements(t, g, "sr", comparand, **kw).astype(np.int64)):
                return False
    return True
