"""Emulator entry points for quantize / dequantize on numpy arrays.

Currently dispatches to the numpy reference (``ref_quantize``); the numba twin must produce identical bits.
"""

from __future__ import annotations

import numpy as np

from fp4lab.emulator.ref_quantize import dequantize_reference, quantize_reference
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.quantized import QuantizedTensor


def quantize_emulated(x: np.ndarray, fmt: QuantFormat, rounding: str | None = None, seed: int = 0, axis: int = -1,
                      rht: int | None = None, rht_seed: int = 0) -> QuantizedTensor:
    return quantize_reference(x, fmt, rounding=rounding, seed=seed, axis=axis, rht=rht, rht_seed=rht_seed)


def dequantize_emulated(qt: QuantizedTensor, rotated: bool = False) -> np.ndarray:
    return dequantize_reference(qt, rotated=rotated)
