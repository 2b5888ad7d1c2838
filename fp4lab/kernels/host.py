"""Host-side helpers shared by the kernel launchers: interpreter detection, input views, device tables."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from fp4lab.errors import InputError


def interpreting() -> bool:
    """True when Triton runs in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_device(x: Any, what: str) -> None:
    import torch

    if not isinstance(x, torch.Tensor):
        raise InputError(f"{what}: expected a torch tensor, got {type(x).__name__}")
    if not x.is_cuda and not interpreting():
        raise InputError(f"{what}: tensor is on {x.device}; the Triton kernels need a CUDA tensor "
                         "(or TRITON_INTERPRET=1 for the CPU interpreter)")


def kernel_input(x: Any, what: str) -> tuple[Any, int]:
    """(contiguous tensor the kernel reads, IN_KIND): fp32 as is (0), bf16 as int16 bit patterns (1), fp16 (2);
    float64 is cast to fp32 with RTNE first."""
    import torch

    check_device(x, what)
    if not torch.is_floating_point(x):
        raise InputError(f"{what}: input tensor has dtype {x.dtype}; expected bfloat16, float16, float32 or float64")
    if x.numel() >= 2**31 - 2**20:
        raise InputError(f"{what}: {x.numel()} elements; the kernels index with int32 (at most 2**31 - 2**20)")
    x = x.detach().contiguous()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16), 1
    if x.dtype == torch.float16:
        return x, 2
    return x.to(torch.float32), 0


@dataclass(frozen=True)
class MatrixView:
    """A C-contiguous tensor as a logical [M, K] matrix with K the blocked axis (see quantize.py)."""

    M: int
    K: int
    inner: int


def matrix_view(shape: tuple[int, ...], axis: int, two_d: bool) -> MatrixView:
    n = math.prod(shape)
    if two_d:
        K = shape[-1]
        return MatrixView(n // K if K else 0, K, 1)
    K = shape[axis]
    inner = math.prod(shape[axis + 1:])
    return MatrixView(n // K if K else 0, K, inner)


_TABLES: dict[tuple, Any] = {}


def device_array(arr: np.ndarray, device: Any) -> Any:
    """A torch copy of a small numpy table on ``device``, cached by content (tables are immutable)."""
    import torch

    a = np.ascontiguousarray(arr)
    key = (a.dtype.str, a.shape, a.tobytes(), str(device))
    t = _TABLES.get(key)
    if t is None:
        t = torch.from_numpy(a.copy()).to(device)
        if len(_TABLES) > 512:
            _TABLES.clear()
        _TABLES[key] = t
    return t


def scratch_f32(device: Any) -> Any:
    """A cached 1-element fp32 tensor (1.0) on ``device`` for kernel arguments that are neither read nor written
    on the path taken (saves a fill launch per call). Kernels must never write it."""
    return device_array(np.ones(1, np.float32), device)
