"""QuantizedTensor <-> torchao's ``MXTensor`` and ``NVFP4Tensor`` (torchao.prototype.mx_formats), bit for bit.

Where the formats coincide (checked on the codes' values, never on names):

* ``MXTensor``: elements ``float4_e2m1fn_x2`` (``qdata`` uint8 [..., K/2], element 2i in bits 0-3; torchao's
  ``pack_uint4``) or ``float8_e4m3fn`` / ``float8_e5m2`` (``qdata`` typed, one code per element); ``scale``
  ``float8_e8m0fnu`` [..., K/block] for any ``block_size``; no tensor scale. fp4lab formats with E8M0 block scales
  and 1-D blocks along the last axis (mxfp4, mxfp4-ceil/-even/-rceil, ...).
* ``NVFP4Tensor``: ``qdata`` uint8 packed E2M1 as above, ``scale`` ``float8_e4m3fn`` [..., K/16] (fp4lab's UE4M3
  codes are its positive half), ``per_tensor_scale`` a 0-d float32 (fp4lab's ``tensor_scale``) or None. fp4lab
  formats with E2M1 elements, E4M3 scales on 1x16 blocks: nvfp4, nvfp4-torchao (two-level), nvfp4-torchao-1level.
* Scale layout: row-major, or with ``swizzle=True`` / ``is_swizzled_scales`` the cuBLAS 128x4 layout that
  torchao's ``to_blocked`` writes, held as a [32*ceil(M/128), 16*ceil(K/block/4)] tensor (2-D tensors only).

Dequantization order differs: fp4lab computes ``(value * S) * ts``, ``NVFP4Tensor.dequantize`` ``value * (ts * S)``
(equal bits without a tensor scale; two-level results can differ in the last bit). Not carried: ``orig_dtype``
(an argument of ``to_torchao``), ``act_per_tensor_scale``, kernel preferences.
"""

from __future__ import annotations

from typing import Any

from fp4lab.errors import InputError
from fp4lab.interop.common import quiet_import_logs, require_1d_last_axis
from fp4lab.interop.torch_dtypes import from_torch, to_torch, torch_dtypes
from fp4lab.quantized import QuantizedTensor

_FP4 = "float4_e2m1fn_x2"
_MX_ELEMENTS = (_FP4, "float8_e4m3fn", "float8_e5m2")


def _classes() -> tuple[type, type]:
    try:
        with quiet_import_logs():
            from torchao.prototype.mx_formats.mx_tensor import MXTensor
            from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor
    except ImportError as exc:
        from fp4lab.errors import Fp4labError

        raise Fp4labError(f"torchao interop needs torchao (pip install 'fp4lab[test]' or torchao): {exc}") from None
    return MXTensor, NVFP4Tensor


def _kind(fmt: Any, elem: str, sdt: str | None, what: str) -> str:
    """'mx' or 'nvfp4': the torchao tensor type that holds ``fmt``; else a one-line InputError naming why."""
    block = tuple(fmt.block.shape) if fmt.block is not None else ()
    if sdt == "float8_e8m0fnu" and elem in _MX_ELEMENTS and fmt.tensor_scale == "none":
        return "mx"
    if sdt == "float8_e4m3fn" and elem == _FP4 and block == (16,):
        return "nvfp4"
    scales = f"{sdt} block scales" if sdt else "no block scales"
    ts = ", a tensor scale" if fmt.tensor_scale != "none" else ""
    raise InputError(f"{what}: format '{fmt.name}' ({elem} elements, {scales}, blocks {block or 'none'}{ts}) is "
                     "neither torchao MX (E8M0 scales, no tensor scale) nor NVFP4 (E2M1, E4M3 scales, blocks of 16)")


def _swizzled_shape(rows: int, blocks: int) -> tuple[int, int]:
    return 32 * -(-rows // 128), 16 * -(-blocks // 4)


def to_torchao(qt: QuantizedTensor, *, swizzle: bool = False, orig_dtype: Any = None) -> Any:
    """``MXTensor`` or ``NVFP4Tensor`` holding ``qt``'s bits (see the module docstring); ``orig_dtype`` (default
    torch.float32) is what torchao's ``dequantize()`` returns."""
    import torch

    MXTensor, NVFP4Tensor = _classes()
    fmt = qt.fmt if isinstance(qt, QuantizedTensor) else None
    if fmt is None:
        raise InputError(f"to_torchao: expected a QuantizedTensor, got {type(qt).__name__}")
    require_1d_last_axis(fmt, len(qt.shape), qt.axis, "to_torchao", "torchao's MXTensor / NVFP4Tensor")
    elem, sdt = torch_dtypes(fmt, "to_torchao")
    kind = _kind(fmt, elem, sdt, "to_torchao")
    if kind == "nvfp4" and len(qt.shape) not in (2, 3):
        raise InputError(f"to_torchao: NVFP4Tensor holds 2-D or 3-D tensors, got shape {qt.shape}")
    tc = to_torch(qt, swizzle=swizzle)
    scale = tc.scale
    if swizzle:
        scale = scale.view(*_swizzled_shape(qt.shape[0], qt.shape[1] // fmt.block_size))
    qdata = tc.data.view(torch.uint8) if elem == _FP4 else tc.data
    od = torch.float32 if orig_dtype is None else orig_dtype
    if kind == "mx":
        with quiet_import_logs():
            from torchao.quantization.quantize_.common.kernel_preference import KernelPreference

        return MXTensor(qdata, scale, getattr(torch, elem), fmt.block_size, od, KernelPreference.EMULATED, None,
                        bool(swizzle))
    return NVFP4Tensor(qdata, scale, fmt.block_size, od, per_tensor_scale=tc.tensor_scale,
                       is_swizzled_scales=bool(swizzle))


def _default_format(t: Any, is_mx: bool) -> str:
    import torch

    if is_mx:
        if t.elem_dtype == torch.float4_e2m1fn_x2 and t.block_size == 32:
            return "mxfp4"
        raise InputError(f"from_torchao: an MXTensor with {t.elem_dtype} elements and blocks of {t.block_size} has "
                         "no default fp4lab format; pass fmt=")
    return "nvfp4-torchao" if t.per_tensor_scale is not None else "nvfp4-torchao-1level"


def from_torchao(t: Any, fmt: Any = None) -> QuantizedTensor:
    """QuantizedTensor (torch fields on ``t``'s device) holding a torchao ``MXTensor``'s or ``NVFP4Tensor``'s bits.

    ``fmt`` defaults to mxfp4 (MX, E2M1, blocks of 32), nvfp4-torchao (NVFP4 with ``per_tensor_scale``) or
    nvfp4-torchao-1level; any format with the same storage is accepted (the scale rule is not stored)."""
    import torch

    from fp4lab.formats.registry import get_format

    MXTensor, NVFP4Tensor = _classes()
    if not isinstance(t, (MXTensor, NVFP4Tensor)):
        raise InputError(f"from_torchao: expected a torchao MXTensor or NVFP4Tensor, got {type(t).__name__}")
    is_mx = isinstance(t, MXTensor)
    fmt = get_format(fmt if fmt is not None else _default_format(t, is_mx))
    elem, sdt = torch_dtypes(fmt, "from_torchao")
    kind = _kind(fmt, elem, sdt, "from_torchao")
    theirs = ("mx" if is_mx else "nvfp4", str(t.elem_dtype).removeprefix("torch.") if is_mx else _FP4, t.block_size)
    ours = (kind, elem, fmt.block_size)
    if theirs != ours or (not is_mx and (t.per_tensor_scale is None) != (fmt.tensor_scale == "none")):
        has_ts = "with" if not is_mx and t.per_tensor_scale is not None else "without"
        raise InputError(f"from_torchao: a {type(t).__name__} ({theirs[1]} elements, blocks of {t.block_size}, "
                         f"{has_ts} a tensor scale) is not stored as format '{fmt.name}'")
    if not t.qdata.is_contiguous():
        raise InputError("from_torchao: the tensor is transposed (qdata not row-major); fp4lab blocks along the "
                         "last axis of a row-major tensor")
    data = t.qdata.view(torch.float4_e2m1fn_x2) if elem == _FP4 else t.qdata
    scale = t.scale
    if t.is_swizzled_scales:
        if t.qdata.dim() != 2:
            raise InputError("from_torchao: swizzled scales are read for 2-D tensors only")
        scale = scale.reshape(-1)
    ts = None if is_mx else t.per_tensor_scale
    return from_torch(data, scale, fmt, ts, axis=-1, swizzled=bool(t.is_swizzled_scales))
