"""Randomized Hadamard transform (RHT) on consecutive n-element blocks, n in {16, 32, 64, 128, 256}.

Numerics (float32 throughout; float16/bfloat16/float64 inputs are first converted to float32, float64 with RTNE):
  forward  y = c * FWHT(s * v)      inverse  v = s * (c * FWHT(y))
where s is the +-1 sign vector of ``rht_signs(n, seed)`` (multiplying by it is exact), c = fp32(1/sqrt(n))
(``rht_scale``: exactly 1/4, 1/8, 1/16 for n = 16, 64, 256; 0x3E3504F3 and 0x3DB504F3 for n = 32, 128) applied
as one fp32 multiply per element, and FWHT is the unnormalized Sylvester Walsh-Hadamard transform computed by
log2(n) butterfly stages h = 1, 2, 4, ..., n/2: in every group of 2h elements, each pair (j, j+h) becomes
(a + b, a - b), one fp32 rounding each. In matrix form (exact arithmetic) forward is ``(s * v) @ H`` with
``H = hadamard_matrix(n)``, which is symmetric, so inverse(forward(v)) = v up to the fp32 roundings.

Sign j (j = 0..n-1) is -1 iff bit 31 of word (j % 4) of ``tl.randint4x(seed, j // 4)`` is set.

Range: a block with ``max |v| <= FLT_MAX / n`` gives finite results (each stage at most doubles the largest
magnitude); beyond, the IEEE results stand (a stage may overflow to +-Inf, and Inf - Inf gives NaN), in every
backend: no rescaling, which would change the bits of every input (docs/numerics.md).
"""

from __future__ import annotations

import functools

import numpy as np

from fp4lab.errors import InputError
from fp4lab.numerics.options import RHT_SIZES  # the allowed sizes, beside the other checks of quantize's options
from fp4lab.numerics.philox import philox4x32_reference


def check_rht_size(size: int) -> int:
    """``int(size)`` if it is an allowed RHT size (``RHT_SIZES``), else a one-line ``InputError``."""
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or int(size) not in RHT_SIZES:
        raise InputError(f"rht: size must be one of {', '.join(map(str, RHT_SIZES))}, got {size!r}")
    return int(size)


def rht_scale(size: int) -> np.float32:
    """fp32(1/sqrt(size)): the float64 quotient rounded once to float32 (RTNE)."""
    return np.float32(1.0 / np.sqrt(np.float64(check_rht_size(size))))


def hadamard_matrix(size: int) -> np.ndarray:
    """Normalized Sylvester Hadamard matrix H (float64, symmetric): H[0] = 1/sqrt(n), H_2n = [[H, H], [H, -H]]."""
    n = check_rht_size(size)
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(np.float64(n))


def rht_signs(size: int, seed: int = 0) -> np.ndarray:
    """float32 +-1 vector of length size: entry j is -1 iff bit 31 of word j % 4 of randint4x(seed, j // 4) is set."""
    return _rht_signs_cached(check_rht_size(size), int(seed)).copy()


@functools.lru_cache(maxsize=256)
def _rht_signs_cached(n: int, seed: int) -> np.ndarray:
    words = philox4x32_reference(seed, np.arange(n // 4, dtype=np.uint64)).T.reshape(-1)
    return np.where(words >> np.uint32(31), np.float32(-1.0), np.float32(1.0)).astype(np.float32)


def rht_blocks(x: np.ndarray, size: int, axis: int) -> tuple[np.ndarray, tuple[int, ...], int]:
    """Copy of x as C-contiguous float32 with ``axis`` moved last, reshaped to (blocks, size)."""
    arr = np.asarray(x)
    if not (arr.dtype.kind == "f" or arr.dtype.name == "bfloat16"):
        raise InputError(f"rht: x must be a float16, bfloat16, float32 or float64 array, got dtype {arr.dtype}")
    if not -arr.ndim <= axis < arr.ndim:
        raise InputError(f"rht: axis {axis} is out of range for a {arr.ndim}-D array")
    ax = axis % arr.ndim
    if arr.shape[ax] % size:
        raise InputError(
            f"rht: axis {axis} has length {arr.shape[ax]}, which is not a multiple of size={size}"
        )
    moved = np.moveaxis(arr, ax, -1)
    blocks = np.array(moved, dtype=np.float32, order="C", copy=True)
    return blocks.reshape(-1, size), moved.shape, ax


def rht_unblock(blocks: np.ndarray, moved_shape: tuple[int, ...], ax: int) -> np.ndarray:
    """Inverse of ``rht_blocks``: the (blocks, size) rows back in x's shape, C-contiguous."""
    return np.ascontiguousarray(np.moveaxis(blocks.reshape(moved_shape), -1, ax))


def _fwht_reference(u: np.ndarray) -> np.ndarray:
    """Unnormalized butterflies on each row of a float32 (m, n) array; stages h = 1, 2, ..., n/2."""
    m, n = u.shape
    h = 1
    while h < n:
        pairs = u.reshape(m, n // (2 * h), 2, h)
        a, b = pairs[:, :, 0, :], pairs[:, :, 1, :]
        u = np.stack((a + b, a - b), axis=2).reshape(m, n)
        h *= 2
    return u


def rht_reference(x: np.ndarray, size: int = 16, seed: int = 0, axis: int = -1, inverse: bool = False) -> np.ndarray:
    """The definition of the RHT (module docstring); ``fp4lab.emulator.nb_rht.rht`` is its numba twin (same
    arguments, same float32 bits)."""
    n = check_rht_size(size)
    blocks, moved_shape, ax = rht_blocks(x, n, axis)
    signs = rht_signs(n, seed)
    c = rht_scale(n)
    with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN results are data here, as in the numba twin
        if inverse:
            out = (_fwht_reference(blocks) * c) * signs
        else:
            out = _fwht_reference(blocks * signs) * c
    return rht_unblock(out, moved_shape, ax)
