"""Parallel numba kernels for block-scaled quantize / dequantize over flat float32 arrays.

Block geometry (``Geometry``) covers every layout with one compiled kernel: the scale array is viewed as
``[nA, nB, nC]`` (C order, = the reference's ``scale_shape``); block ``(a, b, c)`` starts at flat element
``a*sa + b*sb + c*sc`` and its element ``j = r*cw + q`` (``r < rows``, ``q < cw``) sits ``r*s_row + q*s_col``
further on, so the block's element order is the reference's ``BlockView.to_blocks`` order:

* 1-D blocks along the last axis: ``[1, 1, n/bs]``, contiguous (no copy at all);
* 1-D blocks along axis ``k`` of ``[O, K, I]``: ``[O, K/bs, I]``, element stride ``I`` (gathered per block);
* 2-D ``r x c`` tiles of ``[L, R, C]``: ``[L, R/r, C/c]``, ``rows = r``, ``s_row = C``.

Work items are runs of up to ``CHUNK`` elements' worth of blocks along ``c``; ``prange`` spreads them over cores.
Per work item: gather (if not contiguous), block amax / NaN / Inf flags from the float32 bits, the scale per
target (``nb_encode.block_scale``), the scaled elements ``t`` exactly as ``ref_quantize.scale_elements``, the
element codes (``nb_encode.encode_run``), and for several targets the float32 squared error in element order.
SR draws: the element at flat index i uses word ``i % 4`` of ``philox4x32_10(seed, i // 4)`` shifted right by 8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from numba import prange

from fp4lab.emulator.nb_bits import f32_to_u32, u32_to_f32
from fp4lab.emulator.nb_encode import ABS_MASK, FLT_MAX, SIGN_MASK, block_scale, decode_scale, encode_run
from fp4lab.emulator.nb_tables import ENC_SR, P_BS, P_ENC, P_ENCODE_ARITH, P_ESCALE, P_NTARGETS
from fp4lab.emulator.philox import philox4x32_10

CHUNK = 4096  # elements per work item (blocks are never split)
NJP = dict(cache=True, error_model="numpy", parallel=True)
EXP_MASK = np.uint32(0x7F800000)
U_MASK32 = np.uint64(0xFFFFFFFF)
U_2 = np.uint64(2)
U_3 = np.uint64(3)
U_8 = np.uint32(8)
U_32 = np.uint64(32)


@dataclass(frozen=True)
class Geometry:
    """Block placement in the flat input (see module docstring); ``ints()`` is the kernel argument."""

    nA: int
    nB: int
    nC: int
    sa: int
    sb: int
    sc: int
    rows: int
    cw: int
    s_row: int
    s_col: int

    @property
    def contiguous(self) -> bool:
        """Each block's elements, and consecutive blocks along c, are adjacent in memory."""
        return self.s_col == 1 and (self.rows == 1 or self.s_row == self.cw) and self.sc == self.rows * self.cw

    def ints(self) -> np.ndarray:
        return np.array([self.nA, self.nB, self.nC, self.sa, self.sb, self.sc, self.rows, self.cw, self.s_row,
                         self.s_col, int(self.contiguous)], np.int64)

    @classmethod
    def blocks_1d(cls, shape: tuple[int, ...], axis: int, bs: int) -> "Geometry":
        outer = int(np.prod(shape[:axis], dtype=np.int64))
        k = shape[axis]
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
        if inner == 1:
            return cls(1, 1, outer * k // bs, 0, 0, bs, 1, bs, 0, 1)
        return cls(outer, k // bs, inner, k * inner, bs * inner, 1, 1, bs, 0, inner)

    @classmethod
    def tiles_2d(cls, shape: tuple[int, ...], r: int, c: int) -> "Geometry":
        lead = int(np.prod(shape[:-2], dtype=np.int64))
        R, C = shape[-2], shape[-1]
        return cls(lead, R // r, C // c, R * C, r * C, c, r, c, C, 1)


@numba.njit(cache=True, error_model="numpy")
def _block_base(geo, w, nch, cpb):
    """(first c index, number of blocks, flat start of block 0, scale index of block 0) of work item w."""
    per_a = geo[1] * nch
    a = w // per_a
    b = (w % per_a) // nch
    c0 = (w % nch) * cpb
    nb = min(cpb, geo[2] - c0)
    return c0, nb, a * geo[3] + b * geo[4] + c0 * geo[5], (a * geo[1] + b) * geo[2] + c0


@numba.njit(cache=True, error_model="numpy")
def _gather(x, xs, base0, nb, geo):
    sc, rows, cw, s_row, s_col = geo[5], geo[6], geo[7], geo[8], geo[9]
    k = 0
    for bi in range(nb):
        base = base0 + bi * sc
        for r in range(rows):
            p = base + r * s_row
            for q in range(cw):
                xs[k] = x[p + q * s_col]
                k += 1


@numba.njit(cache=True, error_model="numpy")
def _scatter(src, dst, base0, nb, geo):
    sc, rows, cw, s_row, s_col = geo[5], geo[6], geo[7], geo[8], geo[9]
    k = 0
    for bi in range(nb):
        base = base0 + bi * sc
        for r in range(rows):
            p = base + r * s_row
            for q in range(cw):
                dst[p + q * s_col] = src[k]
                k += 1


@numba.njit(cache=True, error_model="numpy")
def _sr_draws(rnd, base0, nb, geo, seed_lo, seed_hi):
    """24-bit SR draws of a work item's elements, in block-element order; one Philox call per 4 flat indices."""
    sc, rows, cw, s_row, s_col = geo[5], geo[6], geo[7], geo[8], geo[9]
    g_last = np.uint64(0)
    w = philox4x32_10(seed_lo, seed_hi, g_last, g_last)
    k = 0
    for bi in range(nb):
        base = base0 + bi * sc
        for r in range(rows):
            p = base + r * s_row
            for q in range(cw):
                flat = np.uint64(p + q * s_col)
                g = flat >> U_2
                if g != g_last:
                    w = philox4x32_10(seed_lo, seed_hi, g & U_MASK32, g >> U_32)
                    g_last = g
                rnd[k] = w[flat & U_3] >> U_8
                k += 1


@numba.njit(**NJP)
def quantize_blocks(x, codes, scode_out, s_out, geo, ts, inv_ts, two_level, gmul, seed_lo, seed_hi,
                    ip, fp, ethr, ecodes, evals, sthr, scodes, sdec):
    """Quantize flat float32 ``x`` block by block: element codes into ``codes`` (flat, x's layout), scale codes
    (uint32) and decoded scales into ``scode_out`` / ``s_out`` (flat scale layout). ``ts``: decode tensor
    scale (used if ``two_level``), ``inv_ts = float32(1/ts)``, ``gmul``: per-target "encode" multipliers."""
    bs = ip[P_BS]
    ntg = ip[P_NTARGETS]
    recip = ip[P_ESCALE] != 0
    encode_arith = ip[P_ENCODE_ARITH] != 0
    sr = ip[P_ENC] == ENC_SR
    contiguous = geo[10] != 0
    cpb = max(1, CHUNK // bs)
    nch = (geo[2] + cpb - 1) // cpb
    n_items = geo[0] * geo[1] * nch
    for w in prange(n_items):
        c0, nb, base0, s0 = _block_base(geo, w, nch, cpb)
        nel = nb * bs
        if contiguous:
            xv = x[base0:base0 + nel]
        else:
            xv = np.empty(nel, np.float32)
            _gather(x, xv, base0, nb, geo)
        t = np.empty(nel, np.float32)
        cnt = np.empty(nel, np.int32)
        rnd = np.empty(nel if sr else 1, np.uint32)
        if sr:
            _sr_draws(rnd, base0, nb, geo, seed_lo, seed_hi)
        if contiguous and ntg == 1:
            cand = codes[base0:base0 + nel]
        else:
            cand = np.empty(nel, np.uint8)
        best = np.empty(nel if ntg > 1 else 1, np.uint8)
        amax = np.empty(nb, np.float32)
        hnan = np.empty(nb, np.bool_)
        hinf = np.empty(nb, np.bool_)
        for bi in range(nb):
            mx = np.uint32(0)
            anynan = False
            anyinf = False
            for j in range(bi * bs, bi * bs + bs):
                u = f32_to_u32(xv[j]) & ABS_MASK
                mx = max(mx, u if u < EXP_MASK else np.uint32(0))
                anynan |= u > EXP_MASK
                anyinf |= u == EXP_MASK
            amax[bi] = u32_to_f32(mx)
            hnan[bi] = anynan
            hinf[bi] = anyinf
        best_err = np.empty(nb, np.float32)
        ccode = np.empty(nb, np.int64)
        cscale = np.empty(nb, np.float32)
        for ti in range(ntg):
            for bi in range(nb):
                code = block_scale(amax[bi], hnan[bi], hinf[bi], ti, ts, two_level, gmul, ip, fp, sthr, scodes)
                S = decode_scale(code, ip, sdec)
                ccode[bi] = code
                cscale[bi] = S
                lo = bi * bs
                if encode_arith:  # t = x * min(float32(1 / float32(S*ts)), FLT_MAX), no zero-scale case
                    R = np.float32(1.0) / ((S * ts) if two_level else S)
                    if R > FLT_MAX:
                        R = FLT_MAX
                    for j in range(lo, lo + bs):
                        t[j] = xv[j] * R
                    continue
                if recip:
                    R = (inv_ts / S) if two_level else (np.float32(1.0) / S)
                    for j in range(lo, lo + bs):
                        t[j] = xv[j] * R
                else:
                    D = (S * ts) if two_level else S
                    for j in range(lo, lo + bs):
                        t[j] = xv[j] / D
                if S == 0:  # zero scale: signed zero (NaN stays NaN)
                    for j in range(lo, lo + bs):
                        v = xv[j]
                        if v == v:
                            t[j] = u32_to_f32(f32_to_u32(v) & SIGN_MASK)
            encode_run(t, cand, rnd, nel, ip, fp, ethr, ecodes, cnt)
            if ntg == 1:
                for bi in range(nb):
                    scode_out[s0 + bi] = ccode[bi]
                    s_out[s0 + bi] = cscale[bi]
                continue
            for bi in range(nb):  # float32 squared error of the dequantized block, in element order
                lo = bi * bs
                S = cscale[bi]
                err = np.float32(0.0)
                for j in range(lo, lo + bs):
                    d = evals[cand[j]] * S
                    if two_level:
                        d = d * ts
                    d = d - xv[j]
                    err = err + d * d
                if ti == 0 or err < best_err[bi]:
                    best_err[bi] = err
                    scode_out[s0 + bi] = ccode[bi]
                    s_out[s0 + bi] = S
                    for j in range(lo, lo + bs):
                        best[j] = cand[j]
        result = best if ntg > 1 else cand
        if contiguous:
            if ntg > 1:
                codes[base0:base0 + nel] = result
        else:
            _scatter(result, codes, base0, nb, geo)


@numba.njit(**NJP)
def encode_flat(x, codes, seed_lo, seed_hi, ip, fp, ethr, ecodes):
    """Element-only formats: round every element of flat float32 ``x`` onto the grid (no scale)."""
    n = x.shape[0]
    sr = ip[P_ENC] == ENC_SR
    nch = (n + CHUNK - 1) // CHUNK
    geo = np.array([1, 1, n, 0, 0, 1, 1, 1, 0, 1, 1], np.int64)
    for w in prange(nch):
        lo = w * CHUNK
        m = min(CHUNK, n - lo)
        cnt = np.empty(m, np.int32)
        rnd = np.empty(m if sr else 1, np.uint32)
        if sr:
            _sr_draws(rnd, lo, m, geo, seed_lo, seed_hi)
        encode_run(x[lo:lo + m], codes[lo:lo + m], rnd, m, ip, fp, ethr, ecodes, cnt)


@numba.njit(**NJP)
def finite_amax(x):
    """float32 max of |x| over the finite elements of flat ``x`` (0 if none), from the float32 bits."""
    n = x.shape[0]
    nch = (n + CHUNK - 1) // CHUNK
    part = np.zeros(max(nch, 1), np.uint32)
    for w in prange(nch):
        mx = np.uint32(0)
        for i in range(w * CHUNK, min(n, w * CHUNK + CHUNK)):
            u = f32_to_u32(x[i]) & ABS_MASK
            mx = max(mx, u if u < EXP_MASK else np.uint32(0))
        part[w] = mx
    return u32_to_f32(part.max())


@numba.njit(**NJP)
def dequantize_blocks(codes, scales, geo, bs, ts, two_level, evals, out):
    """``out = float32(evals[code] * S)`` (then ``* ts`` for two-level formats), same geometry as quantize."""
    contiguous = geo[10] != 0
    cpb = max(1, CHUNK // bs)
    nch = (geo[2] + cpb - 1) // cpb
    n_items = geo[0] * geo[1] * nch
    for w in prange(n_items):
        c0, nb, base0, s0 = _block_base(geo, w, nch, cpb)
        nel = nb * bs
        if contiguous:
            cv = codes[base0:base0 + nel]
            ov = out[base0:base0 + nel]
        else:
            cv = np.empty(nel, np.uint8)
            ov = np.empty(nel, np.float32)
            _gather(codes, cv, base0, nb, geo)
        for bi in range(nb):
            S = scales[s0 + bi]
            for j in range(bi * bs, bi * bs + bs):
                v = evals[cv[j]] * S
                if two_level:
                    v = v * ts
                ov[j] = v
        if not contiguous:
            _scatter(ov, out, base0, nb, geo)


@numba.njit(**NJP)
def decode_flat(codes, evals, out):
    """Element-only formats: ``out = evals[codes]``."""
    for i in prange(codes.shape[0]):
        out[i] = evals[codes[i]]
