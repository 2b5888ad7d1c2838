"""``fp4lab verify``: Triton kernels against the plain-numpy reference, bit for bit.

Each ``quantize`` case quantizes one tensor (random or adversarial data: ties, values next to powers of two,
zeros, subnormals, huge values, NaN/Inf, all-zero blocks; or a whole tensor at a range edge: tiny amax or near
float32 max) with one format, rounding (rtne / sr), RHT (off / 16)
and blocked axis (last / first), then compares codes, scale codes, scales, tensor scale and the dequantized fp32
values with ``quantize_reference`` / ``dequantize_reference`` as integer bit patterns. Each ``fakequant`` case
runs the fused fake-quantize kernel (``fake_quantize_triton``) on a 2-D tensor along K and along M at once (RHT,
SR and its random-bit width per case, bf16 or fp32 outputs, with or without the tensor scale) and compares both
outputs and tensor scales with ``fake_quantize_reference``. Any difference is a mismatch (NaN results compare
equal whatever their payload and sign); the first one is reported in full.

The inputs are named kinds of ``fp4lab.testing.inputs`` (``CASE_INPUTS``: "random" is ``gaussian_logscale``,
"adversarial" ``adversarial_rows``, "edges" ``range_edge_tiny`` / ``range_edge_huge`` by seed parity); the
comparison is ``fp4lab.testing.bits.mismatch_mask`` with ``nan="any"``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fp4lab.numerics.fakequant import fake_quantize_reference
from fp4lab.numerics.options import QuantizeOptions
from fp4lab.numerics.ref_quantize import dequantize_reference, quantize_reference
from fp4lab.testing.bits import bit_patterns, mismatch_mask
from fp4lab.testing.inputs import FLT_MAX, make_inputs, range_edge_input  # noqa: F401 (range_edge_input: API)

F32 = np.float32
KINDS = ("random", "adversarial", "edges")
# verify's case kinds -> input kinds of fp4lab.testing.inputs ("edges": tiny for an even seed, huge for an odd one;
# "sparse-nan" is not planned by plan_cases: benchmarks/device/edge_paths_check.py runs it on NaN-ignoring formats)
CASE_INPUTS = {"random": ("gaussian_logscale",), "adversarial": ("adversarial_rows",),
               "edges": ("range_edge_tiny", "range_edge_huge"), "sparse-nan": ("gaussian_sparse_nan",)}
OPS = ("quantize", "fakequant")
FAKEQUANT_SHARE = 0.25  # fraction of a run's elements spent on fakequant cases when both ops run


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
    op: str = "quantize"  # "quantize", or "fakequant" (both blockings of a 2-D tensor; ``axis`` unused)
    sr_bits: int = 24  # random bits per element of "sr"
    out_dtype: str = "bf16"  # fakequant output dtype: bf16 or fp32
    apply_ts: bool = True  # fakequant: outputs include the tensor scale of two-level formats
    tile: tuple[int, int] | None = None  # fakequant: explicit (BM, BK), None for the kernel's own choice

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def variant(self) -> "Case":
        """The case without its data (input kind, shape, seed): cases with one variant run the same kernels."""
        return replace(self, kind="", rows=0, cols=0, seed=0)

    @property
    def group(self) -> str:
        """The summary row: the format, with " (fakequant)" for fake-quantize cases."""
        return self.fmt if self.op == "quantize" else f"{self.fmt} ({self.op})"

    def label(self, data: bool = True) -> str:
        """The case in one line; without ``data``, its variant's (no input kind, shape or seed)."""
        shown = f" {self.kind} {self.rows}x{self.cols} seed={self.seed}" if data else ""
        if self.op == "fakequant":
            return (f"fakequant {self.fmt} {self.rounding} sr_bits={self.sr_bits} rht={self.rht}{shown} "
                    f"{self.dtype} out={self.out_dtype} apply_ts={self.apply_ts}"
                    + (f" tile={self.tile[0]}x{self.tile[1]}" if self.tile else ""))
        sr = f" sr_bits={self.sr_bits}" if self.sr_bits != 24 else ""
        return f"{self.fmt} {self.rounding}{sr} rht={self.rht} axis={self.axis}{shown} {self.dtype}"


@dataclass
class Outcome:
    case: Case
    mismatches: int = 0
    detail: dict[str, Any] = field(default_factory=dict)


def make_input(kind: str, rows: int, cols: int, seed: int) -> np.ndarray:
    """float32 [rows, cols] of a verify case kind (``CASE_INPUTS``). 'random': normal values with a log-uniform
    scale per row; 'adversarial': rows cycle through ties on a dyadic grid, powers of two and their float32
    neighbours, zeros and all-zero blocks, subnormals, huge values near FLT_MAX, and NaN/Inf sprinkled over
    otherwise normal data; 'edges': a whole tensor at one end of float32's range (``range_edge_input``);
    'sparse-nan': normal values with one NaN in every 16th row."""
    if kind not in CASE_INPUTS:
        from fp4lab.errors import InputError

        raise InputError(f"verify: input kind must be one of {', '.join(CASE_INPUTS)}, got {kind!r}")
    names = CASE_INPUTS[kind]
    return make_inputs(names[seed % len(names)], (rows, cols), seed)


def plan_cases(formats: list[str], elements: int, seed: int = 0, rht_sizes=(None, 16),
               roundings=("rtne", "sr"), ops=OPS, interpreter: bool = False) -> list[Case]:
    """Cases covering formats x roundings x RHT x kinds with about ``elements`` in total: quantize cases (axes
    alternating) and, when ``ops`` has both, fakequant cases on about ``FAKEQUANT_SHARE`` of the elements (of the
    planned total: cases have a minimum size, so a small ``elements`` is exceeded). ``interpreter``: fakequant
    cases take 64 x 256 tiles where the block and RHT size allow (the interpreter pays per program, and the
    kernel's own interpreter tiles along M are 16 rows high; tests/test_fakequant.py covers those)."""
    ops = tuple(ops)
    bad = [op for op in ops if op not in OPS]
    if bad or not ops:
        from fp4lab.errors import InputError

        raise InputError(f"verify: ops must be among {', '.join(OPS)}, got {', '.join(map(str, ops)) or 'none'}")
    cases: list[Case] = []
    if "quantize" in ops:
        share = elements if "fakequant" not in ops else int(elements * (1 - FAKEQUANT_SHARE))
        cases = _plan_quantize(formats, share, seed, rht_sizes, roundings)
    if "fakequant" in ops:
        q = sum(c.elements for c in cases)
        budget = elements if not cases else max(int(elements * FAKEQUANT_SHARE),
                                                 int(q * FAKEQUANT_SHARE / (1 - FAKEQUANT_SHARE)))
        cases += _plan_fakequant(formats, budget, seed + len(cases), rht_sizes, roundings, interpreter)
    return cases


def _plan_quantize(formats: list[str], elements: int, seed: int, rht_sizes, roundings) -> list[Case]:
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


def _fakequant_combos(roundings, rht_sizes) -> list[tuple[str, int | None, str]]:
    """(rounding, rht, kind) in an order where each run of len/2 from the start or the middle holds every
    rounding, RHT size and kind (a Gray-code walk), so a format given half of them is still covered."""
    full = [(r, h, k) for r in roundings for h in rht_sizes for k in KINDS]
    if len(roundings) != 2 or len(rht_sizes) != 2:
        return full
    (r0, r1), (h0, h1), (k0, k1, k2) = roundings, rht_sizes, KINDS
    return [(r0, h0, k0), (r1, h1, k0), (r1, h0, k1), (r0, h1, k1), (r0, h0, k2), (r1, h1, k2),
            (r1, h0, k0), (r0, h1, k0), (r0, h0, k1), (r1, h1, k1), (r1, h0, k2), (r0, h1, k2)]


def _plan_fakequant(formats: list[str], elements: int, seed: int, rht_sizes, roundings,
                    interpreter: bool = False) -> list[Case]:
    """Fake-quantize cases: 2-D [M, K] inputs with M and K multiples of 64, the block and the RHT size (M-blocking
    needs the tile height); each format takes as many (rounding, RHT, kind) combinations as the budget allows at
    the minimum case size (at least 2 each), rotating through them across formats. SR widths cycle 24, 16, 8;
    input dtype, output dtype and (for two-level formats) ``apply_ts`` alternate with different periods."""
    from fp4lab.formats.registry import get_format

    combos = _fakequant_combos(roundings, rht_sizes)
    nf = max(len(formats), 1)
    min_elems = 64 * 256
    take = min(len(combos), max(2, elements // (min_elems * nf)))
    per = max(elements // (take * nf), 1)
    cases = []
    n_sr = 0
    i = 0
    for f, name in enumerate(formats):
        fmt = get_format(name)
        bs = max(fmt.block.shape) if fmt.block is not None else 1
        two_level = fmt.tensor_scale != "none"
        pow2 = bs & (bs - 1) == 0
        for j in range(take):
            rounding, rht, kind = combos[(f * take + j) % len(combos)]
            unit = math.lcm(bs, rht or 1, 64)
            cols = max(unit, 1024 if per >= 1 << 20 else 256)
            rows = max(unit, -(-per // cols) // unit * unit or unit)
            sr_bits = 24
            if rounding == "sr":
                sr_bits = (24, 16, 8)[n_sr % 3]
                n_sr += 1
            cases.append(Case(name, rounding, rht, -1, kind, rows, cols, seed + i, ("fp32", "bf16")[(j + f) % 2],
                              op="fakequant", sr_bits=sr_bits, out_dtype=("bf16", "fp32")[(j + f // 2) % 2],
                              apply_ts=not (two_level and i % 3 == 2),
                              tile=(64, 256) if interpreter and pow2 and 64 % max(bs, rht or 1) == 0 else None))
            i += 1
    return cases


def _bits(a: Any) -> np.ndarray:
    """Integer bit patterns as verify compares them: ``bit_patterns(a, nan="any")``, float32 NaNs of any payload
    or sign become 0x7FC00000 (IEEE 754 leaves NaN payloads unspecified: NVIDIA GPUs produce 0x7FFFFFFF, x86
    0xFFC00000 or the propagated payload)."""
    return bit_patterns(a, nan="any")


def compare(case: Case, got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> Outcome:
    """Bitwise comparison of every field; records the first mismatching element in full."""
    out = Outcome(case)
    for key, w in want.items():
        g = got[key]
        if np.shape(g) != np.shape(w):
            out.mismatches += max(np.size(g), np.size(w))
            out.detail.setdefault("first", {"field": key, "got_shape": np.shape(g), "want_shape": np.shape(w)})
            continue
        bad = mismatch_mask(g, w, nan="any")
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


def case_options(case: Case) -> QuantizeOptions:
    """The ``QuantizeOptions`` of a quantize case (RHT signs keyed by ``seed + 1``), the same on both sides."""
    return QuantizeOptions(case.rounding, case.seed, case.axis, case.rht, case.seed + 1)


def reference_fields(case: Case, x: np.ndarray) -> dict[str, np.ndarray]:
    from fp4lab.formats.registry import get_format

    with np.errstate(all="ignore"):
        q = quantize_reference(x, get_format(case.fmt), case_options(case))
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
    q = quantize_cuda(xt, get_format(case.fmt), case_options(case))
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


def _fq_blockings(case: Case) -> tuple[tuple[int, int], tuple[int, int]]:
    """(rht_seed, seed) along K and along M: distinct streams per output."""
    return (case.seed + 1, case.seed), (case.seed + 3, case.seed + 2)


def fakequant_reference_fields(case: Case, x: np.ndarray) -> dict[str, np.ndarray]:
    from fp4lab.formats.registry import get_format

    fmt = get_format(case.fmt)
    out: dict[str, np.ndarray] = {}
    for key, axis, (rht_seed, seed) in zip("km", (-1, 0), _fq_blockings(case)):
        with np.errstate(all="ignore"):
            y, ts = fake_quantize_reference(x, fmt, case.rounding, seed, axis, case.rht, rht_seed, case.sr_bits,
                                            case.out_dtype, case.apply_ts)
        out[f"y_{key}"] = np.ascontiguousarray(y, F32)
        out[f"ts_{key}"] = np.array([np.nan if ts is None else ts], F32)
    return out


def fakequant_kernel_fields(case: Case, x: np.ndarray, device: str) -> dict[str, np.ndarray]:
    import torch

    from fp4lab.formats.registry import get_format
    from fp4lab.kernels.fakequant_launch import Blocking, fake_quantize_triton

    xt = torch.from_numpy(x).to(device)
    if case.dtype == "bf16":
        xt = xt.to(torch.bfloat16)  # exact: run_case rounded x to bf16 values already
    (rs_k, s_k), (rs_m, s_m) = _fq_blockings(case)
    yk, ym, tsk, tsm = fake_quantize_triton(
        xt, get_format(case.fmt), case.rounding, along_k=Blocking(case.rht, rs_k, s_k),
        along_m=Blocking(case.rht, rs_m, s_m), sr_bits=case.sr_bits,
        out_dtype=torch.float32 if case.out_dtype == "fp32" else torch.bfloat16, apply_tensor_scale=case.apply_ts,
        tile=case.tile)

    def ts(t: Any) -> np.ndarray:
        return np.array([np.nan if t is None else float(t.reshape(()))], F32)

    return {"y_k": yk.float().cpu().numpy(), "ts_k": ts(tsk), "y_m": ym.float().cpu().numpy(), "ts_m": ts(tsm)}


def run_case(case: Case, device: str) -> Outcome:
    x = make_input(case.kind, case.rows, case.cols, case.seed)
    if case.dtype == "bf16":
        import torch

        x = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    fq = case.op == "fakequant"
    with np.errstate(all="ignore"):  # the interpreter evaluates inf/NaN arithmetic with numpy
        got = (fakequant_kernel_fields if fq else kernel_fields)(case, x, device)
    return compare(case, got, (fakequant_reference_fields if fq else reference_fields)(case, x))


def kernel_groups(cases: list[Case]) -> list[list[int]]:
    """Indices of ``cases`` grouped by kernel variant (``Case.variant``), the group of most elements first: a
    group runs in one process, so each variant's Triton compile happens once."""
    groups: dict[Case, list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault(c.variant, []).append(i)
    return sorted(groups.values(), key=lambda g: -sum(cases[i].elements for i in g))


def _run_group(cases: list[Case], device: str) -> tuple[list[Outcome], float]:
    t0 = time.perf_counter()
    return [run_case(c, device) for c in cases], time.perf_counter() - t0


def run_cases(cases: list[Case], device: str, workers: int = 1, progress: bool = True,
              log: Callable[[str], None] | None = None) -> list[Outcome]:
    """Outcomes of every case, in case order. Cases run in groups of one kernel variant (``kernel_groups``): in
    this process, or in ``workers`` processes (each with its own CUDA context) that each take the next group when
    they finish one. ``progress``: a progress bar; ``log``: called with one line per group as it finishes (its
    variant, cases, elements, mismatches and seconds), so a run cut off still shows how far it got."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    groups = kernel_groups(cases)
    tasks = [[cases[i] for i in g] for g in groups]
    run = functools.partial(_run_group, device=device)
    outcomes: list[Outcome | None] = [None] * len(cases)
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, disable=not progress, transient=False) as bar:
        task = bar.add_task("verify (elements)", total=sum(c.elements for c in cases))

        def collect(done: int, group: list[int], result: tuple[list[Outcome], float]) -> None:
            got, seconds = result
            for i, o in zip(group, got):
                outcomes[i] = o
            n = sum(cases[i].elements for i in group)
            bar.advance(task, n)
            if log is not None:
                bad = sum(o.mismatches for o in got)
                log(f"[{done}/{len(groups)}] {cases[group[0]].label(data=False)}: {len(group)} cases, {n} elements, "
                    f"{bad} mismatches, {seconds:.1f} s")

        if workers <= 1:
            for k, (group, t) in enumerate(zip(groups, tasks), 1):
                collect(k, group, run(t))
        else:
            import multiprocessing as mp

            with mp.get_context("spawn").Pool(workers) as pool:
                order = pool.imap_unordered(_indexed, [(j, run, t) for j, t in enumerate(tasks)])
                for k, (j, result) in enumerate(order, 1):
                    collect(k, groups[j], result)
    return outcomes  # type: ignore[return-value] (every index is filled)


def _indexed(args: tuple[int, Callable, list[Case]]) -> tuple[int, Any]:
    j, fn, task = args
    return j, fn(task)


def summarize(outcomes: list[Outcome]) -> tuple[list[dict[str, Any]], Outcome | None]:
    """Rows per format and op (cases, elements, mismatching cases, mismatching values; quantize rows first, the
    format column of fakequant rows reads "name (fakequant)") and the first failing outcome."""
    rows: dict[str, dict[str, Any]] = {}
    first = None
    for o in sorted(outcomes, key=lambda o: OPS.index(o.case.op)):  # stable: case order within an op
        r = rows.setdefault(o.case.group, {"format": o.case.group, "op": o.case.op, "cases": 0, "elements": 0,
                                           "failed_cases": 0, "mismatches": 0})
        r["cases"] += 1
        r["elements"] += o.case.elements
        if o.mismatches:
            r["failed_cases"] += 1
            r["mismatches"] += o.mismatches
            first = first or o
    return list(rows.values()), first
