"""Block-scaled GEMM on quantized operands: C = A @ B.T in fp32, A [M, K] and B [N, K] blocked along K.

``exact`` (one Triton kernel; codes are decoded in registers, never written out):

* fold path (element value x block scale exact in bf16 for every code/scale pair, e.g. MXFP4, NVFP4): each
  K-tile of BK (a multiple of the block) is decoded to bf16 ``value * S`` and accumulated with
  ``acc = tl.dot(a, b.T, acc)`` (fp32 accumulator), K-tiles in ascending order. Inside one ``tl.dot`` the
  summation is the tensor core's (Hopper wgmma bf16, K=16 steps; hwspec ``hopper-sm90``, ``wgmma.bf16``).
* per-block path (fp32/bf16 block scales, e.g. UFP4): for each block b in ascending K,
  ``P_b = tl.dot(values_a, values_b.T)`` over the block's K elements is exact (4-bit grid products on a common
  quantum, checked on the host), then ``acc = acc + (P_b * Sa_b) * Sb_b`` in fp32, one rounding per operation.
  This path is fully defined by its fp32 operations, so ``fp4lab.emulator.gemm_reference`` reproduces it bit for bit.

Two-level formats: ``C = (acc * ts_a) * ts_b``. ``fast``: both operands dequantized to bf16 by the Triton
kernel (without the tensor scales; exact for fold-path formats, RTNE-rounded otherwise), one cuBLAS bf16 GEMM
with fp32 output, then ``C * fp32(ts_a * ts_b)`` in place.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from fp4lab.kernels.params import gemm_plan  # host-side (no triton), shared with fp4lab.cpu_gemm
from fp4lab.kernels.tile import decode_elements, decode_scale, grouped_tile


@triton.jit
def _gemm_kernel(a_ptr, b_ptr, sa_ptr, sb_ptr, tsa_ptr, tsb_ptr, c_ptr, vals_ptr, svals_ptr, M, N, K,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BS: tl.constexpr, TR: tl.constexpr,
                 GROUP_M: tl.constexpr,
                 GKIND: tl.constexpr, EB: tl.constexpr, MB: tl.constexpr, EBIAS: tl.constexpr, STEP: tl.constexpr,
                 SCALED: tl.constexpr, SKIND: tl.constexpr, SBIAS: tl.constexpr, SNAN: tl.constexpr,
                 TWO_LEVEL: tl.constexpr, FOLD: tl.constexpr, INTERP: tl.constexpr):
    pid_m, pid_n = grouped_tile(M, N, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mm = rm < M
    mn = rn < N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    KB = K // BS
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        mk = rk < K
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=mm[:, None] & mk[None, :], other=0).to(tl.int32)
        b = tl.load(b_ptr + rn[:, None] * K + rk[None, :], mask=mn[:, None] & mk[None, :], other=0).to(tl.int32)
        va = decode_elements(a, vals_ptr, GKIND, EB, MB, EBIAS, STEP)
        vb = decode_elements(b, vals_ptr, GKIND, EB, MB, EBIAS, STEP)
        if GKIND == 2:  # code 0 (masked loads) is value 0 for the float and int grids, not for a value table
            va = tl.where(mm[:, None] & mk[None, :], va, 0.0)
            vb = tl.where(mn[:, None] & mk[None, :], vb, 0.0)
        if FOLD:
            if SCALED:
                kb = k0 // BS + tl.arange(0, BK // BS)
                mkb = kb < KB
                ca = tl.load(sa_ptr + (rm // TR)[:, None] * KB + kb[None, :], mask=mm[:, None] & mkb[None, :],
                             other=0)
                cb = tl.load(sb_ptr + (rn // TR)[:, None] * KB + kb[None, :], mask=mn[:, None] & mkb[None, :],
                             other=0)
                sa = decode_scale(ca.to(tl.int32), svals_ptr, SKIND, SBIAS, SNAN)
                sb = decode_scale(cb.to(tl.int32), svals_ptr, SKIND, SBIAS, SNAN)
                va = tl.reshape(tl.reshape(va, [BM, BK // BS, BS]) * sa[:, :, None], [BM, BK])
                vb = tl.reshape(tl.reshape(vb, [BN, BK // BS, BS]) * sb[:, :, None], [BN, BK])
            if INTERP:
                acc = tl.dot(va, tl.trans(vb), acc, input_precision="ieee")
            else:
                acc = tl.dot(va.to(tl.bfloat16), tl.trans(vb.to(tl.bfloat16)), acc)
        else:
            kb = k0 // BS
            ca = tl.load(sa_ptr + rm * KB + kb, mask=mm, other=0).to(tl.int32)
            cb = tl.load(sb_ptr + rn * KB + kb, mask=mn, other=0).to(tl.int32)
            if SKIND == 3:
                ca = ca & 0xFFFF
                cb = cb & 0xFFFF
            sa = decode_scale(ca, svals_ptr, SKIND, SBIAS, SNAN)
            sb = decode_scale(cb, svals_ptr, SKIND, SBIAS, SNAN)
            if INTERP:
                p = tl.dot(va, tl.trans(vb), input_precision="ieee")
            else:
                p = tl.dot(va.to(tl.bfloat16), tl.trans(vb.to(tl.bfloat16)))
            acc = acc + (p * sa[:, None]) * sb[None, :]
    if TWO_LEVEL:
        acc = (acc * tl.load(tsa_ptr)) * tl.load(tsb_ptr)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=mm[:, None] & mn[None, :])


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
    from fp4lab.kernels.dequantize import dequantize_triton
    from fp4lab.kernels.host import check_device, device_array, interpreting
    from fp4lab.kernels.params import block_extents, element_decode_kind, scale_params

    if mode not in ("exact", "fast"):
        raise InputError(f"gemm: mode '{mode}' is unknown; use 'exact' or 'fast'")
    fmt = qa.fmt
    if qb.fmt != fmt:
        raise InputError(f"gemm: operands use different formats ('{fmt.name}' and '{qb.fmt.name}'); quantize both alike")
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
    if sp.method:
        from fp4lab.emulator.blocks import BlockView

        for q, nm in ((qa, "qa"), (qb, "qb")):
            want = tuple(BlockView.for_format(q.shape, fmt, 1).scale_shape)
            if tuple(q.scale_codes.shape) != want:
                raise InputError(f"gemm: {nm}.scale_codes has shape {tuple(q.scale_codes.shape)}; format "
                                 f"'{fmt.name}' on a {q.shape} tensor needs {want}")
    dev = qa.codes.device
    f32 = torch.float32
    one = torch.ones(1, dtype=f32, device=dev)
    tsa = qa.tensor_scale.reshape(1).to(f32) if sp.two_level else one
    tsb = qb.tensor_scale.reshape(1).to(f32) if sp.two_level else one
    if mode == "fast":
        a = dequantize_triton(qa.codes, qa.scale_codes, None, fmt, 1, rotated=True, out_dtype=torch.bfloat16,
                              apply_tensor_scale=False)
        b = dequantize_triton(qb.codes, qb.scale_codes, None, fmt, 1, rotated=True, out_dtype=torch.bfloat16,
                              apply_tensor_scale=False)
        c = _fp32_mm(a, b)
        return c.mul_(tsa * tsb) if sp.two_level else c
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
    gk, eb, mb, ebias, step = element_decode_kind(fmt)
    sa = qa.scale_codes if sp.method else torch.zeros(1, dtype=torch.uint8, device=dev)
    sb = qb.scale_codes if sp.method else torch.zeros(1, dtype=torch.uint8, device=dev)
    if sa.dtype == torch.uint16:
        sa, sb = sa.view(torch.int16), sb.view(torch.int16)
    c = torch.empty((M, N), dtype=f32, device=dev)
    opts = {} if interp else {"enable_fp_fusion": False, "num_warps": warps, "num_stages": stages}
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _gemm_kernel[grid](qa.codes.contiguous(), qb.codes.contiguous(), sa.contiguous(), sb.contiguous(), tsa, tsb, c,
                       device_array(fmt.element.values.astype(np.float32), dev),
                       device_array(sp.svals, dev), M, N, K, BM=bm, BN=bn, BK=bk, BS=max(bs, 1), TR=tr, GROUP_M=8,
                       GKIND=gk, EB=eb, MB=mb, EBIAS=ebias, STEP=step, SCALED=sp.method != 0, SKIND=sp.skind,
                       SBIAS=sp.sbias, SNAN=sp.snan, TWO_LEVEL=sp.two_level, FOLD=plan == "fold", INTERP=interp,
                       **opts)
    return c
