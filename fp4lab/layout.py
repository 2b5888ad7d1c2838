"""Memory layouts of quantized tensors, shared by every backend (numpy at import; torch inside the torch functions).

* Nibble packing of 4-bit codes: two codes per byte along the last axis, element 2i in the low nibble (bits 0-3),
  element 2i+1 in the high nibble (bits 4-7): the layout of ``tl.dot_scaled`` e2m1 operands, torchao's
  ``pack_uint4`` and torch's ``float4_e2m1fn_x2``. ``pack_nibbles_reference`` / ``unpack_nibbles_reference`` are
  the numpy definitions (``fp4lab.emulator.pack`` holds their numba twins), ``*_torch`` the same on torch tensors
  of any device; ``unpack_codes`` takes either (and torch's ``float4_e2m1fn_x2``), for ``fp4lab.unpack`` and
  ``fp4lab.interop``.
* The cuBLAS / CUTLASS "128x4" block-scale layout for interop with block-scaled GEMM libraries. A row-major scale
  matrix ``[R, C]`` (one scale per 1xk block of an ``[R, C*k]`` operand) is zero-padded to
  ``[ceil(R/128)*128, ceil(C/4)*4]`` and cut into 128x4 tiles, stored tile after tile in row-major tile order.
  Inside a 512-entry tile, the scale at tile row ``r`` and column ``c`` goes to offset
  ``(r % 32) * 16 + (r // 32) * 4 + c`` (cuBLAS documentation, "1D block scaling factors layout").

This module sits below ``fp4lab.quantized``, whose ``packed()`` and ``swizzled_scale_codes()`` use it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fp4lab.errors import InputError


def check_codes(codes: np.ndarray) -> np.ndarray:
    c = np.asarray(codes)
    if c.dtype.kind not in "iu":
        raise InputError(f"pack_nibbles: codes must be an integer array, got dtype {c.dtype}")
    if c.ndim == 0 or c.shape[-1] % 2:
        raise InputError(f"pack_nibbles: the last axis must have even length, got shape {c.shape}")
    return c


def range_error(c: np.ndarray) -> InputError:
    return InputError(f"pack_nibbles: codes must be in 0..15, got values in [{c.min()}, {c.max()}]")


def check_packed(packed: np.ndarray) -> np.ndarray:
    p = np.asarray(packed)
    if p.dtype != np.uint8:
        raise InputError(f"unpack_nibbles: packed must be a uint8 array, got dtype {p.dtype}")
    if p.ndim == 0:
        raise InputError("unpack_nibbles: packed must have at least one axis, got a 0-d array")
    return p


def pack_nibbles_reference(codes: np.ndarray) -> np.ndarray:
    """uint8 [..., K] codes in 0..15 (any integer dtype) -> uint8 [..., K/2]; byte i = codes[2i] | codes[2i+1] << 4."""
    c = check_codes(codes)
    if c.size and (c.min() < 0 or c.max() > 15):
        raise range_error(c)
    c = c.astype(np.uint8, copy=False)
    return np.ascontiguousarray(c[..., 0::2] | (c[..., 1::2] << np.uint8(4)))


def unpack_nibbles_reference(packed: np.ndarray) -> np.ndarray:
    """uint8 [..., K/2] -> uint8 [..., K] codes in 0..15; inverse of ``pack_nibbles``."""
    p = check_packed(packed)
    out = np.empty((*p.shape[:-1], 2 * p.shape[-1]), dtype=np.uint8)
    out[..., 0::2] = p & np.uint8(0x0F)
    out[..., 1::2] = p >> np.uint8(4)
    return out


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


TILE_ROWS, TILE_COLS = 128, 4


def _offsets(rows: int, cols: int) -> tuple[np.ndarray, int, int]:
    n_rb, n_cb = -(-rows // TILE_ROWS), -(-cols // TILE_COLS)
    r = np.arange(n_rb * TILE_ROWS)[:, None]
    c = np.arange(n_cb * TILE_COLS)[None, :]
    tile = (r // TILE_ROWS) * n_cb + c // TILE_COLS
    r_in, c_in = r % TILE_ROWS, c % TILE_COLS
    return tile * (TILE_ROWS * TILE_COLS) + (r_in % 32) * 16 + (r_in // 32) * 4 + c_in, n_rb, n_cb


def swizzle_scales(scales: np.ndarray) -> np.ndarray:
    """Flat array of ``32*ceil(R/128) * 16*ceil(C/4)`` entries: ``scales [R, C]`` in the 128x4 layout."""
    scales = np.asarray(scales)
    if scales.ndim != 2:
        raise InputError(f"swizzle_scales: scales must be 2-D [rows, blocks], got shape {scales.shape}")
    rows, cols = scales.shape
    off, n_rb, n_cb = _offsets(rows, cols)
    out = np.zeros(n_rb * n_cb * TILE_ROWS * TILE_COLS, dtype=scales.dtype)
    out[off[:rows, :cols]] = scales
    return out


def unswizzle_scales(flat: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Inverse of ``swizzle_scales``: the row-major ``[rows, cols]`` scales (padding dropped)."""
    off, n_rb, n_cb = _offsets(rows, cols)
    flat = np.asarray(flat).reshape(-1)
    if flat.size != n_rb * n_cb * TILE_ROWS * TILE_COLS:
        raise InputError(f"unswizzle_scales: expected {n_rb * n_cb * 512} entries for [{rows}, {cols}] scales, "
                         f"got {flat.size}")
    return flat[off[:rows, :cols]]


def _is_torch_tensor(a: Any) -> bool:
    return type(a).__module__.startswith("torch")


def unpack_codes(packed: Any) -> Any:
    """uint8 codes [..., 2n] of packed bytes [..., n] (numpy uint8 -> numpy; torch uint8 or float4_e2m1fn_x2 ->
    torch on the same device): ``codes[..., 2i] = byte & 15``, ``codes[..., 2i+1] = byte >> 4``."""
    if _is_torch_tensor(packed):
        import torch

        if packed.dtype not in (torch.uint8, torch.float4_e2m1fn_x2):
            raise InputError(f"unpack_codes: packed must be torch.uint8 or torch.float4_e2m1fn_x2, got {packed.dtype}")
        if packed.dim() == 0:
            raise InputError("unpack_codes: packed must have at least one axis, got a 0-d tensor")
        return unpack_nibbles_torch(packed.contiguous().view(torch.uint8))
    if not isinstance(packed, np.ndarray):
        raise InputError(f"unpack_codes: packed must be a numpy array or torch tensor, got {type(packed).__name__}")
    return unpack_nibbles_reference(packed)
