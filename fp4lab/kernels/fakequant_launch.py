"""Host side of the fake-quantize kernel (``fakequant.py``): plans cached per (format, rounding, shape, dtype,
blockings), launched through ``CachedLaunch``; a fallback through the quantize and dequantize kernels for what
the fused kernel does not cover (2-D tiles along M, blocks of width 1, 3-D inputs).

The bits of each output equal ``fp4lab.numerics.fakequant.fake_quantize_reference`` for the same arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.blocks import BlockView
from fp4lab.numerics.options import Blocking, QuantizeOptions, check_sr_bits
from fp4lab.numerics.philox import sr_elements_per_call
from fp4lab.numerics.plan import ScaleKind
from fp4lab.numerics.ref_quantize import check_rounding
from fp4lab.numerics.rht import check_rht_size, rht_scale, rht_signs


@dataclass
class _Plan:
    """What repeated calls with one signature share: "fused" (one kernel), "split" (one pass per blocking) or
    "fallback" (quantize + dequantize kernels)."""

    fmt: QuantFormat
    mode: str
    out_dtype: Any
    kind: str = "fused"
    launch: Any = None  # CachedLaunch of the fused kernel
    signs_k: Any = None
    signs_m: Any = None
    two_level: bool = False
    amax: Any = None  # CachedLaunch of the tensor-amax pass (two-level formats)
    scales: Any = None  # CachedLaunch of the tensor-scales kernel after it (two-level formats)
    view_dtype: Any = None  # dtype of the output view the kernel writes
    words: bool = False  # the kernel reads bf16 pairs as int32 words
    scratch: Any = None
    dummy_out: Any = None
    zero_seed: Any = None  # int64 placeholder seed tensor (seeds read from device memory)


_PLANS: dict[tuple, _Plan] = {}


def _tile(fmt_tc: int, tr: int, rht_k: int, rht_m: int, along_k: bool, along_m: bool, K: int, M: int,
          interp: bool, tile: tuple[int, ...] | None, coded_scales: bool = False) -> tuple[int, int, int]:
    """(BM, BK, num_warps): the blocked extents and RHT sizes divide it; the bits do not depend on the tile.
    Measured on the H200 (BENCHMARKS.md, "Fake-quant kernel"):

    * K only: 16 x 256, 4 warps (the quantize kernel's best);
    * a column pass whose blocks and rotation span 16 rows, alone (ufp4's split passes) or beside the K pass when
      the block scales are ExMy floats encoded per block (``coded_scales``: UE4M3 and the like; measured for
      nvfp4): 16 x 128, 2 warps, against 32 x 64 (16384 x 4096 bf16, RHT-16 along M: nvfp4 K and M 0.401 ->
      0.296 ms rtne, 0.617 -> 0.567 SR-16; ufp4 M 0.154 -> 0.133, 0.246 -> 0.219; nvfp4 rtne K and M: 165 ->
      113 static SASS per element, ``benchmarks/sass_count.py``). E2M1 with FP32 scales gains nothing beside
      the K pass, and 32-row blocks (mxfp4) need 32 rows;
    * other column passes: 32 x 64, 2 warps when the column pass is the only one (each thread then holds twice
      the elements of a block column), else 4;

    larger in the interpreter."""
    import triton

    if tile is not None:
        return tile[0], tile[1], tile[2] if len(tile) > 2 else 4
    need_m = max(fmt_tc if along_m else 1, rht_m, tr, 2)
    need_k = max(fmt_tc, rht_k, 2)
    sixteen_rows = along_m and need_m == 16 and (coded_scales or not along_k)
    if sixteen_rows:
        bm, bk = 16, max(128, need_k)
    elif along_m:
        bm, bk = max(32, need_m), max(64, need_k)
    else:
        bm, bk = max(16, need_m), max(256, need_k)
    if interp:
        bk = max(need_k, min(triton.next_power_of_2(K), 1024))
        bm = max(need_m, min(triton.next_power_of_2(max(M, 1)), max(4096 // bk, 1) if along_m else 64))
    bk = max(need_k, min(bk, triton.next_power_of_2(K)))
    bm = max(need_m, min(bm, triton.next_power_of_2(max(M, 1))))
    return bm, bk, 2 if along_m and (sixteen_rows or not along_k) else 4


def _amax_tile(rht_k: int, rht_m: int, K: int, M: int, interp: bool) -> tuple[int, int, int]:
    """(BM, BK, num_warps) of the tensor-amax pass; the amax does not depend on the tile. On the GPU 16 rows
    (the RHT-16 groups along M, or more rows for larger ones) by 256 columns per warp, up to 4 warps: a warp's
    threads then hold whole 16-row columns (4 bf16 pairs each), so the rotation along M and the maxima run in
    registers with no layout conversion (sm_90 static SASS per element, ``benchmarks/sass_count.py``-style
    compile: nvfp4's X pass, plain along K and RHT-16 along M, 33 -> 21 against 32 x 256 x 4; along K only
    12 -> 9). Rotations over more rows keep 32+ x 256 x 4 (16 rows x 256 values per thread would spill)."""
    import triton

    if interp:
        return (max(rht_m, 2, min(triton.next_power_of_2(max(M, 1)), 64)),
                max(rht_k, 2, min(triton.next_power_of_2(K), 1024)), 4)
    if rht_m > 16:
        return max(32, rht_m), max(256, rht_k, 2), 4
    bk = max(rht_k, 2, min(1024, triton.next_power_of_2(K)))
    bm = max(rht_m, 2, min(16, triton.next_power_of_2(max(M, 1))))
    return bm, bk, max(1, min(4, bk // 256))


def _fused(plan: _Plan, x: Any, fmt: QuantFormat, mode: str, along_k: Blocking | None, along_m: Blocking | None,
           sr_bits: int, out_f32: bool, apply_ts: bool, tile: tuple[int, ...] | None, seed_ptr: bool) -> None:
    """Fill ``plan`` for the fused kernel: tile, constexprs, tables, RHT signs, amax pass."""

    from fp4lab.kernels.fakequant import _amax2_kernel, _fake_quant_kernel, _tensor_scales_kernel
    from fp4lab.kernels.host import CachedLaunch, device_array, input_kind, interpreting
    from fp4lab.kernels.params import InputKind, block_extents, element_decode_kind, element_params, scale_params
    from fp4lab.kernels.quantize_launch import kernel_tables

    M, K = x.shape
    dev = x.device
    tr, tc = block_extents(fmt)
    two_d = tr > 1
    rk = check_rht_size(along_k.rht) if along_k is not None and along_k.rht is not None else 0
    rm = check_rht_size(along_m.rht) if along_m is not None and along_m.rht is not None else 0
    ep = element_params(fmt, mode)
    sp = scale_params(fmt)
    interp = interpreting()
    bm, bk, warps = _tile(tc, tr, rk, rm, along_k is not None, along_m is not None, K, M, interp, tile,
                          coded_scales=sp.cx.KIND == ScaleKind.FLOAT_BITS.code)
    if bk % max(tc, rk, 2) or bm % max(tr, rm, tc if along_m is not None else 1, 2):
        raise InputError(f"fake_quantize: tile {bm}x{bk} must be a multiple of the block {tr}x{tc} and the RHT sizes")
    grid = (math.ceil(M / bm), math.ceil(K / bk))
    in_kind = input_kind(x.dtype)
    words = in_kind == InputKind.BF16 and K % 2 == 0
    per_call = sr_elements_per_call(sr_bits)

    def qdiv(rht_n: int) -> bool:
        return (in_kind == InputKind.F32 or rht_n > 0) and ep.one_spacing and mode == "rtne"

    # column-only passes of dividing formats divide lean tiles by the block's reciprocal (tile.div_by_reciprocal):
    # measured faster on the H200 (ufp4 RHT-16 column pass 138 -> 106 us rtne, 196 -> 167 us SR-16 at 16384 x
    # 4096); where the K blocking runs, the extra lean copy of the encoder made the pass slower (BENCHMARKS.md,
    # "Tried and dropped")
    fast_div_m = along_k is None and sp.divides and ep.fast_division
    lean_ok = sp.targets.size == 1 and ((qdiv(rk) and qdiv(rm)) or not sp.divides or fast_div_m)
    consts = dict(
        BM=bm, BK=bk, TR=tr, TC=tc, TWO_D=two_d, IN_KIND=in_kind.code, WORDS=words, ALONG_K=along_k is not None,
        ALONG_M=along_m is not None, RHT_K=rk, RHT_M=rm, OUT_F32=out_f32, APPLY_TS=apply_ts, INTERP=interp,
        SEED_PTR=seed_ptr, FAST_RAND=K % per_call == 0 and bk % per_call == 0, SRW=sr_bits, QDIV_K=qdiv(rk),
        QDIV_M=qdiv(rm), LEAN_OK=lean_ok, FAST_DIV_M=fast_div_m, ELEM=ep.cx, SCALE=sp.cx,
        DEC=element_decode_kind(fmt),
    )
    options = {} if interp else {"enable_fp_fusion": False, "num_warps": warps}
    tables = kernel_tables(ep, sp, dev)
    signs_k = device_array(rht_signs(rk, along_k.rht_seed) if rk else np.ones(1, np.float32), dev)
    signs_m = device_array(rht_signs(rm, along_m.rht_seed) if rm else np.ones(1, np.float32), dev)
    rscale_k = float(rht_scale(rk)) if rk else 1.0
    rscale_m = float(rht_scale(rm)) if rm else 1.0
    amax = scales = None
    two_level = sp.cx.TWO_LEVEL
    if two_level:
        # the finite amax of the tensor each output quantizes (rotated along its own axis first), in one read
        abm, abk, awarps = _amax_tile(rk, rm, K, M, interp)
        g = (math.ceil(M / abm), math.ceil(K / abk))
        amax = CachedLaunch(_amax2_kernel, g, dict(BM=abm, BK=abk, IN_KIND=in_kind.code, WORDS=words,
                                                   ALONG_K=along_k is not None, ALONG_M=along_m is not None,
                                                   RHT_K=rk, RHT_M=rm),
                            {} if interp else {"enable_fp_fusion": False, "num_warps": awarps},
                            fixed=(signs_k, signs_m, rscale_k, rscale_m, M, K, K // 2), n_lead=2)
        scales = CachedLaunch(_tensor_scales_kernel, (1,), dict(BLOCK=1024, SCALE=sp.cx),
                              {} if interp else {"enable_fp_fusion": False, "num_warps": 4},
                              fixed=(g[0] * g[1], sp.ts_den, tables.svals), n_lead=2)
    args = (*ep.kernel_args(tables), *tables.scale_tables(), *sp.block_constants(), signs_k, signs_m, rscale_k,
            rscale_m, M, K, K // 2)
    plan.launch = CachedLaunch(_fake_quant_kernel, grid, consts, options, fixed=args, n_lead=4)
    plan.signs_k, plan.signs_m, plan.two_level = signs_k, signs_m, two_level
    plan.amax, plan.scales = amax, scales


def fake_quantize_triton(x: Any, fmt: QuantFormat, rounding: str | None = None, *, along_k: Blocking | None = None,
                         along_m: Blocking | None = None, sr_bits: int = 24, out_dtype: Any = None,
                         apply_tensor_scale: bool = True, tile: tuple[int, ...] | None = None) -> tuple:
    """Fake-quantize a 2-D torch tensor x [M, K] (bf16, fp16 or fp32; CUDA, or CPU under TRITON_INTERPRET=1)
    along K (``along_k``) and/or along M (``along_m``) in one read of x.

    Returns ``(y_k, y_m, ts_k, ts_m)``: [M, K] tensors of ``out_dtype`` (torch.bfloat16, the default, rounded to
    nearest-even; or torch.float32) holding ``dequantize(quantize(x, ...), rotated=True)`` for each requested
    blocking (None otherwise), and the 1-element fp32 tensor scales of two-level formats (None otherwise); with
    ``apply_tensor_scale=False`` the outputs leave the tensor scale out (a GEMM applies it to its result).
    Everything but the seeds is checked once per distinct call signature; repeated calls cost a dictionary
    lookup, the output allocations and one kernel launch on the host (three for two-level formats: the amax pass,
    the tensor scales, the fake-quant pass).
    """
    import torch

    if not x.is_contiguous():
        x = x.contiguous()
    seed_ptr = any(b is not None and not isinstance(b.seed, int) for b in (along_k, along_m))
    key = (id(fmt), rounding, x.shape, x.dtype, x.device, None if along_k is None else (along_k.rht,
           along_k.rht_seed), None if along_m is None else (along_m.rht, along_m.rht_seed), sr_bits, out_dtype,
           apply_tensor_scale, tile, seed_ptr)
    plan = _PLANS.get(key)
    if plan is None or plan.fmt is not fmt:
        if len(_PLANS) > 512:
            _PLANS.clear()
        plan = _PLANS[key] = _make_plan(x, fmt, rounding, along_k, along_m, sr_bits, out_dtype, apply_tensor_scale,
                                        tile, seed_ptr)
    if plan.kind == "split":
        yk, _, tsk, _ = fake_quantize_triton(x, fmt, rounding, along_k=along_k, sr_bits=sr_bits, out_dtype=out_dtype,
                                             apply_tensor_scale=apply_tensor_scale)
        _, ym, _, tsm = fake_quantize_triton(x, fmt, rounding, along_m=along_m, sr_bits=sr_bits, out_dtype=out_dtype,
                                             apply_tensor_scale=apply_tensor_scale)
        return yk, ym, tsk, tsm
    if plan.kind == "fallback":  # (seeds in device memory are read on the host here: no CUDA-graph capture)
        return _fallback(x, fmt, plan.mode, _int_seed(along_k), _int_seed(along_m), sr_bits, plan.out_dtype,
                         apply_tensor_scale)
    M, K = x.shape
    dev = x.device
    xk = x.view(torch.int32) if plan.words else x
    tsv = plan.scratch
    if plan.two_level:
        n = plan.amax.grid[0] * plan.amax.grid[1]
        buf = torch.empty(8 + 2 * n, dtype=torch.float32, device=dev)  # (one allocation for both)
        tsv = buf[:8]  # (ts, g, floor code, floor value) for K, for M
        part = buf[8:].view(2, n)  # per-program amax partials of the K and M outputs
        plan.amax(xk, part)
        plan.scales(part, tsv)
    yk = ym = None
    vk = vm = plan.dummy_out
    if along_k is not None:
        yk = torch.empty((M, K), dtype=plan.out_dtype, device=dev)
        vk = yk.view(plan.view_dtype)
    if along_m is not None:
        ym = torch.empty((M, K), dtype=plan.out_dtype, device=dev)
        vm = ym.view(plan.view_dtype)
    if seed_ptr:
        plan.launch(xk, vk, vm, tsv, _seed_tensor(along_k, plan), _seed_tensor(along_m, plan))
    else:
        plan.launch(xk, vk, vm, tsv, int(along_k.seed) if along_k is not None else 0,
                    int(along_m.seed) if along_m is not None else 0)
    ts_k = tsv[0:1] if plan.two_level and along_k is not None else None
    ts_m = tsv[4:5] if plan.two_level and along_m is not None else None
    return yk, ym, ts_k, ts_m


def _int_seed(spec: Blocking | None) -> Blocking | None:
    """``spec`` with a seed held in device memory read into an int (the quantize + dequantize path)."""
    if spec is None or isinstance(spec.seed, int):
        return spec
    return Blocking(spec.rht, spec.rht_seed, int(spec.seed.item()))


def _seed_tensor(spec: Blocking | None, plan: "_Plan") -> Any:
    """The int64 device tensor the kernel reads a seed from (a zero placeholder for an unused blocking)."""
    if spec is None or isinstance(spec.seed, int):
        return plan.zero_seed
    return spec.seed


def _make_plan(x: Any, fmt: QuantFormat, rounding: str | None, along_k: Blocking | None, along_m: Blocking | None,
               sr_bits: int, out_dtype: Any, apply_ts: bool, tile: tuple[int, ...] | None,
               seed_ptr: bool = False) -> "_Plan":
    """Check the arguments and derive everything a launch needs (see ``fake_quantize_triton``)."""
    import torch

    from fp4lab.kernels.host import check_device, interpreting, scratch_f32
    from fp4lab.kernels.params import block_extents

    check_device(x, "fake_quantize")
    if x.ndim != 2:
        raise InputError(f"fake_quantize: expected a 2-D [M, K] tensor, got shape {tuple(x.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise InputError(f"fake_quantize: input has dtype {x.dtype}; expected bfloat16, float16 or float32")
    if along_k is None and along_m is None:
        raise InputError("fake_quantize: ask for at least one of along_k, along_m")
    mode = check_rounding(rounding, fmt)
    sr_bits = check_sr_bits(sr_bits)
    out_dtype = out_dtype or torch.bfloat16
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise InputError(f"fake_quantize: out_dtype must be torch.bfloat16 or torch.float32, got {out_dtype}")
    M, K = x.shape
    _check_extents(fmt, M, K, along_k, along_m)
    tr, tc = block_extents(fmt)
    for spec in (along_k, along_m):
        if spec is not None and not isinstance(spec.seed, int):
            t = spec.seed
            if not (hasattr(t, "dtype") and t.dtype == torch.int64 and t.numel() == 1 and t.device == x.device):
                raise InputError("fake_quantize: a seed must be an int or a 1-element int64 tensor on the input's "
                                 "device")
    plan = _Plan(fmt=fmt, mode=mode, out_dtype=out_dtype)
    if tc < 2 or (tr > 1 and along_m is not None) or K % 2:
        plan.kind = "fallback"
    elif along_k is not None and along_m is not None and along_k.rht and along_m.rht and tile is None:
        # rotations along both axes in one program need a tile's rows and its columns in one thread at once;
        # two passes are faster (H200, ufp4 RHT-16 on a 16384 x 4096 bf16 tensor: 142 + 160 us against 462 us)
        plan.kind = "split"
    else:
        _fused(plan, x, fmt, mode, along_k, along_m, sr_bits, out_dtype == torch.float32, apply_ts, tile, seed_ptr)
        plan.zero_seed = torch.zeros(1, dtype=torch.int64, device=x.device)
        interp = interpreting()
        plan.words = x.dtype == torch.bfloat16
        plan.view_dtype = torch.float32 if out_dtype == torch.float32 else (torch.int32 if interp else torch.int16)
        scratch = scratch_f32(x.device)
        plan.scratch = scratch
        plan.dummy_out = scratch if out_dtype == torch.float32 else scratch.view(plan.view_dtype)[:1]
    return plan


def _check_extents(fmt: QuantFormat, M: int, K: int, along_k: Blocking | None, along_m: Blocking | None) -> None:

    if along_k is not None:
        BlockView.for_format((M, K), fmt, -1)
        if along_k.rht is not None and K % along_k.rht:
            raise InputError(f"rht: axis 1 has length {K}, which is not a multiple of size={along_k.rht}")
    if along_m is not None:
        view = BlockView.for_format((M, K), fmt, 0)
        n = (M, K)[view.axis]
        if along_m.rht is not None and n % along_m.rht:
            raise InputError(f"rht: axis {view.axis} has length {n}, which is not a multiple of size={along_m.rht}")


def _fallback(x: Any, fmt: QuantFormat, mode: str, along_k: Blocking | None, along_m: Blocking | None,
              sr_bits: int, out_dtype: Any, apply_ts: bool) -> tuple:
    """Quantize kernel + dequantize kernel per output (same bits, two passes each)."""
    from fp4lab.kernels.dequantize_launch import dequantize_triton
    from fp4lab.kernels.quantize_launch import quantize_triton

    res: list[Any] = []
    scales: list[Any] = []
    for axis, spec in ((-1, along_k), (0, along_m)):
        if spec is None:
            res.append(None)
            scales.append(None)
            continue
        q = quantize_triton(x, fmt, QuantizeOptions(mode, spec.seed, axis, spec.rht, spec.rht_seed, sr_bits),
                            store_scales=False)
        ts = q.tensor_scale
        res.append(dequantize_triton(q.codes, q.scale_codes, ts, fmt, q.axis, rht=spec.rht, rht_seed=spec.rht_seed,
                                     rotated=True, out_dtype=out_dtype, apply_tensor_scale=apply_ts))
        scales.append(None if ts is None else ts.reshape(1))
    return res[0], res[1], scales[0], scales[1]
