"""PNG plot of element grids: levels, RTNE bins and per-level shrinkage bias (matplotlib, Agg backend, lazy import).

One panel per distinct element grid (formats sharing a grid share a panel). In each panel, on the normalized
magnitude axis (grid units): alternating shaded RTNE bins, a tick at every level, bars of the locally-uniform bias
``(l_i - r_i)/2`` at each level (paper Eq. 2; the zero and top edge bins hatched); with a compare result, the panel title adds the measured mean
bias (grid units) per RHT size, averaged over the formats and inputs that use the grid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fp4lab.analysis.bias import level_bias
from fp4lab.analysis.outputs import write_atomic
from fp4lab.formats.registry import get_format


def plot_grids(formats: list[Any], path: str | Path, result: dict[str, Any] | None = None) -> Path:
    """Write the grid plot for ``formats`` (names or QuantFormats) to exactly ``path`` (PNG); returns the path.

    ``result``: an optional ``run_compare`` document; its mean ``bias`` per grid and RHT size is shown per panel.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grids: dict[tuple[float, ...], tuple[str, list[str]]] = {}
    for f in formats:
        fmt = get_format(f)
        key = tuple(level_bias(fmt).levels.tolist())
        grids.setdefault(key, (fmt.element.name or fmt.name, []))[1].append(fmt.name)
    fig, axes = plt.subplots(len(grids), 1, figsize=(9, 2.3 * len(grids)), squeeze=False)
    for ax, (key, (gname, users)) in zip(axes[:, 0], grids.items()):
        lb = level_bias(np.array(key))
        q = lb.levels
        edges = np.concatenate([[0.0], (q[:-1] + q[1:]) / 2.0, [q[-1]]])
        for i in range(q.size):
            ax.axvspan(edges[i], edges[i + 1], color="C0" if i % 2 else "C1", alpha=0.12, lw=0)
        ax.vlines(q, -1, 1, color="0.3", lw=0.8, transform=ax.get_xaxis_transform(), zorder=1)
        colors = np.where(lb.bias < 0, "C3", np.where(lb.bias > 0, "C2", "0.5"))
        width = 0.35 * float(np.min(np.diff(q)))
        ax.bar(q[lb.interior], lb.bias[lb.interior], width=width, color=colors[lb.interior], zorder=2)
        edge = ~lb.interior
        ax.bar(q[edge], lb.bias[edge], width=width, color=colors[edge], alpha=0.35, hatch="//", zorder=2)
        ax.axhline(0.0, color="k", lw=0.6)
        span = max(float(np.max(np.abs(lb.bias))), 1e-3) * 1.3
        ax.set_ylim(-span, span)
        ax.set_xlim(-0.02 * q[-1], q[-1] * 1.02)
        title = f"{gname}  (formats: {', '.join(users)})"
        if result is not None:
            parts = []
            for r in result["config"]["rht"]:
                vals = [rec["bias"] for rec in result["results"]
                        if rec["format"] in users and rec["rht"] == r and rec["bias"] is not None]
                if vals:
                    parts.append(f"rht {r}: mean measured bias {np.mean(vals):+.4f}")
            title += ("\n" + "; ".join(parts)) if parts else ""
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("(l - r)/2")
        ax.set_xticks(q)
        ax.set_xticklabels([f"{v:g}" for v in q], fontsize=7)
    axes[-1, 0].set_xlabel("normalized magnitude t = |x| / s (grid units); shaded: RTNE bins")
    fig.tight_layout()
    out = Path(path)
    try:  # exactly ``path``, as PNG whatever its suffix, through a temporary name (never a half-written file)
        write_atomic(out, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    finally:
        plt.close(fig)
    return out
