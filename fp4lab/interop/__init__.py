"""Conversions between ``QuantizedTensor`` and other libraries' narrow types, bit for bit (docs/interop.md).

* torch's own dtypes: ``to_torch`` / ``from_torch`` (``float4_e2m1fn_x2`` packed codes, ``float8_e8m0fnu`` /
  ``float8_e4m3fn`` / float32 / bfloat16 scale codes);
* ml_dtypes-typed numpy arrays: ``to_ml_dtypes`` / ``from_ml_dtypes``;
* torchao: ``to_torchao`` / ``from_torchao`` (``MXTensor``, ``NVFP4Tensor``);
* packed 4-bit codes from anywhere: ``unpack_codes``, ``from_packed``, ``dequantize_packed``.

A format converts only where the foreign type decodes every code to the same value; otherwise the call raises a
one-line ``InputError`` saying what differs. torch, ml_dtypes and torchao are imported on first use only.
"""

from fp4lab.interop.ml_dtypes_views import MLDtypesCodes, from_ml_dtypes, ml_dtypes_types, to_ml_dtypes
from fp4lab.interop.packed import dequantize_packed, from_packed, unpack_codes
from fp4lab.interop.torch_dtypes import TorchCodes, from_torch, to_torch, torch_dtypes
from fp4lab.interop.torchao_tensors import from_torchao, to_torchao

__all__ = [
    "MLDtypesCodes", "TorchCodes", "dequantize_packed", "from_ml_dtypes", "from_packed", "from_torch", "from_torchao",
    "ml_dtypes_types", "to_ml_dtypes", "to_torch", "to_torchao", "torch_dtypes", "unpack_codes",
]
