"""Training-time diagnostics of the QuantLinear layers (paper §5-6): attenuation per layer and operand, and
captured operand tensors.

At a diagnostic step, hooks on every ``QuantLinear`` see the layer's high-precision operands as the layer sees
them (X: its input flattened to [M, K]; W: [N, K]; dY: the gradient of its output, [M, N]) and fake-quantize each
one for every GEMM that uses it exactly as the layer does (``layer.operands``: same format, rounding, RHT
signs and stochastic-rounding stream of that step; folded tensor scales multiplied back):

    x: fprop (along K), wgrad (along M);  w: fprop (along K), dgrad (along N);  dy: dgrad (along N), wgrad (along M)

Each row holds ``alpha = <q, r> / ||r||^2`` (``fp4lab.analysis.metrics.alpha``, paper Eq. 3) and ``sqnr_db`` of
the operand ``q`` against the reference ``r`` in the same basis (the input rotated by the GEMM's RHT when the
recipe rotates that GEMM). The hooks change no state of the training step: SR streams are the step's own (the
step a layer's backward advances after its hooks have run). Captures write X, W and dY of the layers matching
``capture_layers`` (fnmatch patterns of qualified names) as float32 ``.npy`` files ``<dir>/<layer>.<operand>.npy``
for ``fp4lab compare`` (X and dY: their first ``capture_rows`` token rows, all rows when 0; W whole).
"""

from __future__ import annotations

import fnmatch
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

import fp4lab
from fp4lab.analysis import metrics
from fp4lab.recipes.linear import QuantLinear
from fp4lab.study.logs import write_with

USES: dict[str, tuple[tuple[str, str], ...]] = {
    "x": (("fprop", "k"), ("wgrad", "m")),
    "w": (("fprop", "k"), ("dgrad", "m")),
    "dy": (("dgrad", "k"), ("wgrad", "m")),
}
ALPHA_COLUMNS: tuple[str, ...] = ("step", "layer", "operand", "gemm", "alpha", "sqnr_db")


def quant_layers(model: torch.nn.Module) -> list[tuple[str, QuantLinear]]:
    """(qualified name, layer) of every QuantLinear of ``model``, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, QuantLinear)]


def operand_alpha(layer: QuantLinear, t: torch.Tensor, operand: str, gemm: str, along: str,
                  step: int) -> tuple[float, float]:
    """(alpha, sqnr_db) of ``operand`` (2-D ``t``) of ``gemm``, blocked ``along`` "k" (last axis) or "m" (axis 0),
    fake-quantized as the layer does at ``step``."""
    if along == "k":
        q, _, ts, _ = layer.operands(t, operand, gemm, None, step=step)
    else:
        _, q, _, ts = layer.operands(t, operand, None, gemm, step=step)
    q = q.float() if ts is None else q.float() * ts
    ref = t.detach().float()
    r = layer.recipe
    if r.format_of(operand) is not None and gemm in r.rht:
        ref = fp4lab.rht(ref, size=r.rht_size, seed=layer.rht_seed, axis=-1 if along == "k" else 0)
    return metrics.alpha_sqnr_db(ref, q)  # float64 sums on the tensors' device


def _save(directory: Path, name: str, operand: str, t: torch.Tensor) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    array = t.detach().float().cpu().numpy()

    def dump(tmp: Path) -> None:
        with tmp.open("wb") as f:
            np.save(f, array)

    write_with(directory / f"{name}.{operand}.npy", dump)


@contextmanager
def watch(model: torch.nn.Module, step: int, alpha: bool, capture_dir: Path | None,
          capture_layers: tuple[str, ...] = ("*",), capture_rows: int = 0) -> Iterator[list[dict[str, Any]]]:
    """Hooks for one training step (forward and backward inside the block): yields the list that collects the
    alpha rows (``ALPHA_COLUMNS``) when ``alpha``; writes captures into ``capture_dir`` unless it is None."""
    rows: list[dict[str, Any]] = []
    handles = []
    if not alpha and capture_dir is None:
        yield rows
        return

    def measure(name: str, layer: QuantLinear, t: torch.Tensor, operand: str, layer_step: int) -> None:
        if alpha:
            for gemm, along in USES[operand]:
                a, snr = operand_alpha(layer, t, operand, gemm, along, layer_step)
                rows.append({"step": step, "layer": name, "operand": operand, "gemm": gemm, "alpha": a,
                             "sqnr_db": snr})
        if capture_dir is not None and any(fnmatch.fnmatchcase(name, p) for p in capture_layers):
            _save(capture_dir, name, operand, t[:capture_rows] if capture_rows and operand != "w" else t)

    def forward_hook(name: str, layer: QuantLinear) -> Any:
        def hook(module: torch.nn.Module, args: tuple, out: torch.Tensor) -> None:
            layer_step = layer.step  # (the layer's backward advances it, after these hooks)
            x = args[0].reshape(-1, layer.in_features)
            measure(name, layer, x, "x", layer_step)
            measure(name, layer, layer.weight, "w", layer_step)
            if out.requires_grad:
                out.register_hook(lambda g: measure(name, layer, g.reshape(-1, layer.out_features).contiguous(),
                                                    "dy", layer_step))
        return hook

    try:
        for name, layer in quant_layers(model):
            handles.append(layer.register_forward_hook(forward_hook(name, layer)))
        yield rows
    finally:
        for h in handles:
            h.remove()
