"""Host side of the E4M3 row/column conversion kernels (``fp4lab.kernels.fp8_convert``): launch plans cached per
shape and device, and ``to_e4m3_rows_triton``."""

from __future__ import annotations

import math
from typing import Any

import triton

from fp4lab.errors import InputError
from fp4lab.kernels import fp8_convert as fk

_PLANS: dict[tuple, Any] = {}  # launch plans per (rows, cols, transpose, device)


def _launches(R: int, C: int, transpose: bool, device: Any) -> tuple:
    from fp4lab.kernels.host import CachedLaunch, interpreting

    key = (R, C, transpose, device)
    plan = _PLANS.get(key)
    if plan is None:
        interp = interpreting()
        opts = {} if interp else {"num_warps": 4}
        if not transpose:
            br, bc = 2, min(1024, triton.next_power_of_2(C))
            plan = (CachedLaunch(fk._rows_kernel, (math.ceil(R / br),),
                                 dict(BR=br, BC=bc, R_LO=fk.R_MIN, EVEN=R % br == 0 and C % bc == 0), opts,
                                 fixed=(R, C), n_lead=4),)
        else:
            am, ak = min(512, triton.next_power_of_2(R)), min(64, triton.next_power_of_2(C))
            bm, bk = min(128, triton.next_power_of_2(R)), min(64, triton.next_power_of_2(C))
            plan = (CachedLaunch(fk._col_amax_kernel, (math.ceil(R / am), math.ceil(C / ak)),
                                 dict(BM=am, BK=ak, EVEN=R % am == 0 and C % ak == 0), opts, fixed=(R, C), n_lead=2),
                    CachedLaunch(fk._cols_kernel, (math.ceil(R / bm), math.ceil(C / bk)),
                                 dict(BM=bm, BK=bk, R_LO=fk.R_MIN, EVEN=R % bm == 0 and C % bk == 0), opts,
                                 fixed=(R, C), n_lead=5))
        if len(_PLANS) > 256:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def to_e4m3_rows_triton(t: Any, transpose: bool = False) -> tuple[Any, Any, Any]:
    """``(codes, scale, unfit)`` of the bf16 2-D tensor ``t`` [R, C] (CUDA, or CPU under TRITON_INTERPRET=1) as
    an E4M3 operand whose rows are the rows of ``t`` (``transpose=False``: codes [R, C]) or its columns
    (``transpose=True``: codes [C, R], row-major). ``codes``: torch.float8_e4m3fn; ``scale``: fp32 ``2^r`` per
    operand row; ``unfit``: int32, 1 where the row is not exactly representable (its codes are then
    meaningless)."""
    import torch

    from fp4lab.kernels.host import check_device

    check_device(t, "to_e4m3_rows")
    if t.ndim != 2 or t.dtype != torch.bfloat16:
        raise InputError(f"to_e4m3_rows: expected a 2-D bfloat16 tensor, got {t.dtype} of shape {tuple(t.shape)}")
    if t.numel() >= 2**31:
        raise InputError(f"to_e4m3_rows: {t.numel()} elements; at most 2**31 - 1")
    t = t.contiguous()
    R, C = t.shape
    n = C if transpose else R
    dev = t.device
    q = torch.empty((C, R) if transpose else (R, C), dtype=torch.uint8, device=dev)
    scale = torch.empty(n, dtype=torch.float32, device=dev)
    x = t.view(torch.int16)
    plan = _launches(R, C, transpose, dev)
    if not transpose:
        unfit = torch.empty(n, dtype=torch.int32, device=dev)
        plan[0](x, q, scale, unfit)
    else:
        amax, unfit = torch.zeros((2, n), dtype=torch.int32, device=dev)  # (one fill for both)
        plan[0](x, amax)
        plan[1](x, amax, q, scale, unfit)
    return q.view(torch.float8_e4m3fn), scale, unfit
