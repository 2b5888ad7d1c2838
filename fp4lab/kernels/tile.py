"""Triton device helpers shared by the kernels: tile indices and loads, block views, bit views, exact fp32
arithmetic.

The element and scale encoders are in ``encoding``, the Hadamard butterflies in ``hadamard``, the stochastic-
rounding draws in ``sr_draws``. The bit-exactness rules hold for all of them:

Everything is bit-exact between the GPU and ``TRITON_INTERPRET=1``: integer/bit operations, IEEE fp32
add/mul/compare, ``tl.div_rn`` (never ``/``), table lookups with ``tl.load``; no ``.to(bf16/fp8)``, no
``tl.sum``/``tl.dot`` on inexact data. Kernels are launched with ``enable_fp_fusion=False`` so no ``a*b+c`` is
contracted to an FMA; an explicit ``tl.fma`` appears only where its product is exact (a power-of-two multiple),
so the GPU's single rounding equals the interpreter's mul-then-add, or goes through ``fma_rn``, which is one
correct rounding in both. The GPU-only operations have interpreter twins: dequantize's fp32 -> bf16 conversion
(IEEE round-to-nearest-even in hardware) an integer one; the SR encoder's FMAs rounded toward -inf (libdevice
``fma_rd``), of which it uses only the floor, that floor in float64; ``fma_rn`` the exact sum rounded to odd in
float64, then to fp32.
Float ``tl.minimum``/``tl.maximum`` take ``propagate_nan=ALL``: the GPU's default ``min.f32`` returns the non-NaN
operand, numpy (the reference and the interpreter) returns NaN.
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.codes import INPUT_BF16, INPUT_F16
from fp4lab.kernels.host import interpreting

FLT_MAX: tl.constexpr = tl.constexpr(3.4028234663852886e38)
# how triton.jit decorated this module's functions (it reads TRITON_INTERPRET at decoration, as this does at import)
INTERPRETED: tl.constexpr = tl.constexpr(interpreting())


@triton.jit
def bits_of(x):
    return x.to(tl.int32, bitcast=True)


@triton.jit
def f32_of(b):
    return b.to(tl.float32, bitcast=True)


@triton.jit
def fma_rn(a, b, c):
    """fp32 ``a * b + c`` with one rounding to nearest-even: ``fma.rn.f32`` on the GPU. In the interpreter (whose
    ``tl.fma`` rounds twice) the product is exact in float64, the sum is rounded to odd (TwoSum error, then the
    last bit set where the sum was inexact) and that 53-bit value rounded to fp32, which is the correctly rounded
    result (53 >= 24 + 2). Normal-range operands (a subnormal result may round differently)."""
    if INTERPRETED:
        p = a.to(tl.float64) * b.to(tl.float64)
        c64 = c.to(tl.float64)
        s = p + c64
        sp = s - c64
        err = (p - sp) + (c64 - (s - sp))
        sb = s.to(tl.int64, bitcast=True)
        away = tl.where((err > 0.0) == (s > 0.0), 1, -1).to(tl.int64)  # one ulp toward the exact sum
        sb = tl.where((err != 0.0) & ((sb & 1) == 0), sb + away, sb)
        return sb.to(tl.float64, bitcast=True).to(tl.float32)
    else:
        return tl.fma(a, b, c)


@triton.jit
def div_by_reciprocal(x, d, r):
    """fp32 ``x / d`` rounded to nearest-even (``tl.div_rn(x, d)``) from ``r = tl.div_rn(1, d)`` computed once per
    block: ``q = x * r``, then twice ``q += (x - d * q) * r`` with FMAs, and a zero quotient takes x's sign. 6
    instructions per element against about 10 for a division. Exact (Markstein's theorem: r is within half an ulp
    of 1 / d, the first correction leaves q within one ulp of x / d, so the second remainder is exact and the
    second correction rounds correctly) when d is in [2^-60, 2^100], |x / d| <= 2^100 and |x / d| >= 2^-42
    (then the exponents of d and q add up to at least -103 and every remainder is an fp32). Below 2^-42 the
    quotient may differ by an ulp or be a signed zero where the division gives 2^-149, with x's sign always:
    callers use it only for grids on which such a quotient rounds as zero does (``ElementParams.fast_division``)."""
    q = x * r
    q = fma_rn(fma_rn(-d, q, x), r, q)
    q = fma_rn(fma_rn(-d, q, x), r, q)
    return f32_of(bits_of(q) | (bits_of(x) & -2147483648))


@triton.jit
def is_finite(x):
    return (bits_of(x) & 0x7F800000) != 0x7F800000


@triton.jit
def sign_bit(x):
    """int32 0/1: the sign bit of fp32 ``x`` (1 for -0.0 and negative NaN too)."""
    return (bits_of(x) >> 31) & 1


@triton.jit
def negative(t, SZ_POS: tl.constexpr):
    """int32 0/1: which code column (negative side) a result takes; SZ_POS: t < 0, else the sign bit."""
    if SZ_POS:
        return (t < 0.0).to(tl.int32)
    else:
        return sign_bit(t)


@triton.jit
def view_offsets(rows, cols, K, INNER, INNER1: tl.constexpr):
    """Flat offsets of elements (rows[:, None], cols[None, :]) of a C-contiguous tensor seen as [M, K] with K the
    blocked axis: ``(r // INNER) * K * INNER + k * INNER + r % INNER`` (INNER1: the plain row-major ``r * K + k``)."""
    if INNER1:
        return rows[:, None] * K + cols[None, :]
    else:
        return (rows // INNER)[:, None] * (K * INNER) + cols[None, :] * INNER + (rows % INNER)[:, None]


@triton.jit
def pair_tile(M, K, K2, INNER, BM: tl.constexpr, C2: tl.constexpr, INNER1: tl.constexpr):
    """Indices of this program's [BM, 2 * C2] tile held as even/odd column halves: rows, pair (word) indices kw
    (contiguous, so loads and stores coalesce and vectorize), even columns, flat offsets of the even and odd
    elements, and masks for rows, even elements, odd elements and whole words (== even for even K)."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    kw = tl.program_id(1) * C2 + tl.arange(0, C2)
    ce = 2 * kw
    addr_e = view_offsets(rows, ce, K, INNER, INNER1)
    if INNER1:
        addr_o = addr_e + 1
    else:
        addr_o = addr_e + INNER
    rmask = (rows < M)[:, None]
    return (rows, kw, ce, addr_e, addr_o, rmask, rmask & (ce < K)[None, :], rmask & (ce + 1 < K)[None, :],
            rmask & (kw < K2)[None, :])


@triton.jit
def scale_tile(rows, rmask, M, K, INNER, BM: tl.constexpr, BK: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr,
               TWO_D: tl.constexpr, INNER1: tl.constexpr):
    """Flat offsets and mask of the block scales of this program's tile: [BM // TR, BK // TC] for 2-D tiles (scale
    array [M // TR, K // TC]), else [BM, BK // TC] in the tensor's own layout with the blocked axis shortened."""
    scols = tl.program_id(1) * (BK // TC) + tl.arange(0, BK // TC)
    if TWO_D:
        srows = tl.program_id(0) * (BM // TR) + tl.arange(0, BM // TR)
        return (srows[:, None] * (K // TC) + scols[None, :],
                (srows < M // TR)[:, None] & (scols < K // TC)[None, :])
    else:
        return view_offsets(rows, scols, K // TC, INNER, INNER1), rmask & (scols < K // TC)[None, :]


@triton.jit
def grouped_tile(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of this program for a 1-D grid over [M / BM, N / BN] output tiles, GROUP_M tile rows at a
    time so that consecutive programs share operand tiles in L2."""
    pid = tl.program_id(0)
    n_n = tl.cdiv(N, BN)
    group = pid // (GROUP_M * n_n)
    first_m = group * GROUP_M
    gsize = tl.minimum(tl.cdiv(M, BM) - first_m, GROUP_M)
    return first_m + (pid % (GROUP_M * n_n)) % gsize, (pid % (GROUP_M * n_n)) // gsize


@triton.jit
def load_f32(ptr, offs, mask, IN_KIND: tl.constexpr):
    """Load as fp32 (``IN_KIND``: ``params.InputKind``): fp32, bf16 (read as int16 bit patterns, widened by a
    shift: exact, also for subnormals, unlike the interpreter's bf16 cast), fp16."""
    if IN_KIND == INPUT_BF16:
        b = tl.load(ptr + offs, mask=mask, other=0)
        return f32_of(b.to(tl.int32) << 16)
    elif IN_KIND == INPUT_F16:
        return tl.load(ptr + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        return tl.load(ptr + offs, mask=mask, other=0.0)


@triton.jit
def load_tile(x_ptr, M, K, INNER, BM: tl.constexpr, BK: tl.constexpr, IN_KIND: tl.constexpr, INNER1: tl.constexpr):
    """This program's [BM, BK] tile of the [M, K] view as fp32, with its columns, offsets and mask."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BK + tl.arange(0, BK)
    addr = view_offsets(rows, cols, K, INNER, INNER1)
    mask = (rows < M)[:, None] & (cols < K)[None, :]
    return load_f32(x_ptr, addr, mask, IN_KIND), cols, addr, mask


@triton.jit
def blocks_of(v, BM: tl.constexpr, BK: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr, TWO_D: tl.constexpr):
    """Tile v [BM, BK] seen as its blocks: [BM // TR, TR, BK // TC, TC] for TR x TC tiles (TWO_D), else
    [BM, BK // TC, TC] for 1 x TC blocks along the columns."""
    if TWO_D:
        return tl.reshape(v, [BM // TR, TR, BK // TC, TC])
    else:
        return tl.reshape(v, [BM, BK // TC, TC])


@triton.jit
def expand_blocks(s, TWO_D: tl.constexpr):
    """Per-block values s ([BM // TR, BK // TC] or [BM, BK // TC]) with unit axes, to broadcast over ``blocks_of``."""
    if TWO_D:
        return s[:, None, :, None]
    else:
        return s[:, :, None]
