"""``C = scale * (A @ B) (+ bias)`` on CUDA as one cuBLAS GEMM whose output scale ``scale`` is an fp32 scalar in
device memory: the folded tensor scales of two-level recipes (NVFP4) without a host synchronization, so a
training step stays capturable in a CUDA graph, and without a second pass over C.

cuBLAS's GEMM epilogue computes ``alpha * acc + beta * C`` in fp32 from the fp32-accumulated product and rounds
it once to C's dtype (round to nearest even); a bias is C's initial rows with ``beta = 1`` (else 0). ``alpha``
is read from device memory when the GEMM runs (``CUBLAS_POINTER_MODE_DEVICE``), so a graph replay reads the
current step's scale. The call is ``cublasGemmEx`` (bf16 or fp16 operands, fp32 compute, bf16 / fp16 / fp32
output) on torch's own cuBLAS handle and stream, with torch's math mode for reduced-precision reductions
(``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction``); the handle's pointer mode is restored
afterwards.

``scaled_mm`` returns None where this path does not apply (no CUDA cuBLAS found in the process, other dtypes,
layouts that are neither row- nor column-major, a first call inside a CUDA-graph capture); callers then multiply
C by the scale in a separate pass, a second rounding of bf16 outputs.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, NamedTuple

import torch

from fp4lab.errors import DeviceError

_OP_N, _OP_T = 0, 1
_CUDA_TYPE = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 14}  # cudaDataType_t
_COMPUTE_32F = 68  # cublasComputeType_t CUBLAS_COMPUTE_32F
_GEMM_DEFAULT_TENSOR_OP = 99
_POINTER_HOST, _POINTER_DEVICE = 0, 1
_DEFAULT_MATH, _DISALLOW_REDUCED_PRECISION_REDUCTION = 0, 16


class GemmArgs(NamedTuple):
    """Column-major ``cublasGemmEx`` arguments for row-major ``C [M, N] = A [M, K] @ B [K, N]``, computed as
    ``C^T = B^T A^T``: cuBLAS's first operand is B, its second A."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int


def _major(t: torch.Tensor) -> tuple[bool, int] | None:
    """(row-major?, leading dimension) of a 2-D tensor stored row- or column-major, else None."""
    r, c = t.shape
    if t.stride(1) == 1 and (r <= 1 or t.stride(0) >= max(c, 1)):
        return True, max(t.stride(0), c, 1)
    if t.stride(0) == 1 and (c <= 1 or t.stride(1) >= max(r, 1)):
        return False, max(t.stride(1), r, 1)
    return None


def gemm_args(a: torch.Tensor, b: torch.Tensor) -> GemmArgs | None:
    """The cuBLAS arguments of ``a @ b`` for a [M, K] and b [K, N] stored row- or column-major (None otherwise);
    C is a new row-major [M, N] tensor. A row-major [K, N] B is column-major [N, K] to cuBLAS (no transpose),
    a column-major one needs its transpose; likewise A as the second operand ([K, M] column-major)."""
    (m, k), (_, n) = a.shape, b.shape
    la, lb = _major(a), _major(b)
    if la is None or lb is None:
        return None
    b_rows, ldb_ = lb
    a_rows, lda_ = la
    return GemmArgs(transa=_OP_N if b_rows else _OP_T, transb=_OP_N if a_rows else _OP_T, m=n, n=m, k=k,
                    lda=ldb_, ldb=lda_, ldc=max(n, 1))


@functools.cache
def _cublas() -> Any:
    """torch's libcublas, found among the libraries mapped into this process (None if there is none)."""
    torch.cuda.current_blas_handle()  # loads and initializes cuBLAS on the current device
    try:
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if "/libcublas.so" in line]
    except OSError:
        return None
    if not paths:
        return None
    lib = ctypes.CDLL(paths[0])
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.cublasGemmEx.restype = i
    lib.cublasGemmEx.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i]
    for name, arg in (("cublasSetPointerMode_v2", i), ("cublasSetMathMode", i)):
        getattr(lib, name).restype = i
        getattr(lib, name).argtypes = [vp, arg]
    return lib


_BETAS: dict[torch.device, torch.Tensor] = {}


def _betas(device: torch.device) -> torch.Tensor:
    """fp32 [0, 1] on ``device``: the beta of a GEMM without / with a bias (made once, outside graph capture)."""
    if device not in _BETAS:
        _BETAS[device] = torch.tensor([0.0, 1.0], dtype=torch.float32, device=device)
    return _BETAS[device]


def available() -> bool:
    """True when CUDA is usable and torch's cuBLAS library was found."""
    return torch.cuda.is_available() and _cublas() is not None


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor, out_dtype: torch.dtype,
              bias: torch.Tensor | None = None) -> torch.Tensor | None:
    """``scale * (a @ b) (+ bias)`` as ``out_dtype``, one cuBLAS GEMM (module docstring): a [M, K], b [K, N] bf16
    or fp16 CUDA tensors of one dtype, stored row- or column-major with 16-byte-aligned data; ``scale`` a
    one-element fp32 CUDA tensor; ``bias`` [N] (rounded to ``out_dtype`` first, as C holds it); ``out_dtype`` bf16,
    fp16 or fp32. None where the path does not apply."""
    args = gemm_args(a, b) if a.dim() == b.dim() == 2 else None
    if (args is None or not a.is_cuda or a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16)
            or out_dtype not in _CUDA_TYPE or not a.device == b.device == scale.device or scale.numel() != 1
            or (bias is not None and (bias.device != a.device or bias.shape != (b.shape[1],)))
            or a.data_ptr() % 16 or b.data_ptr() % 16 or min(a.shape + b.shape) == 0):
        return None
    lib = _cublas()
    if lib is None or (a.device not in _BETAS and torch.cuda.is_current_stream_capturing()):
        return None  # (the beta constants are made outside a CUDA-graph capture: eager warm-up steps make them)
    alpha = scale if scale.dtype == torch.float32 else scale.to(torch.float32)
    beta = _betas(a.device)
    shape = (a.shape[0], b.shape[1])
    if bias is None:
        c = torch.empty(shape, dtype=out_dtype, device=a.device)
    else:
        c = bias.to(out_dtype).expand(shape).contiguous()
    math = _DEFAULT_MATH
    if a.dtype == torch.bfloat16 and not torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction:
        math = _DISALLOW_REDUCED_PRECISION_REDUCTION
    if a.dtype == torch.float16 and not torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction:
        math = _DISALLOW_REDUCED_PRECISION_REDUCTION
    if a.device.index == torch.cuda.current_device():
        _gemm(lib, args, a, b, c, alpha, beta, bias is not None, math)
    else:
        with torch.cuda.device(a.device):  # the handle and stream of the operands' device
            _gemm(lib, args, a, b, c, alpha, beta, bias is not None, math)
    return c


def _gemm(lib: Any, args: GemmArgs, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, alpha: torch.Tensor,
          beta: torch.Tensor, has_bias: bool, math: int) -> None:
    """The ``cublasGemmEx`` call of ``scaled_mm`` on the current device's torch cuBLAS handle and stream."""
    t = _CUDA_TYPE[a.dtype]
    handle = ctypes.c_void_p(torch.cuda.current_blas_handle())  # (sets torch's current stream on the handle)
    _check(lib.cublasSetPointerMode_v2(handle, _POINTER_DEVICE), "cublasSetPointerMode")
    try:
        _check(lib.cublasSetMathMode(handle, math), "cublasSetMathMode")
        status = lib.cublasGemmEx(handle, args.transa, args.transb, args.m, args.n, args.k, alpha.data_ptr(),
                                  b.data_ptr(), t, args.lda, a.data_ptr(), t, args.ldb,
                                  beta.data_ptr() + (4 if has_bias else 0),
                                  c.data_ptr(), _CUDA_TYPE[c.dtype], args.ldc, _COMPUTE_32F,
                                  _GEMM_DEFAULT_TENSOR_OP)
        _check(status, "cublasGemmEx")
    finally:
        lib.cublasSetPointerMode_v2(handle, _POINTER_HOST)
        lib.cublasSetMathMode(handle, _DEFAULT_MATH)


def _check(status: int, what: str) -> None:
    if status != 0:
        raise DeviceError(f"scaled_mm: {what} returned cuBLAS status {status}")
