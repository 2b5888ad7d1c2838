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
from fp4lab.kernels.tile import bits_of, decode_elements, decode_scale, pair_tile, rht_pairs, scale_tile


@triton.jit
def bf16_bits_rtne(v):
    """int32 holding the bf16 bit pattern of fp32 v rounded to nearest-even (NaN -> quiet NaN, sign kept)."""
    b = bits_of(v)
    m = b & 0x7FFFFFFF
    s = (b >> 16) & 0x8000
    r = (m + 0x7FFF + ((m >> 16) & 1)) >> 16
    return tl.where(m > 0x7F800000, 0x7FC0, r) | s


@triton.jit
def _bf16_pair_rtne(ve, vo):
    """int32 word ``bf16(ve) | bf16(vo) << 16``, both rounded to nearest-even on their bit patterns; valid for
    finite and infinite inputs only (a NaN would carry into the sign)."""
    be = bits_of(ve)
    bo = bits_of(vo)
    re = be + 0x7FFF + ((be >> 16) & 1)
    ro = bo + 0x7FFF + ((bo >> 16) & 1)
    return ((re >> 16) & 0xFFFF) | (ro & -65536)


@triton.jit
def _dequantize_kernel(codes_ptr, sc_ptr, ts_ptr, out_ptr, out16_ptr, vals_ptr, svals_ptr, signs_ptr, rscale,
                       M, K, K2, INNER,
                       BM: tl.constexpr, BK: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr,
                       TWO_D: tl.constexpr, INNER1: tl.constexpr, PACKED: tl.constexpr, WORDS: tl.constexpr,
                       SCALED: tl.constexpr, TWO_LEVEL: tl.constexpr, SKIND: tl.constexpr, SBIAS: tl.constexpr,
                       SNAN: tl.constexpr, GKIND: tl.constexpr, EB: tl.constexpr, MB: tl.constexpr,
                       EBIAS: tl.constexpr, STEP: tl.constexpr, RHT_N: tl.constexpr, OUT_BF16: tl.constexpr,
                       LEAN: tl.constexpr, EXACT: tl.constexpr, INTERP: tl.constexpr, TS_FIRST: tl.constexpr = False):
    """Tile held as even/odd column halves (as in quantize): packed bytes split into two codes elementwise,
    bf16 pairs written as one int32 word (WORDS).

    LEAN (1-D blocks on the last axis, even K, bf16 output, no RHT; codes packed or read as int16 pairs): element
    values are decoded in registers (value table gather for table grids); on the GPU the bf16 words come from the
    hardware conversion; in the interpreter, when no block of the tile has a NaN/Inf scale (nor the
    tensor scale), the bf16 words are built without NaN handling: by truncation when every value x scale product
    is exact in bf16 (EXACT, host-checked), else by the integer RTNE formula. Same bits as the general path."""
    C2: tl.constexpr = BK // 2
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows, kw, ce, addr_e, addr_o, rmask, me, mo, mw = pair_tile(M, K, K2, INNER, BM, C2, INNER1)
    if LEAN:
        p = tl.load(codes_ptr + rows[:, None] * K2 + kw[None, :], mask=mw, other=0).to(tl.int32)
        if PACKED:  # one byte per pair: even code in the low nibble
            code_e = p & 15
            code_o = (p >> 4) & 15
        else:  # unpacked codes read as int16 pairs: even code in the low byte
            code_e = p & 255
            code_o = (p >> 8) & 255
        if GKIND == 2:
            ve = tl.load(vals_ptr + code_e)
            vo = tl.load(vals_ptr + code_o)
        else:
            ve = decode_elements(code_e, vals_ptr, GKIND, EB, MB, EBIAS, STEP)
            vo = decode_elements(code_o, vals_ptr, GKIND, EB, MB, EBIAS, STEP)
        if SCALED:
            scols = pid_k * (BK // TC) + tl.arange(0, BK // TC)
            sc = tl.load(sc_ptr + rows[:, None] * (K // TC) + scols[None, :], mask=rmask & (scols < K // TC)[None, :],
                         other=0).to(tl.int32)
            if SKIND == 3:
                sc = sc & 0xFFFF
            S = decode_scale(sc, svals_ptr, SKIND, SBIAS, SNAN)
            special = tl.max(tl.max(((bits_of(S) & 0x7F800000) == 0x7F800000).to(tl.int32), axis=1), axis=0)
            if TWO_LEVEL:
                ts = tl.load(ts_ptr)
                special = special | ((bits_of(ts) & 0x7F800000) == 0x7F800000).to(tl.int32)
                if TS_FIRST:  # value * (S * ts)
                    S = S * ts
                    special = special | tl.max(tl.max(((bits_of(S) & 0x7F800000) == 0x7F800000).to(tl.int32),
                                                      axis=1), axis=0)
            ve = tl.reshape(_blocks(ve, BM, C2, 1, TC // 2, False) * S[:, :, None], [BM, C2])
            vo = tl.reshape(_blocks(vo, BM, C2, 1, TC // 2, False) * S[:, :, None], [BM, C2])
            if TWO_LEVEL and not TS_FIRST:
                ve = ve * ts
                vo = vo * ts
        else:
            special = 0
        if not INTERP:
            # hardware cvt.rn.bf16x2.f32: IEEE round-to-nearest-even, the same bits as the integer formula
            # below (the interpreter's bf16 cast truncates, so it takes the formula)
            word = tl.reshape(tl.join(ve, vo).to(tl.bfloat16), [BM, BK]).to(tl.int16, bitcast=True)
        elif EXACT:
            word = ((bits_of(ve) >> 16) & 0xFFFF) | (bits_of(vo) & -65536)  # a NaN stays a NaN
        elif special == 0:
            word = _bf16_pair_rtne(ve, vo)
        else:
            word = bf16_bits_rtne(ve) | (bf16_bits_rtne(vo) << 16)
        if INTERP:
            tl.store(out_ptr + rows[:, None] * K2 + kw[None, :], word, mask=mw)
        else:
            cols = pid_k * BK + tl.arange(0, BK)
            tl.store(out16_ptr + rows[:, None] * K + cols[None, :], word, mask=rmask & (cols < K)[None, :])
        return
    if PACKED:
        p = tl.load(codes_ptr + rows[:, None] * K2 + kw[None, :], mask=mw, other=0).to(tl.int32)
        code_e = p & 15
        code_o = p >> 4
    else:
        code_e = tl.load(codes_ptr + addr_e, mask=me, other=0).to(tl.int32)
        code_o = tl.load(codes_ptr + addr_o, mask=mo, other=0).to(tl.int32)
    ve = decode_elements(code_e, vals_ptr, GKIND, EB, MB, EBIAS, STEP)
    vo = decode_elements(code_o, vals_ptr, GKIND, EB, MB, EBIAS, STEP)
    if SCALED:
        saddr, smask = scale_tile(rows, rmask, M, K, INNER, BM, BK, TR, TC, TWO_D, INNER1)
        sc = tl.load(sc_ptr + saddr, mask=smask, other=0).to(tl.int32)
        if SKIND == 3:
            sc = sc & 0xFFFF
        S = decode_scale(sc, svals_ptr, SKIND, SBIAS, SNAN)
        if TWO_LEVEL:
            ts = tl.load(ts_ptr)
            if TS_FIRST:  # value * (S * ts)
                S = S * ts
        S = _expand(S, TWO_D)
        ve = tl.reshape(_blocks(ve, BM, C2, TR, TC // 2, TWO_D) * S, [BM, C2])
        vo = tl.reshape(_blocks(vo, BM, C2, TR, TC // 2, TWO_D) * S, [BM, C2])
        if TWO_LEVEL and not TS_FIRST:
            ve = ve * ts
            vo = vo * ts
    if RHT_N > 0:
        ve, vo = rht_pairs(ve, vo, signs_ptr, ce, rscale, BM, C2, RHT_N, True)
    if OUT_BF16:
        if WORDS:
            tl.store(out_ptr + rows[:, None] * K2 + kw[None, :],
                     bf16_bits_rtne(ve) | (bf16_bits_rtne(vo) << 16), mask=mw)
        else:
            tl.store(out_ptr + addr_e, bf16_bits_rtne(ve), mask=me)
            tl.store(out_ptr + addr_o, bf16_bits_rtne(vo), mask=mo)
    else:
        tl.store(out_ptr + addr_e, ve, mask=me)
        tl.store(out_ptr + addr_o, vo, mask=mo)


def dequantize_triton(codes, scale_codes, tensor_scale, fmt, axis, *, rht=None, rht_seed=0, rotated=False,
                      out_dtype=None, packed=False, apply_tensor_scale=True, tile=None):
    """fp32 (or bf16) tensor of ``value[code] * S (* ts)``; the RHT is undone unless ``rotated``.

    ``codes``: uint8 of the tensor's shape, or packed along the last axis (``packed``). ``scale_codes`` as
    ``quantize_triton`` returns them. ``apply_tensor_scale=False`` leaves the tensor scale out (GEMM epilogue).
    """
    import torch

    from fp4lab.emulator.blocks import BlockView
    from fp4lab.emulator.rht import rht_scale, rht_signs
    from fp4lab.errors import InputError
    from fp4lab.kernels.host import check_device, device_array, interpreting, matrix_view, scratch_f32
    from fp4lab.kernels.params import (block_extents, element_decode_kind, element_params, scale_params,
                                       scaled_values_bf16_exact)
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
    if sp.method and tuple(scale_codes.shape) != tuple(view.scale_shape):
        raise InputError(f"dequantize: scale codes have shape {tuple(scale_codes.shape)}; format '{fmt.name}' on a "
                         f"{shape} tensor blocked along axis {view.axis} needs {tuple(view.scale_shape)}")
    sc = scale_codes.contiguous() if sp.method else device_array(np.zeros(1, np.uint8), dev)  # unread without scales
    if sc.dtype == torch.uint16:
        sc = sc.view(torch.int16)
    two_level = sp.two_level and apply_tensor_scale
    if two_level and tensor_scale is None:
        raise InputError(f"dequantize: format '{fmt.name}' has a tensor scale; pass tensor_scale "
                         "(or apply_tensor_scale=False)")
    ts = tensor_scale.reshape(1).to(torch.float32) if two_level else scratch_f32(dev)  # unread unless two-level
    opts = {} if interpreting() else {"enable_fp_fusion": False}
    if tile is not None and len(tile) > 2 and not interpreting():
        opts["num_warps"] = tile[2]
    bf16 = out_dtype == torch.bfloat16
    words = bf16 and mv.inner == 1 and mv.K % 2 == 0
    gk, eb, mb, ebias, step = element_decode_kind(fmt)
    lean = bool(words and not two_d and rht_n == 0 and (not sp.method or tc % 2 == 0)
                and np.all(np.isfinite(ep.values)))
    big = (1 << 14, 512) if lean else (1 << 12, 256)
    bm, bk = tile[:2] if tile is not None else tile_shape(mv.K, mv.M, tr, tc, rht_n, interpreting(), two_d, *big)
    codes_in = codes if (packed or not lean) else codes.view(torch.int16)
    exact = lean and not two_level and scaled_values_bf16_exact(fmt)
    if mv.M * mv.K:
        grid = (triton.cdiv(mv.M, bm), triton.cdiv(mv.K, bk))
        _dequantize_kernel[grid](
            codes_in, sc, ts, out.view(torch.int32) if words else out, out, device_array(ep.values, dev),
            device_array(sp.svals, dev), signs, float(rht_scale(rht_n)) if rht_n else 1.0, mv.M, mv.K, mv.K // 2,
            mv.inner,
            BM=bm, BK=bk, TR=tr, TC=tc, TWO_D=two_d, INNER1=mv.inner == 1, PACKED=packed, WORDS=words,
            SCALED=sp.method != 0, TWO_LEVEL=two_level, SKIND=sp.skind, SBIAS=sp.sbias, SNAN=sp.snan,
            GKIND=gk, EB=eb, MB=mb, EBIAS=ebias, STEP=step, RHT_N=rht_n, OUT_BF16=bf16, LEAN=lean, EXACT=exact,
            INTERP=interpreting(), TS_FIRST=bool(two_level and sp.ts_first), **opts)
    return out.view(torch.bfloat16) if out_dtype == torch.bfloat16 else out
