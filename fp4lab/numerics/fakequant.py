"""Fake quantization (quantize, then dequantize in the rotated basis): the GEMM operands of a training recipe.

``fake_quantize_reference`` defines the bits of the fused Triton kernel (``fp4lab.kernels.fakequant``):

    v = value[code] * S            (* ts unless apply_tensor_scale=False)      float32, as ``dequantize_reference``
    out = v                        dtype "fp32"
    out = bf16_rtne(v)             dtype "bf16": rounded to the nearest bf16, ties to even (NaN stays NaN)

with ``code, S, ts`` from ``quantize_reference(x, fmt, QuantizeOptions(rounding, seed, axis, rht, rht_seed,
sr_bits))`` and no inverse RHT (values stay in the rotated basis, where the two rotated operands of a GEMM
multiply to the unrotated product). For formats whose products ``value * S`` are bf16 numbers (MXFP4, NVFP4
without its tensor scale, UFP4-E4M3 without it, INT4 with E8M0 scales) the bf16 rounding changes nothing; for
FP32-scaled formats (UFP4, the paper's E2M1 reference) it is one extra rounding of each operand
(docs/numerics.md).
``fp4lab.emulator.quantize.fake_quantize_emulated`` is the numba twin (same bits).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.options import QuantizeOptions
from fp4lab.numerics.ref_quantize import dequantize_reference, quantize_reference
from fp4lab.quantized import QuantizedTensor

F32 = np.float32
GemmDtype = Literal["bf16", "fp32"]


def bf16_rtne(v: np.ndarray) -> np.ndarray:
    """float32 ``v`` rounded to bfloat16 (nearest, ties to even; overflow to +-Inf; NaN -> quiet NaN, sign kept),
    returned as float32."""
    b = np.ascontiguousarray(v, dtype=F32).view(np.uint32)
    mag = b & np.uint32(0x7FFFFFFF)
    r = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    r = np.where(mag > np.uint32(0x7F800000), (b & np.uint32(0x80000000)) | np.uint32(0x7FC00000), r)
    return r.astype(np.uint32).view(F32)


def fake_quant_values(qt: QuantizedTensor, dequantize: Callable[..., np.ndarray], dtype: GemmDtype,
                      apply_tensor_scale: bool) -> np.ndarray:
    """The GEMM operand of ``qt``: ``dequantize(qt, rotated=True)`` (without the tensor scale unless
    ``apply_tensor_scale``), rounded to bf16 for dtype "bf16"; float32."""
    if not apply_tensor_scale and qt.tensor_scale is not None:
        qt = dataclasses.replace(qt, tensor_scale=None)
    with np.errstate(over="ignore", invalid="ignore"):
        v = dequantize(qt, rotated=True)
    return bf16_rtne(v) if dtype == "bf16" else np.ascontiguousarray(v, dtype=F32)


def check_gemm_dtype(dtype: str) -> None:
    """A one-line ``InputError`` unless ``dtype`` is "bf16" or "fp32"."""
    if dtype not in ("bf16", "fp32"):
        raise InputError(f"fake_quantize: dtype must be 'bf16' or 'fp32', got {dtype!r}")


def fake_quantize_reference(x: np.ndarray, fmt: QuantFormat, rounding: str | None = None, seed: int = 0,
                            axis: int = -1, rht: int | None = None, rht_seed: int = 0, sr_bits: int = 24,
                            dtype: GemmDtype = "bf16", apply_tensor_scale: bool = True
                            ) -> tuple[np.ndarray, np.float32 | None]:
    """(float32 fake-quantized values of x, the tensor scale or None); see the module docstring."""
    check_gemm_dtype(dtype)
    qt = quantize_reference(x, fmt, QuantizeOptions(rounding, seed, axis, rht, rht_seed, sr_bits))
    return fake_quant_values(qt, dequantize_reference, dtype, apply_tensor_scale), qt.tensor_scale
