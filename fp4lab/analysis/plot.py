"""PNG plot of element grids: levels, RTNE bins and per-level shrinkage bias (matplotlib, Agg backend, lazy import).

One panel per distinct element grid (formats sharing a grid share a panel). In each panel, on the normalized
magnitude axis (grid units): alternating shaded RTNE bins, a tick at every level, bars of the locally-uniform bias
``(l_i - r_i)/2`` at each level (paper Eq. 2; the zero and top edge bins hatched) divided by the grid's top level
``g_max``, in percent: the unit of a block amax that maps onto ``g_max``, so every panel shares one y-scale and
bars compare across grids. With a compare result, one dashed line per RHT size at the measured mean
``bias_amax`` (percent of the block amax), averaged over the formats and inputs that use the grid, whether the
formats were given by name or as spec files. A legend under the panels names every mark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fp4lab.analysis.bias import level_bias
from fp4lab.analysis.outputs import write_atomic
from fp4lab.formats.registry import get_format


def _measured(result: dict[str, Any] | None, given: list[str]) -> dict[int, float]:
    """``{rht: mean bias_amax in percent}`` over the records of the formats ``given`` (as listed in ``result``'s
    config)."""
    if result is None:
        return {}
    out = {}
    for r in result["config"]["rht"]:
        vals = [rec["bias_amax"] for rec in result["results"]
                if rec["format"] in given and rec["rht"] == r and rec.get("bias_amax") is not None]
        if vals:
            out[r] = 100.0 * float(np.mean(vals))
    return out


TITLE_WIDTH = 100  # characters per title line: fits the 9-inch panel at 9 pt


def _panel_title(grid: str, users: list[str], measured: dict[int, float]) -> str:
    """The panel's title: the grid and the formats that use it, then the measured bias per RHT size, wrapped to
    ``TITLE_WIDTH`` characters a line (names and numbers never split)."""
    import textwrap

    head = textwrap.wrap(f"{grid}  (formats: {', '.join(users)})", TITLE_WIDTH, break_long_words=False,
                         break_on_hyphens=False)
    if measured:
        parts = ", ".join(f"{'no RHT' if r == 0 else f'RHT {r}'} {v:+.4f}%".replace(" ", "\u00a0")  # one unit
                          for r, v in measured.items())
        head += textwrap.wrap(f"measured bias / block amax: {parts}", TITLE_WIDTH, break_long_words=False,
                              break_on_hyphens=False)
    return "\n".join(head)


def _lowered(q: np.ndarray) -> list[bool]:
    """Which level labels go one row down: where neighbours lie closer than ``CROWDED`` of the axis (e.g. 0,
    0.125, 0.25 under a top level of 8), every second label of such a run, so that no two labels overlap."""
    span = float(q[-1] - q[0]) or 1.0
    out = [False]
    for i in range(1, len(q)):
        out.append((not out[-1]) and (q[i] - q[i - 1]) / span < CROWDED)
    return out


CROWDED = 0.06  # fraction of the axis width below which two neighbouring level labels (7 pt, up to 5 chars) touch


def plot_grids(formats: list[Any], path: str | Path, result: dict[str, Any] | None = None) -> Path:
    """Write the grid plot for ``formats`` (names, spec-file paths or QuantFormats) to exactly ``path`` (PNG);
    returns the path.

    ``result``: an optional ``run_compare`` document whose ``config.formats`` lists ``formats`` as given; its mean
    ``bias`` per grid and RHT size is drawn in each panel.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    grids: dict[tuple[float, ...], tuple[str, list[str], list[str]]] = {}  # levels -> (grid, names, as given)
    for f in formats:
        fmt = get_format(f)
        key = tuple(level_bias(fmt).levels.tolist())
        entry = grids.setdefault(key, (fmt.element.label, [], []))
        entry[1].append(fmt.name)
        entry[2].append(f if isinstance(f, str) else str(f) if isinstance(f, Path) else fmt.name)
    panels = [(key, gname, users, _measured(result, given)) for key, (gname, users, given) in grids.items()]
    rhts = list(result["config"]["rht"]) if result is not None else []
    span = max([1e-3] + [100.0 * float(np.max(np.abs(level_bias(np.array(k)).bias))) / k[-1] for k, *_ in panels]
               + [abs(v) for *_, m in panels for v in m.values()]) * 1.3
    height = 2.3 * len(panels) + 0.7
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, height), squeeze=False, sharey=True)
    for ax, (key, gname, users, measured) in zip(axes[:, 0], panels):
        lb = level_bias(np.array(key))
        q = lb.levels
        pct = 100.0 * lb.bias / q[-1]
        edges = np.concatenate([[0.0], (q[:-1] + q[1:]) / 2.0, [q[-1]]])
        for i in range(q.size):
            ax.axvspan(edges[i], edges[i + 1], color="C0" if i % 2 else "C1", alpha=0.12, lw=0)
        ax.vlines(q, -1, 1, color="0.3", lw=0.8, transform=ax.get_xaxis_transform(), zorder=1)
        colors = np.where(lb.bias < 0, "C3", np.where(lb.bias > 0, "C2", "0.5"))
        width = 0.35 * float(np.min(np.diff(q)))
        ax.bar(q[lb.interior], pct[lb.interior], width=width, color=colors[lb.interior], zorder=2)
        edge = ~lb.interior
        ax.bar(q[edge], pct[edge], width=width, color=colors[edge], alpha=0.35, hatch="//", zorder=2)
        ax.axhline(0.0, color="k", lw=0.6)
        for j, r in enumerate(rhts):
            if r in measured:
                ax.axhline(measured[r], color=f"C{4 + j}", lw=1.2, ls="--", zorder=3)
        ax.set_ylim(-span, span)
        ax.set_xlim(-0.02 * q[-1], q[-1] * 1.02)
        ax.set_title(_panel_title(gname, users, measured), fontsize=9)
        ax.set_ylabel("bias, % of top level", fontsize=8)
        ax.set_xticks(q)
        ax.set_xticklabels([f"{v:g}" for v in q], fontsize=7)
        for tick, low in zip(ax.xaxis.get_major_ticks(), _lowered(q)):
            if low:  # one label row lower than its crowded neighbours
                tick.set_pad(tick.get_pad() + 9)
    axes[-1, 0].set_xlabel("normalized magnitude t = |x| / s (grid units)")
    handles = [Patch(color="C1", alpha=0.25, label="RTNE bins (alternating shade)"),
               Patch(color="C3", label="level bias (l - r)/2 / g_max < 0 (shrinks)"),
               Patch(color="C2", label="level bias (l - r)/2 / g_max > 0 (grows)"),
               Patch(facecolor="C3", alpha=0.35, hatch="//", label="edge bin (zero, top level)")]
    handles += [Line2D([], [], color=f"C{4 + j}", lw=1.2, ls="--",
                       label=f"measured bias / block amax, {'no RHT' if r == 0 else f'RHT {r}'}")
                for j, r in enumerate(rhts)]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.6 / height, 1, 1))
    out = Path(path)
    try:  # exactly ``path``, as PNG whatever its suffix, through a temporary name (never a half-written file)
        write_atomic(out, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    finally:
        plt.close(fig)
    return out
