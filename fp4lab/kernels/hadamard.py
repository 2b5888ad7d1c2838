"""Triton device functions of the Random Hadamard Transform on register tiles: FWHT butterfly stages along
columns or rows, on whole tiles or on tiles held as even/odd halves, with the random signs and the 1/sqrt(N)
scale (``fp4lab.numerics.rht`` is the reference; the stage order is its order of additions).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def butterfly(v, R: tl.constexpr, C: tl.constexpr, H: tl.constexpr):
    """One FWHT stage on v [R, C]: in each group of 2H consecutive columns, (a_j, a_{j+H}) -> (a + b, a - b)."""
    w = tl.reshape(v, [R, C // (2 * H), 2, H])
    w = tl.permute(w, [0, 1, 3, 2])
    a, b = tl.split(w)
    w = tl.join(a + b, a - b)
    w = tl.permute(w, [0, 1, 3, 2])
    return tl.reshape(w, [R, C])


@triton.jit
def fwht(v, R: tl.constexpr, C: tl.constexpr, N: tl.constexpr):
    """Unnormalized Walsh-Hadamard transform of every N-column chunk of v [R, C]; stages H = 1, 2, ..., N/2."""
    for s in tl.static_range(N.bit_length() - 1):
        v = butterfly(v, R, C, 1 << s)
    return v


@triton.jit
def rht_tile(v, signs_ptr, cols, rscale, R: tl.constexpr, C: tl.constexpr, N: tl.constexpr, INVERSE: tl.constexpr):
    """Forward ``c * FWHT(s * v)`` or inverse ``s * (c * FWHT(v))`` of the N-chunks of v along columns ``cols``."""
    s = tl.load(signs_ptr + (cols % N))[None, :]
    if INVERSE:
        return (fwht(v, R, C, N) * rscale) * s
    else:
        return fwht(v * s, R, C, N) * rscale


@triton.jit
def rht_pairs(e, o, signs_ptr, cols_e, rscale, R: tl.constexpr, C2: tl.constexpr, N: tl.constexpr,
              INVERSE: tl.constexpr):
    """RHT on a tile held as even/odd column halves e, o [R, C2] (cols_e: global even column indices).
    Stage h = 1 pairs (even, odd) elementwise; stages h >= 2 act within each half with h/2."""
    se = tl.load(signs_ptr + (cols_e % N))[None, :]
    so = tl.load(signs_ptr + ((cols_e + 1) % N))[None, :]
    if not INVERSE:
        e = e * se
        o = o * so
    e, o = e + o, e - o
    if N >= 4:
        e = fwht(e, R, C2, N // 2)
        o = fwht(o, R, C2, N // 2)
    e = e * rscale
    o = o * rscale
    if INVERSE:
        e = e * se
        o = o * so
    return e, o


@triton.jit
def butterfly_rows(v, R: tl.constexpr, C: tl.constexpr, H: tl.constexpr):
    """One FWHT stage on v [R, C] along rows: in each group of 2H consecutive rows, (a_j, a_{j+H}) -> (a + b, a - b)."""
    w = tl.permute(tl.reshape(v, [R // (2 * H), 2, H, C]), [0, 2, 3, 1])
    a, b = tl.split(w)
    w = tl.permute(tl.join(a + b, a - b), [0, 3, 1, 2])
    return tl.reshape(w, [R, C])


@triton.jit
def rht_row_pairs(e, o, signs_ptr, rows_e, rscale, R: tl.constexpr, C: tl.constexpr, N: tl.constexpr):
    """Forward RHT along rows of a tile held as even/odd row halves e, o [R, C] (rows_e: global even row indices):
    ``c * FWHT(s * v)`` over each N-row chunk. Stage h = 1 pairs (even, odd) elementwise; stages h >= 2 act within
    each half with h/2 (the same butterflies, in the same order, as ``rht_pairs`` along columns)."""
    e = e * tl.load(signs_ptr + (rows_e % N))[:, None]
    o = o * tl.load(signs_ptr + ((rows_e + 1) % N))[:, None]
    e, o = e + o, e - o
    for s in tl.static_range((N // 2).bit_length() - 1):
        e = butterfly_rows(e, R, C, 1 << s)
        o = butterfly_rows(o, R, C, 1 << s)
    return e * rscale, o * rscale
