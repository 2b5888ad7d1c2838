"""Summary of a study: every run, the relative loss gap to bf16, and paired recipe differences.

Definitions (percent; ``L`` is ``train_loss`` or ``heldout_loss`` of ``metrics.csv``):

* final window: the last ``ceil(window * n)`` of a run's ``n`` evaluations (at least one; ``window = 0.1``), and
  at most those that end within the final ``window_steps`` steps (default 1000): the paper's window, the final
  1000 steps or the final 10% of the run if that is shorter;
* relative gap of a finished run to the finished baseline run (bf16) of the same size and seed, whose
  configuration agrees except for the recipe: ``gap = 100 * mean over the window of (L_run - L_bf16) / L_bf16``
  (the two runs evaluate at the same steps);
* per (size, recipe): mean and standard error ``SE = sd / sqrt(n)`` (sd with n - 1) of the gap over seeds;
* paired difference of recipes A and B (e.g. ufp4 minus e2m1-ref) per seed: ``d = gap_A - gap_B`` in percentage
  points (an interaction ``(A, B, C, D)``: ``d = (gap_A - gap_B) - (gap_C - gap_D)``), with mean, sd and SE over
  the seeds that have all of them (same batches and initial weights per seed), and
  ``seeds_needed``: the paired seeds for a two-sided paired t-test at level ``alpha`` to detect a difference of
  ``delta`` points with probability ``power``, taking the measured sd as the true one (``stats.seeds_needed``), and
  ``detectable``: the difference in points such a test detects with probability 0.8 with ``planned_seeds`` paired
  seeds (default: the row's n) at the measured sd (``stats.detectable_difference``, the same formula solved for delta);
* for each paired difference also its median over the seeds and ``p_signed_rank``, the exact two-sided p-value of
  Wilcoxon's signed-rank test (``stats.signed_rank_p``): a check of the t-test that a few seeds far out cannot
  sway, not a test of the design;
* for each paired difference: the 95% confidence interval ``mean ± t(0.975, n - 1) * SE``, the two-sided p-value
  of the paired t-test (``t = mean / SE``, Student's t with n - 1 degrees of freedom), and ``p_holm``, Holm's
  step-down adjustment over the family of every paired difference of the training loss (the primary metric) in
  the summary; held-out rows get no adjusted p-value;
* where a difference's seeds trained on more than one GPU: the same mean, SE and 95% CI over the seeds of each
  GPU (a seed's device: the one GPU that trained all runs of its difference and their baseline runs, else
  ``mixed: <GPUs>``), a sensitivity check without tests.

Runs are read from run folders (``config.json``) and from packed slices (``runs.jsonl`` or ``runs.jsonl.gz``,
``fp4lab.study.pack``) under ``root``. A run's name in the tables is its label (``TrainConfig.label``, default the
recipe's name). The summary refuses (one-line ``InputError``) runs of more than one code version or corpus
fingerprint (pass ``code_version`` to keep one version), and a run found finished (or diverged) twice (same size,
label, seed and replica): a rerun never replaces a result silently. An unfinished record (a run that a slice cut
off, packed as ``partial``) gives way to a finished one of the same run, and of two unfinished ones the one logged
further is kept. Two runs are paired when their identities agree except for the recipe and ``data_order`` (the
negative control differs from its baseline only in the data order). Repeats (``replica`` 1) stay out of the gaps;
``repeats.csv`` says, for each, whether its logged losses equal those of its run bit for bit.

Files written into ``dest``: ``runs.csv`` (with ``tokens_per_s``, the mean training throughput of a run's
evaluation intervals after the first, which holds the kernels' compilation, and ``device``, the GPU that trained
it: from its ``done.json``, else from its pack's ``slice.json``; empty if neither says), ``gaps.csv``, ``paired.csv``,
``paired_by_device.csv`` (the split by GPU; header only where every seed ran on one), ``alpha.csv`` (per run,
the last diagnostic step's mean and minimum alpha over layers for each operand and GEMM), ``repeats.csv``,
``summary.json`` (all of it, with notes on runs left out), ``summary.md`` (tables) and, with matplotlib,
``loss_curves.png``, ``paired.png`` (each seed's training-loss difference per pair, with the mean, its 95% CI and
the median) and ``gap_vs_size.png`` (``fp4lab.study.plots``); given crossing levels, also
``crossings.csv`` and ``timing.csv`` (``fp4lab.study.crossings``: when each run reaches each loss level, and how
much of the final gap that timing explains), with matplotlib ``timing.png`` (the gap against the delay).
"""

from __future__ import annotations

import json
import math
import statistics
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fp4lab.errors import InputError
from fp4lab.study import crossings, pack
from fp4lab.study.logs import last_step_rows, read_csv, write_csv, write_json, write_text
from fp4lab.study.stats import (
    detectable_difference,
    holm,
    mean_se,
    seeds_needed,
    signed_rank_p,
    t_quantile,
    t_two_sided_p,
)

METRICS: tuple[str, ...] = ("train", "heldout")
RUN_COLUMNS = ("size", "recipe", "seed", "replica", "status", "params", "steps", "tokens", "final_train",
               "final_heldout", "window_train", "window_heldout", "gap_train", "gap_heldout", "tokens_per_s",
               "elapsed_s", "device", "folder")
GAP_COLUMNS = ("size", "params", "recipe", "metric", "n", "mean", "sd", "se")
PAIR_COLUMNS = ("size", "params", "a", "b", "metric", "n", "mean", "sd", "se", "ci_low", "ci_high", "p", "p_holm",
                "seeds_needed", "detectable", "median", "p_signed_rank", "seeds", "diffs")
ALPHA_COLUMNS = ("size", "recipe", "seed", "step", "operand", "gemm", "layers", "alpha_mean", "alpha_min")
REPEAT_COLUMNS = ("size", "recipe", "seed", "rows", "identical", "max_abs_diff")
BY_DEVICE_COLUMNS = ("size", "a", "b", "metric", "device", "n", "mean", "se", "ci_low", "ci_high", "seeds", "diffs")
UNPAIRED_FIELDS = frozenset({"recipe_toml", "data_order"})


@dataclass
class RunLog:
    """A run folder's configuration and evaluation rows."""

    folder: str | Path            # a run folder, or ``<runs.jsonl>:<line>`` of a packed run
    size: str
    recipe: str
    seed: int
    done: bool
    params: int
    identity: dict[str, Any]
    rows: list[dict[str, Any]]
    elapsed_s: float | None
    alpha: list[dict[str, Any]]   # alpha.csv rows of the last diagnostic step
    replica: int = 0
    status: str = ""
    device: str = ""              # the GPU's name (``RUN_COLUMNS``), "" if no record says

    @property
    def key(self) -> tuple[str, str, int, int]:
        return self.size, self.recipe, self.seed, self.replica

    @property
    def code_version(self) -> str:
        return str(self.identity.get("code_version", "unknown"))

    def loss(self, metric: str) -> list[float]:
        return [float(r[f"{metric}_loss"]) for r in self.rows]

    def steps(self) -> list[int]:
        return [int(r["step"]) for r in self.rows]


def _run_log(where: str | Path, cfg: Any, ident: Any, params: Any, done: Any, rows: Any, alpha: Any,
             status: str) -> RunLog:
    """A RunLog from a run's parts, checked (InputError naming ``where``)."""
    try:
        name = cfg.get("label") or tomllib.loads(ident["recipe_toml"])["name"]
        log = RunLog(where, str(cfg["size"]), str(name), int(cfg["seed"]), isinstance(done, dict), int(params or 0),
                     ident, list(rows), None if not isinstance(done, dict) else done.get("elapsed_s"), list(alpha),
                     int(cfg.get("replica", 0)), status,
                     str(done.get("device") or "") if isinstance(done, dict) else "")
        for r in log.rows:
            int(r["step"]), float(r["train_loss"]), float(r["heldout_loss"]), int(r["tokens"])
    except (KeyError, TypeError, ValueError, AttributeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"summarize: {where} is not a run's record ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:80] if str(exc) else ''})") from None
    return log


def _folder_run(cfg_path: Path) -> RunLog:
    folder = cfg_path.parent
    try:
        meta = json.loads(cfg_path.read_text(encoding="utf-8"))
        done = json.loads((folder / "done.json").read_text(encoding="utf-8")) \
            if (folder / "done.json").is_file() else None
    except (ValueError, RecursionError, OSError) as exc:
        raise InputError(f"summarize: {folder}: unreadable config.json or done.json ({type(exc).__name__})") \
            from None
    if not isinstance(meta, dict):
        raise InputError(f"summarize: {cfg_path} is not a run's config.json")
    status = "done" if done is not None else "diverged" if (folder / "diverged.json").is_file() else "partial"
    return _run_log(folder, meta.get("config"), meta.get("identity"), meta.get("params"), done,
                    read_csv(folder / "metrics.csv"),
                    last_step_rows(read_csv(folder / "alpha.csv", drop_incomplete=True)), status)


def _final(run: RunLog) -> bool:
    """Whether a run's record is a result (finished or diverged), not an unfinished one that a slice cut off."""
    return run.done or run.status == "diverged"


def load_runs(root: str | Path, code_version: str | None = None) -> list[RunLog]:
    """Every run folder (one with ``config.json``) and packed run (``pack.load_packs``) under ``root``, sorted by
    where they were found; only those of ``code_version`` if given. InputError for a run found finished twice and
    for runs of several code versions or corpora; an unfinished record gives way to a finished one (module
    docstring)."""
    base = Path(root)
    if not base.is_dir():
        raise InputError(f"summarize: {base} is not a directory")
    runs = [_folder_run(p) for p in sorted(base.rglob("config.json"))]
    devices: dict[str, str] = {}  # runs file -> the device its slice.json names
    for where, rec in pack.load_packs(base):
        log = _run_log(where, rec["config"], rec["identity"], rec.get("params"), rec.get("done"), rec["rows"],
                       rec.get("alpha") or [], str(rec["status"]))
        runs_file = where.rsplit(":", 1)[0]
        if runs_file not in devices:
            devices[runs_file] = pack.slice_device(runs_file)
        log.device = log.device or devices[runs_file]
        runs.append(log)
    if code_version is not None:
        runs = [r for r in runs if r.code_version == code_version]
    seen: dict[tuple, RunLog] = {}
    for r in runs:
        other = seen.get(r.key)
        if other is not None and _final(r) and _final(other):
            raise InputError(f"summarize: {r.size}/{r.recipe}/seed{r.seed} is in both {other.folder} and "
                             f"{r.folder}; keep one (a rerun never replaces a result silently)")
        if other is None or _final(r) or (not _final(other) and len(r.rows) > len(other.rows)):
            seen[r.key] = r
    runs = [r for r in runs if seen[r.key] is r]
    for what, of in (("code versions", lambda r: r.code_version),
                     ("corpora", lambda r: str(r.identity.get("corpus_fingerprint")))):
        groups: dict[str, int] = defaultdict(int)
        for r in runs:
            groups[of(r)] += 1
        if len(groups) > 1:
            shown = ", ".join(f"{k} ({n} runs)" for k, n in sorted(groups.items()))
            raise InputError(f"summarize: the runs under {base} come from {len(groups)} {what}: {shown}; "
                             "summarize one at a time" + (" (--code-version)" if what == "code versions" else ""))
    return runs


def window_size(n: int, window: float, steps: list[int] | None = None, window_steps: int | None = None) -> int:
    """Evaluations in the final window of a run with ``n`` of them (logged at ``steps``; module docstring)."""
    if not n:
        return 0
    k = max(1, math.ceil(window * n))
    if steps and window_steps is not None:
        k = min(k, max(1, sum(1 for s in steps if s > steps[-1] - window_steps)))
    return k


def contrast_terms(pair: tuple[str, ...]) -> list[tuple[str, int]]:
    """(label, coefficient) of a paired contrast: ``(A, B)`` is ``A - B``; ``(A, B, C, D)`` is the interaction
    ``(A - B) - (C - D)``."""
    if len(pair) == 2:
        return [(pair[0], 1), (pair[1], -1)]
    if len(pair) == 4:
        return [(pair[0], 1), (pair[1], -1), (pair[2], -1), (pair[3], 1)]
    raise InputError(f"summarize: a contrast names 2 or 4 labels (A:B or A:B:C:D), not {len(pair)}")


def relative_gap(run: RunLog, base: RunLog, metric: str, window: float, window_steps: int | None = None) -> float:
    """``100 * mean over the final window of (L_run - L_base) / L_base`` (module docstring)."""
    k = window_size(len(run.rows), window, run.steps(), window_steps)
    if run.steps() != base.steps() or k == 0:
        raise InputError(f"summarize: {run.folder} and {base.folder} evaluate at different steps")
    a, b = run.loss(metric)[-k:], base.loss(metric)[-k:]
    return 100.0 * sum((x - y) / y for x, y in zip(a, b)) / k


def _comparable(run: RunLog, base: RunLog) -> bool:
    return {k: v for k, v in run.identity.items() if k not in UNPAIRED_FIELDS} == \
        {k: v for k, v in base.identity.items() if k not in UNPAIRED_FIELDS}


def baseline_runs(runs: list[RunLog], baseline: str) -> dict[tuple[str, int], RunLog]:
    """{(size, seed): the finished baseline run} (repeats left out): what every other run is paired with."""
    return {(r.size, r.seed): r for r in runs if r.recipe == baseline and r.done and not r.replica}


def gaps(runs: list[RunLog], window: float, baseline: str = "bf16",
         window_steps: int | None = None) -> tuple[dict, list[str]]:
    """({(size, recipe, seed, metric): gap}, notes) over the finished runs (not repeats) that have a comparable
    baseline."""
    base = baseline_runs(runs, baseline)
    out, notes = {}, []
    for r in runs:
        if r.status == "diverged":
            notes.append(f"{r.folder}: diverged")
        if not r.done or r.recipe == baseline or r.replica:
            continue
        b = base.get((r.size, r.seed))
        if b is None:
            notes.append(f"{r.folder}: no finished {baseline} run of size {r.size}, seed {r.seed}")
        elif not _comparable(r, b) or r.steps() != b.steps():
            notes.append(f"{r.folder}: its settings differ from {b.folder} beyond the recipe; not paired")
        else:
            for m in METRICS:
                out[(r.size, r.recipe, r.seed, m)] = relative_gap(r, b, m, window, window_steps)
    return out, notes


def repeats(runs: list[RunLog]) -> list[dict[str, Any]]:
    """Per finished repeat (replica 1) with its finished run: whether every logged train and held-out loss is
    equal bit for bit, and the largest absolute difference."""
    by = {r.key: r for r in runs if r.done}
    out = []
    for r in runs:
        first = by.get((r.size, r.recipe, r.seed, 0))
        if not r.replica or not r.done or first is None:
            continue
        pairs = [(float(a[f"{m}_loss"]), float(b[f"{m}_loss"])) for a, b in zip(r.rows, first.rows) for m in METRICS]
        same = r.steps() == first.steps() and all(a == b for a, b in pairs)
        out.append({"size": r.size, "recipe": r.recipe, "seed": r.seed, "rows": len(r.rows), "identical": same,
                    "max_abs_diff": max((abs(a - b) for a, b in pairs), default=math.nan)})
    return out


def _alpha_rows(run: RunLog) -> list[dict[str, Any]]:
    rows = [r for r in last_step_rows(run.alpha) if isinstance(r.get("alpha"), (int, float))]
    if not rows:
        return []
    last = rows[0]["step"]
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        groups[(str(r.get("operand")), str(r.get("gemm")))].append(float(r["alpha"]))
    return [{"size": run.size, "recipe": run.recipe, "seed": run.seed, "step": last, "operand": op, "gemm": g,
             "layers": len(v), "alpha_mean": sum(v) / len(v), "alpha_min": min(v)} for (op, g), v in groups.items()]


def summarize(root: str | Path, dest: str | Path, window: float = 0.1, baseline: str = "bf16",
              pairs: tuple[tuple[str, ...], ...] = (("ufp4", "e2m1-ref"),), plots: bool = True,
              code_version: str | None = None, window_steps: int | None = 1000, delta: float = 0.3,
              alpha: float = 0.05, planned_seeds: int | None = None,
              crossing_levels: tuple[float, ...] = ()) -> dict[str, Any]:
    """Write the summary files of the runs under ``root`` into ``dest`` (module docstring); returns summary.json."""
    levels = crossings.check_levels(tuple(crossing_levels))
    if planned_seeds is not None and planned_seeds < 2:
        raise InputError(f"summarize: planned_seeds = {planned_seeds}; it must be at least 2")
    if not 0 < window <= 1:
        raise InputError(f"summarize: window = {window}; it must be in (0, 1]")
    if window_steps is not None and window_steps < 1:
        raise InputError(f"summarize: window_steps = {window_steps}; it must be at least 1")
    runs = load_runs(root, code_version)
    if not runs:
        raise InputError(f"summarize: no run folders (config.json) or packed runs (runs.jsonl) under {root}")
    out = Path(dest)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"summarize: cannot create {out}: {exc.strerror}") from None
    gap, notes = gaps(runs, window, baseline, window_steps)
    params = {r.size: r.params for r in runs}
    run_rows = []
    for r in runs:
        k = window_size(len(r.rows), window, r.steps(), window_steps)
        speeds = [float(x["tokens_per_s"]) for x in r.rows[1:]]  # the first interval holds compilation
        row = {"size": r.size, "recipe": r.recipe, "seed": r.seed, "replica": r.replica,
               "tokens_per_s": sum(speeds) / len(speeds) if speeds else None,
               "status": "done" if r.done else (r.status or "partial"),
               "params": r.params, "steps": r.rows[-1]["step"] if r.rows else 0,
               "tokens": r.rows[-1]["tokens"] if r.rows else 0, "elapsed_s": r.elapsed_s, "device": r.device,
               "folder": str(r.folder)}
        for m in METRICS:
            loss = r.loss(m)
            row[f"final_{m}"] = loss[-1] if loss else None
            row[f"window_{m}"] = sum(loss[-k:]) / k if k else None
            row[f"gap_{m}"] = gap.get((r.size, r.recipe, r.seed, m))
        run_rows.append(row)
    by: dict[tuple[str, str, str], dict[int, float]] = defaultdict(dict)
    for (size, recipe, seed, m), v in gap.items():
        by[(size, recipe, m)][seed] = v
    gap_rows = []
    for (size, recipe, m), per_seed in sorted(by.items()):
        mean, se, n = mean_se(list(per_seed.values()))
        gap_rows.append({"size": size, "params": params[size], "recipe": recipe, "metric": m, "n": n, "mean": mean,
                         "sd": se * math.sqrt(n), "se": se})
    pair_rows, device_rows = [], []
    devices = {(r.size, r.recipe, r.seed): r.device for r in runs if r.done and not r.replica}
    for pair in pairs:
        terms = contrast_terms(pair)
        a, b = (pair[0], pair[1]) if len(pair) == 2 else (f"({pair[0]} − {pair[1]})", f"({pair[2]} − {pair[3]})")
        for size in sorted({s for s, _, _ in by}, key=lambda s: params[s]):
            for m in METRICS:
                per = [(coef, by.get((size, name, m), {})) for name, coef in terms]
                seeds = sorted(set.intersection(*(set(g) for _, g in per)))
                if not seeds:
                    continue
                diffs = [sum(coef * g[s] for coef, g in per) for s in seeds]
                mean, se, n, half = mean_ci(diffs)
                sd = se * math.sqrt(n)
                ok = n >= 2 and se > 0
                pair_rows.append({"size": size, "params": params[size], "a": a, "b": b, "metric": m, "n": n,
                                  "mean": mean, "sd": sd, "se": se, "ci_low": mean - half, "ci_high": mean + half,
                                  "p": t_two_sided_p(mean / se, n - 1) if ok else math.nan, "p_holm": math.nan,
                                  "seeds_needed": seeds_needed(sd, delta, alpha),
                                  "detectable": detectable_difference(sd, planned_seeds or n, alpha),
                                  "median": statistics.median(diffs), "p_signed_rank": signed_rank_p(diffs),
                                  "seeds": " ".join(map(str, seeds)),
                                  "diffs": " ".join(f"{d:.6g}" for d in diffs)})
                on = [seed_device(devices, size, [name for name, _ in terms] + [baseline], s) for s in seeds]
                if len(set(on)) > 1:
                    device_rows += [{"size": size, "a": a, "b": b, "metric": m, **row}
                                    for row in split_by_device(seeds, diffs, on)]
    primary = [p for p in pair_rows if p["metric"] == "train" and not math.isnan(p["p"])]
    for p, adjusted in zip(primary, holm([p["p"] for p in primary])):
        p["p_holm"] = adjusted
    alpha_rows = [row for r in runs if r.done for row in _alpha_rows(r)]
    write_csv(out / "runs.csv", RUN_COLUMNS, run_rows)
    write_csv(out / "gaps.csv", GAP_COLUMNS, gap_rows)
    write_csv(out / "paired.csv", PAIR_COLUMNS, pair_rows)
    write_csv(out / "paired_by_device.csv", BY_DEVICE_COLUMNS, device_rows)
    write_csv(out / "alpha.csv", ALPHA_COLUMNS, alpha_rows)
    repeat_rows = repeats(runs)
    write_csv(out / "repeats.csv", REPEAT_COLUMNS, repeat_rows)
    summary = {"window": window, "window_steps": window_steps, "baseline": baseline, "delta": delta,
               "test_level": alpha, "planned_seeds": planned_seeds, "code_version": runs[0].code_version,
               "runs": run_rows, "gaps": gap_rows,
               "paired": pair_rows, "paired_by_device": device_rows, "alpha": alpha_rows, "repeats": repeat_rows,
               "notes": notes}
    if levels:
        summary["crossings"] = crossings.crossing_rows(runs, gap, levels, baseline_runs(runs, baseline))
        summary["timing"] = crossings.timing_rows(summary["crossings"])
        write_csv(out / "crossings.csv", crossings.CROSSING_COLUMNS, summary["crossings"])
        write_csv(out / "timing.csv", crossings.TIMING_COLUMNS, summary["timing"])
    write_json(out / "summary.json", summary)
    write_text(out / "summary.md", markdown(summary))
    if plots:
        from fp4lab.study import plots as plotting

        plotting.loss_curves(runs, out / "loss_curves.png", baseline)
        if pair_rows:
            plotting.paired_differences(pair_rows, device_rows, out / "paired.png")
        if levels:
            plotting.gap_vs_delay(summary["crossings"], summary["timing"], out / "timing.png")
        if len(params) > 1:  # a gap against size needs two sizes
            plotting.gap_vs_size(gap_rows, out / "gap_vs_size.png")
    return summary


def mean_ci(values: list[float]) -> tuple[float, float, int, float]:
    """(mean, SE, n, half-width of the 95% t-interval ``t(0.975, n - 1) * SE``; NaN below two values or SE 0)."""
    mean, se, n = mean_se(values)
    return mean, se, n, t_quantile(0.975, n - 1) * se if n >= 2 and se > 0 else math.nan


def seed_device(devices: dict[tuple[str, str, int], str], size: str, labels: list[str], seed: int) -> str:
    """The GPU that trained every run of ``labels`` at ``size`` and ``seed`` (``devices``: (size, label, seed) ->
    device), or ``mixed: <GPUs>`` when they differ ("?" for a run that names none)."""
    on = sorted({devices.get((size, name, seed)) or "?" for name in labels})
    return on[0] if len(on) == 1 else "mixed: " + " + ".join(on)


def split_by_device(seeds: list[int], diffs: list[float], on: list[str]) -> list[dict[str, Any]]:
    """Mean, SE and 95% CI of the paired differences ``diffs`` over the seeds of each device in ``on`` (one
    device per seed), in order of first appearance."""
    rows = []
    for device in dict.fromkeys(on):
        mine = [(s, d) for s, d, o in zip(seeds, diffs, on) if o == device]
        mean, se, n, half = mean_ci([d for _, d in mine])
        rows.append({"device": device, "n": n, "mean": mean, "se": se, "ci_low": mean - half,
                     "ci_high": mean + half, "seeds": " ".join(str(s) for s, _ in mine),
                     "diffs": " ".join(f"{d:.6g}" for _, d in mine)})
    return rows


def _num(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.3g}"


def _pm(mean: float, se: float) -> str:
    return f"{mean:+.3f}" + ("" if se is None or math.isnan(se) else f" ± {se:.3f}")


def markdown(summary: dict[str, Any]) -> str:
    """Tables of the gaps and the paired differences."""
    cap = f" (at most the final {summary['window_steps']} steps)" if summary.get("window_steps") else ""
    lines = [f"Relative loss gap to {summary['baseline']} (%), final {100 * summary['window']:g}% of evaluations"
             f"{cap}, mean ± SE over seeds.", "", "| size | recipe | n | train | held-out |", "|---|---|---|---|---|"]
    cell = {(g["size"], g["recipe"], g["metric"]): g for g in summary["gaps"]}
    for size, recipe in sorted({(g["size"], g["recipe"]) for g in summary["gaps"]},
                               key=lambda k: (cell[(k[0], k[1], "train")]["params"], k[1])):
        t, h = cell[(size, recipe, "train")], cell[(size, recipe, "heldout")]
        lines.append(f"| {size} | {recipe} | {t['n']} | {_pm(t['mean'], t['se'])} | "
                     f"{_pm(h['mean'], h['se'])} |")
    planned = summary.get("planned_seeds")
    lines += ["", "Paired differences per seed (percentage points): mean ± SE, 95% confidence interval, two-sided "
              "paired t-test p, p after Holm's correction over the training-loss rows, sd, the seeds a paired "
              f"t-test needs for 80% power at {summary.get('delta', 0.3):g} points, and the difference it detects "
              f"with 80% power with {planned or 'the n'} seeds, at level {summary.get('test_level', 0.05):g} and "
              "the measured sd; then the median over the seeds and the exact two-sided p of Wilcoxon's "
              "signed-rank test (a check that a few seeds far out cannot sway, no test).", "",
              "| size | A − B | metric | n | mean ± SE | 95% CI | p | p (Holm) | sd | seeds needed | detectable | "
              "median | signed-rank p | per seed |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in summary["paired"]:
        ci = f"[{p['ci_low']:+.3f}, {p['ci_high']:+.3f}]" if p["ci_low"] is not None and \
            math.isfinite(p["ci_low"]) else "-"
        lines.append(f"| {p['size']} | {p['a']} − {p['b']} | {p['metric']} | {p['n']} | {_pm(p['mean'], p['se'])} | "
                     f"{ci} | {_num(p['p'])} | {_num(p['p_holm'])} | {_num(p['sd'])} | "
                     f"{p['seeds_needed'] if p['seeds_needed'] is not None else '-'} | "
                     f"{_num(p.get('detectable'))} | {_pm(p['median'], None)} | {_num(p['p_signed_rank'])} | "
                     f"{p['diffs']} |")
    split = [p for p in summary.get("paired_by_device", []) if p["metric"] == "train"]
    if split:
        lines += ["", "The training-loss differences over the seeds of each GPU (a sensitivity check, no test): "
                  "mean ± SE and 95% confidence interval.", "",
                  "| size | A − B | device | n | mean ± SE | 95% CI | seeds |", "|---|---|---|---|---|---|---|"]
        for p in split:
            ci = f"[{p['ci_low']:+.3f}, {p['ci_high']:+.3f}]" if math.isfinite(p["ci_low"]) else "-"
            lines.append(f"| {p['size']} | {p['a']} − {p['b']} | {p['device']} | {p['n']} | "
                         f"{_pm(p['mean'], p['se'])} | {ci} | {p['seeds']} |")
    if summary["repeats"]:
        lines += ["", "Repeated runs (bit-identity check).", "", "| size | recipe | seed | rows | identical | "
                  "max abs diff |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['size']} | {r['recipe']} | {r['seed']} | {r['rows']} | {r['identical']} | "
                  f"{r['max_abs_diff']:.3g} |" for r in summary["repeats"]]
    if summary.get("timing"):
        lines += ["", "Loss-drop timing (exploratory, no test): per level, the runs' delay in reaching it against "
                  "their bf16 run (steps), and how much of the final training gap it explains: r², the slope "
                  "in points per 100 steps of delay, and the gap (%) the fitted line gives at no delay "
                  "(`fp4lab.study.crossings`).", "",
                  "| size | level | recipe | n | never reached | r² | slope | gap at no delay |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {t['size']} | {t['level']:g} | {t['recipe']} | {t['n']} | {t['never']} | {_num(t['r2'])} | "
                  f"{_num(t['slope'])} | {_num(t['intercept'])} |" for t in summary["timing"]]
    if summary["notes"]:
        lines += ["", "Left out:", ""] + [f"- {n}" for n in summary["notes"]]
    return "\n".join(lines) + "\n"
