"""``fp4lab verify``: Triton kernels against the plain-numpy reference, bit for bit.

Each case quantizes one tensor (random or adversarial data: ties, values next to powers of two, zeros,
subnormals, huge values, NaN/Inf, all-zero blocks) with one format, rounding (rtne / sr), RHT (off / 16) and
blocked axis (last / first), then compares codes, scale codes, scales, tensor scale and the dequantized fp32
values with ``quantize_reference`` / ``dequantize_reference`` as integer bit patterns. Any difference is a
mismatch (NaN results compare equal whatever their payload and sign); the first one is reported in full.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

F32 = np.float32
KINDS = ("random", "adversarial")


@dataclass(frozen=True)
class Case:
    fmt: str
    rounding: str
    rht: int | None
    axis: int
    kind: str
    rows: int
    cols: int
    seed: int
    dtype: str = "fp32"  # kernel input dtype: fp32, or bf16 (inputs rounded to bf16 first)

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    def label(self) -> str:
        return (f"{self.fmt} {self.rounding} rht={self.rht} axis={self.axis} {self.kind} "
                f"{self.rows}x{self.cols} seed={self.seed} {self.dtype}")


@dataclass
class Outcome:
    case: Case
    mismatches: int = 0
    detail: dict[str, Any] = field(default_factory=dict)


def make_input(kind: str, rows: int, cols: int, seed: int) -> np.ndarray:
    """float32 [rows, cols]. 'random': normal values with a log-uniform scale per row; 'adversarial': rows cycle
    through ties on a dyadic grid, powers of two and their float32 neighbours, zeros and all-zero blocks,
    subnormals, huge values near FLT_MAX, and NaN/Inf sprinkled over otherwise normal data."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * np.exp2(rng.uniform(-20, 20, (rows, 1)))
    x = x.astype(F32)
    if kind == "random":
        return x
    r = np.arange(rows)[:, None] % 8
    ties = (rng.integers(-96, 97, (rows, cols)) / 8.0 * np.exp2(rng.integers(-4, 5, (rows, 1)))).astype(F32)
    p2 = np.exp2(rng.integers(-30, 30, (rows, cols))).astype(F32) * rng.choice([-1, 1], (rows, cols)).astype(F32)
    p2 = np.where(rng.random((rows, cols)) < 0.3, np.nextafter(p2, F32(np.inf)), p2)
    p2 = np.where(rng.random((rows, cols)) < 0.3, np.nextafter(p2, F32(-np.inf)), p2).astype(F32)
    zeros = np.where(rng.random((rows, cols)) < 0.5, F32(0.0), x) * np.where(rng.random((rows, 1)) < 0.5, 0, 1)
    zeros = np.where(rng.random((rows, cols)) < 0.1, F32(-0.0), zeros).astype(F32)
    sub = (rng.standard_normal((rows, cols)) * 1e-39).astype(F32)
    sub = np.where(rng.random((rows, cols)) < 0.2, np.uint32(1).view(F32), sub).astype(F32)
    huge = (rng.uniform(-3.4e38, 3.4e38, (rows, cols))).astype(F32)
    special = x.copy()
    pick = rng.random((rows, cols))
    special[pick < 0.003] = np.nan
    special[(pick >= 0.003) & (pick < 0.006)] = np.inf
    special[(pick >= 0.006) & (pick < 0.009)] = -np.inf
    mixed = np.where(rng.random((rows, cols)) < 0.5, ties, x * F32(1e-30))
    choices = [ties, p2, zeros, sub, huge, special, mixed, x]
    out = np.select([r == i for i in range(8)], choices).astype(F32)
    return out


def plan_cases(formats: list[str], elements: int, seed: int = 0, rht_sizes=(None, 16),
               roundings=("rtne", "sr")) -> list[Case]:
    """Cases covering formats x roundings x RHT x kinds, axes alternating, with about ``elements`` in total."""
    from fp4lab.formats.registry import get_format

    combos = []
    for name in formats:
        fmt = get_format(name)
        two_d = fmt.block is not None and fmt.block.is_2d
        for rounding in roundings:
            for rht in rht_sizes:
                for kind in KINDS:
                    combos.append((name, fmt, rounding, rht, kind, two_d, "fp32"))
                    if rht is None:  # bf16 words along the last axis: the kernels' packed-pair fast path
                        combos.append((name, fmt, rounding, rht, kind, two_d, "bf16"))
    per = max(elements // max(len(combos), 1), 1)
    cases = []
    j = 0  # fp32 cases alternate their blocked axis in the pattern last, first, first, last, ...
    for i, (name, fmt, rounding, rht, kind, two_d, dtype) in enumerate(combos):
        bs = max(fmt.block.shape) if fmt.block is not None else 1
        unit = math.lcm(bs, rht or 1, 64)
        axis = 0 if ((j + j // 2) % 2 and not two_d and dtype == "fp32") else -1
        j += dtype == "fp32"
        cols = max(unit, 1024 if per >= 1 << 20 else 256)
        rows = max(unit, -(-per // cols) // unit * unit or unit)
        if axis == 0:
            rows, cols = cols, rows
        cases.append(Case(name, rounding, rht, axis, kind, rows, cols, seed + i, dtype))
    return cases


def _bits(a: Any) -> np.ndarray:
    """Integer bit patterns; float32 NaNs of any payload or sign become 0x7FC00000 (IEEE 754 leaves NaN payloads
    unspecified: NVIDIA GPUs produce 0x7FFFFFFF, x86 0xFFC00000 or the propagated payload)."""
    a = np.ascontiguousarray(a)
    if a.dtype == np.float32:
        return np.where(np.isnan(a), np.uint32(0x7FC00000), a.view(np.uint32))
    if a.dtype == np.int32:
        return a.view(np.uint32)
    if a.dtype in (np.int16,):
        return a.view(np.uint16)
    return a


def compare(case: Case, got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> Outcome:
    """Bitwise comparison of every field; records the first mismatching element in full."""
    out = Outcome(case)
    for key, w in want.items():
        g = got[key]
        gb, wb = _bits(g), _bits(w)
        if gb.shape != wb.shape:
            out.mismatches += max(gb.size, wb.size)
            out.detail.setdefault("first", {"field": key, "got_shape": gb.shape, "want_shape": wb.shape})
            continue
        bad = gb != wb
        n = int(bad.sum())
        if n:
            out.mismatches += n
            if "first" not in out.detail:
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                out.detail["first"] = {"field": key, "index": idx, "got": _show(g[idx]), "want": _show(w[idx])}
    return out


def _show(v: Any) -> str:
    v = np.asarray(v)
    if v.dtype == np.float32:
        return f"{float(v)!r} (0x{int(v.view(np.uint32)):08x})"
    return f"{int(v)} (0x{int(v):x})"


def reference_fields(case: Case, x: np.ndarray) -> dict[str, np.ndarray]:
    from fp4lab.emulator.ref_quantize import dequantize_reference, quantize_reference
    from fp4lab.formats.registry import get_format

    with np.errstate(all="ignore"):
        q = quantize_reference(x, get_format(case.fmt), case.rounding, case.seed, case.axis, case.rht, case.seed + 1)
        d = dequantize_reference(q)
    ts = np.array([np.nan if q.tensor_scale is None else q.tensor_scale], F32)
    return {"codes": q.codes, "scale_codes": np.asarray(q.scale_codes), "scales": np.asarray(q.scales, F32),
            "tensor_scale": ts, "dequantized": d}


def kernel_fields(case: Case, x: np.ndarray, device: str) -> dict[str, np.ndarray]:
    import torch

    from fp4lab.formats.registry import get_format
    from fp4lab.kernels.api import dequantize_cuda, quantize_cuda

    xt = torch.from_numpy(x).to(device)
    if case.dtype == "bf16":
        xt = xt.to(torch.bfloat16)  # exact: run_case rounded x to bf16 values already
    q = quantize_cuda(xt, get_format(case.fmt), case.rounding, case.seed, case.axis, case.rht, case.seed + 1)
    d = dequantize_cuda(q)
    sc = q.scale_codes
    sc = sc.view(torch.int16) if sc.dtype == torch.uint16 else sc
    sc_np = sc.cpu().numpy()
    if sc_np.dtype == np.int32:
        sc_np = sc_np.view(np.uint32)
    elif sc_np.dtype == np.int16:
        sc_np = sc_np.view(np.uint16)
    ts = np.array([np.nan if q.tensor_scale is None else float(q.tensor_scale)], F32)
    return {"codes": q.codes.cpu().numpy(), "scale_codes": sc_np, "scales": q.scales.cpu().numpy(),
            "tensor_scale": ts, "dequantized": d.cpu().numpy()}


def run_case(case: Case, device: str) -> Outcome:
    x = make_input(case.kind, case.rows, case.cols, case.seed)
    if case.dtype == "bf16":
        import torch

        x = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    with np.errstate(all="ignore"):  # the interpreter evaluates inf/NaN arithmetic with numpy
        got = kernel_fields(case, x, device)
    return compare(case, got, reference_fields(case, x))


def _worker(args: tuple[list[Case], str, Any]) -> list[Outcome]:
    cases, device, queue = args
    out = []
    for c in cases:
        out.append(run_case(c, device))
        if queue is not None:
            queue.put(c.elements)
    return out


def run_cases(cases: list[Case], device: str, workers: int = 1, progress: bool = True) -> list[Outcome]:
    """Run every case (in ``workers`` processes when > 1, each with its own CUDA context)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = sum(c.elements for c in cases)
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, disable=not progress, transient=False) as bar:
        task = bar.add_task("verify (elements)", total=total)
        if workers <= 1:
            outcomes = []
            for c in cases:
                bar.update(task, description=f"verify {c.fmt} {c.rounding} rht={c.rht}")
                outcomes.append(run_case(c, device))
                bar.advance(task, c.elements)
            return outcomes
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        with ctx.Manager() as mgr:
            q = mgr.Queue()
            chunks = [cases[i::workers] for i in range(workers)]
            with ctx.Pool(workers) as pool:
                res = pool.map_async(_worker, [(ch, device, q) for ch in chunks])
                while not res.ready():
                    res.wait(0.5)
                    while not q.empty():
                        bar.advance(task, q.get())
                outcomes = [o for part in res.get() for o in part]
                while not q.empty():
                    bar.advance(task, q.get())
        return outcomes


def summarize(outcomes: list[Outcome]) -> tuple[list[dict[str, Any]], Outcome | None]:
    """Per-format rows (cases, elements, mismatching cases, mismatching values) and the first failing outcome."""
    rows: dict[str, dict[str, Any]] = {}
    first = None
    for o in outcomes:
        r = rows.setdefault(o.case.fmt, {"format": o.case.fmt, "cases": 0, "elements": 0, "failed_cases": 0,
                                         "mismatches": 0})
        r["cases"] += 1
        r["elements"] += o.case.elements
        if o.mismatches:
            r["failed_cases"] += 1
            r["mismatches"] += o.mismatches
            first = first or o
    return list(rows.values()), first
