"""GEMM operands of a recipe: one high-precision tensor fake-quantized along K (its last axis) and/or along M
(axis 0), on the device it lives on.

CUDA tensors go through the fused Triton kernel (one read of the tensor for both blockings); CPU tensors through
the numba emulator. Both give the bits of ``fp4lab.numerics.fakequant.fake_quantize_reference``: the dequantized
values in the rotated basis, rounded to bf16 (``gemm_dtype = "bf16"``, and the FP8 dtypes, whose GEMMs convert
these operands) or exact in fp32 (``"fp32"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.options import Blocking
from fp4lab.recipes import backend

Operands = tuple[Any, Any, Any, Any]  # (along K, along M, tensor scale along K, tensor scale along M)



def gemm_torch_dtype(gemm_dtype: str) -> torch.dtype:
    """dtype of the fake-quantized operands: fp32 for ``"fp32"``, else bf16 (the FP8 GEMM dtypes convert the
    bf16 operands, exact for their power-of-two-scaled formats, to E4M3: ``fp4lab.recipes.fp8_gemm``)."""
    return torch.float32 if gemm_dtype == "fp32" else torch.bfloat16


def fake_quant_operands(t: torch.Tensor, fmt: QuantFormat | None, rounding: str | None, *, along_k: Blocking | None,
                        along_m: Blocking | None, sr_bits: int, gemm_dtype: str, fold_tensor_scale: bool) -> Operands:
    """(t_k, t_m, ts_k, ts_m) for a 2-D tensor ``t`` [M, K]: fake-quantized copies blocked along K and along M
    (None where not asked for), of dtype bf16 or fp32 per ``gemm_dtype``. ``fmt = None``: ``t`` rounded to the GEMM
    dtype (the bf16 baseline). ``fold_tensor_scale``: two-level formats leave their tensor scale out of the values
    and return it (1-element fp32 tensors) for the GEMM's output; otherwise ts_k = ts_m = None."""
    dt = gemm_torch_dtype(gemm_dtype)
    if fmt is None:
        y = t.detach().to(dt)
        return (y if along_k is not None else None), (y if along_m is not None else None), None, None
    if backend.on_triton(t):
        from fp4lab.kernels.fakequant_launch import fake_quantize_triton

        yk, ym, tsk, tsm = fake_quantize_triton(t.detach(), fmt, rounding, along_k=along_k, along_m=along_m,
                                                sr_bits=sr_bits, out_dtype=dt,
                                                apply_tensor_scale=not fold_tensor_scale)
        if not fold_tensor_scale:
            tsk = tsm = None
        return yk, ym, tsk, tsm
    from fp4lab.emulator.quantize import fake_quantize_emulated

    x = t.detach().to(torch.float32).contiguous().numpy()
    out: list[Any] = []
    scales: list[Any] = []
    for axis, spec in ((-1, along_k), (0, along_m)):
        if spec is None:
            out.append(None)
            scales.append(None)
            continue
        seed = spec.seed if isinstance(spec.seed, int) else int(spec.seed.item())  # a layer's key slot (sr_keys)
        with np.errstate(all="ignore"):
            v, ts = fake_quantize_emulated(x, fmt, rounding, seed, axis, spec.rht, spec.rht_seed, sr_bits,
                                           "fp32" if gemm_dtype == "fp32" else "bf16",
                                           apply_tensor_scale=not fold_tensor_scale)
        out.append(torch.from_numpy(v).to(dt))
        scales.append(torch.tensor([ts], dtype=torch.float32) if (fold_tensor_scale and ts is not None) else None)
    return out[0], out[1], scales[0], scales[1]
