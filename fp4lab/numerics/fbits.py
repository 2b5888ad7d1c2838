"""Bit-arithmetic encoders of ExMy float grids: the numpy twins of the Triton kernels' ``encoding.encode_fbits_det``
and ``encoding.encode_fbits_sr``, and the check that qualifies a grid for them.

The kernels round onto a float grid (signed, subnormals, no specials, sign-magnitude codes) with a few integer
and float operations instead of threshold tables. These functions compute the same codes the same way in numpy,
so the formulas can be checked against the reference encoder (``ref_encode.encode_elements``) on the host:
``fbits_ok`` does that for one format before a kernel may take the fast path, and tests/test_kernel_params.py
does it exhaustively for the built-in grids. Element codes only: NaN and overflow policies apply afterwards.
"""

from __future__ import annotations

import numpy as np

from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.ref_encode import encode_elements

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


def sr_v(rand24: np.ndarray) -> np.ndarray:
    """fp32 v = (2^24 - 1 - c) / 2^24 of 24-bit SR comparands c (exact): the kernels' form of a draw. For a w-bit
    draw r (comparand ``r << (24 - w) | (2^(24 - w) - 1)``) it is (2^w - 1 - r) / 2^w."""
    return ((np.int64(0xFFFFFF) - np.asarray(rand24, np.int64)).astype(F32) * F32(2.0 ** -24)).astype(F32)


def _floor_sum(a: np.ndarray, b: float, c: np.ndarray) -> np.ndarray:
    """floor(a * b + c) in float64 for fp32 a, a power of two b and c a multiple of 2^-24 in (-1, 1): the floor
    that the GPU's ``fma.rm`` keeps. The product is exact; the sum is exact for 2^-29 <= |a * b| < 2^28 (at most
    53 bits); below, it lies within 2^-29 of c, which is 0 or at least 2^-24 from an integer, so its rounding
    crosses none; above, it may be one off, but such a candidate exceeds every code."""
    return np.floor(a.astype(np.float64) * np.float64(b) + c.astype(np.float64))


def fbits_sr(t: np.ndarray, rand24: np.ndarray, m: int, emin: int, cmax: int) -> np.ndarray:
    """Magnitude code of SR(t) on an ExMy grid for 24-bit comparands ``rand24`` (any width's: see ``sr_v``), as
    the kernels' ``encoding.encode_fbits_sr`` computes it with FMAs rounded toward -inf.

    In code space the grid is the concave function C(a) = min_j (a * s_j + o_j) over the binades j (s_j =
    2^(m - emin - j), o_j = j * 2^m). With v = ``sr_v(rand24)``, the reference's rule ``up iff floor(p * 2^24) >
    rand24`` gives the code floor(C(a) + v) for t >= 0 and ceil(C(a) - v) for t < 0, as long as its p is exact;
    floor and ceil commute with the minimum, and for signed t both are |floor(t * s_j + v)| + o_j. Its p is
    inexact in one place: for t < 0 in binade 0 it is fl(1 - a * s_0), which rounds when a < u / 2, so that
    binade takes floor(fl(1 + t * s_0) + v - 1) (then exactly the reference's p compared with 1 - v). Each floor
    is an FMA rounded down (which keeps the floor), then an FMA rounded down onto sign * (1.5 * 2^23 + o_j), whose
    bits hold the candidate; the code is the smallest candidate and cmax."""
    t = np.asarray(t, F32)
    v = sr_v(rand24)
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
    """True when fbits_det (rtne) and fbits_sr (comparands of 24, 16, 8 and 4 random bits) give encode_elements'
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
    for w in (4, 8, 16):  # the comparands of narrow draws
        for r in (np.zeros(t.size, np.int64), np.full(t.size, (1 << w) - 1), rng.integers(0, 1 << w, t.size)):
            comparand = ((r << (24 - w)) | ((1 << (24 - w)) - 1)).astype(np.uint32)
            got = fbits_sr(t, comparand, m, emin, cmax) | sign
            if not np.array_equal(got, encode_elements(t, g, "sr", comparand, **kw).astype(np.int64)):
                return False
    return True
