"""Public entry points ``quantize`` / ``dequantize`` / ``rht``: dispatch by array type and device.

numpy arrays and CPU torch tensors run on the numba emulator; CUDA tensors run on the Triton kernels. All
paths produce the same bits (see docs/numerics.md). Inputs are converted to float32 first (RTNE from float64;
exact from float16/bfloat16).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.formats.registry import get_format
from fp4lab.quantized import QuantizedTensor

FormatLike = str | Path | QuantFormat


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _to_float32_numpy(x: Any, what: str) -> np.ndarray:
    """float32 numpy copy/view of a numpy array or CPU torch tensor; rejects non-float dtypes."""
    if _is_torch(x):
        import torch

        if not torch.is_floating_point(x):
            raise InputError(f"{what}: input tensor has dtype {x.dtype}; expected a floating-point tensor")
        return x.detach().to(torch.float32).contiguous().numpy()
    arr = np.asarray(x)
    if arr.ndim == 0:
        raise InputError(f"{what}: input is a 0-d scalar; give an array with at least one axis")
    if arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
        raise InputError(f"{what}: input array has dtype {arr.dtype}; expected float16, float32 or float64")
    return np.ascontiguousarray(arr, dtype=np.float32)


def _torch_fields(qt: QuantizedTensor) -> QuantizedTensor:
    """Same quantized tensor with its arrays as CPU torch tensors (for torch inputs)."""
    import dataclasses

    import torch

    def conv(a: Any) -> Any:
        a = np.asarray(a)
        return torch.from_numpy(a.view(np.int32) if a.dtype == np.uint32 else a)

    return dataclasses.replace(qt, codes=conv(qt.codes), scale_codes=conv(qt.scale_codes), scales=conv(qt.scales),
                               meta={**qt.meta, "torch": True})


def quantize(
    x: Any,
    fmt: FormatLike,
    rounding: str | None = None,
    seed: int = 0,
    axis: int = -1,
    rht: int | None = None,
    rht_seed: int = 0,
    *,
    sr_bits: int = 24,
) -> QuantizedTensor:
    """Quantize ``x`` (numpy array or torch tensor) with format ``fmt`` (name, spec-file path or QuantFormat).

    ``rounding``: None (the format's default), "rtne", "rtna", "rtnz", "rtz" or "sr" (``seed`` drives it).
    ``rht``: rotate along the blocked axis with ``fp4lab.rht(size=rht, seed=rht_seed)`` before scaling.
    ``sr_bits``: random bits per element for "sr" (24, 16, 8 or 4; docs/numerics.md, "Stochastic rounding").
    """
    fmt = get_format(fmt)
    if _is_torch(x) and x.is_cuda:
        from fp4lab.kernels.api import quantize_cuda

        return quantize_cuda(x, fmt, rounding=rounding, seed=seed, axis=axis, rht=rht, rht_seed=rht_seed,
                             sr_bits=sr_bits)
    from fp4lab.emulator.quantize import quantize_emulated

    arr = _to_float32_numpy(x, "quantize")
    qt = quantize_emulated(arr, fmt, rounding=rounding, seed=seed, axis=axis, rht=rht, rht_seed=rht_seed,
                           sr_bits=sr_bits)
    return _torch_fields(qt) if _is_torch(x) else qt


def dequantize(qt: QuantizedTensor, rotated: bool = False) -> Any:
    """float32 values of ``qt`` (array or tensor, matching the input of ``quantize``).

    The RHT applied at quantization is undone unless ``rotated=True`` (then values stay in the rotated basis,
    as a GEMM on rotated operands sees them).
    """
    if _is_torch(qt.codes) and qt.codes.is_cuda:
        from fp4lab.kernels.api import dequantize_cuda

        return dequantize_cuda(qt, rotated=rotated)
    from fp4lab.emulator.quantize import dequantize_emulated

    if qt.meta.get("torch"):
        import dataclasses

        import torch

        np_qt = dataclasses.replace(
            qt, codes=qt.codes.numpy(), scales=qt.scales.numpy(),
            scale_codes=qt.scale_codes.numpy().view(np.uint32) if qt.scale_codes.dtype == torch.int32 else qt.scale_codes.numpy())
        return torch.from_numpy(dequantize_emulated(np_qt, rotated=rotated))
    return dequantize_emulated(qt, rotated=rotated)


def rht(x: Any, size: int = 16, seed: int = 0, axis: int = -1, inverse: bool = False) -> Any:
    """Random Hadamard transform of ``x`` in consecutive ``size``-element chunks along ``axis`` (float32)."""
    if _is_torch(x) and x.is_cuda:
        from fp4lab.kernels.api import rht_cuda

        return rht_cuda(x, size=size, seed=seed, axis=axis, inverse=inverse)
    from fp4lab.emulator.rht import rht as rht_numpy

    out = rht_numpy(_to_float32_numpy(x, "rht"), size=size, seed=seed, axis=axis, inverse=inverse)
    if _is_torch(x):
        import torch

        return torch.from_numpy(out)
    return out


def gemm(qa: QuantizedTensor, qb: QuantizedTensor, mode: str = "exact") -> Any:
    """fp32 ``A @ B.T`` of quantized CUDA tensors qa [M, K] and qb [N, K] (same format, blocked along K).

    ``exact``: one Triton kernel decoding tiles in registers, fp32 accumulation in ascending K (see
    ``fp4lab.kernels.gemm``); ``fast``: Triton dequantize to bf16, then cuBLAS.
    """
    from fp4lab.kernels.api import gemm as gemm_triton

    return gemm_triton(qa, qb, mode=mode)
