"""The study driver: a plan file lists (size, recipe, seed) runs; ``run_plan`` runs what is still missing.

Plan (TOML or JSON; ``fp4lab.study.defaults.PLAN`` is the default study)::

    out = "runs"                     # run folders <out>/<size>/<recipe name>/seed<seed>
    corpus = "/some/dir"             # optional, like any TrainConfig field in [train]
    [train]                          # TrainConfig fields of every run
    [sizes.<size>]                   # TrainConfig fields of one size; model = {d_model = ..., ...} for a
                                     # shape other than SIZES[<size>] (fields default to it)
    [[runs]]                         # groups: sizes x seeds x recipes, with optional train = {...} overrides
    sizes = ["small"]; recipes = ["bf16", "my.toml"]; seeds = [0, 1, 2]

Relative paths (``out``, recipe files, ``corpus``) are taken from the plan file's folder. Runs are ordered by
group, then size, then seed, then recipe, so that an interrupted study has whole paired seeds first. A run listed
in several groups keeps its first position and takes the settings of its last group. ``run_plan`` skips finished
runs, resumes partial ones from their checkpoints, starts missing ones, and stops cleanly (checkpoint written)
when ``max_minutes`` have passed; ``shard = (i, n)`` takes runs i, i + n, i + 2n, ... of the ordered list, one
process per GPU. Under torchrun (runs with ``parallel = "ddp"`` or ``"fsdp"``) every rank walks the same list and
the ranks agree on the deadline, so each run is trained by all ranks together.

A single-process run that fails (a CUDA out-of-memory error, say) does not stop the others: its error goes to
``<run>/failed.json`` (``FAILED``), its status reads "failed" until a later ``run_plan`` retries it (resuming from
its last checkpoint), and the driver moves on. Bad input (an ``Fp4labError``), an interrupt, and any failure under
torchrun, where the ranks must stay in step, still stop the study.
"""

from __future__ import annotations

import datetime
import gc
import json
import time
import tomllib
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch

from fp4lab.errors import Fp4labError, InputError
from fp4lab.recipes import BUILTIN_RECIPES, get_recipe
from fp4lab.study.data import Corpus, load_corpus
from fp4lab.study.distributed import any_rank
from fp4lab.study.train import TrainConfig, run_status, train

PLAN_KEYS = frozenset({"out", "train", "sizes", "runs"})
GROUP_KEYS = frozenset({"sizes", "recipes", "seeds", "train"})
FAILED = "failed.json"  # a run's last failure: error type, first message line, traceback, UTC time


@dataclass(frozen=True)
class Run:
    """One planned run: its labels and its full configuration."""

    size: str
    recipe: str
    seed: int
    cfg: TrainConfig

    @property
    def label(self) -> str:
        return f"{self.size}/{self.recipe}/seed{self.seed}"


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"plan: {path} is not a file")
    try:
        if path.suffix.lower() == ".json":
            return json.loads(path.read_text())
        return tomllib.loads(path.read_text())
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"plan: {path}: {str(exc).splitlines()[0]}") from None


def _resolve_recipe(recipe: str, base: Path) -> str:
    p = Path(recipe)
    if recipe in BUILTIN_RECIPES or p.is_absolute() or p.suffix.lower() not in (".toml", ".json"):
        return recipe
    return str(base / p)


def _config(fields: dict[str, Any], where: str) -> TrainConfig:
    try:
        return TrainConfig.from_dict(fields)
    except (InputError, TypeError) as exc:
        raise InputError(f"plan: {where}: {exc}") from None


def load_plan(path: str | Path, out: str | Path | None = None) -> list[Run]:
    """The ordered runs of a plan file (``out`` overrides the plan's ``out``)."""
    path = Path(path)
    plan = _read(path)
    base = path.parent
    extra = set(plan) - PLAN_KEYS - {f for f in TrainConfig.__dataclass_fields__}
    if extra:
        raise InputError(f"plan: {path}: unknown key(s) {', '.join(sorted(extra))}")
    root = Path(out) if out is not None else base / plan.get("out", "runs")
    common = {k: v for k, v in plan.items() if k not in PLAN_KEYS}
    common.update(plan.get("train", {}))
    if "corpus" in common and common["corpus"] is not None:
        common["corpus"] = str(base / common["corpus"])
    sizes = plan.get("sizes", {})
    runs: dict[str, Run] = {}
    for g, group in enumerate(plan.get("runs", [])):
        bad = set(group) - GROUP_KEYS
        if bad or not {"sizes", "recipes", "seeds"} <= set(group):
            raise InputError(f"plan: {path}: runs[{g}] needs sizes, recipes and seeds (and optional train); "
                             f"got {', '.join(sorted(group))}")
        for size in group["sizes"]:
            for seed in group["seeds"]:
                for recipe in group["recipes"]:
                    rpath = _resolve_recipe(str(recipe), base)
                    try:
                        name = get_recipe(rpath).name
                    except Exception as exc:  # a recipe file that is missing or malformed
                        raise InputError(f"plan: {path}: runs[{g}]: {str(exc).splitlines()[0]}") from None
                    folder = root / size / name / f"seed{seed}"
                    fields = {**common, **sizes.get(size, {}), **group.get("train", {}),
                              "size": size, "recipe": rpath, "seed": int(seed), "out": str(folder)}
                    run = Run(size, name, int(seed), _config(fields, f"runs[{g}] {size}/{name}/seed{seed}"))
                    runs[str(folder)] = run if str(folder) not in runs else replace(runs[str(folder)], cfg=run.cfg)
    if not runs:
        raise InputError(f"plan: {path}: no runs; add [[runs]] groups with sizes, recipes and seeds")
    return list(runs.values())


def select(runs: list[Run], sizes: list[str] | None = None, recipes: list[str] | None = None,
           seeds: list[int] | None = None, shard: tuple[int, int] = (0, 1)) -> list[Run]:
    """The runs with the given labels (None: all), then shard ``(i, n)`` of the ordered list."""
    i, n = shard
    if not 0 <= i < n:
        raise InputError(f"study: shard {i}/{n}; need 0 <= I < N")
    picked = [r for r in runs if (sizes is None or r.size in sizes) and (recipes is None or r.recipe in recipes)
              and (seeds is None or r.seed in seeds)]
    return picked[i::n]


def status_of(out: str | Path) -> str:
    """``train.run_status``, or "failed" while the run's last attempt failed (``FAILED``) and it is not done."""
    status = run_status(out)
    return "failed" if status != "done" and Path(out, FAILED).is_file() else status


def statuses(runs: list[Run]) -> list[tuple[Run, str, int]]:
    """(run, "done" | "partial" | "missing" | "failed", logged steps) of each run."""
    out = []
    for r in runs:
        path = Path(r.cfg.out, "metrics.json")
        rows = json.loads(path.read_text())["rows"] if path.is_file() else []
        out.append((r, status_of(r.cfg.out), int(rows[-1]["step"]) if rows else 0))
    return out


def _record_failure(out: str | Path, exc: BaseException) -> Path:
    """Write ``FAILED`` for ``exc`` into the run folder; returns its path."""
    path = Path(out, FAILED)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = str(exc).strip().splitlines()
    path.write_text(json.dumps({"error": type(exc).__name__, "message": text[0][:500] if text else "",
                                "traceback": "".join(traceback.format_exception(exc)),
                                "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")},
                               indent=1) + "\n")
    return path


def _release_memory() -> None:
    """Free what a failed run left behind (its tensors die with the exception) before the next run starts."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_plan(runs: list[Run], max_minutes: float | None = None, progress: bool = True,
             say: Callable[[str], None] = print) -> list[tuple[Run, str]]:
    """Run every unfinished run of ``runs`` in order until done or out of time; returns (run, status) after
    ("done", "partial", "missing" or "failed")."""
    deadline = None if max_minutes is None else time.monotonic() + 60.0 * max_minutes
    corpora: dict[tuple, Corpus] = {}
    result = []
    for k, run in enumerate(runs):
        status = status_of(run.cfg.out)
        late = any_rank(deadline is not None and time.monotonic() >= deadline)  # the ranks of torchrun agree
        if status != "done" and not late:
            key = (run.cfg.corpus, run.cfg.corpus_glob, run.cfg.heldout_every)
            if key not in corpora:
                corpora[key] = load_corpus(*key)
            cfg = replace(run.cfg, progress=progress)
            resume = run_status(run.cfg.out) == "partial"
            say(f"[{k + 1}/{len(runs)}] {run.label}: {'resume' if resume else 'start'}")
            Path(run.cfg.out, FAILED).unlink(missing_ok=True)
            try:
                status = train(cfg, deadline=deadline, corpus=corpora[key]).status
                status = "done" if status == "done" else "partial"
            except (Fp4labError, KeyboardInterrupt):
                raise
            except Exception as exc:
                if run.cfg.parallel != "none":
                    raise
                path = _record_failure(run.cfg.out, exc)
                say(f"[{k + 1}/{len(runs)}] {run.label}: failed ({type(exc).__name__}); details in {path}")
                status = "failed"
            if status == "failed":
                _release_memory()
        result.append((run, status))
    return result
