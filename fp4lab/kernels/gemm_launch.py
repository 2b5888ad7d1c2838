"""Host side of the block-scaled GEMM (``fp4lab.kernels.gemm``): ``gemm_triton`` in its two modes, ``exact`` (the
one Triton kernel, documented K order) and ``fast`` (dequantize to bf16, then cuBLAS with fp32 output)."""

from __future__ import annotations

import numpy as np
import triton

from fp4lab.kernels import gemm as gemm_dev
from fp4lab.kernels.params import gemm_plan
from fp4lab.numerics.blocks import BlockView


def _fp32_mm(a, b):
    """fp32 A @ B.T of bf16 operands through cuBLAS (fp32 output where torch supports it)."""
    import torch

    try:
        return torch.mm(a, b.t(), out_dtype=torch.float32)
    except (TypeError, RuntimeError):
        return torch.mm(a.float(), b.float().t())


def gemm_triton(qa, qb, mode="exact", tile=None):
    """fp32 [M, N] = A @ B.T for quantized tensors qa [M, K], qb [N, K] (same format, blocked along K)."""
    import torch

    from fp4lab.errors import InputError
    from fp4lab.kernels.dequantize_launch import dequantize_triton
    from fp4lab.kernels.host import check_device, device_array, interpreting
    from fp4lab.kernels.params import block_extents, element_decode_kind, scale_params

    if mode not in ("exact", "fast"):
        raise InputError(f"gemm: mode '{mode}' is unknown; use 'exact' or 'fast'")
    fmt = qa.fmt
    if qb.fmt != fmt:
        raise InputError(f"gemm: operands use different formats ('{fmt.name}' and '{qb.fmt.name}'); "
                         "quantize both alike")
    for q, nm in ((qa, "qa"), (qb, "qb")):
        check_device(q.codes, "gemm")
        if len(q.shape) != 2 or q.axis != 1:
            raise InputError(f"gemm: {nm} must be 2-D and blocked along its last axis (K), got shape {q.shape}, "
                             f"axis {q.axis}")
        if q.rht != qa.rht or q.rht_seed != qa.rht_seed:
            raise InputError("gemm: operands were rotated differently (rht/rht_seed must match)")
    (M, K), (N, K2) = qa.shape, qb.shape
    if K != K2:
        raise InputError(f"gemm: K differs: qa is {qa.shape}, qb is {qb.shape}")
    sp = scale_params(fmt)
    if sp.scaled:
        for q, nm in ((qa, "qa"), (qb, "qb")):
            want = tuple(BlockView.for_format(q.shape, fmt, 1).scale_shape)
            if tuple(q.scale_codes.shape) != want:
                raise InputError(f"gemm: {nm}.scale_codes has shape {tuple(q.scale_codes.shape)}; format "
                                 f"'{fmt.name}' on a {q.shape} tensor needs {want}")
    dev = qa.codes.device
    f32 = torch.float32
    one = torch.ones(1, dtype=f32, device=dev)
    tsa = qa.tensor_scale.reshape(1).to(f32) if sp.cx.TWO_LEVEL else one
    tsb = qb.tensor_scale.reshape(1).to(f32) if sp.cx.TWO_LEVEL else one
    if mode == "fast":
        a = dequantize_triton(qa.codes, qa.scale_codes, None, fmt, 1, rotated=True, out_dtype=torch.bfloat16,
                              apply_tensor_scale=False)
        b = dequantize_triton(qb.codes, qb.scale_codes, None, fmt, 1, rotated=True, out_dtype=torch.bfloat16,
                              apply_tensor_scale=False)
        c = _fp32_mm(a, b)
        return c.mul_(tsa * tsb) if sp.cx.TWO_LEVEL else c
    plan = gemm_plan(fmt)
    if plan == "none":
        raise InputError(f"gemm: exact mode needs bf16-exact element values on a common grid and 1-D blocks of "
                         f">= 16; format '{fmt.name}' has neither a fold nor a per-block plan (use mode='fast')")
    tr, bs = block_extents(fmt)
    interp = interpreting()
    if tile is None:
        tile = (64, 64, max(bs, 64), 4, 3) if interp else (128, 256, max(bs, 64), 8, 3)
    bm, bn, bk, warps, stages = tile
    if plan == "perblock":
        bk = bs
    if bk % max(bs, 1):
        raise InputError(f"gemm: BK={bk} must be a multiple of the block size {bs}")
    sa = qa.scale_codes if sp.scaled else torch.zeros(1, dtype=torch.uint8, device=dev)
    sb = qb.scale_codes if sp.scaled else torch.zeros(1, dtype=torch.uint8, device=dev)
    if sa.dtype == torch.uint16:
        sa, sb = sa.view(torch.int16), sb.view(torch.int16)
    c = torch.empty((M, N), dtype=f32, device=dev)
    opts = {} if interp else {"enable_fp_fusion": False, "num_warps": warps, "num_stages": stages}
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    gemm_dev._gemm_kernel[grid](qa.codes.contiguous(), qb.codes.contiguous(), sa.contiguous(), sb.contiguous(), tsa,
                                tsb, c,
                       device_array(fmt.element.values.astype(np.float32), dev),
                       device_array(sp.svals, dev), M, N, K, BM=bm, BN=bn, BK=bk, BS=max(bs, 1), TR=tr, GROUP_M=8,
                       FOLD=plan == "fold", INTERP=interp, SCALE=sp.cx, DEC=element_decode_kind(fmt), **opts)
    return c
