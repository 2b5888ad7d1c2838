"""Host side of the quantize kernel (``fp4lab.kernels.quantize``): ``quantize_triton`` (checks, the kernel's
constants from the format's plans via ``fp4lab.kernels.params``, device tables cached per format, tile shape,
the tensor-amax pass of two-level formats, the launch) and the helpers other launchers share (``tile_shape``,
``kernel_tables``)."""

from __future__ import annotations

import numpy as np
import triton

from fp4lab.kernels import quantize as qk
from fp4lab.kernels.params import DeviceTables, ElementParams, InputKind, ScaleParams
from fp4lab.numerics.blocks import BlockView
from fp4lab.numerics.options import DEFAULT_OPTIONS, QuantizeOptions, as_options
from fp4lab.numerics.philox import sr_elements_per_call
from fp4lab.numerics.plan import ScaleKind
from fp4lab.numerics.ref_quantize import check_rounding
from fp4lab.numerics.rht import check_rht_size, rht_scale, rht_signs

_TABLE_SETS: dict[tuple, tuple] = {}


def kernel_tables(ep: ElementParams, sp: ScaleParams, dev) -> DeviceTables:
    """The kernel's device tables for (cached) element/scale params on ``dev``, built once per triple."""
    from fp4lab.kernels.host import device_array

    key = (id(ep), id(sp), str(dev))
    hit = _TABLE_SETS.get(key)
    if hit is None or hit[0] is not ep or hit[1] is not sp:
        arrs = DeviceTables(
            thr=ep.thr, ctab=ep.ctab, levels=ep.levels, ctab_signed=ep.ctab_signed, inv_gaps=ep.inv_gaps,
            values=ep.values, targets=sp.targets, inv_targets=sp.inv_targets, stab=sp.stab, scpos=sp.scpos,
            svals=sp.svals)
        if len(_TABLE_SETS) > 256:
            _TABLE_SETS.clear()
        hit = _TABLE_SETS[key] = (ep, sp, DeviceTables(*(device_array(a, dev) for a in arrs)))
    return hit[2]


def tile_shape(K: int, M: int, tr: int, tc: int, rht_n: int, interp: bool, two_d: bool,
                elems: int = 1 << 12, width: int = 256) -> tuple[int, int]:
    """(BM, BK): powers of two, BK a multiple of the block width and the RHT size, BM of the tile height; about
    ``elems`` elements per program, rows ``width`` wide (the H200 sweep's best: quantize 16 x 256, dequantize
    32 x 512; the interpreter takes large tiles: it pays per program)."""
    per_prog = 1 << 16 if interp else elems
    bk = max(tc, rht_n, 2, min(triton.next_power_of_2(K), width if not interp else 4096))
    bm = max(tr, 1, min(triton.next_power_of_2(max(M, 1)), max(per_prog // bk, 1)))
    return bm, bk


def quantize_triton(x, fmt, options: QuantizeOptions = DEFAULT_OPTIONS, *, packed=False, tensor_amax=None,
                    store_scales=True, swizzle=False, tile=None):
    """Quantize torch tensor ``x`` with the Triton kernels under ``options`` (``fp4lab.QuantizeOptions``); same
    bits as ``quantize_reference``.

    Returns a ``QuantizedTensor`` on x's device (``meta["torch"]``): codes uint8 of x's shape, scale codes
    (uint8, uint16 bf16 bits, int32 fp32 bits) and fp32 scales of the scale shape, a 0-d fp32 tensor scale or
    None. The launch options write what the kernel stores, in the tensor's documented optional fields:
    ``packed``: the kernel writes only nibble-packed codes (two per byte along the last axis; 4-bit codes blocked
    along the last axis, even length), returned as ``packed_codes`` with ``codes`` None; ``store_scales=False``:
    the kernel skips the fp32 scales, ``scales`` is None; ``swizzle``: also the scale codes of a 2-D input blocked
    along its last axis in the cuBLAS/CUTLASS 128x4 layout (flat, padded; ``fp4lab.layout.swizzle_scales_128x4``)
    as ``scale_codes_swizzled``, beside the row-major ``scale_codes``. ``tensor_amax`` (1-element fp32 tensor)
    skips the amax pass of two-level formats; ``tile`` = (BM, BK[, num_warps]).
    """
    import torch

    from fp4lab.errors import InputError
    from fp4lab.kernels.host import device_array, interpreting, kernel_input, matrix_view, scratch_f32
    from fp4lab.kernels.params import block_extents, element_params, scale_params
    from fp4lab.quantized import QuantizedTensor

    options = as_options(options)
    seed, axis, rht, rht_seed, sr_bits = options.seed, options.axis, options.rht, options.rht_seed, options.sr_bits
    mode = check_rounding(options.rounding, fmt)
    xin, in_kind = kernel_input(x, "quantize")
    shape = tuple(x.shape)
    view = BlockView.for_format(shape, fmt, axis)
    two_d = fmt.block is not None and fmt.block.is_2d
    tr, tc = block_extents(fmt)
    mv = matrix_view(shape, view.axis, two_d)
    rht_n = 0
    if rht is not None:
        rht_n = check_rht_size(rht)
        if mv.K % rht_n:
            raise InputError(f"rht: axis {view.axis} has length {mv.K}, which is not a multiple of size={rht_n}")
    dev = x.device
    ep = element_params(fmt, mode)
    sp = scale_params(fmt)
    interp = interpreting()
    bm, bk = tile[:2] if tile is not None else tile_shape(mv.K, mv.M, tr, tc, rht_n, interp, two_d)
    if bk % tc or bm % tr or (rht_n and bk % rht_n):
        raise InputError(f"quantize: tile {bm}x{bk} must be a multiple of the block {tr}x{tc} and the RHT size")
    inner1 = mv.inner == 1
    if packed and (not inner1 or mv.K % 2 or fmt.element.bits > 4):
        raise InputError("quantize: packed output needs 4-bit codes blocked along the last axis (even length)")
    grid = (triton.cdiv(mv.M, bm), triton.cdiv(mv.K, bk))
    f32 = torch.float32
    signs = device_array(rht_signs(rht_n, rht_seed) if rht_n else np.ones(1, np.float32), dev)
    rscale = float(rht_scale(rht_n)) if rht_n else 1.0
    opts = {"enable_fp_fusion": False} if not interp else {}
    if tile is not None and len(tile) > 2 and not interp:
        opts["num_warps"] = tile[2]
    amax_buf = ts_out = scratch_f32(dev)  # read-only / unwritten unless two-level: no fill launches per call
    scaled, two_level = sp.scaled, sp.cx.TWO_LEVEL
    if two_level:
        if tensor_amax is not None:
            amax_buf = tensor_amax.reshape(1).to(f32)
        elif mv.M * mv.K:
            part = torch.empty(grid[0] * grid[1], dtype=f32, device=dev)
            qk._amax_kernel[grid](xin, part, signs, rscale, mv.M, mv.K, mv.inner, BM=bm, BK=bk,
                                  IN_KIND=in_kind.code, INNER1=inner1, RHT_N=rht_n, **opts)
            amax_buf = part.max().reshape(1)
    # stored scale codes: 8 bits but for the fp32 / bf16 bit patterns
    sdtype = {ScaleKind.FP32.code: torch.int32, ScaleKind.BF16.code: torch.int16}.get(sp.cx.KIND, torch.uint8) \
        if scaled else torch.uint8
    sshape = view.scale_shape if scaled else (0,)
    codes = torch.empty((*shape[:-1], shape[-1] // 2) if packed else shape, dtype=torch.uint8, device=dev)
    scodes = torch.empty(sshape, dtype=sdtype, device=dev)
    scales = torch.empty(sshape if (scaled and store_scales) else (0,), dtype=f32, device=dev)
    if two_level:  # the kernel's first program stores the tensor scale
        ts_out = torch.empty(1, dtype=f32, device=dev) if mv.M * mv.K else torch.ones(1, dtype=f32, device=dev)
    per_call = sr_elements_per_call(sr_bits)  # checked by QuantizeOptions
    fast_rand = inner1 and mv.K % per_call == 0 and bk % per_call == 0
    words = in_kind == InputKind.BF16 and inner1 and mv.K % 2 == 0
    xk = xin.view(torch.int32) if words else xin
    if scaled and tc < 2:
        raise InputError(f"quantize: format '{fmt.name}' has blocks of width 1; the Triton kernels need >= 2")

    # the per-tile lean branch (see _tile_is_plain) pays off unless it would still divide every element: a second
    # copy of the division code costs more than the corrections it drops (measured on the H200, ufp4 bf16)
    qdiv = (in_kind == InputKind.F32 or rht_n > 0) and ep.one_spacing and mode == "rtne"
    lean_ok = sp.targets.size == 1 and (qdiv or not sp.divides)
    if mv.M * mv.K:
        tables = kernel_tables(ep, sp, dev)
        qk._quantize_kernel[grid](
            xk, codes, scodes, scales, amax_buf, ts_out, *ep.kernel_args(tables), *tables.scale_tables(),
            sp.ts_den, *sp.block_constants(), signs, rscale, mv.M, mv.K, mv.K // 2, mv.inner, int(seed),
            BM=bm, BK=bk, TR=tr, TC=tc, TWO_D=two_d, IN_KIND=in_kind.code, INNER1=inner1, WORDS=words, PACK=packed,
            STORE_S=bool(scaled and store_scales), FAST_RAND=fast_rand, SRW=int(sr_bits), RHT_N=rht_n, QDIV=qdiv,
            LEAN_OK=lean_ok, ELEM=ep.cx, SCALE=sp.cx, **opts)
    if scaled and sp.cx.KIND == ScaleKind.BF16.code:
        scodes = scodes.view(torch.uint16)
    ts = ts_out.reshape(()) if two_level else None
    swizzled = None
    if swizzle:
        from fp4lab.layout import swizzle_scales_128x4

        if len(shape) != 2 or view.axis != 1 or two_d or not scaled:
            raise InputError("quantize: swizzle=True needs a 2-D input with 1-D blocks along its last axis")
        swizzled = swizzle_scales_128x4(scodes)
    return QuantizedTensor(
        codes=None if packed else codes, scale_codes=scodes,
        scales=None if (scaled and not store_scales) else scales, tensor_scale=ts, fmt=fmt, axis=view.axis,
        rounding=mode, seed=seed, rht=rht, rht_seed=rht_seed, meta={"torch": True},
        packed_codes=codes if packed else None, scale_codes_swizzled=swizzled)
