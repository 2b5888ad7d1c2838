"""Triton kernels: bf16 GEMM operands to E4M3 (OCP ``e4m3fn``) times one power of two per row, exactly.

An operand of a GEMM that contracts over its last axis gets, per row ``i``, a power of two ``2^r_i`` and E4M3
codes ``q`` with ``q * 2^r_i == t`` bit for bit, or the row is marked unfit (it then takes the bf16 path).
The rule (``fp4lab.recipes.fp8_gemm`` has the torch twin and the argument for why it is exact and optimal):

* ``r = max(E - 8, R_MIN)`` where ``E`` is the binary exponent of the row's largest magnitude ``a`` (``E - 7``
  when the mantissa of ``a`` exceeds 1.75, since 448 = 1.75 * 2^8 is E4M3's largest finite value), ``R_MIN =
  -117``; ``r = 0`` for a row of zeros. A row holding an Inf or NaN is unfit.
* each element ``v`` fits when ``decode(e4m3(v * 2^-r)) * 2^r == v`` as integer bits (``_encode`` says why that
  is exact on the GPU and in the interpreter); elements that do not fit are written as code 0 and mark their row
  unfit. Signed zeros keep their sign. The torch twin ``fp4lab.recipes.fp8_gemm.e4m3_rows_reference`` decides
  the same by integer arithmetic on the bf16 bits; tests compare the two bit for bit.

Two layouts: ``rows`` (the operand's rows are the input's rows: one program owns whole rows, reads them once for
the maximum and again, from L2, to encode) and ``cols`` (the operand is the input transposed, rows = input
columns: a column-maximum pass with atomics, then an encode pass that writes the transposed codes).
Outputs: uint8 codes (a ``torch.float8_e4m3fn`` view), fp32 scales ``2^r`` and int32 unfit flags (0/1).
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.tile import f32_of

R_MIN = -117  # smallest row exponent: 2^(r - 9) >= 2^-126, so bf16 subnormals never fit, and 2^r is a normal fp32


@triton.jit
def _row_exp(amax, R_LO: tl.constexpr):
    """(r, unfit) of rows whose largest |bf16 bits| is ``amax`` (int32); rows with an Inf or NaN keep the r of
    their largest bits, so every finite value of every row has ``|v| / 2^r <= 448``."""
    r = (amax >> 7) - 135 + ((amax & 0x7F) > 0x60).to(tl.int32)
    return tl.where(amax == 0, 0, tl.maximum(r, R_LO)), amax >= 0x7F80


@triton.jit
def _encode(h, r):
    """(E4M3 code, fits) of bf16 bits ``h`` (int32 in [0, 65535]) over ``2^r`` (int32 in [-117, 121], broadcast;
    ``|v| / 2^r <= 448`` in finite rows). The hardware conversion (RTNE, saturating) of ``w = v * 2^-r`` gives a
    code ``q`` whose value is always an E4M3 number, so ``decode(q) * 2^r == v`` (as integer bits: immune to
    flushed subnormals; both products are exact where they can match) holds iff ``v`` is E4M3 times ``2^r``,
    for finite ``v`` (a NaN may compare equal to itself bit for bit)."""
    v = h << 16
    q = (f32_of(v) * f32_of((127 - r) << 23)).to(tl.float8e4nv)
    ok = ((q.to(tl.float32) * f32_of((127 + r) << 23)).to(tl.int32, bitcast=True) == v) & ((h & 0x7F80) != 0x7F80)
    return tl.where(ok, q.to(tl.uint8, bitcast=True), 0), ok


@triton.jit
def _scale_of(r):
    return ((r + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _load_bits(x_ptr, offs, msk, EVEN: tl.constexpr):
    """bf16 bit patterns (int32 in [0, 65535]) at ``offs``; masked loads unless EVEN (the tile divides the tensor)."""
    if EVEN:
        h = tl.load(x_ptr + offs)
    else:
        h = tl.load(x_ptr + offs, mask=msk, other=0)
    return h.to(tl.int32) & 0xFFFF


@triton.jit
def _rows_kernel(x_ptr, q_ptr, scale_ptr, unfit_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr,
                 R_LO: tl.constexpr, EVEN: tl.constexpr):
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    rmask = rows < R
    base = rows[:, None] * C
    amax = tl.zeros([BR, BC], dtype=tl.int32)
    for c0 in range(0, C, BC):
        cols = c0 + tl.arange(0, BC)
        amax = tl.maximum(amax, _load_bits(x_ptr, base + cols[None, :], rmask[:, None] & (cols < C)[None, :], EVEN)
                          & 0x7FFF)
    r, bad = _row_exp(tl.max(amax, axis=1), R_LO)
    nok = tl.zeros([BR, BC], dtype=tl.int1)
    for c0 in range(0, C, BC):
        cols = c0 + tl.arange(0, BC)
        msk = rmask[:, None] & (cols < C)[None, :]
        code, ok = _encode(_load_bits(x_ptr, base + cols[None, :], msk, EVEN), r[:, None])
        if EVEN:
            tl.store(q_ptr + base + cols[None, :], code)
        else:
            tl.store(q_ptr + base + cols[None, :], code, mask=msk)
        nok = nok | ~ok
    tl.store(scale_ptr + rows, _scale_of(r), mask=rmask)
    tl.store(unfit_ptr + rows, tl.where(bad, 1, tl.max(nok.to(tl.int32), axis=1)), mask=rmask)


@triton.jit
def _col_amax_kernel(x_ptr, amax_ptr, R, C, BM: tl.constexpr, BK: tl.constexpr, EVEN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BK + tl.arange(0, BK)
    cmask = cols < C
    h = _load_bits(x_ptr, rows[:, None] * C + cols[None, :], (rows < R)[:, None] & cmask[None, :], EVEN)
    tl.atomic_max(amax_ptr + cols, tl.max(h & 0x7FFF, axis=0), mask=cmask)


@triton.jit
def _cols_kernel(x_ptr, amax_ptr, q_ptr, scale_ptr, unfit_ptr, R, C, BM: tl.constexpr, BK: tl.constexpr,
                 R_LO: tl.constexpr, EVEN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BK + tl.arange(0, BK)
    cmask = cols < C
    msk = (rows < R)[:, None] & cmask[None, :]
    r, bad = _row_exp(tl.load(amax_ptr + cols, mask=cmask, other=0), R_LO)
    code, ok = _encode(_load_bits(x_ptr, rows[:, None] * C + cols[None, :], msk, EVEN), r[None, :])
    if EVEN:
        tl.store(q_ptr + cols[None, :] * R + rows[:, None], code)
    else:
        tl.store(q_ptr + cols[None, :] * R + rows[:, None], code, mask=msk)
    nok = tl.max(tl.where(ok, 0, 1), axis=0)
    tl.atomic_max(unfit_ptr + cols, tl.where(bad, 1, nok), mask=cmask)
    if tl.program_id(0) == 0:
        tl.store(scale_ptr + cols, _scale_of(r), mask=cmask)


