"""Philox4x32-10 counter-based generator, bit-identical to Triton 3.6's ``tl.randint4x``: the numpy definition.

Key = (seed_lo, seed_hi), the two 32-bit halves of the 64-bit seed; counter = (offset_lo, offset_hi, 0, 0).
Each round: ``c0' = umulhi(B, c2) ^ c1 ^ k0``, ``c2' = umulhi(A, c0) ^ c3 ^ k1``, ``c1' = lo32(B * c2)``,
``c3' = lo32(A * c0)``; then the key is bumped by the Weyl constants. All arithmetic is modulo 2**32.

Public names:
  ``philox4x32_reference(seed, offsets)``: result shape ``(4, *offsets.shape)`` (row w = word w of
  ``tl.randint4x``).
  ``sr_random_bits_reference(seed, n, bits)``: the stochastic-rounding draws of elements 0..n-1 at a random-bit
  width of 24 (the default), 16, 8 or 4 bits per element; ``sr_elements_per_call(bits)``: elements per Philox call.
  ``split_seed(seed)``: the key halves ``(seed_lo, seed_hi)``.
The numba twins (``philox4x32``, ``sr_random_bits`` and scalar helpers for numba code) are in
``fp4lab.emulator.nb_philox``.
"""

from __future__ import annotations

import numpy as np

from fp4lab.errors import InputError
from fp4lab.numerics.options import SR_BITS, check_sr_bits

N_ROUNDS = 10
ROUND_A = 0xD2511F53  # multiplier applied to c0
ROUND_B = 0xCD9E8D57  # multiplier applied to c2
KEY_A = 0x9E3779B9  # added to k0 after every round
KEY_B = 0xBB67AE85  # added to k1 after every round
MASK32 = 0xFFFFFFFF
# SR_BITS (24, the default random bits per element of stochastic rounding: word >> 8), the allowed widths
# SR_WIDTHS and check_sr_bits live in fp4lab.numerics.options, beside the other checks of quantize's options.


def split_seed(seed: int) -> tuple[int, int]:
    """(seed_lo, seed_hi) of a seed in [-2**63, 2**64); negative seeds wrap as two's complement (Triton casts
    signed seeds to uint64)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed must be an int in [-2**63, 2**64), got {type(seed).__name__}")
    s = int(seed)
    if not -(2**63) <= s < 2**64:
        raise InputError(f"seed must be an int in [-2**63, 2**64), got {s}")
    s &= 2**64 - 1
    return s & MASK32, s >> 32


def offsets_u64(offsets: np.ndarray) -> np.ndarray:
    """Offsets as uint64; signed arrays must be non-negative."""
    off = np.asarray(offsets)
    if off.dtype.kind not in "iu":
        raise InputError(f"offsets must be an integer array (uint64 or int64), got dtype {off.dtype}")
    if off.dtype.kind == "i" and off.size and off.min() < 0:
        raise InputError(f"offsets must be non-negative, got minimum {off.min()}")
    return off.astype(np.uint64)


def _umulhi_lo(a: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """High and low 32-bit halves of a * x (a a 32-bit constant, x uint32 array) as uint32 arrays."""
    prod = np.uint64(a) * x.astype(np.uint64)
    return (prod >> np.uint64(32)).astype(np.uint32), (prod & np.uint64(MASK32)).astype(np.uint32)


def philox_rounds_reference(
    c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, k0: int, k1: int
) -> np.ndarray:
    """Philox4x32-10 on a full 4-word counter (uint32 arrays of one shape) and key (k0, k1); shape (4, ...)."""
    c = [np.asarray(w, dtype=np.uint32) for w in (c0, c1, c2, c3)]
    k0_, k1_ = int(k0) & MASK32, int(k1) & MASK32
    for _ in range(N_ROUNDS):
        hi_b, lo_b = _umulhi_lo(ROUND_B, c[2])
        hi_a, lo_a = _umulhi_lo(ROUND_A, c[0])
        c = [hi_b ^ c[1] ^ np.uint32(k0_), lo_b, hi_a ^ c[3] ^ np.uint32(k1_), lo_a]
        k0_ = (k0_ + KEY_A) & MASK32
        k1_ = (k1_ + KEY_B) & MASK32
    return np.stack(c)


def philox4x32_reference(seed: int, offsets: np.ndarray) -> np.ndarray:
    """``tl.randint4x(seed, offsets)``: uint32 array of shape (4, *offsets.shape); row w is word w."""
    lo, hi = split_seed(seed)
    off = offsets_u64(offsets)
    c0 = (off & np.uint64(MASK32)).astype(np.uint32)
    c1 = (off >> np.uint64(32)).astype(np.uint32)
    zero = np.zeros_like(c0)
    return philox_rounds_reference(c0, c1, zero, zero, lo, hi)


def sr_elements_per_call(bits: int) -> int:
    """Elements served by one ``randint4x`` call at width ``bits``: 4 at 24 bits, else 4 * 32 / bits."""
    return 4 if bits == SR_BITS else 4 * (32 // bits)


def sr_random_bits_reference(seed: int, n: int, bits: int = SR_BITS) -> np.ndarray:
    """Stochastic-rounding draws of flat elements 0..n-1 as 24-bit comparands (uint32 array of length n).

    ``bits`` = 24 (the default contract): element i takes word ``i % 4`` of ``randint4x(seed, i // 4)`` shifted
    right by 8. ``bits`` = w in (4, 8, 16): one call serves ``e = 4 * 32 / w`` consecutive elements; element i
    takes field ``f = i % (32 / w)`` (bits ``w*f .. w*f + w - 1``, the low field first) of word
    ``(i // (32 / w)) % 4`` of ``randint4x(seed, i // e)``: a w-bit integer r. Its comparand is
    ``r << (24 - w) | (2^(24 - w) - 1)``, so the encoders' 24-bit rule ``up iff floor(p * 2^24) > comparand`` is
    exactly ``up iff floor(p * 2^w) > r``.
    """
    if n < 0:
        raise InputError(f"n must be >= 0, got {n}")
    bits = check_sr_bits(bits)
    if bits == SR_BITS:
        words = philox4x32_reference(seed, np.arange((n + 3) // 4, dtype=np.uint64))
        return (words.T.reshape(-1)[:n] >> np.uint32(8)).astype(np.uint32)
    per = 32 // bits
    e = 4 * per
    words = philox4x32_reference(seed, np.arange((n + e - 1) // e, dtype=np.uint64))  # (4, calls)
    flat = words.T.reshape(-1)  # word (call, j) at 4 * call + j: element i's word is i // per
    i = np.arange(n, dtype=np.int64)
    r = (flat[i // per] >> ((i % per) * bits).astype(np.uint32)) & np.uint32((1 << bits) - 1)
    return ((r << np.uint32(24 - bits)) | np.uint32((1 << (24 - bits)) - 1)).astype(np.uint32)
