"""Accelerator specs (hwspec): MMA instruction kinds, their accumulation models with provenance, native
format combinations and peak rates; plus the emulation entry points that run a spec's model.

Public API: ``list_hw()``, ``get_hw(name_or_path)`` (``.kinds``), ``load_hw(path)``, ``register_hw(spec)``,
``emulate_mma(...)`` and ``emulate_gemm(...)`` (implemented in fp4lab.hwspec.mma).
"""

from __future__ import annotations

from typing import Any

from fp4lab.hwspec.operands import OPERAND_FORMATS, OperandFormat, operand_format
from fp4lab.hwspec.registry import get_hw, list_hw, load_hw, register_hw, spec_to_dict
from fp4lab.hwspec.schema import HWSpec, MMAKind, Num


def schema_json() -> dict:
    """JSON schema of an hwspec (the expanded form: every number as {value, provenance, source})."""
    return HWSpec.model_json_schema()


def emulate_mma(a, b, c=None, hw: Any = "hopper-sm90", kind: str = "wgmma.bf16", scale_a=None, scale_b=None,
                **kwargs):
    """D = A @ B + C (a [M, K], b [K, N], c [M, N] or None for zeros; values or integer codes; block-scaled kinds
    also take scale_a [M, K / block] and scale_b [K / block, N]) as the tensor cores of ``hw`` compute it with
    instruction ``kind``, bit for bit: a float32 numpy array of the kind's output (f16 outputs widened exactly).
    See fp4lab.hwspec.mma."""
    from fp4lab.hwspec.mma import emulate_mma as _impl

    return _impl(a, b, c, hw=hw, kind=kind, scale_a=scale_a, scale_b=scale_b, **kwargs)


def emulate_gemm(qa, qb, hw: Any = "hopper-sm90", kind: str = "wgmma.bf16", block_k: int | None = None,
                 promotion_interval: int | None = None, **kwargs):
    """A @ B.T (A [M,K], B [N,K]) as a tiled GEMM kernel on ``hw``/``kind`` computes it, on the CPU; see
    fp4lab.hwspec.mma (``fp4lab.emulate_gemm`` also runs CUDA operands on the Triton kernels)."""
    from fp4lab.hwspec.mma import emulate_gemm as _impl

    return _impl(qa, qb, hw=hw, kind=kind, block_k=block_k, promotion_interval=promotion_interval, **kwargs)


__all__ = [
    "HWSpec", "MMAKind", "Num", "OPERAND_FORMATS", "OperandFormat", "emulate_gemm", "emulate_mma", "get_hw",
    "list_hw", "load_hw", "operand_format", "register_hw", "schema_json", "spec_to_dict",
]
