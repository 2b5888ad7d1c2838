"""PNG plots of a study (matplotlib, Agg backend): loss curves per size, the paired differences per seed, the final
gap against the delay of the loss drop, and the final gap against model size."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.study import crossings
from fp4lab.study.logs import write_with


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise InputError("plots: matplotlib is not installed; pip install matplotlib, or summarize without plots") \
            from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, **kw: Any) -> None:
    """``fig`` as a PNG at ``path``, written atomically (``fp4lab.study.logs``)."""
    write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120, **kw))


def _colors(plt: Any, recipes: set[str]) -> dict[str, Any]:
    """One colour per recipe name (sorted order, matplotlib's tab10 then tab20), the same in every panel."""
    names = sorted(recipes)
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}


def loss_curves(runs: list, path: Path, baseline: str = "bf16") -> None:
    """Per size (columns): held-out loss against tokens (top) and its relative gap to the baseline in % (bottom),
    each curve the mean over the finished seeds of a recipe (repeats left out)."""
    plt = _pyplot()
    done = [r for r in runs if r.done and r.rows and not r.replica]
    sizes = sorted({r.size for r in done}, key=lambda s: next(r.params for r in done if r.size == s))
    if not sizes:
        return
    color = _colors(plt, {r.recipe for r in done})
    fig, axes = plt.subplots(2, len(sizes), figsize=(5 * len(sizes), 7), squeeze=False)
    for col, size in enumerate(sizes):
        curves: dict[str, list] = defaultdict(list)
        for r in done:
            if r.size == size:
                curves[r.recipe].append(r)
        base = {r.seed: r for r in curves.get(baseline, [])}
        for recipe, rs in sorted(curves.items()):
            n = min(len(r.rows) for r in rs)
            tokens = [r0["tokens"] for r0 in rs[0].rows[:n]]
            mean = [sum(r.loss("heldout")[i] for r in rs) / len(rs) for i in range(n)]
            axes[0, col].plot(tokens, mean, label=f"{recipe} ({len(rs)})", color=color[recipe])
            paired = [r for r in rs if r.seed in base and len(base[r.seed].rows) >= n]
            if recipe != baseline and paired:
                gap = [100 * sum(r.loss("heldout")[i] / base[r.seed].loss("heldout")[i] - 1 for r in paired)
                       / len(paired) for i in range(n)]
                axes[1, col].plot(tokens, gap, label=recipe, color=color[recipe])
        axes[0, col].set(title=f"{size}", xlabel="tokens", ylabel="held-out loss (nats/byte)")
        axes[1, col].set(xlabel="tokens", ylabel=f"held-out gap to {baseline} (%)")
        axes[1, col].axhline(0, color="gray", lw=0.5)
        axes[0, col].legend(fontsize=7)
        axes[1, col].legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def paired_differences(pair_rows: list[dict[str, Any]], device_rows: list[dict[str, Any]], path: Path) -> None:
    """One row per (size, pair) of the training loss: each seed's difference in points (a dot, coloured by the GPU
    that trained the seed where ``device_rows`` splits the pair), the mean with its 95% CI (black bar) and the
    median (open diamond)."""
    rows = [p for p in pair_rows if p["metric"] == "train" and p["diffs"]]
    if not rows:
        return
    plt = _pyplot()
    split = {(d["size"], d["a"], d["b"], s): d["device"] for d in device_rows if d["metric"] == "train"
             for s in str(d["seeds"]).split()}
    color = _colors(plt, set(split.values()) or {"all seeds"})
    fig, ax = plt.subplots(figsize=(9, 0.8 * len(rows) + 1.4))
    shown: set[str] = set()
    jitter = np.random.default_rng(0)  # the same picture for the same rows
    for y, p in enumerate(reversed(rows)):
        by: dict[str, list[float]] = defaultdict(list)
        for seed, d in zip(str(p["seeds"]).split(), str(p["diffs"]).split()):
            by[split.get((p["size"], p["a"], p["b"], seed), "all seeds")].append(float(d))
        for on, ds in by.items():
            ax.plot(ds, y + jitter.uniform(-0.18, 0.18, len(ds)), "o", ms=3.5, alpha=0.7, color=color[on],
                    label=None if on in shown else on)
            shown.add(on)
        if math.isfinite(p["ci_low"]):
            ax.plot([p["ci_low"], p["ci_high"]], [y, y], color="black", lw=2)
        ax.plot(p["mean"], y, "|", ms=14, mew=2, color="black")
        ax.plot(p["median"], y, "D", ms=6, mfc="none", color="black")
    ax.set_yticks(range(len(rows)), [f"{p['a']}\n− {p['b']}\n({p['size']}, {p['n']} seeds)" for p in reversed(rows)],
                  fontsize=7)
    ax.axvline(0, color="gray", lw=0.5)
    ax.set(xlabel="difference of the final training-loss gaps (points)",
           title="per seed (dots), mean and 95% CI (bar), median (diamond)")
    ax.legend(fontsize=7, loc="best")
    _save(fig, path, bbox_inches="tight")
    plt.close(fig)


def gap_vs_delay(crossing_rows: list[dict[str, Any]], timing_rows: list[dict[str, Any]], path: Path) -> None:
    """One panel per (size, level) of ``fp4lab.study.crossings``: each paired run's final training gap (%) against
    its delay in reaching the level (steps after its bf16 run), coloured by recipe, with the least-squares line and
    r² over all of them."""
    keys = sorted({(r["size"], r["level"]) for r in crossing_rows}, key=lambda k: (k[0], -k[1]))
    if not keys:
        return
    plt = _pyplot()
    color = _colors(plt, {r["recipe"] for r in crossing_rows})
    fit = {(t["size"], t["level"]): t for t in timing_rows if t["recipe"] == crossings.ALL_RECIPES}
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4.2), squeeze=False)
    for ax, (size, level) in zip(axes[0], keys):
        rows = [r for r in crossing_rows if (r["size"], r["level"]) == (size, level) and r["delay"] is not None]
        for recipe in sorted({r["recipe"] for r in rows}):
            mine = [r for r in rows if r["recipe"] == recipe]
            ax.plot([r["delay"] for r in mine], [r["gap_train"] for r in mine], "o", ms=3.5, alpha=0.75,
                    color=color[recipe], label=recipe)
        t = fit.get((size, level))
        title = f"{size}: loss {level:g} nats"
        if t is not None and math.isfinite(t["r2"]) and rows:
            lo, hi = min(r["delay"] for r in rows), max(r["delay"] for r in rows)
            ax.plot([lo, hi], [t["intercept"] + t["slope"] / 100 * x for x in (lo, hi)], color="black", lw=1)
            title += f", r² {t['r2']:.2f} over {t['n']} runs"
        ax.axhline(0, color="gray", lw=0.5)
        ax.axvline(0, color="gray", lw=0.5)
        ax.set(title=title, xlabel="delay in reaching the level (steps after the bf16 run)",
               ylabel="final training-loss gap to bf16 (%)")
        if rows:
            ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def gap_vs_size(gap_rows: list[dict[str, Any]], path: Path) -> None:
    """Final-window gap (mean ± SE over seeds) against parameter count, train and held-out panels."""
    plt = _pyplot()
    if not gap_rows:
        return
    color = _colors(plt, {g["recipe"] for g in gap_rows})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), squeeze=False)
    for ax, metric in zip(axes[0], ("train", "heldout")):
        by: dict[str, list] = defaultdict(list)
        for g in gap_rows:
            if g["metric"] == metric:
                by[g["recipe"]].append(g)
        for recipe, rows in sorted(by.items()):
            rows.sort(key=lambda g: g["params"])
            se = [0.0 if g["se"] != g["se"] else g["se"] for g in rows]  # NaN (one seed): no bar
            ax.errorbar([g["params"] for g in rows], [g["mean"] for g in rows], yerr=se, marker="o", capsize=3,
                        label=recipe, color=color[recipe])
        title = "held-out loss" if metric == "heldout" else "train loss"
        ax.set(xscale="log", xlabel="parameters", ylabel="relative loss gap to bf16 (%)", title=title)
        ax.axhline(0, color="gray", lw=0.5)
        ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def rht_heatmap(means: dict[tuple[str, str, str], tuple[float, int]], formats: list[str], families: list[str],
                quantities: tuple[str, ...], path: Path, title: str = "", rht: int = 16) -> None:
    """One panel per format: mean RHT-induced SQNR change (dB) per layer family (rows) and tensor or GEMM output
    (columns) on one symmetric colour scale, each cell annotated; red = the rotation hurt, blue = it helped."""
    plt = _pyplot()
    grids = [np.array([[means.get((f, fam, q), (np.nan, 0))[0] for q in quantities] for fam in families])
             for f in formats]
    lim = max(float(np.nanmax(np.abs(g))) for g in grids) or 1.0
    fig, axes = plt.subplots(1, len(formats), figsize=(4.2 * len(formats) + 1, 0.5 * len(families) + 1.8),
                             squeeze=False)
    for ax, name, g in zip(axes[0], formats, grids):
        im = ax.imshow(g, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xticks(range(len(quantities)), quantities, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(families)), families if ax is axes[0][0] else [], fontsize=8)
        for (i, j), v in np.ndenumerate(g):
            if v == v:
                ax.text(j, i, f"{v:+.2f}", ha="center", va="center", fontsize=7)
        ax.set_title(name, fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), label=f"ΔSQNR, RHT-{rht} vs none (dB)")
    if title:
        fig.suptitle(title, fontsize=9)
    _save(fig, path, bbox_inches="tight")
    plt.close(fig)
