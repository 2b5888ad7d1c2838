"""The paper's RHT diagnostics (§5.2, Appendix A, Fig. 12) on operands captured during training.

A capture folder (``<run>/captures/step_<step>/``, written by ``fp4lab.study.diagnostics``) holds, per linear
layer ``L``, ``L.x.npy`` (X: [M, K], tokens x in), ``L.w.npy`` (W: [N, K]) and ``L.dy.npy`` (dY: [M, N]), read
with fp4lab's checked loader (``fp4lab.analysis.tensors_io.load_tensor``: sizes and dtypes checked, no pickles).
For each format and each quantity, quantized with RTNE and 1-D blocks along the reduction dimension, without a
rotation (``I``) and with a 16-point random Hadamard transform (``H``, seed ``rht_seed``) along that dimension:

* tensors ``fwd_x`` (X along K), ``fwd_w`` (W along K) and ``bwd_dy`` (dY along N, as DGRAD blocks it):
  ``sqnr = 10 log10(||T||^2 / ||Q(T) - T||^2)`` in the quantizer's basis;
* GEMM outputs ``fwd_y = X W^T``, ``bwd_dx = dY W`` and ``bwd_dw = dY^T X``: both operands quantized along the
  GEMM's reduction dimension (both rotated with the same signs under ``H``), the float64 product against the
  float64 product of the captured float32 operands (``fp4lab.analysis.gemm.gemm_sqnr``);

and ``delta_sqnr_db = sqnr_H - sqnr_I = 10 log10(NMSE_I / NMSE_H)``: positive when the rotation helped. Layers
are grouped into the paper's families by the last part of their name (``FAMILIES``).
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

import fp4lab
from fp4lab.analysis import gemm, metrics
from fp4lab.analysis.tensors_io import load_tensor
from fp4lab.errors import InputError
from fp4lab.study.logs import write_text

TENSORS: dict[str, tuple[str, int]] = {"fwd_x": ("x", 1), "fwd_w": ("w", 1), "bwd_dy": ("dy", 1)}
GEMM_OUTPUTS: dict[str, str] = {"fwd_y": "fprop", "bwd_dx": "dgrad", "bwd_dw": "wgrad"}
QUANTITIES: tuple[str, ...] = tuple(TENSORS) + tuple(GEMM_OUTPUTS)
FAMILIES: dict[str, str] = {"qkv": "linear_qkv", "proj": "linear_proj", "gate_up": "linear_fc1",
                            "down": "linear_fc2"}
COLUMNS: tuple[str, ...] = ("layer", "family", "quantity", "format", "sqnr_i_db", "sqnr_h_db", "delta_sqnr_db")
_LAYER = re.compile(r"^(?P<layer>.+)\.(?P<operand>x|w|dy)\.npy$")


def family(layer: str) -> str:
    """The paper's family name of a layer (``blocks.3.mlp.down`` -> ``linear_fc2``); other names are kept."""
    last = layer.rsplit(".", 1)[-1]
    return FAMILIES.get(last, last)


def load_layers(folder: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """``{layer: {"x", "w", "dy": float32 array}}`` of a capture folder; layers missing an operand are skipped."""
    base = Path(folder)
    if not base.is_dir():
        raise InputError(f"captures: {base} is not a folder")
    found: dict[str, dict[str, Path]] = defaultdict(dict)
    for path in sorted(base.iterdir()):
        m = _LAYER.match(path.name)
        if m:
            found[m["layer"]][m["operand"]] = path
    layers = {name: {op: load_tensor(p) for op, p in ops.items()}  # checked loader: sizes, dtypes, no pickles
              for name, ops in found.items() if len(ops) == 3}
    if not layers:
        raise InputError(f"captures: {base} holds no complete layer (<layer>.x.npy, .w.npy and .dy.npy)")
    for name, t in layers.items():
        x, w, dy = t["x"], t["w"], t["dy"]
        if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1] or dy.shape != (x.shape[0], w.shape[0]):
            raise InputError(f"captures: {base}/{name}: shapes X {x.shape}, W {w.shape}, dY {dy.shape} do not form "
                             "X:[M,K], W:[N,K], dY:[M,N]")
    return layers


def layer_rows(layer: str, ops: dict[str, np.ndarray], formats: tuple[str, ...], rht: int = 16,
               rht_seed: int = 0) -> list[dict[str, Any]]:
    """One row (``COLUMNS``) per quantity and format of one layer's captured operands."""
    rows = []
    for name in formats:
        fmt = fp4lab.get_format(name)
        pairs = {q: tuple(metrics.evaluate(ops[op], fmt, rht=r, rht_seed=rht_seed, axis=axis)[0].sqnr_db
                          for r in (None, rht))
                 for q, (op, axis) in TENSORS.items()}
        for q, g in GEMM_OUTPUTS.items():
            pairs[q] = tuple(gemm.gemm_sqnr(ops["x"], ops["w"], ops["dy"], fmt, g, r, rht_seed)["sqnr_db"]
                             for r in (None, rht))
        for q in QUANTITIES:
            i, h = pairs[q]
            rows.append({"layer": layer, "family": family(layer), "quantity": q, "format": name,
                         "sqnr_i_db": i, "sqnr_h_db": h, "delta_sqnr_db": h - i})
    return rows


def rht_effects(folder: str | Path, formats: tuple[str, ...] = ("e2m1-b16-fp32", "ufp4"), rht: int = 16,
                rht_seed: int = 0) -> list[dict[str, Any]]:
    """``layer_rows`` of every complete layer of a capture folder, in name order."""
    for name in formats:
        fp4lab.get_format(name)  # unknown names fail before any work
    return [row for layer, ops in load_layers(folder).items() for row in layer_rows(layer, ops, formats, rht, rht_seed)]


def family_means(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], tuple[float, int]]:
    """``{(format, family, quantity): (mean delta_sqnr_db over layers, layers)}``."""
    acc: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in rows:
        acc[(r["format"], r["family"], r["quantity"])].append(float(r["delta_sqnr_db"]))
    return {k: (float(np.mean(v)), len(v)) for k, v in acc.items()}


def write(rows: list[dict[str, Any]], dest: str | Path, title: str = "", plot: bool = True,
          rht: int = 16) -> list[Path]:
    """``rht_effects.csv`` (every row), ``rht_effects.md`` (family means per format) and, with ``plot``,
    ``rht_effects.png`` (one heatmap per format, as the paper's Fig. 12) into ``dest``; returns the paths.
    ``rht``: the RHT size the rows were computed with (for the labels)."""
    out = Path(dest)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"captures: cannot write to {out}: {exc.strerror}") from None
    paths = [out / "rht_effects.csv", out / "rht_effects.md"]
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=COLUMNS)
    w.writeheader()
    w.writerows({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows)
    write_text(paths[0], text.getvalue())
    means = family_means(rows)
    formats = list(dict.fromkeys(r["format"] for r in rows))
    order = list(FAMILIES.values())
    families = sorted(dict.fromkeys(r["family"] for r in rows), key=lambda f: (order.index(f) if f in order
                                                                                 else len(order), f))
    lines = [f"# {title}" if title else "# RHT-induced SQNR change", "",
             f"Mean over layers of `delta_sqnr_db = SQNR(RHT-{rht}) - SQNR(no RHT)` in dB, RTNE, blocks along the "
             "reduction dimension (positive: the rotation helped).", ""]
    for name in formats:
        lines += [f"## {name}", "", "| family | layers | " + " | ".join(QUANTITIES) + " |",
                  "|---|---|" + "---|" * len(QUANTITIES)]
        for fam in families:
            cells = [means.get((name, fam, q)) for q in QUANTITIES]
            n = next((c[1] for c in cells if c), 0)
            lines.append(f"| {fam} | {n} | " + " | ".join(f"{c[0]:+.2f}" if c else "" for c in cells) + " |")
        lines.append("")
    write_text(paths[1], "\n".join(lines))
    if plot:
        from fp4lab.study.plots import rht_heatmap

        paths.append(out / "rht_effects.png")
        rht_heatmap(means, formats, families, QUANTITIES, paths[2], title, rht)
    return paths
