"""Nibble packing of 4-bit codes: two codes per byte along the last axis, element 2i in the low nibble (bits 0-3),
element 2i+1 in the high nibble (bits 4-7). The layout of ``tl.dot_scaled`` e2m1 operands, torchao's ``pack_uint4``
and torch's ``float4_e2m1fn_x2``.

``pack_nibbles``/``unpack_nibbles`` run a fused numba loop (validation included); the ``*_reference`` functions
are the plain-numpy definitions. Both give identical bytes and raise the same errors.
"""

from __future__ import annotations

import numpy as np

from fp4lab.emulator.jit import njit
from fp4lab.errors import InputError


def _check_codes(codes: np.ndarray) -> np.ndarray:
    c = np.asarray(codes)
    if c.dtype.kind not in "iu":
        raise InputError(f"pack_nibbles: codes must be an integer array, got dtype {c.dtype}")
    if c.ndim == 0 or c.shape[-1] % 2:
        raise InputError(f"pack_nibbles: the last axis must have even length, got shape {c.shape}")
    return c


def _range_error(c: np.ndarray) -> InputError:
    return InputError(f"pack_nibbles: codes must be in 0..15, got values in [{c.min()}, {c.max()}]")


def _check_packed(packed: np.ndarray) -> np.ndarray:
    p = np.asarray(packed)
    if p.dtype != np.uint8:
        raise InputError(f"unpack_nibbles: packed must be a uint8 array, got dtype {p.dtype}")
    if p.ndim == 0:
        raise InputError("unpack_nibbles: packed must have at least one axis, got a 0-d array")
    return p


# ----------------------------------------------------------------------------------------------------------
# plain-numpy reference


def pack_nibbles_reference(codes: np.ndarray) -> np.ndarray:
    """uint8 [..., K] codes in 0..15 (any integer dtype) -> uint8 [..., K/2]; byte i = codes[2i] | codes[2i+1] << 4."""
    c = _check_codes(codes)
    if c.size and (c.min() < 0 or c.max() > 15):
        raise _range_error(c)
    c = c.astype(np.uint8, copy=False)
    return np.ascontiguousarray(c[..., 0::2] | (c[..., 1::2] << np.uint8(4)))


def unpack_nibbles_reference(packed: np.ndarray) -> np.ndarray:
    """uint8 [..., K/2] -> uint8 [..., K] codes in 0..15; inverse of ``pack_nibbles``."""
    p = _check_packed(packed)
    out = np.empty((*p.shape[:-1], 2 * p.shape[-1]), dtype=np.uint8)
    out[..., 0::2] = p & np.uint8(0x0F)
    out[..., 1::2] = p >> np.uint8(4)
    return out


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
    c = _check_codes(codes)
    if c.dtype != np.uint8:
        if c.size and (c.min() < 0 or c.max() > 15):
            raise _range_error(c)
        c = c.astype(np.uint8)
    flat = np.ascontiguousarray(c).reshape(-1)
    out = np.empty(flat.size // 2, dtype=np.uint8)
    if _pack_flat(flat, out) > 15:
        raise _range_error(c)
    return out.reshape((*c.shape[:-1], c.shape[-1] // 2))


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """uint8 [..., K/2] -> uint8 [..., K] codes in 0..15; inverse of ``pack_nibbles``."""
    p = _check_packed(packed)
    out = np.empty(2 * p.size, dtype=np.uint8)
    _unpack_flat(np.ascontiguousarray(p).reshape(-1), out)
    return out.reshape((*p.shape[:-1], 2 * p.shape[-1]))
