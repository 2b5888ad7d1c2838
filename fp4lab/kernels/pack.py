"""Nibble packing of torch code tensors: two codes per byte along the last axis, element 2i in the low nibble."""

from __future__ import annotations

from typing import Any

from fp4lab.errors import InputError


def pack_nibbles_torch(codes: Any) -> Any:
    """uint8 tensor [..., n/2] from 4-bit codes [..., n] (any device): ``codes[2i] | codes[2i+1] << 4``."""
    import torch

    if codes.dim() == 0 or codes.shape[-1] % 2:
        raise InputError(f"pack_nibbles: the last axis must have even length, got shape {tuple(codes.shape)}")
    c = codes.to(torch.uint8)
    if c.numel() and int(c.max()) > 15:
        raise InputError(f"pack_nibbles: codes must be in 0..15, got a maximum of {int(c.max())}")
    pairs = c.reshape(*c.shape[:-1], c.shape[-1] // 2, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


def unpack_nibbles_torch(packed: Any) -> Any:
    """Inverse of ``pack_nibbles_torch``: uint8 codes [..., 2n] from bytes [..., n]."""
    import torch

    if packed.dtype != torch.uint8:
        raise InputError(f"unpack_nibbles: packed must be uint8, got {packed.dtype}")
    return torch.stack((packed & 15, packed >> 4), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def swizzle_scales_128x4(scales: Any) -> Any:
    """cuBLAS/CUTLASS block-scaled layout of a [rows, cols] scale matrix: rows padded to 128, cols to 4 (zeros),
    tiles of 128x4 stored as (rows/128, cols/4, 32, 4, 4) with element (r, c) of a tile at [r % 32, r // 32, c].
    Returns a flat tensor of ``ceil(rows/128)*128 * ceil(cols/4)*4`` entries."""
    import torch

    if scales.dim() != 2:
        raise InputError(f"swizzle_scales_128x4: expected a 2-D scale matrix, got shape {tuple(scales.shape)}")
    r, c = scales.shape
    rp, cp = -(-r // 128) * 128, -(-c // 4) * 4
    padded = torch.zeros((rp, cp), dtype=scales.dtype, device=scales.device)
    padded[:r, :c] = scales
    blocks = padded.reshape(rp // 128, 4, 32, cp // 4, 4).permute(0, 3, 2, 1, 4)
    return blocks.reshape(-1).contiguous()
