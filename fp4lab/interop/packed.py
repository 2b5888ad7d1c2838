"""Packed 4-bit codes from any library: unpack them, make a QuantizedTensor of them, dequantize them.

Packing (the only one used anywhere in fp4lab): two codes per byte along the last axis, element 2i in bits 0-3,
element 2i+1 in bits 4-7 (``QuantizedTensor.packed()``, torchao's ``pack_uint4``, torch ``float4_e2m1fn_x2``).
Scale codes are the integers fp4lab stores (``qt.scale_codes``): uint8 for 8-bit scale formats, uint16 (or int16)
bf16 bits, uint32 (or int32) fp32 bits; row-major in ``qt.scales``' shape, or the flat cuBLAS 128x4 layout of a
2-D tensor (``swizzled=True``, fp4lab.layout).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.interop.common import assemble, host
from fp4lab.layout import unpack_codes
from fp4lab.quantized import QuantizedTensor


def _is_torch(a: Any) -> bool:
    return type(a).__module__.startswith("torch")


_CODE_DTYPES = {1: ("uint8",), 2: ("uint16", "int16"), 4: ("uint32", "int32")}


def unswizzle(scale_codes: Any, scale_shape: tuple[int, ...], what: str) -> Any:
    """Row-major scale codes of ``scale_shape`` (2-D) from the flat 128x4 layout, on the input's device."""
    from fp4lab.layout import unswizzle_scales

    if len(scale_shape) != 2:
        raise InputError(f"{what}: swizzled scales need a 2-D tensor, got one with scales of shape {scale_shape}")
    h = host(scale_codes)
    try:
        out = unswizzle_scales(h, *scale_shape)
    except InputError as exc:
        raise InputError(f"{what}: {str(exc).removeprefix('unswizzle_scales: ')}") from None
    if _is_torch(scale_codes):
        import torch

        return torch.from_numpy(np.ascontiguousarray(out)).to(scale_codes.device)
    return np.ascontiguousarray(out)


def scale_shape_of(fmt: Any, shape: tuple[int, ...], axis: int, what: str) -> tuple[int, ...]:
    """The row-major scale shape of a ``shape`` tensor blocked along ``axis`` in ``fmt``."""
    from fp4lab.numerics.blocks import BlockView

    try:
        return tuple(BlockView.for_format(shape, fmt, axis).scale_shape)
    except InputError as exc:
        raise InputError(str(exc).replace("quantize:", f"{what}:", 1)) from None


def from_packed(packed: Any, scale_codes: Any, fmt: Any, tensor_scale: Any = None, *, axis: int = -1,
                swizzled: bool = False, source: str = "packed", what: str = "from_packed") -> QuantizedTensor:
    """QuantizedTensor of 4-bit ``packed`` bytes [..., K/2] and integer ``scale_codes`` (see the module docstring)
    in format ``fmt`` (name, spec path or QuantFormat), blocked along ``axis`` of the unpacked tensor."""
    from fp4lab.formats.registry import get_format

    fmt = get_format(fmt)
    if fmt.element.bits > 4:
        raise InputError(f"{what}: format '{fmt.name}' has {fmt.element.bits}-bit codes; only 4-bit codes pack two "
                         "per byte")
    codes = unpack_codes(packed)
    scaled = fmt.scale_rule.method != "none"
    if scaled:
        if scale_codes is None or not hasattr(scale_codes, "dtype"):
            raise InputError(f"{what}: format '{fmt.name}' has block scales; give scale_codes as an array or tensor")
        width = np.dtype(fmt.scale.code_dtype).itemsize
        dt = str(scale_codes.dtype).removeprefix("torch.")
        if dt not in _CODE_DTYPES[width]:
            raise InputError(f"{what}: scale_codes have dtype {dt}; format '{fmt.name}' stores its scale codes as "
                             f"{' or '.join(_CODE_DTYPES[width])}")
        if swizzled:
            if not isinstance(axis, (int, np.integer)) or len(codes.shape) != 2 or axis % 2 != 1:
                raise InputError(f"{what}: swizzled scales need a 2-D tensor blocked along its last axis")
            scale_codes = unswizzle(scale_codes, scale_shape_of(fmt, tuple(codes.shape), 1, what), what)
    elif scale_codes is not None and int(np.prod(scale_codes.shape)):
        raise InputError(f"{what}: format '{fmt.name}' has no block scales, but scale_codes were given")
    return assemble(codes, scale_codes, fmt, tensor_scale, axis, source, what)


def dequantize_packed(packed: Any, scale_codes: Any, fmt: Any, tensor_scale: Any = None, *, axis: int = -1,
                      swizzled: bool = False) -> Any:
    """float32 values of packed codes: ``fp4lab.dequantize(from_packed(...))``, i.e. ``(value[code] * S) * ts``."""
    from fp4lab.api import dequantize

    return dequantize(from_packed(packed, scale_codes, fmt, tensor_scale, axis=axis, swizzled=swizzled,
                                  what="dequantize_packed"))
