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


class CachedLaunch:
    """A Triton kernel with fixed constexprs launched many times: the first launch (and any launch whose argument
    specialization could differ: a pointer not 16-byte aligned where the first was, an int outside int32) goes
    through the JIT, which checks and compiles; later ones hand the arguments straight to the compiled kernel,
    skipping the JIT's per-call argument binding (tens of microseconds for kernels with ~80 parameters).

    ``args`` of a call are the kernel's runtime (non-constexpr) parameters in signature order."""

    def __init__(self, fn: Any, grid: tuple[int, ...], consts: dict[str, Any], options: dict[str, Any]) -> None:
        self.fn, self.grid, self.consts, self.options = fn, grid, consts, options
        self._grid3 = tuple(grid) + (1,) * (3 - len(grid))  # the compiled kernel's runner wants all three
        self.compiled: Any = None
        self.signature: tuple | None = None
        if interpreting():  # an InterpretedFunction: no compiled kernel to call directly
            return
        names = fn.arg_names
        self._slots = [(i, names[i]) for i, p in enumerate(fn.params) if p.is_constexpr]
        runtime = [p for p in fn.params if not p.is_constexpr]
        self._free = tuple(p.do_not_specialize for p in runtime)  # ints the JIT types but does not specialize

    def _signature(self, args: tuple) -> tuple:
        sig = []
        for a, free in zip(args, self._free):
            if hasattr(a, "data_ptr"):
                sig.append(("p", a.dtype, a.data_ptr() % 16 == 0))
            elif isinstance(a, bool):
                sig.append(("b", a))
            elif isinstance(a, int):
                sig.append(("i", -(2**31) <= a < 2**31) + (() if free else (a == 1, a % 16 == 0)))
            else:
                sig.append(("f",))
        return tuple(sig)

    def __call__(self, *args: Any) -> None:
        if interpreting():
            self.fn[self.grid](*args, **self.consts)
            return
        sig = self._signature(args)
        if self.compiled is None or sig != self.signature:
            self.compiled = self.fn[self.grid](*args, **self.consts, **self.options)
            self.signature = sig
            return
        full = list(args)
        for i, name in self._slots:
            full.insert(i, self.consts[name])
        self.compiled[self._grid3](*full)
