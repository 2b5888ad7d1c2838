"""Philox4x32-10 counter-based generator, bit-identical to Triton 3.6's ``tl.randint4x``.

Key = (seed_lo, seed_hi), the two 32-bit halves of the 64-bit seed; counter = (offset_lo, offset_hi, 0, 0).
Each round: ``c0' = umulhi(B, c2) ^ c1 ^ k0``, ``c2' = umulhi(A, c0) ^ c3 ^ k1``, ``c1' = lo32(B * c2)``,
``c3' = lo32(A * c0)``; then the key is bumped by the Weyl constants. All arithmetic is modulo 2**32.

Public names:
  ``philox4x32(seed, offsets)`` / ``philox4x32_reference``: arrays, result shape ``(4, *offsets.shape)``
  (row w = word w of ``tl.randint4x``).
  ``sr_random_bits(seed, n)`` / ``sr_random_bits_reference``: the stochastic-rounding bits of elements 0..n-1.
  ``philox4x32_10(seed_lo, seed_hi, c0, c1)`` and ``sr_bits_for(seed_lo, seed_hi, i)``: njit scalars for
  inlining into other numba code; get ``seed_lo, seed_hi`` from ``split_seed(seed)``.
"""

from __future__ import annotations

import numba
import numpy as np

from fp4lab.errors import InputError

N_ROUNDS = 10
ROUND_A = 0xD2511F53  # multiplier applied to c0
ROUND_B = 0xCD9E8D57  # multiplier applied to c2
KEY_A = 0x9E3779B9  # added to k0 after every round
KEY_B = 0xBB67AE85  # added to k1 after every round
SR_BITS = 24  # random bits per element for stochastic rounding: word >> 8

_MASK32 = 0xFFFFFFFF

# numba twins compute in uint64 and mask to 32 bits; typed constants keep every expression unsigned 64-bit.
_U_MASK = np.uint64(_MASK32)
_U_A = np.uint64(ROUND_A)
_U_B = np.uint64(ROUND_B)
_U_KA = np.uint64(KEY_A)
_U_KB = np.uint64(KEY_B)
_U_32 = np.uint64(32)
_U_2 = np.uint64(2)
_U_3 = np.uint64(3)
_U_8 = np.uint64(8)


def split_seed(seed: int) -> tuple[int, int]:
    """(seed_lo, seed_hi) of a seed in [-2**63, 2**64); negative seeds wrap as two's complement (Triton casts
    signed seeds to uint64)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed must be an int in [-2**63, 2**64), got {type(seed).__name__}")
    s = int(seed)
    if not -(2**63) <= s < 2**64:
        raise InputError(f"seed must be an int in [-2**63, 2**64), got {s}")
    s &= 2**64 - 1
    return s & _MASK32, s >> 32


def _offsets_u64(offsets: np.ndarray) -> np.ndarray:
    """Offsets as uint64; signed arrays must be non-negative."""
    off = np.asarray(offsets)
    if off.dtype.kind not in "iu":
        raise InputError(f"offsets must be an integer array (uint64 or int64), got dtype {off.dtype}")
    if off.dtype.kind == "i" and off.size and off.min() < 0:
        raise InputError(f"offsets must be non-negative, got minimum {off.min()}")
    return off.astype(np.uint64)


# ----------------------------------------------------------------------------------------------------------
# plain-numpy reference


def _umulhi_lo(a: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """High and low 32-bit halves of a * x (a a 32-bit constant, x uint32 array) as uint32 arrays."""
    prod = np.uint64(a) * x.astype(np.uint64)
    return (prod >> np.uint64(32)).astype(np.uint32), (prod & np.uint64(_MASK32)).astype(np.uint32)


def philox_rounds_reference(
    c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, k0: int, k1: int
) -> np.ndarray:
    """Philox4x32-10 on a full 4-word counter (uint32 arrays of one shape) and key (k0, k1); shape (4, ...)."""
    c = [np.asarray(w, dtype=np.uint32) for w in (c0, c1, c2, c3)]
    k0_, k1_ = int(k0) & _MASK32, int(k1) & _MASK32
    for _ in range(N_ROUNDS):
        hi_b, lo_b = _umulhi_lo(ROUND_B, c[2])
        hi_a, lo_a = _umulhi_lo(ROUND_A, c[0])
        c = [hi_b ^ c[1] ^ np.uint32(k0_), lo_b, hi_a ^ c[3] ^ np.uint32(k1_), lo_a]
        k0_ = (k0_ + KEY_A) & _MASK32
        k1_ = (k1_ + KEY_B) & _MASK32
    return np.stack(c)


def philox4x32_reference(seed: int, offsets: np.ndarray) -> np.ndarray:
    """``tl.randint4x(seed, offsets)``: uint32 array of shape (4, *offsets.shape); row w is word w."""
    lo, hi = split_seed(seed)
    off = _offsets_u64(offsets)
    c0 = (off & np.uint64(_MASK32)).astype(np.uint32)
    c1 = (off >> np.uint64(32)).astype(np.uint32)
    zero = np.zeros_like(c0)
    return philox_rounds_reference(c0, c1, zero, zero, lo, hi)


def sr_random_bits_reference(seed: int, n: int) -> np.ndarray:
    """Stochastic-rounding bits of flat elements 0..n-1: element i takes word (i % 4) of
    ``randint4x(seed, i // 4)`` shifted right by 8 (24 random bits). uint32 array of length n."""
    if n < 0:
        raise InputError(f"n must be >= 0, got {n}")
    words = philox4x32_reference(seed, np.arange((n + 3) // 4, dtype=np.uint64))
    return (words.T.reshape(-1)[:n] >> np.uint32(8)).astype(np.uint32)


# ----------------------------------------------------------------------------------------------------------
# numba twins


@numba.njit(cache=True)
def philox_rounds(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on a full 4-word counter and key; integer scalars in, tuple of 4 uint32 out."""
    x0 = np.uint64(c0) & _U_MASK
    x1 = np.uint64(c1) & _U_MASK
    x2 = np.uint64(c2) & _U_MASK
    x3 = np.uint64(c3) & _U_MASK
    key0 = np.uint64(k0) & _U_MASK
    key1 = np.uint64(k1) & _U_MASK
    for _ in range(N_ROUNDS):
        pb = _U_B * x2
        pa = _U_A * x0
        x0 = (pb >> _U_32) ^ x1 ^ key0
        x2 = (pa >> _U_32) ^ x3 ^ key1
        x1 = pb & _U_MASK
        x3 = pa & _U_MASK
        key0 = (key0 + _U_KA) & _U_MASK
        key1 = (key1 + _U_KB) & _U_MASK
    return np.uint32(x0), np.uint32(x1), np.uint32(x2), np.uint32(x3)


@numba.njit(cache=True)
def philox4x32_10(seed_lo, seed_hi, c0, c1):
    """``tl.randint4x`` for one counter (c0, c1) = (offset_lo, offset_hi): tuple of 4 uint32."""
    return philox_rounds(c0, c1, 0, 0, seed_lo, seed_hi)


@numba.njit(cache=True)
def sr_bits_for(seed_lo, seed_hi, i):
    """24 stochastic-rounding bits (uint32) of flat element i: word (i % 4) of randint4x(seed, i // 4) >> 8.
    Costs one full Philox call; loops over consecutive elements should call ``philox4x32_10`` once per 4."""
    ii = np.uint64(i)
    off = ii >> _U_2
    w = philox4x32_10(seed_lo, seed_hi, off & _U_MASK, off >> _U_32)
    return np.uint32(np.uint64(w[ii & _U_3]) >> _U_8)


@numba.njit(cache=True)
def _philox4x32_flat(seed_lo, seed_hi, off, out):
    for j in range(off.shape[0]):
        o = off[j]
        w = philox4x32_10(seed_lo, seed_hi, o & _U_MASK, o >> _U_32)
        out[0, j] = w[0]
        out[1, j] = w[1]
        out[2, j] = w[2]
        out[3, j] = w[3]


@numba.njit(cache=True)
def _sr_bits_flat(seed_lo, seed_hi, out):
    n = out.shape[0]
    for g in range((n + 3) // 4):
        w = philox4x32_10(seed_lo, seed_hi, np.uint64(g) & _U_MASK, np.uint64(g) >> _U_32)
        for k in range(min(4, n - 4 * g)):
            out[4 * g + k] = w[k] >> np.uint32(8)


def philox4x32(seed: int, offsets: np.ndarray) -> np.ndarray:
    """Numba twin of ``philox4x32_reference``: uint32 array of shape (4, *offsets.shape)."""
    lo, hi = split_seed(seed)
    off = _offsets_u64(offsets)
    out = np.empty((4, off.size), dtype=np.uint32)
    _philox4x32_flat(np.uint64(lo), np.uint64(hi), np.ascontiguousarray(off).reshape(-1), out)
    return out.reshape((4, *off.shape))


def sr_random_bits(seed: int, n: int) -> np.ndarray:
    """Numba twin of ``sr_random_bits_reference``: uint32 array of length n, 24 random bits each."""
    if n < 0:
        raise InputError(f"n must be >= 0, got {n}")
    lo, hi = split_seed(seed)
    out = np.empty(n, dtype=np.uint32)
    _sr_bits_flat(np.uint64(lo), np.uint64(hi), out)
    return out
