"""``fp4lab.gemm`` on CPU operands (numpy arrays or CPU torch tensors): C = A @ B.T in float32, no GPU needed.

``exact`` gives the bits of the GPU GEMM kernel (``fp4lab.kernels.gemm``, default tile) by emulating its
arithmetic; ``fp4lab.kernels.params.gemm_plan(fmt)`` picks the same path as on the GPU:

* fold: both operands decoded to float32 ``value[code] * S`` (exact in bf16 for such formats; an overflowing
  product is Inf, as in the kernel's fp32 multiply), K padded with zeros to the kernel's K tile
  ``max(block, 64)``, then one chain of Hopper ``wgmma.bf16`` instructions in ascending K from C = 0
  (``fp4lab.emulate_gemm(..., hw="hopper-sm90", kind="wgmma.bf16")``: the model that reproduced Triton's
  ``acc = tl.dot(a, b, acc)`` K-loop on an H200 bit for bit, docs/hardware_validation.md section 3; the GEMM
  kernel itself against this path: benchmarks/device/cpu_gemm_vs_gpu.py);
* per-block: ``acc = acc + (P_b * Sa_b) * Sb_b`` over blocks in ascending K, one fp32 rounding per operation,
  ``P_b`` the exact block dot product (``emulate_gemm(..., scale_mode="per_block")``).

Two-level formats then compute ``(acc * ts_a) * ts_b`` in float32. Every NaN result carries the GPU's canonical
bits 0x7FFFFFFF and zero results are +0, as the tensor cores give them.

``fast``: both operands dequantized to float32 (``value[code] * S`` rounded once to float32, without the tensor
scales; exact where the fold path applies), one float32 ``numpy.matmul`` (BLAS: its summation order, not
bit-reproducible across machines or thread counts), then ``C * float32(ts_a * ts_b)``. The GPU's ``fast``
rounds the operands to bf16 instead; both are within float32 accumulation error of the exact product.

Cost (one core, NUMBA_NUM_THREADS=1, 512 x 512 x 1024): ``exact`` 0.28 s (mxfp4) to 0.53 s (ufp4), about
1-2 ns per multiply-add; ``fast`` 0.04-0.08 s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.quantized import QuantizedTensor

_HW, _KIND = "hopper-sm90", "wgmma.bf16"  # the tensor cores the GPU kernel was validated on


def _host(a: Any) -> Any:
    """numpy array of a numpy array / CPU torch tensor field (signed torch views of uint bits reinterpreted)."""
    if a is None or isinstance(a, (np.ndarray, np.generic, float, int)):
        return a
    h = a.detach().cpu().numpy()
    return h.view(np.uint32) if h.dtype == np.int32 else h.view(np.uint16) if h.dtype == np.int16 else h


def _host_qt(q: QuantizedTensor) -> QuantizedTensor:
    return dataclasses.replace(q, codes=_host(q.codes), scale_codes=_host(q.scale_codes), scales=_host(q.scales),
                               tensor_scale=_host(q.tensor_scale))


def _checked(qa: Any, qb: Any, mode: Any) -> tuple[QuantizedTensor, QuantizedTensor]:
    """Host copies of two valid operands of one GEMM (the GPU entry point's rules), else a one-line InputError."""
    from fp4lab.numerics.checks import check_quantized

    if not isinstance(mode, str) or mode not in ("exact", "fast"):
        raise InputError(f"gemm: mode {mode!r} is unknown; use 'exact' or 'fast'"[:200])
    for q, nm in ((qa, "qa"), (qb, "qb")):
        check_quantized(q, f"gemm: {nm}")
        if len(q.shape) != 2 or q.axis != 1:
            raise InputError(f"gemm: {nm} must be 2-D and blocked along its last axis (K), got shape {q.shape}, "
                             f"axis {q.axis}")
    if qb.fmt != qa.fmt:
        raise InputError(f"gemm: operands use different formats ('{qa.fmt.name}' and '{qb.fmt.name}'); quantize "
                         "both alike")
    if qa.rht != qb.rht or qa.rht_seed != qb.rht_seed:
        raise InputError("gemm: operands were rotated differently (rht/rht_seed must match)")
    if qa.shape[1] != qb.shape[1]:
        raise InputError(f"gemm: K differs: qa is {qa.shape}, qb is {qb.shape}")
    return _host_qt(qa), _host_qt(qb)


def _values(q: QuantizedTensor) -> np.ndarray:
    """float32 ``value[code] * S`` without the tensor scale, in the rotated basis (what the kernel multiplies)."""
    from fp4lab.emulator.quantize import dequantize_emulated

    return dequantize_emulated(dataclasses.replace(q, tensor_scale=None), rotated=True, check=False)


def _tensor_scales(acc: np.ndarray, qa: QuantizedTensor, qb: QuantizedTensor, finish: Any) -> np.ndarray:
    """``(acc * ts_a) * ts_b``, two float32 roundings (formats without a tensor scale: ``acc``)."""
    for ts in (qa.tensor_scale, qb.tensor_scale):
        if ts is not None:
            acc = finish((acc * np.float32(np.asarray(ts).reshape(-1)[0])).astype(np.float64))
    return acc


def gemm_exact_cpu(qa: QuantizedTensor, qb: QuantizedTensor) -> np.ndarray:
    """The GPU exact GEMM kernel's float32 [M, N] bits for host operands (see the module docstring)."""
    from fp4lab.hwspec.mma import emulate_gemm, finish, resolve_kind
    from fp4lab.kernels.params import gemm_plan

    fmt = qa.fmt
    plan = gemm_plan(fmt)
    if plan == "none":
        raise InputError(f"gemm: exact mode needs bf16-exact element values on a common grid and 1-D blocks of "
                         f">= 16; format '{fmt.name}' has neither a fold nor a per-block plan (use mode='fast')")
    extents = [int(e) for e in fmt.block.shape] if fmt.block is not None else [1]
    if any(e & (e - 1) for e in extents):
        raise InputError(f"gemm: format '{fmt.name}' has blocks of {tuple(extents)}; the GEMM kernel needs "
                         "power-of-two block extents (use mode='fast')")
    kind = resolve_kind(_HW, _KIND)
    if plan == "perblock":
        return emulate_gemm(qa, qb, hw=_HW, kind=_KIND, scale_mode="per_block")
    va, vb = _values(qa), _values(qb)
    K = va.shape[1]
    bk = max(extents[-1], 64)  # the kernel's K tile (BK) on the GPU
    pad = -K % bk  # the kernel's masked loads: zero columns up to a whole K tile
    if pad:
        va = np.pad(va, ((0, 0), (0, pad)))
        vb = np.pad(vb, ((0, 0), (0, pad)))
    acc = emulate_gemm(va, vb, hw=_HW, kind=_KIND)
    return _tensor_scales(acc, qa, qb, lambda x: finish(x, kind))


def gemm_fast_cpu(qa: QuantizedTensor, qb: QuantizedTensor) -> np.ndarray:
    """float32 dequantize, float32 BLAS matmul, then ``C * float32(ts_a * ts_b)`` (see the module docstring)."""
    c = np.matmul(_values(qa), _values(qb).T)
    if qa.tensor_scale is None:
        return c
    return c * (np.float32(np.asarray(qa.tensor_scale).reshape(-1)[0]) *
                np.float32(np.asarray(qb.tensor_scale).reshape(-1)[0]))


def gemm_cpu(qa: Any, qb: Any, mode: str = "exact") -> Any:
    """float32 ``A @ B.T`` of host operands qa [M, K], qb [N, K]; a torch tensor when either operand holds torch
    tensors, else a numpy array."""
    torch_out = any(q.meta.get("torch") or type(q.codes).__module__.startswith("torch")
                    for q in (qa, qb) if isinstance(q, QuantizedTensor))
    ha, hb = _checked(qa, qb, mode)
    out = gemm_exact_cpu(ha, hb) if mode == "exact" else gemm_fast_cpu(ha, hb)
    if torch_out:
        import torch

        return torch.from_numpy(np.ascontiguousarray(out))
    return out
