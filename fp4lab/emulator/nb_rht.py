"""The numba twin of ``fp4lab.numerics.rht``: the randomized Hadamard transform, same float32 bits as
``rht_reference`` (the numerics are in that module's docstring).
"""

from __future__ import annotations

import numpy as np

from fp4lab.emulator.jit import njit
from fp4lab.numerics.rht import check_rht_size, rht_blocks, rht_signs, rht_unblock


@njit(cache=True)
def rht_block_inplace(v, signs, inverse):
    """Rotate one contiguous float32 block v (length n = len(signs), a power of two) in place.
    forward: v <- c * FWHT(signs * v); inverse: v <- signs * (c * FWHT(v)); c = fp32(1/sqrt(n))."""
    n = v.shape[0]
    c = np.float32(1.0 / np.sqrt(np.float64(n)))
    if not inverse:
        for j in range(n):
            v[j] = v[j] * signs[j]
    h = 1
    while h < n:
        for i in range(0, n, 2 * h):
            for j in range(i, i + h):
                a = v[j]
                b = v[j + h]
                v[j] = a + b
                v[j + h] = a - b
        h *= 2
    for j in range(n):
        v[j] = v[j] * c
    if inverse:
        for j in range(n):
            v[j] = v[j] * signs[j]


@njit(cache=True)
def _rht_rows(blocks, signs, inverse):
    for r in range(blocks.shape[0]):
        rht_block_inplace(blocks[r], signs, inverse)


def rht(x: np.ndarray, size: int = 16, seed: int = 0, axis: int = -1, inverse: bool = False) -> np.ndarray:
    """Randomized Hadamard transform of consecutive ``size``-element chunks along ``axis``; float32 result of x's
    shape. ``inverse=True`` undoes the forward transform with the same seed (up to fp32 rounding)."""
    n = check_rht_size(size)
    blocks, moved_shape, ax = rht_blocks(x, n, axis)
    _rht_rows(blocks, rht_signs(n, seed), bool(inverse))
    return rht_unblock(blocks, moved_shape, ax)
