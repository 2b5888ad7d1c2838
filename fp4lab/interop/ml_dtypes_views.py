"""QuantizedTensor <-> numpy arrays typed with ml_dtypes, bit for bit (views of the same bytes, never a cast).

``to_ml_dtypes(qt)`` gives ``MLDtypesCodes(elements, scale, tensor_scale)`` as numpy arrays:

* ``elements``: the codes, unpacked (one per element, the tensor's shape), typed as the ml_dtypes type equal to
  the grid: ``float4_e2m1fn`` (E2M1), ``int4`` (the two's-complement INT4 grid), ``float8_e4m3fn``, ... ml_dtypes
  keeps a sub-byte value in the low bits of its own byte, so there is no nibble order.
* ``scale``: the block-scale codes typed ``float8_e8m0fnu`` (E8M0), ``float8_e4m3fn`` (E4M3; UE4M3 is its
  positive half), ``float8_e5m3fnu`` (UE5M3; ml_dtypes 0.7 and later), ``numpy.float32`` or ``ml_dtypes.bfloat16``;
  row-major, ``qt.scales``' shape (ml_dtypes has no
  swizzled layout). None without block scales.
* ``tensor_scale``: ``numpy.float32`` or None.

``from_ml_dtypes(elements, scale, fmt, tensor_scale)`` is the inverse and refuses types that are not the format's.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

import numpy as np

from fp4lab.errors import InputError
from fp4lab.interop.common import assemble, host, match_element, match_scale
from fp4lab.quantized import QuantizedTensor

_ELEMENTS = ("float4_e2m1fn", "int4", "uint4", "float6_e2m3fn", "float6_e3m2fn", "float8_e4m3fn", "float8_e5m2",
             "float8_e4m3", "float8_e3m4", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz")
_SCALES = ("float8_e8m0fnu", "float8_e4m3fn", "float8_e5m3fnu", "float8_e5m2", "float8_e4m3", "float8_e3m4")
_IEEE = {"fp32": "float32", "bf16": "bfloat16"}  # scale kinds whose codes are IEEE bit patterns


class MLDtypesCodes(NamedTuple):
    """A quantized tensor as ml_dtypes-typed numpy arrays (see the module docstring)."""

    elements: np.ndarray
    scale: np.ndarray | None
    tensor_scale: np.float32 | None


def _dtype(name: str) -> np.dtype:
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


def _bits(name: str) -> int:
    import ml_dtypes

    t = getattr(ml_dtypes, name)
    return int(ml_dtypes.iinfo(t).bits if name.lstrip("u").startswith("int") else ml_dtypes.finfo(t).bits)


def _decode_all(name: str) -> np.ndarray:
    return np.arange(1 << _bits(name), dtype=np.uint8).view(_dtype(name)).astype(np.float64)


@cache
def element_tables() -> dict[str, np.ndarray]:
    """ml_dtypes element type name -> float64 value of every code (types this ml_dtypes has)."""
    import ml_dtypes

    return {n: _decode_all(n) for n in _ELEMENTS if hasattr(ml_dtypes, n)}


@cache
def scale_tables() -> dict[str, np.ndarray]:
    """ml_dtypes 8-bit scale type name -> float64 value of codes 0..255."""
    import ml_dtypes

    return {n: _decode_all(n) for n in _SCALES if hasattr(ml_dtypes, n)}


def _np_dtype(name: str) -> np.dtype:
    return np.dtype(np.float32) if name == "float32" else _dtype(name)


def ml_dtypes_types(fmt: Any, what: str = "to_ml_dtypes") -> tuple[str, str | None]:
    """(element type name, scale type name or None) of the ml_dtypes types holding ``fmt``'s codes."""
    from fp4lab.formats.registry import get_format

    fmt = get_format(fmt)
    return (match_element(fmt, element_tables(), "ml_dtypes", what),
            match_scale(fmt, scale_tables(), _IEEE, "ml_dtypes", what))


def to_ml_dtypes(qt: QuantizedTensor) -> MLDtypesCodes:
    """``qt``'s codes as ml_dtypes-typed numpy arrays, bit for bit (see the module docstring)."""
    from fp4lab.numerics.checks import check_quantized, tensor_scale_value

    check_quantized(qt, "to_ml_dtypes")
    elem, sdt = ml_dtypes_types(qt.fmt, "to_ml_dtypes")
    elements = np.ascontiguousarray(host(qt.codes)).view(np.uint8).view(_dtype(elem))
    scale = None
    if sdt is not None:
        bits = np.ascontiguousarray(host(qt.scale_codes))
        scale = bits.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[bits.itemsize]).view(_np_dtype(sdt))
    ts = None if qt.tensor_scale is None else tensor_scale_value(qt.tensor_scale, "to_ml_dtypes")
    return MLDtypesCodes(elements, scale, ts)


def from_ml_dtypes(elements: np.ndarray, scale: np.ndarray | None, fmt: Any, tensor_scale: Any = None, *,
                   axis: int = -1) -> QuantizedTensor:
    """QuantizedTensor (numpy fields) of ml_dtypes-typed codes as ``to_ml_dtypes`` gives them, blocked along
    ``axis``."""
    from fp4lab.formats.registry import get_format

    fmt = get_format(fmt)
    elem, sdt = ml_dtypes_types(fmt, "from_ml_dtypes")
    for arr, want, nm in ((elements, elem, "elements"), (scale, sdt, "scale")):
        if want is None:
            if arr is not None:
                raise InputError(f"from_ml_dtypes: format '{fmt.name}' has no block scales, but a scale was given")
            continue
        if not isinstance(arr, np.ndarray) or arr.dtype != _np_dtype(want):
            got = arr.dtype if isinstance(arr, np.ndarray) else type(arr).__name__
            raise InputError(f"from_ml_dtypes: {nm} has type {got}; format '{fmt.name}' needs {want}")
    codes = np.ascontiguousarray(elements).view(np.uint8)
    sc = None if sdt is None else np.ascontiguousarray(scale).view(np.dtype(fmt.scale.code_dtype))
    return assemble(codes, sc, fmt, tensor_scale, axis, "ml_dtypes", "from_ml_dtypes")
