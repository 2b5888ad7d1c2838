"""Triton kernels around the fake-quant kernel's E4M3 outputs (FP8 GEMM operands of power-of-two-scaled formats).

An FP8 operand row (a row along the GEMM's reduction axis: a row of the K output, a column of the M output) is
written as E4M3 codes times one ``2^r``, and ``r`` must be known before the fake-quant pass writes the codes.
It comes from the block-scale rule (the host module ``e4m3_operands_launch`` has the argument):

* ``_maxima_kernel``: one read of the input, the largest ``|y|`` of every row of the tensor rotated along K and of
  every column of the tensor rotated along M, as int32 bit patterns (non-negative floats order like their bits,
  and NaN above Inf) folded in by atomic maxima;
* ``_exponents_kernel``: per operand row, the block scale ``S = 2^s`` that the format's rule gives a block whose
  amax is the row maximum (``quantize.block_scale_codes`` with the first amax target), and
  ``r = s + E_TOP - 8 + M_HI`` (``E_TOP``: binary exponent of the grid's largest value; ``M_HI`` = 1 when its
  significand exceeds 1.75), clamped to ``[R_MIN, 127]``; ``r = 0`` and the row unfit where the maximum or the
  scale is not finite (or the scale is not positive), ``r = 0`` for a row of zeros. Writes ``2^r`` (fp32) and
  the unfit flags (int32 0/1), which the fake-quant pass then sets for every value that does not fit;
* ``_repair_kernel``: after the fake-quant pass, the side buffer of each unfit row gets the decoded values of
  its fitting codes, so it holds the whole row in bf16 for the bf16 path of that row (``unfit_mm``). Programs
  whose rows all fit return at once.
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.fakequant import _load_quarters
from fp4lab.kernels.tile import bits_of, block_scale_codes, decode_scale, f32_of, rht_pairs, rht_row_pairs

R_MIN = -117  # as fp8_convert.R_MIN: 2^(r - 9) >= 2^-126 and 2^r is a normal fp32


@triton.jit
def _abs_bits(v):
    """int32 bits of |v| (NaN above Inf above every finite value)."""
    return bits_of(v) & 0x7FFFFFFF


@triton.jit
def _maxima_kernel(x_ptr, rmax_ptr, cmax_ptr, signs_k_ptr, signs_m_ptr, rscale_k, rscale_m, M, K, K2,
                   BM: tl.constexpr, BK: tl.constexpr, TILES: tl.constexpr, IN_KIND: tl.constexpr,
                   WORDS: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr, RHT_K: tl.constexpr,
                   RHT_M: tl.constexpr):
    """TILES [BM, BK] tiles, one under the other, of a row-major [M, K] input: ROWS: atomic maxima of |y| bits per
    row into ``rmax`` [M] (y: the tile rotated along K when RHT_K); COLS: per column into ``cmax`` [K] (rotated
    along M when RHT_M), folded over the program's tiles first (one atomic per column and program).
    ``rmax``/``cmax`` start at zero."""
    C2: tl.constexpr = BK // 2
    H: tl.constexpr = BM // 2
    cmax_e = tl.zeros([C2], dtype=tl.int32)
    cmax_o = tl.zeros([C2], dtype=tl.int32)
    for t in range(TILES):
        rows_e, rows_o, kw, ce, ae_e, ae_o, me_e, me_o, wm, xee, xeo, xoe, xoo = _load_quarters(
            x_ptr, (tl.program_id(0) * TILES + t) * BM, M, K, K2, BM, C2, IN_KIND, WORDS)
        if ROWS:
            if RHT_K > 0:
                ye, yo = rht_pairs(xee, xeo, signs_k_ptr, ce, rscale_k, H, C2, RHT_K, False)
                ze, zo = rht_pairs(xoe, xoo, signs_k_ptr, ce, rscale_k, H, C2, RHT_K, False)
            else:
                ye, yo, ze, zo = xee, xeo, xoe, xoo
            tl.atomic_max(rmax_ptr + rows_e, tl.max(tl.maximum(_abs_bits(ye), _abs_bits(yo)), axis=1),
                          mask=rows_e < M)
            tl.atomic_max(rmax_ptr + rows_o, tl.max(tl.maximum(_abs_bits(ze), _abs_bits(zo)), axis=1),
                          mask=rows_o < M)
        if COLS:
            if RHT_M > 0:
                ye, ze = rht_row_pairs(xee, xoe, signs_m_ptr, rows_e, rscale_m, H, C2, RHT_M)
                yo, zo = rht_row_pairs(xeo, xoo, signs_m_ptr, rows_e, rscale_m, H, C2, RHT_M)
            else:
                ye, yo, ze, zo = xee, xeo, xoe, xoo
            cmax_e = tl.maximum(cmax_e, tl.max(tl.maximum(_abs_bits(ye), _abs_bits(ze)), axis=0))
            cmax_o = tl.maximum(cmax_o, tl.max(tl.maximum(_abs_bits(yo), _abs_bits(zo)), axis=0))
    if COLS:
        ce = 2 * (tl.program_id(1) * C2 + tl.arange(0, C2))
        tl.atomic_max(cmax_ptr + ce, cmax_e, mask=ce < K)
        tl.atomic_max(cmax_ptr + ce + 1, cmax_o, mask=ce + 1 < K)


@triton.jit
def _exponents_kernel(max_ptr, scale_ptr, unfit_ptr, n, tg_ptr, itg_ptr, stab_ptr, scpos_ptr, svals_ptr, min_s,
                      max_s, BLOCK: tl.constexpr, SCALE: tl.constexpr, E_TOP: tl.constexpr, M_HI: tl.constexpr,
                      R_LO: tl.constexpr):
    """``scale`` = 2^r and ``unfit`` of ``n`` operand rows from their maxima (|y| bits), as the module says."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    msk = offs < n
    b = tl.load(max_ptr + offs, mask=msk, other=0)
    bad = b >= 0x7F800000
    a = f32_of(tl.where(bad, 0, b))
    sc = block_scale_codes(a, tl.load(tg_ptr), tl.load(itg_ptr), 1.0, 1.0, min_s, max_s, stab_ptr, scpos_ptr, SCALE)
    sb = bits_of(decode_scale(sc, svals_ptr, SCALE))
    bad = bad | (sb >= 0x7F800000) | (sb <= 0)
    r = tl.minimum(tl.maximum((sb >> 23) - 127 + (E_TOP - 8 + M_HI), R_LO), 127)
    r = tl.where(bad | (b == 0), 0, r)
    tl.store(scale_ptr + offs, f32_of((r + 127) << 23), mask=msk)
    tl.store(unfit_ptr + offs, bad.to(tl.int32), mask=msk)


@triton.jit
def _repair_kernel(codes_ptr, side_ptr, scale_ptr, unfit_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr):
    """Rows of an [R, C] E4M3 operand (uint8 codes, int16 side buffer): in unfit rows, every code other than the
    0x7F marker is decoded (``code * 2^r``, exact in bf16) into the side buffer."""
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    rmask = rows < R
    unfit = tl.load(unfit_ptr + rows, mask=rmask, other=0)
    if tl.max(unfit, axis=0) > 0:
        scale = tl.load(scale_ptr + rows, mask=rmask, other=1.0)
        todo = (rmask & (unfit != 0))[:, None]
        for c0 in range(0, C, BC):
            cols = c0 + tl.arange(0, BC)
            offs = rows[:, None] * C + cols[None, :]
            msk = todo & (cols < C)[None, :]
            q = tl.load(codes_ptr + offs, mask=msk, other=0)
            v = q.to(tl.float8e4nv, bitcast=True).to(tl.float32) * scale[:, None]
            tl.store(side_ptr + offs, (bits_of(v) >> 16).to(tl.int16), mask=msk & ((q & 0x7F) != 0x7F))
