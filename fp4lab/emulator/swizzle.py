"""The cuBLAS / CUTLASS "128x4" block-scale layout for interop with block-scaled GEMM libraries.

A row-major scale matrix ``[R, C]`` (one scale per 1xk block of an ``[R, C*k]`` operand) is zero-padded to
``[ceil(R/128)*128, ceil(C/4)*4]`` and cut into 128x4 tiles, stored tile after tile in row-major tile order.
Inside a 512-entry tile, the scale at tile row ``r`` and column ``c`` goes to offset
``(r % 32) * 16 + (r // 32) * 4 + c``. (cuBLAS documentation, "1D block scaling factors layout".)
"""

from __future__ import annotations

import numpy as np

from fp4lab.errors import InputError

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
