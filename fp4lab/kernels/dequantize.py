"""Triton dequantize kernel: ``value[code] * S`` (``* ts``) in fp32, optional inverse RHT, fp32 or bf16 output.

Same [M, K] view as quantize.py. Scales are decoded from the stored scale codes in the kernel (pow2 from bits,
float formats by table). bf16 output rounds the fp32 result to nearest-even on its bit pattern (NaN -> 0x7FC0
with the sign kept), never through a ``.to(bf16)`` cast. Codes may be packed (two per byte along the last axis).
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from fp4lab.kernels.quantize import _blocks, _expand
from fp4lab.kernels.tile import bits_of, decode_scale, rht_tile


@triton.jit
def bf16_bits_rtne(v):
    """int32 holding the bf16 bit pattern of fp32 v rounded to nearest-even (NaN -> quiet NaN, sign kept)."""
    b = bits_of(v)
    m = b & 0x7FFFFFFF
    s = (b >> 16) & 0x8000
    r = (m + 0x7FFF + ((m >> 16) & 1)) >> 16
    return tl.where(m > 0x7F800000, 0x7FC0, r) | s


@triton.jit
def _dequantize_kernel(codes_ptr, sc_ptr, ts_ptr, out_ptr, vals_ptr, svals_ptr, signs_ptr, rscale, M, K, INNER,
                       BM: tl.constexpr, BK: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr,
                       TWO_D: tl.constexpr, INNER1: tl.constexpr, PACKED: tl.constexpr, SCALED: tl.constexpr,
                       TWO_LEVEL: tl.constexpr, SKIND: tl.constexpr, SBIAS: tl.constexpr, SNAN: tl.constexpr,
                       RHT_N: tl.constexpr, OUT_BF16: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_k * BK + tl.arange(0, BK)
    if INNER1:
        addr = rows[:, None] * K + cols[None, :]
    else:
        addr = (rows // INNER)[:, None] * (K * INNER) + cols[None, :] * INNER + (rows % INNER)[:, None]
    mask = (rows < M)[:, None] & (cols < K)[None, :]
    if PACKED:
        pcols = pid_k * (BK // 2) + tl.arange(0, BK // 2)
        p = tl.load(codes_ptr + rows[:, None] * (K // 2) + pcols[None, :],
                    mask=(rows < M)[:, None] & (pcols < K // 2)[None, :], other=0).to(tl.int32)
        code = tl.reshape(tl.join(p & 15, p >> 4), [BM, BK])
    else:
        code = tl.load(codes_ptr + addr, mask=mask, other=0).to(tl.int32)
    v = tl.load(vals_ptr + code)
    if SCALED:
        if TWO_D:
            srows = pid_m * (BM // TR) + tl.arange(0, BM // TR)
            scols = pid_k * (BK // TC) + tl.arange(0, BK // TC)
            saddr = srows[:, None] * (K // TC) + scols[None, :]
            smask = (srows < M // TR)[:, None] & (scols < K // TC)[None, :]
        else:
            scols = pid_k * (BK // TC) + tl.arange(0, BK // TC)
            if INNER1:
                saddr = rows[:, None] * (K // TC) + scols[None, :]
            else:
                saddr = ((rows // INNER)[:, None] * ((K // TC) * INNER) + scols[None, :] * INNER
                         + (rows % INNER)[:, None])
            smask = (rows < M)[:, None] & (scols < K // TC)[None, :]
        sc = tl.load(sc_ptr + saddr, mask=smask, other=0).to(tl.int32)
        if SKIND == 3:
            sc = sc & 0xFFFF
        S = decode_scale(sc, svals_ptr, SKIND, SBIAS, SNAN)
        vb = _blocks(v, BM, BK, TR, TC, TWO_D) * _expand(S, TWO_D)
        v = tl.reshape(vb, [BM, BK])
        if TWO_LEVEL:
            v = v * tl.load(ts_ptr)
    if RHT_N > 0:
        v = rht_tile(v, signs_ptr, cols, rscale, BM, BK, RHT_N, True)
    if OUT_BF16:
        tl.store(out_ptr + addr, bf16_bits_rtne(v), mask=mask)
    else:
        tl.store(out_ptr + addr, v, mask=mask)


def dequantize_triton(codes, scale_codes, tensor_scale, fmt, axis, *, rht=None, rht_seed=0, rotated=False,
                      out_dtype=None, packed=False, apply_tensor_scale=True, tile=None):
    """fp32 (or bf16) tensor of ``value[code] * S (* ts)``; the RHT is undone unless ``rotated``.

    ``codes``: uint8 of the tensor's shape, or packed along the last axis (``packed``). ``scale_codes`` as
    ``quantize_triton`` returns them. ``apply_tensor_scale=False`` leaves the tensor scale out (GEMM epilogue).
    """
    import torch

    from fp4lab.emulator.blocks import BlockView
    from fp4lab.emulator.rht import rht_scale, rht_signs
    from fp4lab.kernels.host import check_device, device_array, interpreting, matrix_view
    from fp4lab.kernels.params import block_extents, element_params, scale_params
    from fp4lab.kernels.quantize import _tile_shape

    check_device(codes, "dequantize")
    shape = tuple(codes.shape[:-1]) + ((codes.shape[-1] * 2,) if packed else (codes.shape[-1],))
    view = BlockView.for_format(shape, fmt, axis)
    two_d = fmt.block is not None and fmt.block.is_2d
    tr, tc = block_extents(fmt)
    mv = matrix_view(shape, view.axis, two_d)
    rht_n = int(rht) if (rht is not None and not rotated) else 0
    dev = codes.device
    ep = element_params(fmt, fmt.rounding)
    sp = scale_params(fmt)
    bm, bk = tile if tile is not None else _tile_shape(mv.K, mv.M, tr, tc, rht_n, interpreting(), two_d)
    out_dtype = out_dtype or torch.float32
    out = torch.empty(shape, dtype=torch.int16 if out_dtype == torch.bfloat16 else torch.float32, device=dev)
    signs = device_array(rht_signs(rht_n, rht_seed) if rht_n else np.ones(1, np.float32), dev)
    sc = scale_codes if sp.method else torch.zeros(1, dtype=torch.uint8, device=dev)
    if sc.dtype == torch.uint16:
        sc = sc.view(torch.int16)
    two_level = sp.two_level and apply_tensor_scale
    ts = tensor_scale.reshape(1).to(torch.float32) if two_level else torch.ones(1, dtype=torch.float32, device=dev)
    opts = {} if interpreting() else {"enable_fp_fusion": False}
    if mv.M * mv.K:
        grid = (triton.cdiv(mv.M, bm), triton.cdiv(mv.K, bk))
        _dequantize_kernel[grid](
            codes, sc, ts, out, device_array(ep.values, dev), device_array(sp.svals, dev), signs,
            float(rht_scale(rht_n)) if rht_n else 1.0, mv.M, mv.K, mv.inner,
            BM=bm, BK=bk, TR=tr, TC=tc, TWO_D=two_d, INNER1=mv.inner == 1, PACKED=packed,
            SCALED=sp.method != 0, TWO_LEVEL=two_level, SKIND=sp.skind, SBIAS=sp.sbias, SNAN=sp.snan,
            RHT_N=rht_n, OUT_BF16=out_dtype == torch.bfloat16, **opts)
    return out.view(torch.bfloat16) if out_dtype == torch.bfloat16 else out
