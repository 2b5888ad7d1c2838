"""Host-side helpers shared by the kernel launchers: interpreter detection, input views, device tables."""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.kernels.params import InputKind


@functools.cache
def interpreting() -> bool:
    """True when Triton runs in its CPU interpreter (TRITON_INTERPRET=1). Read once, like ``triton.jit``, which
    decides at decoration (import) time whether a kernel is interpreted."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_device(x: Any, what: str) -> None:
    import torch

    if not isinstance(x, torch.Tensor):
        raise InputError(f"{what}: expected a torch tensor, got {type(x).__name__}")
    if not x.is_cuda and not interpreting():
        raise InputError(f"{what}: tensor is on {x.device}; the Triton kernels need a CUDA tensor "
                         "(or TRITON_INTERPRET=1 for the CPU interpreter)")


def kernel_input(x: Any, what: str) -> tuple[Any, InputKind]:
    """(contiguous tensor the kernel reads, its ``InputKind``): fp32 as is, bf16 as int16 bit patterns, fp16;
    float64 is cast to fp32 with RTNE first."""
    import torch

    check_device(x, what)
    if not torch.is_floating_point(x):
        raise InputError(f"{what}: input tensor has dtype {x.dtype}; expected bfloat16, float16, float32 or float64")
    if x.numel() >= 2**31 - 2**20:
        raise InputError(f"{what}: {x.numel()} elements; the kernels index with int32 (at most 2**31 - 2**20)")
    x = x.detach().contiguous()
    if x.dtype not in (torch.bfloat16, torch.float16):
        x = x.to(torch.float32)
    kind = input_kind(x.dtype)
    return (x.view(torch.int16) if kind == InputKind.BF16 else x), kind


def input_kind(dtype: Any) -> InputKind:
    """The ``InputKind`` of a bf16, fp16 or fp32 torch dtype (the kernels' ``IN_KIND``)."""
    import torch

    return {torch.float32: InputKind.F32, torch.bfloat16: InputKind.BF16, torch.float16: InputKind.F16}[dtype]


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


@functools.cache
def scratch_f32(device: Any) -> Any:
    """A cached 1-element fp32 tensor (1.0) on ``device`` for kernel arguments that are neither read nor written
    on the path taken (saves a fill launch per call). Kernels must never write it."""
    return device_array(np.ones(1, np.float32), device)


class CachedLaunch:
    """A Triton kernel with fixed constexprs launched many times with mostly the same arguments.

    The runtime (non-constexpr) arguments in signature order are ``lead + fixed + trail``: ``fixed`` (given here:
    tables, format scalars, shapes) never change; ``lead`` and ``trail`` (tensors, seeds) are passed per call. The
    first launch, and any whose varying arguments could specialize differently (a pointer alignment class, an
    int outside int32), goes through the JIT, which checks and compiles; later ones hand the arguments straight to
    the compiled kernel's launcher, skipping the JIT's binding of ~90 parameters per call, with every device
    pointer as an int (the launcher then neither calls ``data_ptr`` nor queries the driver per pointer)."""

    def __init__(self, fn: Any, grid: tuple[int, ...], consts: dict[str, Any], options: dict[str, Any],
                 fixed: tuple = (), n_lead: int = 0) -> None:
        self.fn, self.grid, self.consts, self.options = fn, grid, consts, options
        self.fixed, self.n_lead = tuple(fixed), n_lead
        self._grid3 = tuple(grid) + (1,) * (3 - len(grid))
        self.compiled: Any = None
        self.signature: tuple | None = None
        self.interpreted = interpreting()
        if self.interpreted:  # an InterpretedFunction: no compiled kernel to call directly
            return
        runtime = [i for i, p in enumerate(fn.params) if not p.is_constexpr]
        self._template = [consts.get(name) for name in fn.arg_names]
        for i, v in zip(runtime[n_lead:], self.fixed):
            self._template[i] = v
        for i, v in enumerate(self._template):  # the launcher takes device pointers as ints: no per-call lookup
            if hasattr(v, "data_ptr"):
                self._template[i] = v.data_ptr()
        trail_idx = runtime[n_lead + len(self.fixed):]
        self._varying_idx = runtime[:n_lead] + trail_idx
        free = {i for i, p in enumerate(fn.params) if p.do_not_specialize}
        self._trail_free = tuple(i in free for i in trail_idx)

    def _bind(self, varying: tuple) -> tuple[tuple, list]:
        """(specialization signature, launcher values) of the varying arguments: tensors become their device
        pointers (the signature keeps their dtype and 16-byte alignment), ints stay (the signature keeps what the
        JIT specializes on: int32 range, == 1, multiple of 16, unless the parameter is do_not_specialize)."""
        sig, values = [], []
        for j, a in enumerate(varying):
            if hasattr(a, "data_ptr"):
                p = a.data_ptr()
                sig.append((a.dtype, p % 16 == 0))
                values.append(p)
                continue
            if isinstance(a, int) and not isinstance(a, bool):
                free = j >= self.n_lead and self._trail_free[j - self.n_lead]
                sig.append((-(2**31) <= a < 2**31,) + (() if free else (a == 1, a % 16 == 0)))
            else:
                sig.append(type(a))
            values.append(a)
        return tuple(sig), values

    def __call__(self, *varying: Any) -> None:
        if self.interpreted:
            self.fn[self.grid](*varying[:self.n_lead], *self.fixed, *varying[self.n_lead:], **self.consts)
            return
        sig, values = self._bind(varying)
        if self.compiled is None or sig != self.signature:
            lead, trail = varying[:self.n_lead], varying[self.n_lead:]
            self.compiled = self.fn[self.grid](*lead, *self.fixed, *trail, **self.consts, **self.options)
            self.compiled._init_handles()
            self.signature = sig
            return
        full = self._template.copy()
        for i, v in zip(self._varying_idx, values):
            full[i] = v
        c = self.compiled
        c.run(*self._grid3, _current_raw_stream(), c.function, c.packed_metadata, None, None, None, *full)


def _current_raw_stream() -> int:
    """The current CUDA stream of the current device as the launcher takes it (what Triton's JIT launches on)."""
    import torch

    return torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())
