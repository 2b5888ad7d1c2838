"""Numba twins of the nibble packing in ``fp4lab.layout`` (two codes per byte along the last axis, element 2i in
the low nibble): ``pack_nibbles``/``unpack_nibbles`` run a fused loop (validation included) and give the bytes and
errors of ``fp4lab.layout.pack_nibbles_reference`` / ``unpack_nibbles_reference``.
"""

from __future__ import annotations

import numpy as np

from fp4lab.emulator.jit import njit
from fp4lab.layout import check_codes, check_packed, range_error

# ----------------------------------------------------------------------------------------------------------
# numba twins (one signature each: flat C-contiguous uint8 arrays)


@njit(cache=True)
def _pack_flat(c, out):
    """out[i] = c[2i] | c[2i+1] << 4; returns the OR of all codes (> 15 means some code was out of range)."""
    seen = np.uint8(0)
    for i in range(out.shape[0]):
        lo = c[2 * i]
        hi = c[2 * i + 1]
        seen |= lo | hi
        out[i] = lo | (hi << np.uint8(4))
    return seen


@njit(cache=True)
def _unpack_flat(p, out):
    for i in range(p.shape[0]):
        b = p[i]
        out[2 * i] = b & np.uint8(0x0F)
        out[2 * i + 1] = b >> np.uint8(4)


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """uint8 [..., K] codes in 0..15 (any integer dtype) -> uint8 [..., K/2]; byte i = codes[2i] | codes[2i+1] << 4."""
    c = check_codes(codes)
    if c.dtype != np.uint8:
        if c.size and (c.min() < 0 or c.max() > 15):
            raise range_error(c)
        c = c.astype(np.uint8)
    flat = np.ascontiguousarray(c).reshape(-1)
    out = np.empty(flat.size // 2, dtype=np.uint8)
    if _pack_flat(flat, out) > 15:
        raise range_error(c)
    return out.reshape((*c.shape[:-1], c.shape[-1] // 2))


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """uint8 [..., K/2] -> uint8 [..., K] codes in 0..15; inverse of ``pack_nibbles``."""
    p = check_packed(packed)
    out = np.empty(2 * p.size, dtype=np.uint8)
    _unpack_flat(np.ascontiguousarray(p).reshape(-1), out)
    return out.reshape((*p.shape[:-1], 2 * p.shape[-1]))
