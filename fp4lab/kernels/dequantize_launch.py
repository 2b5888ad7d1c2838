"""Host side of the dequantize kernel (``fp4lab.kernels.dequantize``): ``dequantize_triton`` checks its inputs,
derives the decode constants from the format (``fp4lab.kernels.params``), picks the tile and launches."""

from __future__ import annotations

import numpy as np
import triton

from fp4lab.kernels import dequantize as dk
from fp4lab.numerics.blocks import BlockView
from fp4lab.numerics.rht import rht_scale, rht_signs


def dequantize_triton(codes, scale_codes, tensor_scale, fmt, axis, *, rht=None, rht_seed=0, rotated=False,
                      out_dtype=None, packed=False, apply_tensor_scale=True, tile=None):
    """fp32 (or bf16) tensor of ``value[code] * S (* ts)``; the RHT is undone unless ``rotated``.

    ``codes``: uint8 of the tensor's shape, or packed along the last axis (``packed``). ``scale_codes`` as
    ``quantize_triton`` returns them. ``apply_tensor_scale=False`` leaves the tensor scale out (GEMM epilogue).
    """
    import torch

    from fp4lab.errors import InputError
    from fp4lab.kernels.host import check_device, device_array, interpreting, matrix_view, scratch_f32
    from fp4lab.kernels.params import (
        block_extents,
        element_decode_kind,
        element_params,
        scale_params,
        scaled_values_bf16_exact,
    )
    from fp4lab.kernels.quantize_launch import tile_shape

    check_device(codes, "dequantize")
    if codes.dtype != torch.uint8:
        raise InputError(f"dequantize: codes have dtype {codes.dtype}; expected torch.uint8 (as quantize returns them)")
    codes = codes.contiguous()  # the kernel indexes the row-major layout
    shape = tuple(codes.shape[:-1]) + ((codes.shape[-1] * 2,) if packed else (codes.shape[-1],))
    view = BlockView.for_format(shape, fmt, axis)
    two_d = fmt.block is not None and fmt.block.is_2d
    tr, tc = block_extents(fmt)
    mv = matrix_view(shape, view.axis, two_d)
    rht_n = int(rht) if (rht is not None and not rotated) else 0
    dev = codes.device
    ep = element_params(fmt, fmt.rounding)
    sp = scale_params(fmt)
    if packed and mv.inner != 1:
        raise InputError("dequantize: packed codes need blocks along the last axis")
    out_dtype = out_dtype or torch.float32
    out = torch.empty(shape, dtype=torch.int16 if out_dtype == torch.bfloat16 else torch.float32, device=dev)
    signs = device_array(rht_signs(rht_n, rht_seed) if rht_n else np.ones(1, np.float32), dev)
    if sp.scaled and tuple(scale_codes.shape) != tuple(view.scale_shape):
        raise InputError(f"dequantize: scale codes have shape {tuple(scale_codes.shape)}; format '{fmt.name}' on a "
                         f"{shape} tensor blocked along axis {view.axis} needs {tuple(view.scale_shape)}")
    sc = scale_codes.contiguous() if sp.scaled else device_array(np.zeros(1, np.uint8), dev)  # unread without scales
    if sc.dtype == torch.uint16:
        sc = sc.view(torch.int16)
    two_level = sp.cx.TWO_LEVEL and apply_tensor_scale
    if two_level and tensor_scale is None:
        raise InputError(f"dequantize: format '{fmt.name}' has a tensor scale; pass tensor_scale "
                         "(or apply_tensor_scale=False)")
    ts = tensor_scale.reshape(1).to(torch.float32) if two_level else scratch_f32(dev)  # unread unless two-level
    opts = {} if interpreting() else {"enable_fp_fusion": False}
    if tile is not None and len(tile) > 2 and not interpreting():
        opts["num_warps"] = tile[2]
    bf16 = out_dtype == torch.bfloat16
    words = bf16 and mv.inner == 1 and mv.K % 2 == 0
    lean = bool(words and not two_d and rht_n == 0 and (not sp.scaled or tc % 2 == 0)
                and np.all(np.isfinite(ep.values)))
    big = (1 << 14, 512) if lean else (1 << 12, 256)
    bm, bk = tile[:2] if tile is not None else tile_shape(mv.K, mv.M, tr, tc, rht_n, interpreting(), two_d, *big)
    codes_in = codes if (packed or not lean) else codes.view(torch.int16)
    exact = lean and not two_level and scaled_values_bf16_exact(fmt)
    if mv.M * mv.K:
        grid = (triton.cdiv(mv.M, bm), triton.cdiv(mv.K, bk))
        dk._dequantize_kernel[grid](
            codes_in, sc, ts, out.view(torch.int32) if words else out, out, device_array(ep.values, dev),
            device_array(sp.svals, dev), signs, float(rht_scale(rht_n)) if rht_n else 1.0, mv.M, mv.K, mv.K // 2,
            mv.inner,
            BM=bm, BK=bk, TR=tr, TC=tc, TWO_D=two_d, INNER1=mv.inner == 1, PACKED=packed, WORDS=words,
            APPLY_TS=two_level, RHT_N=rht_n, OUT_BF16=bf16, LEAN=lean, EXACT=exact, INTERP=interpreting(),
            SCALE=sp.cx, DEC=element_decode_kind(fmt), **opts)
    return out.view(torch.bfloat16) if out_dtype == torch.bfloat16 else out
