"""MMA-Sim 2.1.1 (PyPI ``mmasim``, Microsoft; validated by its authors on real GPUs) as an independent oracle for
fp4lab's MMA models: which MMA-Sim instruction each hwspec kind is, and runners that feed both models the same
operand bit patterns. Needs torch and mmasim (the ``test`` extra); importing mmasim builds its small C++ FMA
helper once with torch.utils.cpp_extension (ninja, from PyPI, and a C++ compiler).

The MMA-Sim name of a kind is derived from the kind's own ``instruction`` and ``shape`` fields, so a kind whose
instruction MMA-Sim does not list fails loudly (MMA-Sim asserts its supported shape-and-type list).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.hwspec.operands import decode_codes, operand_format
from fp4lab.hwspec.registry import get_hw
from fp4lab.hwspec.schema import MMAKind

MMASIM_VERSION = "2.1.1"
ARCH = {"volta-sm70": "Volta", "turing-sm75": "Turing", "ampere-sm80": "Ampere", "ada-sm89": "Ada Lovelace",
        "hopper-sm90": "Hopper", "blackwell-sm100": "Blackwell", "blackwell-sm120": "RTX Blackwell",
        "cdna3-mi300": "CDNA3"}
# kinds of those specs that MMA-Sim 2.1.1 does not model, and why
UNMODELLED = {
    ("blackwell-sm100", "mma.sync.e4m3"): "MMA-Sim's Blackwell (sm_100) mma list has no sm_89 FP8 shapes; fp4lab's "
                                          "rule is fitted to the published B200 vectors (docs/hardware_validation.md)",
}
_AMD_FP8 = {"e4m3fnuz": "fp8", "e5m2fnuz": "bf8"}


@dataclass(frozen=True)
class OracleCase:
    """One fp4lab (spec, kind, formats) and the MMA-Sim class and instruction name that model it."""

    hw: str
    kind: str
    a: str
    b: str
    scale: str | None
    block: int | None
    api: str  # MMA | MMABlockScale | WGMMA | TCGen05MMA | TCGen05MMABlockScale | MFMA
    name: str

    @property
    def label(self) -> str:
        s = f" {self.scale}/{self.block}" if self.scale else ""
        return f"{self.hw} {self.kind} {self.a}x{self.b}{s}"


def _nv_name(k: MMAKind, a: str, b: str, s: str | None, block: int | None) -> tuple[str, str]:
    ins, shape = k.instruction, k.shape.split()[0]
    kind = re.search(r"kind::(\w+)", ins)
    kd = f".kind::{kind.group(1)}" if kind else ""
    d = k.c_format
    if ins.startswith("mma.sync"):
        if s is not None:
            return "MMABlockScale", f"{shape}{kd}.block{block}.{d}.{a}.{b}.{d}.{s}"
        return "MMA", f"{shape}{kd}.{d}.{a}.{b}.{d}"
    if ins.startswith("wgmma"):
        return "WGMMA", f"m64n8k{int(k.k)}.{d}.{a}.{b}"
    if ins.startswith("tcgen05"):
        if s is not None:
            return "TCGen05MMABlockScale", f"m128n8k{int(k.k)}{kd}.block{block}.{d}.{a}.{b}.{s}"
        return "TCGen05MMA", f"m128n8k{int(k.k)}{kd}.{d}.{a}.{b}"
    raise InputError(f"mmasim oracle: no MMA-Sim class for instruction {ins!r}")


def _amd_name(k: MMAKind, a: str, b: str) -> tuple[str, str]:
    suffix = k.instruction.removeprefix("v_mfma_")
    if a in _AMD_FP8:
        suffix = re.sub(r"_(fp8|bf8)_(fp8|bf8)$", f"_{_AMD_FP8[a]}_{_AMD_FP8[b]}", suffix)
    return "MFMA", suffix


def oracle_cases(hw: str) -> list[OracleCase]:
    """Every (kind, A format, B format, scale option) of spec ``hw`` that MMA-Sim models (ab_same_format kinds:
    equal formats only)."""
    spec = get_hw(hw)
    out = []
    for k in spec.kinds.values():
        if (hw, k.name) in UNMODELLED:
            continue
        pairs = [(a, b) for a, b in product(k.a_formats, k.b_formats) if a == b or not k.ab_same_format]
        scales = [(o.format, int(o.block)) for o in k.scales] or [(None, None)]
        for (a, b), (s, blk) in product(pairs, scales):
            api, name = _amd_name(k, a, b) if spec.vendor == "AMD" else _nv_name(k, a, b, s, blk)
            out.append(OracleCase(hw, k.name, a, b, s, blk, api, name))
    return out


def mmasim_op(case: OracleCase) -> Any:
    """The MMA-Sim operation object of a case (raises if MMA-Sim does not list the instruction)."""
    if case.api == "MFMA":
        from mmasim.amd import MFMA

        return MFMA(ARCH[case.hw], case.name)
    import mmasim.nv_ptx as nv

    return getattr(nv, case.api)(ARCH[case.hw], case.name)


# ---- operand conversion ---------------------------------------------------------------------------------------
_TORCH_8BIT = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz",
               "e5m2fnuz": "float8_e5m2fnuz", "ue8m0": "float8_e8m0fnu", "ue4m3": "float8_e4m3fn"}


def to_torch(codes: np.ndarray, fmt: str, gst: bool = False):
    """MMA-Sim's input tensor for integer codes (f32/tf32: 32-bit words) of an operand format: torch float types
    by bit view; fp6/fp4 one per uint8 (e2m1 in bits 5:2, as PTX kind::f8f6f4 holds it); on GST kinds e2m1 as
    float16 values (MMA-Sim's unpacked path)."""
    import torch

    c = np.ascontiguousarray(codes)
    if fmt in ("f32", "tf32"):
        return torch.from_numpy(c.astype(np.uint32).view(np.int32)).view(torch.float32)
    if fmt in ("f16", "bf16"):
        return torch.from_numpy(c.astype(np.uint16).view(np.int16)).view(getattr(torch, {"f16": "float16",
                                                                                          "bf16": "bfloat16"}[fmt]))
    if fmt in _TORCH_8BIT:
        return torch.from_numpy(c.astype(np.uint8)).view(getattr(torch, _TORCH_8BIT[fmt]))
    if gst and fmt == "e2m1":
        return torch.from_numpy(decode_codes(c, operand_format("e2m1")).astype(np.float16))
    if fmt in ("e3m2", "e2m3"):
        return torch.from_numpy(c.astype(np.uint8))
    if fmt == "e2m1":
        return torch.from_numpy((c.astype(np.uint8) << 2).astype(np.uint8))
    raise InputError(f"mmasim oracle: no MMA-Sim encoding for operand format {fmt!r}")


def from_torch_bits(t) -> np.ndarray:
    """uint32 bits of an MMA-Sim result, fp16 widened to fp32 as fp4lab returns it."""
    import torch

    if t.dtype == torch.float16:
        return t.contiguous().view(torch.int16).numpy().view(np.float16).astype(np.float32).view(np.uint32)
    return t.contiguous().view(torch.int32).numpy().view(np.uint32)


def c_array(bits: np.ndarray, c_format: str) -> np.ndarray:
    """fp4lab's C for accumulator bit patterns (uint32 or uint16)."""
    return bits.astype(np.uint16).view(np.float16) if c_format == "f16" else bits.astype(np.uint32).view(np.float32)


def _operand(codes: np.ndarray, fmt: str) -> np.ndarray:
    return codes.astype(np.uint32).view(np.float32) if fmt == "tf32" else codes


# ---- runners: the same bits through both models ---------------------------------------------------------------
def run_gemm(case: OracleCase, a: np.ndarray, b: np.ndarray, c: np.ndarray, sa=None, sb=None, kind=None,
             op=None) -> tuple[np.ndarray, np.ndarray]:
    """(fp4lab bits, MMA-Sim bits) of D = A B + C: a [M, K] / b [K, N] codes, c [M, N] accumulator bits, sa
    [M, K/block] / sb [K/block, N] scale codes. ``kind`` overrides the spec's kind object (mutation tests)."""
    from fp4lab.hwspec.mma import Prepared, finish

    k = kind or get_hw(case.hw).kind(case.kind)
    with np.errstate(all="ignore"):
        prep = Prepared(k, _operand(a, case.a), _operand(b, case.b), sa, sb, _fmt(case.a), _fmt(case.b), case.scale)
        mine = finish(prep.run(c_array(c, k.c_format).astype(np.float64)), k).view(np.uint32)
    return mine, _mmasim_chain(case, k, op, a, b, c, sa, sb, dots=False)


def run_dots(case: OracleCase, a: np.ndarray, b: np.ndarray, c: np.ndarray, sa=None, sb=None, kind=None,
             op=None, tile: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(fp4lab bits, MMA-Sim bits) of P independent dot products d_i = a_i . b_i + c_i: a, b [P, K] codes, c [P]
    bits, sa/sb [P, K/block]. fp4lab runs tiles of ``tile`` rows as GEMMs and keeps the diagonal."""
    from fp4lab.hwspec.mma import Prepared, finish

    k = kind or get_hw(case.hw).kind(case.kind)
    cv = c_array(c, k.c_format).astype(np.float64)
    out = np.empty(len(c))
    with np.errstate(all="ignore"):
        for i in range(0, len(c), tile):
            s = slice(i, i + tile)
            prep = Prepared(k, _operand(a[s], case.a), np.ascontiguousarray(_operand(b[s], case.b).T),
                            None if sa is None else sa[s], None if sb is None else np.ascontiguousarray(sb[s].T),
                            _fmt(case.a), _fmt(case.b), case.scale)
            out[s] = np.diagonal(prep.run(np.repeat(cv[s, None], prep.N, axis=1)))
        mine = finish(out[None, :], k)[0].view(np.uint32)
    return mine, _mmasim_chain(case, k, op, a, b, c, sa, sb, dots=True)


def _mmasim_chain(case: OracleCase, k: MMAKind, op, a, b, c, sa, sb, dots: bool) -> np.ndarray:
    """MMA-Sim's D for K longer than one instruction: a chain of instructions of the kind's K in ascending K, each
    result the next one's C (MMA-Sim models one instruction)."""
    op = op or mmasim_op(case)
    gst = k.accumulation.algorithm == "gst_fdpa"
    kin, K = int(k.k), a.shape[1]
    acc = to_torch(c, k.c_format)
    for k0 in range(0, K, kin):
        bk = b[:, k0:k0 + kin] if dots else b[k0:k0 + kin]
        args = [to_torch(a[:, k0:k0 + kin], case.a, gst), to_torch(bk, case.b, gst), acc]
        if case.scale is not None:
            j0, j1 = k0 // case.block, -(-(k0 + kin) // case.block)
            sbk = sb[:, j0:j1] if dots else sb[j0:j1]
            args += [to_torch(sa[:, j0:j1], case.scale), to_torch(sbk, case.scale)]
        acc = op.dpa(*args) if dots else op(*args)
    return from_torch_bits(acc)


def _fmt(f: str) -> str | None:
    return None if f == "tf32" else f
