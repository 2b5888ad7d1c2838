"""Checking a second implementation of the block-scaled MMA models (fp4lab's Triton kernels) against the CPU model,
bit for bit, on random and adversarial inputs. The implementation under test is a function passed in (``runner``),
so this module stays on the CPU model's side of the package graph.

Cases: every (spec, block-scaled kind, A format, B format, scale format, block) the kernels run, each with four
input styles (all regenerate from a seed; the GEMM is A [M, K] @ B[N, K].T + C, K a chain of instructions):

* ``random``: ``oracle_inputs``'s operands (raw codes with NaN/Inf, narrow and wide exponent windows,
  subnormals, signed zeros), scale codes over the whole byte range mixed with a window around 1, and C that is
  zero, raw bits (NaN, Inf), near the products or cancelling them;
* ``spread``: the maximum exponent spread: elements of the largest and smallest magnitudes and zeros, scales of
  the smallest, largest and unit codes, so one fused step mixes terms 2**500 apart (truncation, e_zero, Inf,
  underflow to subnormals and zero);
* ``scales``: every scale code of the format, on both operands, against random elements;
* ``probe``: the precision probes of oracle_inputs.probe_dots (ties of C plus a term F-1..F2+2 bits below it,
  sums around e_zero), one instruction deep, laid out as a GEMM whose row i has probe i's C (D[i, i] is probe i);
  ``random`` where the kind keeps fewer than output + 2 fraction bits or no probe fits its formats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from types import SimpleNamespace
from typing import Any

import numpy as np

from fp4lab.hwspec.mma import emulate_gemm, resolve_kind
from fp4lab.hwspec.mma_plan import GPU_ALGORITHMS
from fp4lab.hwspec.operands import decode_codes, operand_format
from fp4lab.hwspec.registry import get_hw, list_hw
from fp4lab.hwspec.validation.oracle_inputs import gemm_inputs, make_c, probe_dots, rand_codes

STYLES = ("random", "spread", "scales", "probe")


@dataclass(frozen=True)
class VerifyCase:
    hw: str
    kind: str
    a: str
    b: str
    scale: str
    block: int
    style: str
    M: int
    N: int
    K: int
    seed: int

    def label(self) -> str:
        return f"{self.hw} {self.kind} {self.a}x{self.b} {self.scale}/{self.block} {self.style}"


def kernel_combos(hws: list[str] | None = None) -> list[tuple[str, str, str, str, str, int]]:
    """(spec, kind, A format, B format, scale format, block) of every block-scaled kind the kernels run."""
    out = []
    for hw in hws or list_hw():
        spec = get_hw(hw)
        for k in spec.kinds.values():
            if not k.block_scaled or k.accumulation.algorithm not in GPU_ALGORITHMS:
                continue
            pairs = [(a, b) for a, b in product(k.a_formats, k.b_formats) if a == b or not k.ab_same_format]
            for (a, b), o in product(pairs, k.scales):
                out.append((hw if isinstance(hw, str) else spec.name, k.name, a, b, o.format, int(o.block)))
    return out


def plan_cases(combos, outputs_per_case: int, instructions: int = 4, seed: int = 0,
               styles: tuple[str, ...] = STYLES) -> list[VerifyCase]:
    """Cases of about ``outputs_per_case`` outputs (M = N = its square root, at least 8) for every combo and
    style, K = ``instructions`` instructions of the kind."""
    side = max(8, round(outputs_per_case ** 0.5))
    out = []
    for i, (hw, kind, a, b, s, blk) in enumerate(combos):
        K = instructions * min([int(resolve_kind(hw, kind).k)] + list(resolve_kind(hw, kind).k_alt))
        K = -(-K // blk) * blk
        for j, st in enumerate(styles):
            out.append(VerifyCase(hw, kind, a, b, s, blk, st, side, side, K, seed * 100003 + 16 * i + j))
    return out


def _ncodes(fmt: str) -> int:
    of = operand_format(fmt)
    return 1 << (of.man_bits + 1 if of.integer else of.exp_bits + of.man_bits + (1 if of.signed else 0))


def _scale_ncodes(fmt: str) -> int:
    of = operand_format(fmt)
    return 1 << max(of.exp_bits + of.man_bits, of.container_bits)


def _extreme_codes(rng, fmt: str, shape) -> np.ndarray:
    """Codes of the largest and smallest nonzero finite magnitudes and of zero, random signs."""
    n = _ncodes(fmt)
    v = decode_codes(np.arange(n), operand_format(fmt))
    fin = np.isfinite(v) & (v != 0)
    mags = np.abs(v)
    big = np.flatnonzero(fin & (mags == mags[fin].max()))
    small = np.flatnonzero(fin & (mags == mags[fin].min()))
    zero = np.flatnonzero(v == 0)
    pick = rng.choice(3, size=shape, p=[0.45, 0.45, 0.1])
    return np.select([pick == 0, pick == 1], [rng.choice(big, size=shape), rng.choice(small, size=shape)],
                     rng.choice(zero, size=shape))


def _extreme_scales(rng, fmt: str, shape) -> np.ndarray:
    n = _scale_ncodes(fmt)
    v = decode_codes(np.arange(n), operand_format(fmt))
    fin = np.flatnonzero(np.isfinite(v) & (v > 0))
    lo, hi, one = fin[np.argmin(v[fin])], fin[np.argmax(v[fin])], fin[np.argmin(np.abs(v[fin] - 1))]
    return rng.choice(np.array([lo, hi, one]), size=shape, p=[0.4, 0.4, 0.2])


def make_inputs(case: VerifyCase) -> dict[str, np.ndarray]:
    """Codes a [M, K], b [N, K] (int64), scale codes sa [M, K/block], sb [N, K/block], C float32 [M, N]."""
    rng = np.random.default_rng(case.seed)
    k = resolve_kind(case.hw, case.kind)
    M, N, K, blk = case.M, case.N, case.K, case.block
    acc = k.accumulation
    width = max(int(acc.frac_bits), int(acc.join_frac_bits or 0))
    if case.style == "probe" and width + 2 > int(k.output.mantissa_bits):  # probes sit between output and F bits
        pr = probe_dots(rng, k, case.a, case.b, M, case.scale, blk)
        if pr is not None:
            reps = -(-max(M, N) // len(pr["c"]))  # one instruction's K: probe i is D[i, i]
            a, b = np.tile(pr["a"], (reps, 1))[:M], np.tile(pr["b"], (reps, 1))[:N]
            sa, sb = np.tile(pr["sa"], (reps, 1))[:M], np.tile(pr["sb"], (reps, 1))[:N]
            cb = np.tile(pr["c"], reps)[:M]
            c = _c_values(np.repeat(cb[:, None], N, axis=1), k.c_format)
            return {"a": a, "b": b, "sa": sa, "sb": sb, "c": c}
        case = VerifyCase(**{**case.__dict__, "style": "random"})
    if case.style == "random":
        inp = gemm_inputs(rng, k, case.a, case.b, case.scale, blk, M, N, K)
        return {"a": inp["a"], "b": np.ascontiguousarray(inp["b"].T), "sa": inp["sa"],
                "sb": np.ascontiguousarray(inp["sb"].T), "c": _c_values(inp["c"], k.c_format)}
    if case.style == "spread":
        a, b = _extreme_codes(rng, case.a, (M, K)), _extreme_codes(rng, case.b, (N, K))
        sa, sb = _extreme_scales(rng, case.scale, (M, K // blk)), _extreme_scales(rng, case.scale, (N, K // blk))
    else:  # every scale code on both operands
        n = _scale_ncodes(case.scale)
        a, b = rand_codes(rng, case.a, (M, K)), rand_codes(rng, case.b, (N, K))
        sa = (np.arange(M * (K // blk)) % n).reshape(M, K // blk)
        sb = rng.permutation(np.arange(N * (K // blk)) % n).reshape(N, K // blk)
    c = _c_values(make_c(rng, np.zeros((M, N)), k.c_format), k.c_format)
    return {"a": a, "b": b, "sa": sa, "sb": sb, "c": c}


def _c_values(bits: np.ndarray, c_format: str) -> np.ndarray:
    if c_format == "f16":
        return bits.astype(np.uint16).view(np.float16).astype(np.float32)
    return bits.astype(np.uint32).view(np.float32)


def operands(case: VerifyCase, inp: dict[str, np.ndarray], wrap: Callable[[np.ndarray], Any] = np.asarray):
    """(qa, qb) quantized-tensor-like operands of ``emulate_gemm``: codes (uint8), decoded float32 scales and the
    element format's values table; ``wrap`` turns each array into what the implementation takes."""
    sf = operand_format(case.scale)
    out = []
    for codes, sc, fmt in ((inp["a"], inp["sa"], case.a), (inp["b"], inp["sb"], case.b)):
        table = decode_codes(np.arange(_ncodes(fmt)), operand_format(fmt))
        out.append(SimpleNamespace(codes=wrap(codes.astype(np.uint8)), tensor_scale=None, fmt=table,
                                   scales=wrap(decode_codes(sc, sf).astype(np.float32))))
    return out


def reference(case: VerifyCase, inp: dict[str, np.ndarray]) -> np.ndarray:
    """uint32 bits of the CPU model's D (numba kernels)."""
    qa, qb = operands(case, inp)
    with np.errstate(all="ignore"):
        d = emulate_gemm(qa, qb, hw=case.hw, kind=case.kind, c=inp["c"], scale_format=case.scale)
    return np.asarray(d, np.float32).view(np.uint32)


def check_case(case: VerifyCase, runner: Callable[[VerifyCase, dict], np.ndarray]) -> dict[str, Any]:
    """Outputs, mismatches and the first mismatch of ``runner`` (returning uint32 bits [M, N]) on one case."""
    inp = make_inputs(case)
    want = reference(case, inp)
    got = np.asarray(runner(case, inp)).view(np.uint32).reshape(want.shape)
    bad = got != want
    res: dict[str, Any] = {"case": case.label(), "outputs": int(want.size), "mismatches": int(bad.sum()),
                           "finite": int(np.isfinite(want.view(np.float32)).sum())}
    if bad.any():
        i, j = np.argwhere(bad)[0]
        res["first"] = {"row": int(i), "col": int(j), "got": f"{got[i, j]:#010x}", "want": f"{want[i, j]:#010x}"}
    return res
