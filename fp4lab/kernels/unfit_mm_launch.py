"""Host side of ``fp4lab.kernels.unfit_mm``: ``unfit_mm_triton`` (launch plans cached per shape, strides, dtype
and device)."""

from __future__ import annotations

from typing import Any

import triton

from fp4lab.errors import InputError
from fp4lab.kernels import unfit_mm as uk

_PLANS: dict[tuple, Any] = {}


# (BM, BN, BK, warps, stages) on the GPU: within 0.3 us of the fastest empty launch (the cost every FP8 GEMM pays)
# and close to the fastest with rows to compute (H200, benchmarks/device/unfit_mm_sweep.py; BENCHMARKS.md)
GPU_TILE = (128, 128, 64, 4, 3)


def _plan(key: tuple, grid: tuple[int, int], fixed: tuple, has_bias: bool, out_bf16: bool,
          tile: tuple[int, ...] | None) -> Any:
    from fp4lab.kernels.host import CachedLaunch, interpreting

    plan = _PLANS.get(key)
    if plan is None:
        interp = interpreting()
        bm, bn, bk, warps, stages = tile or ((16, 16, 16, 4, 1) if interp else GPU_TILE)
        opts = {} if interp else {"num_warps": warps, "num_stages": stages}
        plan = CachedLaunch(uk._unfit_mm_kernel, (triton.cdiv(grid[0], bm), triton.cdiv(grid[1], bn)),
                            dict(BM=bm, BN=bn, BK=bk, HAS_BIAS=has_bias, OUT_BF16=out_bf16, INTERP=interp), opts,
                            fixed=fixed, n_lead=7)
        if len(_PLANS) > 256:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def unfit_mm_triton(y: Any, a: Any, b: Any, unfit_a: Any, unfit_b: Any, counts: Any, bias: Any = None,
                    tile: tuple[int, ...] | None = None) -> Any:
    """Overwrite the rows of ``y`` [M, N] (fp32 or bf16, any strides) whose ``unfit_a`` [M] flag is set, and its
    columns whose ``unfit_b`` [N] flag is set, with ``a @ b^T`` (+ ``bias`` [N]) from bf16 ``a`` [M, K] and ``b``
    [N, K] (any strides), fp32 accumulation, one rounding; add ``M + N`` and the number of set flags to the int64
    ``counts[0]`` and ``counts[1]``. Returns ``y``. Flags are int32 0/1 (``to_e4m3_rows``'s ``unfit``). ``tile``:
    (BM, BN, BK, warps, stages), for sweeps; the results depend on it only through the accumulation order inside
    ``tl.dot``."""
    import torch

    from fp4lab.kernels.host import check_device, interpreting, scratch_f32

    check_device(y, "unfit_mm")
    M, K = a.shape
    N = b.shape[0]
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16 or b.shape[1] != K or tuple(y.shape) != (M, N):
        raise InputError(f"unfit_mm: expected bf16 a [M, K], b [N, K] and y [M, N]; got a {a.dtype} "
                         f"{tuple(a.shape)}, b {b.dtype} {tuple(b.shape)}, y {tuple(y.shape)}")
    if y.dtype not in (torch.float32, torch.bfloat16):
        raise InputError(f"unfit_mm: y has dtype {y.dtype}; expected float32 or bfloat16")
    if counts.dtype != torch.int64 or counts.numel() < 2:
        raise InputError("unfit_mm: counts must be an int64 tensor of at least 2 elements")
    interp = interpreting()
    out_bf16 = y.dtype == torch.bfloat16
    bias32 = scratch_f32(y.device) if bias is None else bias.to(torch.float32).contiguous()
    strides = (*a.stride(), *b.stride(), *y.stride())
    key = (M, N, K, strides, out_bf16, bias is not None, y.device, tile)
    plan = _plan(key, (M, N), (M, N, K, *strides), bias is not None, out_bf16, tile)
    if interp:
        a, b = a.view(torch.int16), b.view(torch.int16)
    plan(a, b, y.view(torch.int16) if interp and out_bf16 else y, bias32, unfit_a, unfit_b, counts)
    return y
