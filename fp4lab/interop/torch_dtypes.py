"""QuantizedTensor <-> torch's own narrow dtypes, bit for bit (views of the same codes; nothing is re-rounded).

``to_torch(qt)`` gives ``TorchCodes(data, scale, tensor_scale)`` on the tensor's device (numpy fields: CPU):

* ``data``: the element codes. E2M1 grids: ``torch.float4_e2m1fn_x2`` [..., K/2], two codes per byte along the
  last axis, element 2i in bits 0-3 (torch gives this dtype no arithmetic; the order is torchao's
  ``pack_uint4``); 8-bit grids that equal ``float8_e4m3fn`` / ``float8_e5m2``: that dtype, one code per element.
* ``scale``: the block-scale codes typed ``float8_e8m0fnu`` (E8M0), ``float8_e4m3fn`` (E4M3; UE4M3 codes are its
  positive half), ``float32`` or ``bfloat16``; row-major with ``qt.scales``' shape, or with ``swizzle=True`` the
  flat cuBLAS/CUTLASS 128x4 layout (2-D tensors blocked along the last axis). None without block scales.
* ``tensor_scale``: 0-d float32 tensor, or None.

``from_torch(data, scale, fmt, tensor_scale)`` is the inverse; it refuses dtypes that are not the format's.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

import numpy as np

from fp4lab.errors import InputError, check_plain_data
from fp4lab.interop.common import (
    assemble,
    e2m1_values,
    match_element,
    match_scale,
    require_1d_last_axis,
)
from fp4lab.interop.packed import from_packed, scale_shape_of, unswizzle
from fp4lab.quantized import QuantizedTensor

_ELEMENT_8BIT = ("float8_e4m3fn", "float8_e5m2")
_SCALE_8BIT = ("float8_e8m0fnu", "float8_e4m3fn", "float8_e5m2")
IEEE_SCALES = {"fp32": "float32", "bf16": "bfloat16"}


class TorchCodes(NamedTuple):
    """A quantized tensor as torch dtypes (see the module docstring)."""

    data: Any
    scale: Any
    tensor_scale: Any


def _decode_all(name: str) -> np.ndarray:
    import torch

    return torch.arange(256, dtype=torch.uint8).view(getattr(torch, name)).to(torch.float64).numpy()


@cache
def element_tables() -> dict[str, np.ndarray]:
    """torch element dtype name -> float64 value of every code."""
    return {"float4_e2m1fn_x2": e2m1_values(), **{n: _decode_all(n) for n in _ELEMENT_8BIT}}


@cache
def scale_tables() -> dict[str, np.ndarray]:
    """torch 8-bit scale dtype name -> float64 value of codes 0..255."""
    return {n: _decode_all(n) for n in _SCALE_8BIT}


def torch_dtypes(fmt: Any, what: str = "to_torch") -> tuple[str, str | None]:
    """(element dtype name, scale dtype name or None) of torch dtypes holding ``fmt``'s codes; else InputError."""
    from fp4lab.formats.registry import get_format

    fmt = get_format(fmt)
    return (match_element(fmt, element_tables(), "torch", what),
            match_scale(fmt, scale_tables(), IEEE_SCALES, "torch", what))


_BITS_DTYPE = {1: "uint8", 2: "int16", 4: "int32"}  # torch dtypes that carry scale-code bits of each width


def _as_torch(a: Any) -> Any:
    import torch

    if type(a).__module__.startswith("torch"):
        return a
    a = np.ascontiguousarray(a)
    return torch.from_numpy(a.view({1: np.uint8, 2: np.int16, 4: np.int32}[a.itemsize]) if a.dtype.kind == "u" else a)


def to_torch(qt: QuantizedTensor, *, swizzle: bool = False) -> TorchCodes:
    """``qt``'s codes as torch dtypes, bit for bit (see the module docstring)."""
    import torch

    from fp4lab.layout import pack_nibbles_torch
    from fp4lab.numerics.checks import check_quantized, tensor_scale_value

    check_quantized(qt, "to_torch")
    fmt = qt.fmt
    elem, sdt = torch_dtypes(fmt, "to_torch")
    codes = _as_torch(qt.codes)
    if elem == "float4_e2m1fn_x2":
        if codes.shape[-1] % 2:
            raise InputError(f"to_torch: the last axis has odd length {codes.shape[-1]}; float4_e2m1fn_x2 packs "
                             "pairs along it")
        data = pack_nibbles_torch(codes).view(torch.float4_e2m1fn_x2)
    else:
        data = codes.contiguous().view(getattr(torch, elem))
    scale = None
    if sdt is not None:
        bits = _as_torch(qt.scale_codes).contiguous()
        bits = bits.view(getattr(torch, _BITS_DTYPE[bits.element_size()]))
        if swizzle:
            require_1d_last_axis(fmt, len(qt.shape), qt.axis, "to_torch", "the 128x4 swizzled layout")
            if len(qt.shape) != 2:
                raise InputError(f"to_torch: swizzle=True needs a 2-D tensor, got shape {qt.shape}")
            from fp4lab.layout import swizzle_scales_128x4

            bits = swizzle_scales_128x4(bits)
        scale = bits.view(getattr(torch, sdt))
    elif swizzle:
        raise InputError(f"to_torch: format '{fmt.name}' has no block scales to swizzle")
    ts = None
    if qt.tensor_scale is not None:  # a float32 value: exact through a Python float
        ts = torch.tensor(float(tensor_scale_value(qt.tensor_scale, "to_torch")), dtype=torch.float32,
                          device=codes.device)
    return TorchCodes(data, scale, ts)


def from_torch(data: Any, scale: Any, fmt: Any, tensor_scale: Any = None, *, axis: int = -1,
               swizzled: bool = False) -> QuantizedTensor:
    """QuantizedTensor (torch fields on ``data``'s device) of codes typed as ``to_torch`` gives them."""
    import torch

    from fp4lab.formats.registry import get_format

    fmt = get_format(fmt)
    for part in (data, scale, tensor_scale):
        check_plain_data(part, "from_torch")
    elem, sdt = torch_dtypes(fmt, "from_torch")
    if not isinstance(data, torch.Tensor) or data.dtype != getattr(torch, elem):
        got = data.dtype if isinstance(data, torch.Tensor) else type(data).__name__
        raise InputError(f"from_torch: data is {got}; format '{fmt.name}' element codes are torch.{elem}")
    if sdt is not None:
        if not isinstance(scale, torch.Tensor) or scale.dtype != getattr(torch, sdt):
            got = scale.dtype if isinstance(scale, torch.Tensor) else type(scale).__name__
            raise InputError(f"from_torch: scale is {got}; format '{fmt.name}' block scales are torch.{sdt}")
        scale = scale.contiguous().view(getattr(torch, _BITS_DTYPE[scale.element_size()]))
    elif scale is not None:
        raise InputError(f"from_torch: format '{fmt.name}' has no block scales, but a scale tensor was given")
    if elem == "float4_e2m1fn_x2":
        return from_packed(data, scale, fmt, tensor_scale, axis=axis, swizzled=swizzled, source="torch",
                           what="from_torch")
    codes = data.contiguous().view(torch.uint8)
    if swizzled and sdt is not None:
        if codes.dim() != 2 or not isinstance(axis, int) or axis % 2 != 1:
            raise InputError("from_torch: swizzled scales need a 2-D tensor blocked along its last axis")
        scale = unswizzle(scale, scale_shape_of(fmt, tuple(codes.shape), 1, "from_torch"), "from_torch")
    return assemble(codes, scale, fmt, tensor_scale, axis, "torch", "from_torch")
