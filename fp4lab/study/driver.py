"""The study driver: a plan file lists (size, recipe, seed) runs; ``run_plan`` runs what is still missing.

Plan (TOML or JSON; ``fp4lab.study.defaults`` writes the default study)::

    out = "runs"                     # run folders <out>/<size>/<label>/seed<seed>
    corpus = "python-packages"       # optional, like any TrainConfig field in [train]
    [train]                          # TrainConfig fields of every run
    [sizes.<size>]                   # TrainConfig fields of one size; model = {d_model = ..., ...} for a
                                     # shape other than SIZES[<size>] (fields default to it)
    [[runs]]                         # groups: sizes x seeds x recipes, with optional train = {...} overrides
    sizes = ["small"]; recipes = ["bf16", "my.toml"]; seeds = [0, 1, 2]
    label = "bf16-order1"            # optional, one recipe only: the label instead of the recipe's name
    repeat = true                    # optional: a second copy of each run (folder seed<seed>-repeat, replica 1),
                                     # for the check that a deterministic run repeats bit for bit

Every value is checked before anything runs (types, ranges, finiteness: ``TrainConfig.check``); size labels,
recipe names and group labels must be safe labels (``runfolder.check_label``), so a run folder never leaves
``out``. Relative paths (``out``, recipe files, ``corpus``) are taken from the plan file's folder (``corpus =
"python-packages"`` names the interpreter's site-packages). Runs are ordered by group, then size, then seed, then
recipe, so that an interrupted study has whole paired seeds first. A run listed in several groups keeps its first
position and takes the settings of its last group. ``run_plan`` skips finished runs (and diverged ones, and those
listed as done in packed results, ``fp4lab.study.pack``), resumes partial ones from their checkpoints, starts
missing ones, and stops cleanly (checkpoint written) when ``max_minutes`` have passed; ``shard = (i, n)`` takes runs
i, i + n, i + 2n, ... of the ordered list, one process per GPU. Under torchrun (runs with ``parallel = "ddp"`` or
``"fsdp"``) every rank walks the same list and the ranks agree on the deadline, so each run is trained by all
ranks together.

A single-process run that fails (a CUDA out-of-memory error, say) does not stop the others: its error goes to
``<run>/failed.json`` (``FAILED``), its status reads "failed" until a later ``run_plan`` retries it (resuming from
its last checkpoint), and the driver moves on. A run whose loss stops being finite is "diverged" and is not
retried. Bad input (an ``Fp4labError``), an interrupt, and any failure under torchrun, where the ranks must stay
in step, still stop the study.
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
from fp4lab.study.config import MAX_SEED, TrainConfig
from fp4lab.study.data import PYTHON_PACKAGES, Corpus, load_corpus
from fp4lab.study.distributed import any_rank
from fp4lab.study.logs import write_json
from fp4lab.study.runfolder import check_label
from fp4lab.study.train import DivergedError, run_status, train

PLAN_KEYS = frozenset({"out", "train", "sizes", "runs"})
GROUP_KEYS = frozenset({"sizes", "recipes", "seeds", "train", "label", "repeat"})
FAILED = "failed.json"  # a run's last failure: error type, first message line, traceback, UTC time


@dataclass(frozen=True)
class Run:
    """One planned run: its labels and its full configuration (``recipe``: the group label or the recipe's name;
    ``repeat``: the second copy of a run, for the bit-identity check)."""

    size: str
    recipe: str
    seed: int
    cfg: TrainConfig
    repeat: bool = False

    @property
    def label(self) -> str:
        return f"{self.size}/{self.recipe}/seed{self.seed}" + ("-repeat" if self.repeat else "")


def read_table(path: str | Path, what: str) -> dict[str, Any]:
    """A TOML (or, by suffix, JSON) file's top-level table, or a one-line InputError naming ``what`` and the
    file (missing, not UTF-8, malformed, nested too deeply, not a table)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what}: {path} is not a file")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except UnicodeDecodeError:
        raise InputError(f"{what}: {path} is not UTF-8 text") from None
    except RecursionError:
        raise InputError(f"{what}: {path} is nested too deeply") from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{what}: {path}: {str(exc).splitlines()[0][:200]}") from None
    except OSError as exc:
        raise InputError(f"{what}: cannot read {path}: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise InputError(f"{what}: {path} holds a {type(data).__name__}; expected a table of keys")
    return data


def _resolve_recipe(recipe: str, base: Path) -> str:
    p = Path(recipe)
    if recipe in BUILTIN_RECIPES or p.is_absolute() or p.suffix.lower() not in (".toml", ".json"):
        return recipe
    return str((base / p).resolve())


def _config(fields: dict[str, Any], where: str) -> TrainConfig:
    try:
        cfg = TrainConfig.from_dict(fields)
        cfg.check()
    except (InputError, TypeError) as exc:
        raise InputError(f"plan: {where}: {exc}") from None
    return cfg


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"plan: {where} must be a table, not {type(value).__name__}")
    return value


def _list(value: Any, kind: type, where: str) -> list:
    if not isinstance(value, list) or not value or not all(
            isinstance(v, kind) and not isinstance(v, bool) for v in value):
        raise InputError(f"plan: {where} must be a non-empty list of {'strings' if kind is str else 'integers'}, "
                         f"not {ascii(value)[:60]}")
    return value


def _seeds(value: Any, where: str) -> list[int]:
    seeds = _list(value, int, where)
    bad = [s for s in seeds if not 0 <= s <= MAX_SEED]
    if bad:
        raise InputError(f"plan: {where}: seed {bad[0]} is outside 0..{MAX_SEED}")
    return seeds


def _recipe_name(recipe: str, base: Path, where: str) -> tuple[str, str]:
    """(resolved recipe, its name) of a plan's recipe entry."""
    rpath = _resolve_recipe(recipe, base)
    try:
        name = get_recipe(rpath).name
    except (Fp4labError, OSError, ValueError) as exc:  # a recipe file that is missing or malformed
        raise InputError(f"plan: {where}: {str(exc).splitlines()[0]}") from None
    return rpath, check_label(name, f"plan: {where}: recipe name")


def load_plan(path: str | Path, out: str | Path | None = None) -> list[Run]:
    """The ordered runs of a plan file (``out`` overrides the plan's ``out``); every value checked."""
    path = Path(path)
    plan = read_table(path, "plan")
    where = str(path)
    base = path.parent
    extra = set(plan) - PLAN_KEYS - {f for f in TrainConfig.__dataclass_fields__}
    if extra:
        raise InputError(f"plan: {where}: unknown key(s) {', '.join(sorted(map(str, extra)))[:200]}")
    plan_out = plan.get("out", "runs")
    if not isinstance(plan_out, str):
        raise InputError(f"plan: {where}: out must be a folder name, not {type(plan_out).__name__}")
    root = Path(out) if out is not None else base / plan_out
    common = {k: v for k, v in plan.items() if k not in PLAN_KEYS}
    common.update(_table(plan.get("train", {}), f"{where}: train"))
    corpus = common.get("corpus")
    if isinstance(corpus, str) and corpus != PYTHON_PACKAGES:
        common["corpus"] = str((base / corpus).resolve())
    sizes = _table(plan.get("sizes", {}), f"{where}: sizes")
    known = set(TrainConfig.__dataclass_fields__)
    for size, fields in sizes.items():
        check_label(size, f"plan: {where}: size")
        unknown = set(_table(fields, f"{where}: sizes.{size}")) - known
        if unknown:
            raise InputError(f"plan: {where}: sizes.{size}: unknown field(s) {', '.join(sorted(unknown))[:200]}")
    groups = plan.get("runs", [])
    if not isinstance(groups, list):
        raise InputError(f"plan: {where}: runs must be a list of [[runs]] tables")
    runs: dict[str, Run] = {}
    for g, group in enumerate(groups):
        at = f"{where}: runs[{g}]"
        group = _table(group, at)
        bad = set(group) - GROUP_KEYS
        if bad or not {"sizes", "recipes", "seeds"} <= set(group):
            raise InputError(f"plan: {at} needs sizes, recipes and seeds (and optional train, label, repeat); "
                             f"got {', '.join(sorted(map(str, group)))[:200]}")
        group_sizes = [check_label(s, f"plan: {at}: size") for s in _list(group["sizes"], str, f"{at}: sizes")]
        recipes = [_recipe_name(r, base, at) for r in _list(group["recipes"], str, f"{at}: recipes")]
        seeds = _seeds(group["seeds"], f"{at}: seeds")
        extra_fields = _table(group.get("train", {}), f"{at}: train")
        label = group.get("label")
        if label is not None:
            check_label(label, f"plan: {at}: label")
            if len(recipes) != 1:
                raise InputError(f"plan: {at}: a label names one recipe; the group has {len(recipes)}")
        repeat = group.get("repeat", False)
        if not isinstance(repeat, bool):
            raise InputError(f"plan: {at}: repeat must be true or false")
        for size in group_sizes:
            for seed in seeds:
                for rpath, name in recipes:
                    shown = label or name
                    folder = root / size / shown / (f"seed{seed}" + ("-repeat" if repeat else ""))
                    fields = {**common, **sizes.get(size, {}), **extra_fields, "size": size, "recipe": rpath,
                              "seed": seed, "out": str(folder), "label": label, "replica": int(repeat)}
                    run = Run(size, shown, seed, _config(fields, f"{at} {size}/{shown}/seed{seed}"), repeat)
                    key = str(folder)
                    runs[key] = run if key not in runs else replace(runs[key], cfg=run.cfg)
    if not runs:
        raise InputError(f"plan: {where}: no runs; add [[runs]] groups with sizes, recipes and seeds")
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
    return "failed" if status in ("partial", "missing") and Path(out, FAILED).is_file() else status


def _last_step(out: str | Path) -> int:
    from fp4lab.study.logs import read_csv

    rows = read_csv(Path(out, "metrics.csv"), drop_incomplete=True)
    return int(rows[-1]["step"]) if rows and isinstance(rows[-1].get("step"), int) else 0


def statuses(runs: list[Run], packed: dict[str, Any] | None = None) -> list[tuple[Run, str, int]]:
    """(run, "done" | "diverged" | "partial" | "missing" | "failed", logged steps) of each run; a run missing here
    but finished in ``packed`` (``pack.done_runs``) reads "done (packed)"."""
    out = []
    for r in runs:
        status = status_of(r.cfg.out)
        if status == "missing" and packed and r.label in packed:
            out.append((r, "done (packed)", r.cfg.steps))
        else:
            out.append((r, status, _last_step(r.cfg.out)))
    return out


def _record_failure(out: str | Path, exc: BaseException) -> Path:
    """Write ``FAILED`` for ``exc`` into the run folder; returns its path."""
    path = Path(out, FAILED)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = str(exc).strip().splitlines()
    write_json(path, {"error": type(exc).__name__, "message": text[0][:500] if text else "",
                      "traceback": "".join(traceback.format_exception(exc)),
                      "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
    return path


def _release_memory() -> None:
    """Free what a failed run left behind (its tensors die with the exception) before the next run starts."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_plan(runs: list[Run], max_minutes: float | None = None, progress: bool = True,
             say: Callable[[str], None] = print, skip: frozenset[str] = frozenset()) -> list[tuple[Run, str]]:
    """Run every unfinished run of ``runs`` in order until done or out of time; returns (run, status) after
    ("done", "diverged", "partial", "missing" or "failed"). Runs whose labels are in ``skip`` (finished in packed
    results) are left alone and read "done (packed)"."""
    deadline = None if max_minutes is None else time.monotonic() + 60.0 * max_minutes
    corpora: dict[tuple, Corpus] = {}
    result = []
    for k, run in enumerate(runs):
        status = status_of(run.cfg.out)
        if status == "missing" and run.label in skip:
            result.append((run, "done (packed)"))
            continue
        late = any_rank(deadline is not None and time.monotonic() >= deadline)  # the ranks of torchrun agree
        if status not in ("done", "diverged") and not late:
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
            except DivergedError as exc:
                say(f"[{k + 1}/{len(runs)}] {run.label}: diverged ({str(exc).splitlines()[0]})")
                status = "diverged"
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
