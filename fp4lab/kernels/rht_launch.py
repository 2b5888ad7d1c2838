"""Host side of the standalone RHT kernel (``fp4lab.kernels.rht``): ``rht_triton``."""

from __future__ import annotations

import triton

from fp4lab.kernels import rht as rk
from fp4lab.numerics.blocks import normalize_axis
from fp4lab.numerics.rht import check_rht_size, rht_scale, rht_signs


def rht_triton(x, size=16, seed=0, axis=-1, inverse=False, tile=None):
    """fp32 tensor: RHT of torch tensor ``x`` (bf16/fp16/fp32/fp64) in ``size`` chunks along ``axis``."""
    import torch

    from fp4lab.errors import InputError
    from fp4lab.kernels.host import device_array, interpreting, kernel_input, matrix_view
    from fp4lab.kernels.quantize_launch import tile_shape

    n = check_rht_size(size)
    xin, in_kind = kernel_input(x, "rht")
    shape = tuple(x.shape)
    if not shape:
        raise InputError("rht: x is a 0-d scalar; give an array with at least one axis")
    ax = normalize_axis(axis, len(shape), "rht")
    if shape[ax] % n:
        raise InputError(f"rht: axis {axis} has length {shape[ax]}, which is not a multiple of size={n}")
    mv = matrix_view(shape, ax, False)
    bm, bk = tile if tile is not None else tile_shape(mv.K, mv.M, 1, n, n, interpreting(), False)
    out = torch.empty(shape, dtype=torch.float32, device=x.device)
    opts = {} if interpreting() else {"enable_fp_fusion": False}
    if mv.M * mv.K:
        grid = (triton.cdiv(mv.M, bm), triton.cdiv(mv.K, bk))
        rk._rht_kernel[grid](xin, out, device_array(rht_signs(n, seed), x.device), float(rht_scale(n)), mv.M, mv.K,
                          mv.inner, BM=bm, BK=bk, IN_KIND=in_kind.code, INNER1=mv.inner == 1, N=n,
                          INVERSE=bool(inverse), **opts)
    return out
