"""Multithreaded numba kernels for block-scaled quantize / dequantize over flat float32 arrays.

Block geometry (``Geometry``) covers every layout with one compiled kernel: the scale array is viewed as
``[nA, nB, nC]`` (C order, = the reference's ``scale_shape``); block ``(a, b, c)`` starts at flat element
``a*sa + b*sb + c*sc`` and its element ``j = r*cw + q`` (``r < rows``, ``q < cw``) sits ``r*s_row + q*s_col``
further on, so the block's element order is the reference's ``BlockView.to_blocks`` order:

* 1-D blocks along the last axis: ``[1, 1, n/bs]``, contiguous (no copy at all);
* 1-D blocks along axis ``k`` of ``[O, K, I]``: ``[O, K/bs, I]``, element stride ``I`` (gathered per block);
* 2-D ``r x c`` tiles of ``[L, R, C]``: ``[L, R/r, C/c]``, ``rows = r``, ``s_row = C``.

Work items are runs of up to ``CHUNK`` elements' worth of blocks along ``c``; ``run_items`` splits them into one
run of items per thread (``numba.get_num_threads()`` threads; the kernels release the GIL). Per work item: gather
(if not contiguous), block amax / NaN / Inf flags from the float32 bits (``nb_encode.block_stats``), the scales
per target (``nb_encode.chunk_scales``), the scaled elements exactly as ``ref_quantize.scale_elements`` rounded
onto the grid (``nb_encode.scale_encode_fused`` where ``nb_tables`` allows it, else ``scale_elements`` +
``encode_run``), and for several targets the float32 squared error in element order (ties keep the first target).
Dequantize reads and writes strided layouts in place. ``finite_amax`` and ``decode_flat`` are numpy (no kernel).
SR draws: the element at flat index i uses the comparand of ``philox.sr_random_bits_reference`` at width ``sr_bits``
(24: word ``i % 4`` of ``philox4x32_10(seed, i // 4)`` shifted right by 8).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from fp4lab.emulator.jit import njit
from fp4lab.emulator.nb_encode import (
    block_errors,
    block_stats,
    chunk_scales,
    encode_run,
    scale_elements,
    scale_encode_fused,
)
from fp4lab.emulator.nb_philox import philox4x32_10, sr_call_and_word, sr_comparand
from fp4lab.emulator.nb_tables import ENC_SR, P_BS, P_ENC, P_ERR, P_FUSED, P_NTARGETS
from fp4lab.emulator.threads import workers as thread_count

CHUNK = 16384  # elements per work item (blocks are never split)
NJI = dict(cache=True, error_model="numpy", nogil=True)  # work items: run on a thread pool (``run_items``)
NJH = dict(cache=True, error_model="numpy")  # helpers of the item kernels
# The small helpers are inlined at the numba IR level: a separately compiled function costs a compile of its own
# (about 0.1 s on 2 cores) and is linked and optimized again inside every caller.
ABS_MASK = np.uint32(0x7FFFFFFF)
EXP_MASK = np.uint32(0x7F800000)
U_MASK32 = np.uint64(0xFFFFFFFF)
U_32 = np.uint64(32)
F32 = np.float32


_POOL: dict[str, Any] = {}
_POOL_LOCK = threading.Lock()


def _reset_pool() -> None:  # a forked child has none of its parent's threads
    _POOL.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pool)


def run_items(fn: Callable[..., None], n_items: int, args: tuple) -> None:
    """``fn(lo, hi, *args)`` runs work items ``lo..hi-1``; the items ``range(n_items)`` are split into one
    contiguous run per thread of a pool of ``numba.get_num_threads()`` threads (the kernels release the GIL; each
    item writes only its own outputs, so the split does not change a bit). A thread pool instead of a ``prange``
    loop: a parfor compiles the kernel tree twice more (typing pass, gufunc, caller), which tripled the first-run
    compile time."""
    threads = thread_count()
    workers = min(threads, n_items)
    if workers <= 1:
        if n_items > 0:
            fn(0, n_items, *args)
        return
    with _POOL_LOCK:
        pool = _POOL.get("pool")
        if pool is None or _POOL.get("threads") != threads:  # the caller's thread is the pool's extra worker
            if pool is not None:
                pool.shutdown(wait=False)
            pool = _POOL["pool"] = ThreadPoolExecutor(max_workers=threads - 1, thread_name_prefix="fp4lab")
            _POOL["threads"] = threads
    bounds = [n_items * k // workers for k in range(workers + 1)]
    futures = [pool.submit(fn, bounds[k], bounds[k + 1], *args) for k in range(1, workers)]
    fn(bounds[0], bounds[1], *args)
    for f in futures:
        f.result()


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


@njit(inline="always", **NJH)
def _block_base(geo, w, nch, cpb):
    """(first c index, number of blocks, flat start of block 0, scale index of block 0) of work item w."""
    per_a = geo[1] * nch
    a = w // per_a
    b = (w % per_a) // nch
    c0 = (w % nch) * cpb
    nb = min(cpb, geo[2] - c0)
    return c0, nb, a * geo[3] + b * geo[4] + c0 * geo[5], (a * geo[1] + b) * geo[2] + c0


@njit(inline="always", **NJH)
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


@njit(inline="always", **NJH)
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


@njit(**NJH)
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


def _make_quantize_items(fused: bool) -> Any:
    """The kernel of ``quantize_blocks`` over work items ``lo..hi-1``, for fused (``nb_tables`` set ``P_FUSED``:
    deterministic rounding, fused scale+encode loop) or unfused formats (SR, wide grids, odd blocks, overflow to
    NaN/Inf). Two kernels instead of one with both paths: a call compiles (and caches) only the path its format
    takes (``fused`` is a compile-time constant, so the other branch is pruned before typing)."""

    @njit(**NJI)
    def _quantize_items(lo, hi, x, codes, scode_out, s_out, geo, ts, inv_ts, two_level, gmul, seed_lo, seed_hi,
                        sr_bits, ip, fp, ethr, ecodes, evals, sthr, scodes, sdec, fthr, fdelta, sbkt):
        bs = ip[P_BS]
        ntg = ip[P_NTARGETS]
        sr = ip[P_ENC] == ENC_SR
        contiguous = geo[10] != 0
        cpb = max(1, CHUNK // bs)
        nch = (geo[2] + cpb - 1) // cpb
        for w in range(lo, hi):
            c0, nb, base0, s0 = _block_base(geo, w, nch, cpb)
            nel = nb * bs
            if contiguous:
                xv = x[base0:base0 + nel]
            else:
                xv = np.empty(nel, np.float32)
                _gather(x, xv, base0, nb, geo)
            if not fused:
                t = np.empty(nel, np.float32)
                cnt = np.empty(nel, np.int32)
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
                chunk_scales(amax, hnan, hinf, nb, ti, ts, two_level, gmul, ip, fp, sthr, scodes, sdec, sbkt, ccode,
                             cscale)
                if fused:
                    scale_encode_fused(xv, cand, cscale, nb, ts, inv_ts, two_level, ip, fp, fthr, fdelta)
                else:
                    scale_elements(xv, t, cscale, nb, ts, inv_ts, two_level, ip, fp)
                    encode_run(t, cand, rnd, nel, ip, fp, ethr, ecodes, cnt)
                if ntg == 1:
                    for bi in range(nb):
                        scode_out[s0 + bi] = ccode[bi]
                        s_out[s0 + bi] = cscale[bi]
                    continue
                block_errors(xv, cand, cscale, nb, bs, ts, two_level, evals, err, ip[P_ERR])
                for bi in range(nb):  # the first target wins ties
                    if ti == 0 or err[bi] < best_err[bi]:
                        best_err[bi] = err[bi]
                        scode_out[s0 + bi] = ccode[bi]
                        s_out[s0 + bi] = cscale[bi]
                        for j in range(bi * bs, bi * bs + bs):
                            best[j] = cand[j]
            result = best if ntg > 1 else cand
            if not contiguous:
                _scatter(result, codes, base0, nb, geo)
            elif ntg > 1:  # an element loop, not a slice assignment (whose shape check compiles an error formatter)
                for j in range(nel):
                    codes[base0 + j] = result[j]

    return _quantize_items


_quantize_items_fused = _make_quantize_items(True)
_quantize_items_unfused = _make_quantize_items(False)


def _readonly(*arrays: np.ndarray) -> list[np.ndarray]:
    """Read-only views of the kernels' input arrays. numba types a read-only array apart from a writable one, so
    a caller's mix of cached (read-only) tables and fresh copies would compile every kernel twice; scalar
    arguments are cast to one type each by the wrappers for the same reason."""
    out = []
    for a in arrays:
        if a.flags.writeable:
            a = a.view()
            a.flags.writeable = False
        out.append(a)
    return out


def _n_items(geo: np.ndarray, bs: int) -> int:
    cpb = max(1, CHUNK // int(bs))
    return int(geo[0]) * int(geo[1]) * ((int(geo[2]) + cpb - 1) // cpb)


def quantize_blocks(x, codes, scode_out, s_out, geo, ts, inv_ts, two_level, gmul, seed_lo, seed_hi, sr_bits,
                    ip, fp, ethr, ecodes, evals, sthr, scodes, sdec, fthr, fdelta, sbkt):
    """Quantize flat float32 ``x`` block by block: element codes into ``codes`` (flat, x's layout), scale codes
    (uint32) and decoded scales into ``scode_out`` / ``s_out`` (flat scale layout). ``ts``: decode tensor
    scale (used if ``two_level``), ``inv_ts = float32(1/ts)``, ``gmul``: per-target "encode" multipliers."""
    ins = _readonly(x, geo, gmul, ip, fp, ethr, ecodes, evals, sthr, scodes, sdec, fthr, fdelta, sbkt)
    run_items(_quantize_items_fused if ip[P_FUSED] else _quantize_items_unfused, _n_items(geo, ip[P_BS]),
              (ins[0], codes, scode_out, s_out, ins[1], F32(ts), F32(inv_ts), bool(two_level), ins[2],
               np.uint64(seed_lo), np.uint64(seed_hi), np.int64(sr_bits), *ins[3:]))


@njit(**NJI)
def _encode_flat_items(lo, hi, x, codes, seed_lo, seed_hi, sr_bits, ip, fp, ethr, ecodes):
    """Work items ``lo..hi-1`` (item w: elements ``w*CHUNK ..``) of ``encode_flat``."""
    n = x.shape[0]
    sr = ip[P_ENC] == ENC_SR
    geo = np.array([1, 1, n, 0, 0, 1, 1, 1, 0, 1, 1], np.int64)
    for w in range(lo, hi):
        e0 = w * CHUNK
        m = min(CHUNK, n - e0)
        cnt = np.empty(m, np.int32)
        rnd = np.empty(m if sr else 1, np.uint32)
        if sr:
            _sr_draws(rnd, e0, m, geo, seed_lo, seed_hi, sr_bits)
        encode_run(x[e0:e0 + m], codes[e0:e0 + m], rnd, m, ip, fp, ethr, ecodes, cnt)


def encode_flat(x, codes, seed_lo, seed_hi, sr_bits, ip, fp, ethr, ecodes):
    """Element-only formats: round every element of flat float32 ``x`` onto the grid (no scale)."""
    ins = _readonly(x, ip, fp, ethr, ecodes)
    run_items(_encode_flat_items, (x.shape[0] + CHUNK - 1) // CHUNK,
              (ins[0], codes, np.uint64(seed_lo), np.uint64(seed_hi), np.int64(sr_bits), *ins[1:]))


@njit(**NJI)
def _dequantize_items(lo, hi, codes, scales, geo, bs, ts, two_level, evals, out):
    """Work items ``lo..hi-1`` of ``dequantize_blocks``; strided layouts are read and written in place."""
    sc, rows, cw, s_row, s_col = geo[5], geo[6], geo[7], geo[8], geo[9]
    contiguous = geo[10] != 0
    cpb = max(1, CHUNK // bs)
    nch = (geo[2] + cpb - 1) // cpb
    for w in range(lo, hi):
        c0, nb, base0, s0 = _block_base(geo, w, nch, cpb)
        for bi in range(nb):
            S = scales[s0 + bi]
            base = base0 + bi * sc
            if contiguous:
                for j in range(base, base + bs):
                    v = evals[codes[j]] * S
                    if two_level:
                        v = v * ts
                    out[j] = v
                continue
            for r in range(rows):
                p = base + r * s_row
                for q in range(cw):
                    k = p + q * s_col
                    v = evals[codes[k]] * S
                    if two_level:
                        v = v * ts
                    out[k] = v


def dequantize_blocks(codes, scales, geo, bs, ts, two_level, evals, out):
    """``out = float32(evals[code] * S)`` (then ``* ts`` for two-level formats), same geometry as quantize."""
    codes, scales, geo, evals = _readonly(codes, scales, geo, evals)
    run_items(_dequantize_items, _n_items(geo, bs),
              (codes, scales, geo, np.int64(bs), F32(ts), bool(two_level), evals, out))


def decode_flat(codes, evals, out):
    """Element-only formats: ``out = evals[codes]`` (a gather: numpy, no kernel)."""
    np.take(evals, codes, out=out)


AMAX_CHUNK = 1 << 18  # elements per step of ``finite_amax``: a 1 MiB uint32 buffer, reused


def finite_amax(x: np.ndarray) -> np.float32:
    """float32 max of |x| over the finite elements of flat float32 ``x`` (0 if none), from the float32 bits
    (exact: a maximum does not round; numpy, so that no kernel is compiled for it). Per chunk, the max of the
    magnitude bits is the answer unless it is an Inf/NaN pattern; only such chunks take the masked maximum."""
    top = np.uint32(0)
    buf = np.empty(min(AMAX_CHUNK, x.size), np.uint32)
    for i in range(0, x.size, AMAX_CHUNK):
        v = x[i:i + AMAX_CHUNK].view(np.uint32)
        bits = buf[:v.size]
        np.bitwise_and(v, ABS_MASK, out=bits)
        m = bits.max()
        if m >= EXP_MASK:  # Inf and NaN are left out
            m = bits.max(where=bits < EXP_MASK, initial=0)
        top = max(top, m)
    return np.array([top], np.uint32).view(F32)[0]
