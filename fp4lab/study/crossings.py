"""When runs reach given loss levels, and how much of their final gap that timing explains (exploratory).

A small model's training loss can fall abruptly once in mid-run; a recipe that passes that drop later has a larger
final-window gap to bf16 even if it ends up as good per step after it. This diagnostic measures that:

* crossing step of a run at ``level`` (nats): the first logged step whose ``train_loss`` (the mean over its
  evaluation interval) is at most ``level``; None when the run never gets there;
* delay: a run's crossing step minus that of its paired baseline run (same size and seed; the pairing of
  ``fp4lab.study.summary.gaps``), in steps;
* per (size, level) over every paired run with both crossing steps, and per (size, recipe, level): ``n``, the runs
  left out because they or their baseline never reach the level (``never``), the squared Pearson correlation
  ``r2`` between delay and the run's final-window training gap (percent), the least-squares ``slope`` of the
  gap on the delay in points per 100 steps, and that line's ``intercept``: the gap it gives a run that passes the
  level with its baseline (percent). NaN where n < 3 or a variable is constant.

A level near the final losses makes the crossing step a restatement of the final loss, so levels are meant to lie
inside the drop, well above every run's final loss; the summary reports no test for them.
"""

from __future__ import annotations

import math
from typing import Any

from fp4lab.errors import InputError

CROSSING_COLUMNS = ("size", "recipe", "seed", "level", "step", "baseline_step", "delay", "gap_train")
TIMING_COLUMNS = ("size", "level", "recipe", "n", "never", "r2", "slope", "intercept")
ALL_RECIPES = "(all)"


def check_levels(levels: tuple[float, ...]) -> tuple[float, ...]:
    """The levels as floats, or InputError for one that is not a finite positive number."""
    out = []
    for v in levels:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise InputError(f"summarize: crossing level {v!r}; it must be a finite positive loss in nats")
        out.append(float(v))
    return tuple(out)


def crossing_step(steps: list[int], losses: list[float], level: float) -> int | None:
    """The first of ``steps`` whose loss is at most ``level``, or None."""
    return next((s for s, v in zip(steps, losses) if v <= level), None)


def crossing_rows(runs: list[Any], gap: dict, levels: tuple[float, ...], base: dict) -> list[dict[str, Any]]:
    """One row per (paired run, level): its crossing step, its baseline's, the delay and the run's training gap.
    ``runs`` are ``summary.RunLog``s, ``gap`` is ``summary.gaps``'s dictionary (its keys say which runs are paired)
    and ``base`` is ``summary.baseline_runs``'s (each run's baseline by size and seed)."""
    rows = []
    for r in runs:
        g = gap.get((r.size, r.recipe, r.seed, "train"))
        if g is None or r.replica:
            continue
        b = base[(r.size, r.seed)]
        for level in levels:
            s = crossing_step(r.steps(), r.loss("train"), level)
            sb = crossing_step(b.steps(), b.loss("train"), level)
            rows.append({"size": r.size, "recipe": r.recipe, "seed": r.seed, "level": level, "step": s,
                         "baseline_step": sb, "delay": None if s is None or sb is None else s - sb, "gap_train": g})
    return rows


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """(r², slope, intercept) of y on x by least squares; NaN for fewer than 3 points or a constant variable."""
    n = len(xs)
    if n < 3:
        return math.nan, math.nan, math.nan
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    if sxx == 0 or syy == 0:
        return math.nan, math.nan, math.nan
    return sxy * sxy / (sxx * syy), sxy / sxx, my - sxy / sxx * mx


def timing_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (size, level): the fit over all paired runs (recipe ``(all)``) and per recipe (module docstring)."""
    groups: dict[tuple[str, float, str], list[dict[str, Any]]] = {}
    for r in rows:
        for name in (ALL_RECIPES, r["recipe"]):
            groups.setdefault((r["size"], r["level"], name), []).append(r)
    out = []
    for (size, level, name), group in sorted(groups.items(), key=lambda kv: (kv[0][0], -kv[0][1],
                                                                             kv[0][2] != ALL_RECIPES, kv[0][2])):
        paired = [r for r in group if r["delay"] is not None]
        r2, slope, intercept = _fit([float(r["delay"]) for r in paired], [r["gap_train"] for r in paired])
        out.append({"size": size, "level": level, "recipe": name, "n": len(paired),
                    "never": len(group) - len(paired), "r2": r2, "slope": slope * 100,
                    "intercept": intercept})
    return out
