"""Host side of the FP8-operand kernels (``fp4lab.kernels.e4m3_operands``): the row exponents an E4M3 operand
is written over, and the bf16 rows of unfit operand rows.

Why the exponent rule is safe for any power-of-two-scaled format whose element values have at most 4 significant
bits: a block's decoded values are ``q * S`` with ``|q| <= top = m * 2^E_TOP`` (or Inf/NaN, which never fit).
Where the block-scale rule is a non-decreasing function of the block amax (every single-target rule is), the
largest block scale of an operand row is the rule at the row's maximum, ``2^s``, so every value of the row is at
most ``m * 2^(E_TOP + s)`` and ``r = s + E_TOP - 8 (+1 if m > 1.75)`` keeps it at most 448 * 2^r, E4M3's largest
finite value. Whether each value is E4M3 times ``2^r`` is then tested exactly (``fp8_convert.encode_e4m3``), so
``r`` decides only which rows fit, never a value. For MXFP4 (OCP floor rule, E2M1) it is the smallest ``r``
that holds the row's largest value, the choice ``fp8_convert`` makes from the values themselves.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fp4lab.formats.quant_format import QuantFormat
from fp4lab.kernels.fakequant_launch import Blocking

_PLANS: dict[tuple, Any] = {}


def grid_top(fmt: QuantFormat) -> tuple[int, int]:
    """(E_TOP, M_HI) of the element grid's largest finite magnitude ``m * 2^E_TOP`` (1 <= m < 2): M_HI = 1 when
    m > 1.75."""
    v = np.abs(np.asarray(fmt.element.values, dtype=np.float64))
    top = float(v[np.isfinite(v)].max())
    m, e = math.frexp(top)  # top = m * 2^e, 0.5 <= m < 1
    return e - 1, int(2 * m > 1.75)


def _plans(x: Any, fmt: QuantFormat, along_k: Blocking | None, along_m: Blocking | None) -> tuple:
    from fp4lab.emulator.rht import _check_size, rht_scale, rht_signs
    from fp4lab.kernels import e4m3_operands as ek
    from fp4lab.kernels.fakequant_launch import _amax_tile
    from fp4lab.kernels.host import CachedLaunch, device_array, interpreting
    from fp4lab.kernels.params import element_params, scale_params
    from fp4lab.kernels.quantize_launch import kernel_tables

    M, K = x.shape
    rk = _check_size(along_k.rht) if along_k is not None and along_k.rht is not None else 0
    rm = _check_size(along_m.rht) if along_m is not None and along_m.rht is not None else 0
    key = (id(fmt), x.shape, x.dtype, x.device, along_k is not None, along_m is not None, rk, rm,
           None if along_k is None else along_k.rht_seed, None if along_m is None else along_m.rht_seed)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is fmt:
        return hit[1]
    import torch

    dev = x.device
    interp = interpreting()
    bm, bk, warps = _amax_tile(rk, rm, K, M, interp)
    tiles = 1 if interp else max(1, min(16, (M // bm) * math.ceil(K / bk) // 1024))  # about 1024 programs
    in_kind = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}[x.dtype]
    signs_k = device_array(rht_signs(rk, along_k.rht_seed) if rk else np.ones(1, np.float32), dev)
    signs_m = device_array(rht_signs(rm, along_m.rht_seed) if rm else np.ones(1, np.float32), dev)
    opts = {} if interp else {"enable_fp_fusion": False, "num_warps": warps}
    maxima = CachedLaunch(ek._maxima_kernel, (math.ceil(M / (bm * tiles)), math.ceil(K / bk)),
                          dict(BM=bm, BK=bk, TILES=tiles, IN_KIND=in_kind, WORDS=in_kind == 1, ROWS=along_k is not None,
                               COLS=along_m is not None, RHT_K=rk, RHT_M=rm), opts,
                          fixed=(signs_k, signs_m, float(rht_scale(rk)) if rk else 1.0,
                                 float(rht_scale(rm)) if rm else 1.0, M, K, K // 2), n_lead=3)
    ep, sp = element_params(fmt, "rtne"), scale_params(fmt)
    _thr, _ctab, _lvl, _sctab, _igap, _vals, tg, itg, stab, scpos, svals = kernel_tables(ep, sp, dev)
    e_top, m_hi = grid_top(fmt)
    exps = {}
    for n in (M, K):
        exps[n] = CachedLaunch(ek._exponents_kernel, (math.ceil(n / 1024),),
                               dict(BLOCK=1024, SCALE=sp.cx, E_TOP=e_top, M_HI=m_hi, R_LO=ek.R_MIN),
                               {} if interp else {"num_warps": 4},
                               fixed=(n, tg, itg, stab, scpos, svals, sp.min_scale or 0.0, sp.max_scale or 0.0),
                               n_lead=3)
    plan = (maxima, exps[M], exps[K])
    if len(_PLANS) > 256:
        _PLANS.clear()
    _PLANS[key] = (fmt, plan)
    return plan


def e4m3_exponents_triton(x: Any, fmt: QuantFormat, along_k: Blocking | None,
                          along_m: Blocking | None) -> tuple[Any, Any, Any, Any]:
    """``(scale_k, unfit_k, scale_m, unfit_m)`` for the E4M3 operands of 2-D ``x`` [M, K] blocked along K (rows of
    x rotated as ``along_k`` says) and along M (columns, rotated as ``along_m`` says): fp32 ``2^r`` and int32
    unfit flags (1 where the row's maximum is Inf or NaN or its scale is not finite) per operand row; None for a
    blocking not asked for. One read of ``x`` (the maxima) and one small pass per blocking."""
    import torch

    from fp4lab.kernels.host import check_device

    check_device(x, "e4m3_exponents")
    if not x.is_contiguous():
        x = x.contiguous()
    M, K = x.shape
    maxima, exps_m, exps_k = _plans(x, fmt, along_k, along_m)
    dev = x.device
    rmax = torch.zeros(M if along_k is not None else 1, dtype=torch.int32, device=dev)
    cmax = torch.zeros(K if along_m is not None else 1, dtype=torch.int32, device=dev)
    maxima(x.view(torch.int32) if x.dtype == torch.bfloat16 else x, rmax, cmax)
    out: list[Any] = []
    for spec, mx, launch in ((along_k, rmax, exps_m), (along_m, cmax, exps_k)):
        if spec is None:
            out += [None, None]
            continue
        scale = torch.empty(mx.numel(), dtype=torch.float32, device=dev)
        unfit = torch.empty(mx.numel(), dtype=torch.int32, device=dev)
        launch(mx, scale, unfit)
        out += [scale, unfit]
    return out[0], out[1], out[2], out[3]


def repair_unfit_rows_triton(codes: Any, side: Any, scale: Any, unfit: Any) -> None:
    """Complete the side buffer (bf16 [R, C]) of each unfit row of an E4M3 operand (codes [R, C] from
    ``fake_quantize_e4m3_triton``): every code but the 0x7F marker decoded, ``code * 2^r``. Afterwards ``side``
    holds the operand's values in every unfit row. Programs of rows that all fit return at once."""
    import torch

    from fp4lab.kernels import e4m3_operands as ek
    from fp4lab.kernels.host import CachedLaunch, interpreting

    R, C = codes.shape
    key = ("repair", R, C, codes.device)
    launch = _PLANS.get(key)
    if launch is None:
        interp = interpreting()
        br, bc = 4, min(1024, 1 << max(C - 1, 1).bit_length())
        launch = _PLANS[key] = CachedLaunch(ek._repair_kernel, (math.ceil(R / br),), dict(BR=br, BC=bc),
                                            {} if interp else {"num_warps": 4}, fixed=(R, C), n_lead=4)
    launch(codes.view(torch.uint8), side.view(torch.int16), scale, unfit)
