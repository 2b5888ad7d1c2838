"""The numba twin of ``fp4lab.numerics.philox``: Philox4x32-10 and the stochastic-rounding draws, same bits.

Public names:
  ``philox4x32(seed, offsets)`` and ``sr_random_bits(seed, n, bits)``: twins of ``philox4x32_reference`` and
  ``sr_random_bits_reference`` (arrays in, arrays out).
  ``philox4x32_10(seed_lo, seed_hi, c0, c1)``, ``sr_call_and_word(i, bits)``, ``sr_comparand(w, i, bits)`` and
  ``sr_bits_for(seed_lo, seed_hi, i, bits)``: njit scalars for inlining into other numba code; get
  ``seed_lo, seed_hi`` from ``split_seed(seed)``.
"""

from __future__ import annotations

import numpy as np

from fp4lab.emulator.jit import njit
from fp4lab.errors import InputError
from fp4lab.numerics.options import SR_BITS, check_sr_bits
from fp4lab.numerics.philox import (
    KEY_A,
    KEY_B,
    MASK32,
    N_ROUNDS,
    ROUND_A,
    ROUND_B,
    offsets_u64,
    split_seed,
)

# computed in uint64 and masked to 32 bits; typed constants keep every expression unsigned 64-bit.
_U_MASK = np.uint64(MASK32)
_U_A = np.uint64(ROUND_A)
_U_B = np.uint64(ROUND_B)
_U_KA = np.uint64(KEY_A)
_U_KB = np.uint64(KEY_B)
_U_32 = np.uint64(32)


@njit(cache=True)
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


@njit(cache=True)
def philox4x32_10(seed_lo, seed_hi, c0, c1):
    """``tl.randint4x`` for one counter (c0, c1) = (offset_lo, offset_hi): tuple of 4 uint32."""
    return philox_rounds(c0, c1, 0, 0, seed_lo, seed_hi)


@njit(cache=True)
def sr_comparand(w, i, bits):
    """24-bit SR comparand of flat element i from its Philox word ``w`` (see ``sr_random_bits_reference``)."""
    if bits == 24:
        return np.uint32(np.uint32(w) >> np.uint32(8))
    per = np.int64(32 // bits)
    r = (np.uint32(w) >> np.uint32((np.int64(i) % per) * bits)) & np.uint32((1 << bits) - 1)
    return np.uint32((r << np.uint32(24 - bits)) | np.uint32((1 << (24 - bits)) - 1))


@njit(cache=True)
def sr_call_and_word(i, bits):
    """(Philox call index, word index 0..3) that feed flat element i at width ``bits``."""
    ii = np.int64(i)
    if bits == 24:
        return np.uint64(ii >> 2), np.uint64(ii & 3)
    per = np.int64(32 // bits)
    return np.uint64(ii // (4 * per)), np.uint64((ii // per) & 3)


@njit(cache=True)
def sr_bits_for(seed_lo, seed_hi, i, bits=24):
    """24-bit SR comparand (uint32) of flat element i at width ``bits``. Costs one full Philox call; loops over
    consecutive elements should call ``philox4x32_10`` once per call index (``sr_call_and_word``)."""
    g, j = sr_call_and_word(i, bits)
    w = philox4x32_10(seed_lo, seed_hi, g & _U_MASK, g >> _U_32)
    return sr_comparand(w[j], i, bits)


@njit(cache=True)
def _philox4x32_flat(seed_lo, seed_hi, off, out):
    for j in range(off.shape[0]):
        o = off[j]
        w = philox4x32_10(seed_lo, seed_hi, o & _U_MASK, o >> _U_32)
        out[0, j] = w[0]
        out[1, j] = w[1]
        out[2, j] = w[2]
        out[3, j] = w[3]


@njit(cache=True)
def _sr_bits_flat(seed_lo, seed_hi, out, bits):
    g_last = np.uint64(0)
    w = philox4x32_10(seed_lo, seed_hi, g_last, g_last)
    for i in range(out.shape[0]):
        g, j = sr_call_and_word(i, bits)
        if g != g_last:
            w = philox4x32_10(seed_lo, seed_hi, g & _U_MASK, g >> _U_32)
            g_last = g
        out[i] = sr_comparand(w[j], i, bits)


def philox4x32(seed: int, offsets: np.ndarray) -> np.ndarray:
    """Numba twin of ``philox4x32_reference``: uint32 array of shape (4, *offsets.shape)."""
    lo, hi = split_seed(seed)
    off = offsets_u64(offsets)
    out = np.empty((4, off.size), dtype=np.uint32)
    _philox4x32_flat(np.uint64(lo), np.uint64(hi), np.ascontiguousarray(off).reshape(-1), out)
    return out.reshape((4, *off.shape))


def sr_random_bits(seed: int, n: int, bits: int = SR_BITS) -> np.ndarray:
    """Numba twin of ``sr_random_bits_reference``: uint32 array of length n (24-bit comparands)."""
    if n < 0:
        raise InputError(f"n must be >= 0, got {n}")
    bits = check_sr_bits(bits)
    lo, hi = split_seed(seed)
    out = np.empty(n, dtype=np.uint32)
    _sr_bits_flat(np.uint64(lo), np.uint64(hi), out, bits)
    return out
