"""fp4lab: design 4-bit block-scaled number formats and emulate the hardware that runs them, bit for bit.

Public API (README.md, "Using it"): formats (``list_formats``, ``get_format``, ``load_format``, ``register``),
``quantize`` / ``dequantize`` / ``rht`` (numba emulator on CPU, Triton kernels on CUDA; ``QuantizeOptions`` is the
record of quantize's options that every backend takes), ``pack`` / ``unpack`` (codes two per byte),
``gemm``, and hardware emulation (``list_hw``, ``get_hw``, ``emulate_mma``, ``emulate_gemm``: CPU models, and Triton
kernels for block-scaled kinds on CUDA operands); ``fp4lab.interop`` converts to and from torch dtypes, ml_dtypes
and torchao tensors.
"""

from fp4lab import interop  # torch, ml_dtypes and torchao load on first use
from fp4lab.api import dequantize, emulate_gemm, gemm, pack, quantize, rht, unpack
from fp4lab.errors import (
    Fp4labError,
    InputError,
    OutputError,
    SpecError,
    UnknownFormatError,
)
from fp4lab.formats import QuantFormat, get_format, list_formats, load_format, register
from fp4lab.hwspec import emulate_mma, get_hw, list_hw
from fp4lab.numerics.options import QuantizeOptions
from fp4lab.quantized import QuantizedTensor

__version__ = "0.1.0"

__all__ = [
    "Fp4labError",
    "InputError",
    "OutputError",
    "QuantFormat",
    "QuantizeOptions",
    "QuantizedTensor",
    "SpecError",
    "UnknownFormatError",
    "dequantize",
    "emulate_gemm",
    "emulate_mma",
    "gemm",
    "get_format",
    "get_hw",
    "interop",
    "list_formats",
    "list_hw",
    "load_format",
    "pack",
    "quantize",
    "register",
    "rht",
    "unpack",
]
