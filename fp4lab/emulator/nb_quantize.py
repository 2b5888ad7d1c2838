"""Parallel numba kernels for block-scaled quantize / dequantize over flat float32 arrays.

Block geometry (``Geometry``) covers every layout with one compiled kernel: the scale array is viewed as
``[nA, nB, nC]`` (C order, = the reference's ``scale_shape``); block ``(a, b, c)`` starts at flat element
``a*sa + b*sb + c*sc`` and its element ``j = r*cw + q`` (``r < rows``, ``q < cw``) sits ``r*s_row + q*s_col``
further on, so the block's element order is the reference's ``BlockView.to_blocks`` order:

* 1-D blocks along the last axis: ``[1, 1, n/bs]``, contiguous (no copy at all);
* 1-D blocks along axis ``k`` of ``[O, K, I]``: ``[O, K/bs, I]``, element stride ``I`` (gathered per block);
* 2-D ``r x c`` tiles of ``[L, R, C]``: ``[L, R/r, C/c]``, ``rows = r``, ``s_row = C``.

Work items are runs of up to ``CHUNK`` elements' worth of blocks along ``c``; ``prange`` spreads them over cores.
Per work item (one njit call: loops written inside a prange body do not vectorize): gather (if not contiguous),
block amax / NaN / Inf flags from the float32 bits (``nb_encode.block_stats``), the scales per target
(``nb_encode.chunk_scales``), the scaled elements exactly as ``ref_quantize.scale_elements`` rounded onto the grid
(``nb_encode.scale_encode_fused`` where ``nb_tables`` allows it, else ``scale_elements`` + ``encode_run``), and
for several targets the float32 squared error in element order (ties keep the first target).
SR draws: the element at flat index i uses the comparand of ``philox.sr_random_bits_reference`` at width ``sr_bits``
(24: word ``i % 4`` of ``philox4x32_10(seed, i // 4)`` shifted right by 8).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import prange

from fp4lab.emulator.jit import njit
from fp4lab.emulator.nb_bits import f32_to_u32, u32_to_f32
from fp4lab.emulator.nb_encode import (
    ABS_MASK, block_errors, block_stats, chunk_scales, encode_run, scale_elements, scale_encode_fused,
)
from fp4lab.emulator.nb_tables import ENC_SR, P_BS, P_ENC, P_FUSED, P_NTARGETS
from fp4lab.emulator.philox import philox4x32_10, sr_call_and_word, sr_comparand

CHUNK = 16384  # elements per work item (blocks are never split)
NJP = dict(cache=True, error_model="numpy", parallel=True)
EXP_MASK = np.uint32(0x7F800000)
U_MASK32 = np.uint64(0xFFFFFFFF)
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


@njit(cache=True, error_model="numpy")
def _block_base(geo, w, nch, cpb):
    """(first c index, number of blocks, flat start of block 0, scale index of block 0) of work item w."""
    per_a = geo[1] * nch
    a = w // per_a
    b = (w % per_a) // nch
    c0 = (w % nch) * cpb
    nb = min(cpb, geo[2] - c0)
    return c0, nb, a * geo[3] + b * geo[4] + c0 * geo[5], (a * geo[1] + b) * geo[2] + c0


@njit(cache=True, error_model="numpy")
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


@njit(cache=True, error_model="numpy")
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


@njit(cache=True, error_model="numpy")
def _sr_draws(rnd, base0, nb, geo, seed_lo, seed_hi, sr_bits):
    """SR comparands of a work item's elements, in block-element order; one Philox call per call index."""
    sc, rows, cw, s_row, s_col = geo[5], geo[6], geo[7], geo[8], geo[9]
    g_last = np.uint64(0)
    w = philox4x32_10(seed_lo, seed_hi, g_last, g_last)
    k = 0
    for bi in range(nb):
        base = base0 + bi * sc
        for r in range(rows):
            p = base + r * s_row
            for q in range(cw):
                flat = p + q * s_col
                g, j = sr_call_and_word(flat, sr_bits)
                if g != g_last:
                    w = philox4x32_10(seed_lo, seed_hi, g & U_MASK32, g >> U_32)
                    g_last = g
                rnd[k] = sr_comparand(w[j], flat, sr_bits)
                k += 1


@njit(cache=True, error_model="numpy")
def _quantize_item(w, x, codes, scode_out, s_out, geo, ts, inv_ts, two_level, gmul, seed_lo, seed_hi, sr_bits,
                   ip, fp, ethr, ecodes, evals, sthr, scodes, sdec, fthr, fdelta, sbkt):
    """One work item of ``quantize_blocks`` (a separate function: loops inside a prange body do not vectorize)."""
    bs = ip[P_BS]
    ntg = ip[P_NTARGETS]
    sr = ip[P_ENC] == ENC_SR
    contiguous = geo[10] != 0
    cpb = max(1, CHUNK // bs)
    nch = (geo[2] + cpb - 1) // cpb
    c0, nb, base0, s0 = _block_base(geo, w, nch, cpb)
    nel = nb * bs
    if contiguous:
        xv = x[base0:base0 + nel]
    else:
        xv = np.empty(nel, np.float32)
        _gather(x, xv, base0, nb, geo)
    unfused = ip[P_FUSED] == 0
    t = np.empty(nel if unfused else 1, np.float32)
    cnt = np.empty(nel if unfused else 1, np.int32)
    rnd = np.empty(nel if sr else 1, np.uint32)
    if sr:
        _sr_draws(rnd, base0, nb, geo, seed_lo, seed_hi, sr_bits)
    if contiguous and ntg == 1:
        cand = codes[base0:base0 + nel]
    else:
        cand = np.empty(nel, np.uint8)
    best = np.empty(nel if ntg > 1 else 1, np.uint8)
    amax = np.empty(nb, np.float32)
    hnan = np.empty(nb, np.bool_)
    hinf = np.empty(nb, np.bool_)
    block_stats(xv, nb, bs, amax, hnan, hinf)
    ccode = np.empty(nb, np.int64)
    cscale = np.empty(nb, np.float32)
    err = np.empty(nb if ntg > 1 else 1, np.float32)
    best_err = np.empty(nb if ntg > 1 else 1, np.float32)
    for ti in range(ntg):
        chunk_scales(amax, hnan, hinf, nb, ti, ts, two_level, gmul, ip, fp, sthr, scodes, sdec, sbkt, ccode, cscale)
        if ip[P_FUSED]:
            scale_encode_fused(xv, cand, cscale, nb, ts, inv_ts, two_level, ip, fthr, fdelta)
        else:
            scale_elements(xv, t, cscale, nb, ts, inv_ts, two_level, ip)
            encode_run(t, cand, rnd, nel, ip, fp, ethr, ecodes, cnt)
        if ntg == 1:
            for bi in range(nb):
                scode_out[s0 + bi] = ccode[bi]
                s_out[s0 + bi] = cscale[bi]
            continue
        block_errors(xv, cand, cscale, nb, bs, ts, two_level, evals, err)
        for bi in range(nb):  # the first target wins ties
            if ti == 0 or err[bi] < best_err[bi]:
                best_err[bi] = err[bi]
                scode_out[s0 + bi] = ccode[bi]
                s_out[s0 + bi] = cscale[bi]
                for j in range(bi * bs, bi * bs + bs):
                    best[j] = cand[j]
    result = best if ntg > 1 else cand
    if contiguous:
        if ntg > 1:
            codes[base0:base0 + nel] = result
    else:
        _scatter(result, codes, base0, nb, geo)


@njit(**NJP)
def quantize_blocks(x, codes, scode_out, s_out, geo, ts, inv_ts, two_level, gmul, seed_lo, seed_hi, sr_bits,
                    ip, fp, ethr, ecodes, evals, sthr, scodes, sdec, fthr, fdelta, sbkt):
    """Quantize flat float32 ``x`` block by block: element codes into ``codes`` (flat, x's layout), scale codes
    (uint32) and decoded scales into ``scode_out`` / ``s_out`` (flat scale layout). ``ts``: decode tensor
    scale (used if ``two_level``), ``inv_ts = float32(1/ts)``, ``gmul``: per-target "encode" multipliers."""
    cpb = max(1, CHUNK // ip[P_BS])
    n_items = geo[0] * geo[1] * ((geo[2] + cpb - 1) // cpb)
    for w in prange(n_items):
        _quantize_item(w, x, codes, scode_out, s_out, geo, ts, inv_ts, two_level, gmul, seed_lo, seed_hi, sr_bits,
                       ip, fp, ethr, ecodes, evals, sthr, scodes, sdec, fthr, fdelta, sbkt)


@njit(**NJP)
def encode_flat(x, codes, seed_lo, seed_hi, sr_bits, ip, fp, ethr, ecodes):
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
            _sr_draws(rnd, lo, m, geo, seed_lo, seed_hi, sr_bits)
        encode_run(x[lo:lo + m], codes[lo:lo + m], rnd, m, ip, fp, ethr, ecodes, cnt)


@njit(cache=True, error_model="numpy")
def _finite_amax_bits(x):
    mx = np.uint32(0)
    for i in range(x.shape[0]):
        u = f32_to_u32(x[i]) & ABS_MASK
        mx = max(mx, u if u < EXP_MASK else np.uint32(0))
    return mx


@njit(**NJP)
def finite_amax(x):
    """float32 max of |x| over the finite elements of flat ``x`` (0 if none), from the float32 bits."""
    n = x.shape[0]
    nch = (n + CHUNK - 1) // CHUNK
    part = np.zeros(max(nch, 1), np.uint32)
    for w in prange(nch):
        part[w] = _finite_amax_bits(x[w * CHUNK:min(n, w * CHUNK + CHUNK)])
    return u32_to_f32(part.max())


@njit(cache=True, error_model="numpy")
def _dequantize_item(w, codes, scales, geo, bs, ts, two_level, evals, out):
    contiguous = geo[10] != 0
    cpb = max(1, CHUNK // bs)
    nch = (geo[2] + cpb - 1) // cpb
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


@njit(**NJP)
def dequantize_blocks(codes, scales, geo, bs, ts, two_level, evals, out):
    """``out = float32(evals[code] * S)`` (then ``* ts`` for two-level formats), same geometry as quantize."""
    cpb = max(1, CHUNK // bs)
    n_items = geo[0] * geo[1] * ((geo[2] + cpb - 1) // cpb)
    for w in prange(n_items):
        _dequantize_item(w, codes, scales, geo, bs, ts, two_level, evals, out)


@njit(**NJP)
def decode_flat(codes, evals, out):
    """Element-only formats: ``out = evals[codes]``."""
    for i in prange(codes.shape[0]):
        out[i] = evals[codes[i]]
