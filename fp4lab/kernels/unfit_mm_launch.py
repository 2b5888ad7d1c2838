"""Host side of ``fp4lab.kernels.unfit_mm``: ``unfit_mm_triton`` (launch plans cached per shape, strides, dtype
and device)."""

from __future__ import annotations

from typing import Any

import triton

from fp4lab.errors import InputError
from fp4lab.kernels import unfit_mm as uk

_PLANS: dict[tuple, Any] = {}


# (BM, BN, BK, warps, stages) on the GPU: within 0.3 us of the fastest empty launch (the cost every FP8 GEMM pays)
# and close to the fastest with rows to compute (H200, benchmarks/unfit_mm_sweep.py; BENCHMARKS.md)
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
                            fixed=fixed, n_lead=11)
        if len(_PLANS) > 256:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def unfit_mm_triton(y: Any, a: tuple, b: tuple, counts: Any, bias: Any = None,
                    tile: tuple[int, ...] | None = None) -> Any:
    """Overwrite the rows of ``y`` [M, N] (fp32 or bf16, any strides) whose operand row of A is unfit, and its
    columns whose operand row of B is, with ``A @ B^T`` (+ ``bias`` [N]), fp32 accumulation, one rounding; add
    ``M + N`` and the number of unfit rows to the int64 ``counts[0]`` and ``counts[1]``. Returns ``y``. ``a`` and
    ``b`` are E4M3 operands ``(codes, scale, unfit, values)``: row-major float8_e4m3fn codes [M, K] / [N, K], fp32
    row scales ``2^r``, int32 0/1 unfit flags and bf16 values of the same shape (any strides; read only in unfit
    rows). ``tile``: (BM, BN, BK, warps, stages), for sweeps; the results depend on it only through the
    accumulation order inside ``tl.dot``."""
    import torch

    from fp4lab.kernels.host import check_device, interpreting, scratch_f32

    check_device(y, "unfit_mm")
    (qa, sa, ua, va), (qb, sb, ub, vb) = a, b
    M, K = qa.shape
    N = qb.shape[0]
    if (va.dtype != torch.bfloat16 or vb.dtype != torch.bfloat16 or qb.shape[1] != K or tuple(y.shape) != (M, N)
            or tuple(va.shape) != (M, K) or tuple(vb.shape) != (N, K) or not (qa.is_contiguous() and qb.is_contiguous())):
        raise InputError(f"unfit_mm: expected contiguous codes and bf16 values a [M, K], b [N, K] and y [M, N]; got "
                         f"a {tuple(qa.shape)} / {va.dtype} {tuple(va.shape)}, b {tuple(qb.shape)} / {vb.dtype} "
                         f"{tuple(vb.shape)}, y {tuple(y.shape)}")
    if y.dtype not in (torch.float32, torch.bfloat16):
        raise InputError(f"unfit_mm: y has dtype {y.dtype}; expected float32 or bfloat16")
    if counts.dtype != torch.int64 or counts.numel() < 2:
        raise InputError("unfit_mm: counts must be an int64 tensor of at least 2 elements")
    interp = interpreting()
    out_bf16 = y.dtype == torch.bfloat16
    bias32 = scratch_f32(y.device) if bias is None else bias.to(torch.float32).contiguous()
    strides = (*va.stride(), *vb.stride(), *y.stride())
    key = (M, N, K, strides, out_bf16, bias is not None, y.device, tile)
    plan = _plan(key, (M, N), (M, N, K, *strides), bias is not None, out_bf16, tile)
    if interp:
        va, vb = va.view(torch.int16), vb.view(torch.int16)
    plan(qa.view(torch.uint8), sa, va, qb.view(torch.uint8), sb, vb,
         y.view(torch.int16) if interp and out_bf16 else y, bias32, ua, ub, counts)
    return y
