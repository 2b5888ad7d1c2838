"""Entry points the public API dispatches torch tensors to (CUDA tensors; CPU tensors under TRITON_INTERPRET=1).

All return what the emulator returns for the same inputs, bit for bit, as torch tensors on the input's device:
``QuantizedTensor`` fields ``codes`` (uint8), ``scale_codes`` (uint8; int32 fp32 bits; uint16 bf16 bits),
``scales`` (fp32) and ``tensor_scale`` (0-d fp32 tensor or None). ``quantize_cuda`` takes the options record
``QuantizeOptions``, as every quantize backend does.
"""

from __future__ import annotations

from typing import Any

from fp4lab.formats.registry import get_format
from fp4lab.numerics.options import DEFAULT_OPTIONS, QuantizeOptions
from fp4lab.quantized import QuantizedTensor


def quantize_cuda(x: Any, fmt: Any, options: QuantizeOptions = DEFAULT_OPTIONS) -> QuantizedTensor:
    """Triton quantize of torch tensor ``x`` with format ``fmt`` (name, path or QuantFormat) under ``options``
    (see ``fp4lab.quantize``): ``quantize_triton``'s plain outputs (unpacked codes, row-major scale codes)."""
    from fp4lab.kernels.quantize_launch import quantize_triton

    return quantize_triton(x, get_format(fmt), options)


def dequantize_cuda(qt: QuantizedTensor, rotated: bool = False, out_dtype: Any = None) -> Any:
    """fp32 (or ``out_dtype=torch.bfloat16``) values of ``qt``; the RHT is undone unless ``rotated``."""
    from fp4lab.kernels.dequantize_launch import dequantize_triton

    return dequantize_triton(qt.codes, qt.scale_codes, qt.tensor_scale, qt.fmt, qt.axis, rht=qt.rht,
                             rht_seed=qt.rht_seed, rotated=rotated, out_dtype=out_dtype)


def rht_cuda(x: Any, size: int = 16, seed: int = 0, axis: int = -1, inverse: bool = False) -> Any:
    """fp32 randomized Hadamard transform of torch tensor ``x`` (see ``fp4lab.rht``)."""
    from fp4lab.kernels.rht_launch import rht_triton

    return rht_triton(x, size=size, seed=seed, axis=axis, inverse=inverse)


def gemm(qa: QuantizedTensor, qb: QuantizedTensor, mode: str = "exact") -> Any:
    """fp32 A @ B.T of quantized A [M, K] and B [N, K] (see ``fp4lab.kernels.gemm`` for both modes)."""
    from fp4lab.kernels.gemm_launch import gemm_triton

    return gemm_triton(qa, qb, mode=mode)
