"""The comparison engine behind ``fp4lab compare``: formats x inputs x RHT sizes -> metrics, as JSON-ready data.

Defaults (``fp4lab compare`` with no arguments): the 4-bit built-ins in ``DEFAULT_FORMATS`` on the synthetic
inputs ``distributions.DEFAULT_DISTRIBUTIONS`` (each a float32 tensor of ``DEFAULT_SHAPE`` = 256 x 1024, seed 0,
blocks along the last axis), with RHT sizes 0 (none) and 16 (the paper's size, equal to the NVFP4/UFP4 block).

JSON document (``schema = "fp4lab.compare/1"``):

``config``   ``formats`` (names), ``inputs`` (canonical distribution specs or tensor files), ``input_shapes``
             (``{input: shape}``), ``rht`` (sizes; 0 = none), ``shape`` (of synthetic inputs), ``seed`` (input generator), ``rht_seed``, ``rounding`` (null = each format's default).
``formats``  per format name: ``element`` (grid name), ``magnitudes`` (non-negative levels, grid units),
             ``level_bias`` (locally-uniform bias ``(l_i - r_i)/2`` per magnitude, paper Eq. 2), ``block``
             (block shape or null), ``scale`` (scale-format name or kind), ``tensor_scale`` (bool),
             ``bits_per_element``, ``description``.
``results``  one record per (format, input, rht): ``format``, ``input``, ``rht`` (0 = none), ``sqnr_db``, ``nmse``,
             ``alpha`` (Eq. 3), ``bias`` (mean signed error of normalized magnitudes, grid units), ``b_eff``
             (Eq. 6-7), ``clip_rate``, ``zero_block_rate``, ``delta_sqnr_db`` (this SQNR minus the same format's
             and input's rht = 0 SQNR, null when rht = 0 or not run), ``delta_b_eff`` (likewise), and
             ``scale_code_histogram`` (``{"code": count}`` for scale formats of at most 8 bits, else null).
``elapsed_s`` wall time of the run in seconds.

Metric definitions: ``fp4lab.analysis.metrics``. Non-finite values are written as null.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from fp4lab.analysis import distributions, metrics, tensors_io
from fp4lab.analysis.bias import level_bias
from fp4lab.formats.registry import get_format

SCHEMA = "fp4lab.compare/1"
DEFAULT_FORMATS: tuple[str, ...] = (
    "mxfp4", "mxfp4-rceil", "nvfp4", "nvfp4-4over6", "e2m1-b16-fp32",
    "ufp4", "ufp4-e4m3", "ufp4-e8m0", "int4-b32-e8m0", "nf4-b64-fp32",
)
DEFAULT_RHT: tuple[int, ...] = (0, 16)
DEFAULT_SHAPE: tuple[int, ...] = (256, 1024)


@dataclass
class CompareConfig:
    """What to compare; every field has the documented default."""

    formats: list[str] = field(default_factory=lambda: list(DEFAULT_FORMATS))
    inputs: list[str] = field(default_factory=lambda: list(distributions.DEFAULT_DISTRIBUTIONS))
    rht: list[int] = field(default_factory=lambda: list(DEFAULT_RHT))
    shape: tuple[int, ...] = DEFAULT_SHAPE
    seed: int = 0
    rht_seed: int = 0
    rounding: str | None = None


def load_input(spec: str, shape: tuple[int, ...], seed: int) -> tuple[str, np.ndarray]:
    """``(label, float32 tensor)`` for a distribution spec or a tensor file (``path[::key]``)."""
    if tensors_io.is_tensor_file(spec):
        return spec, tensors_io.load_tensor(spec)
    d = distributions.parse(spec)
    return d.label, distributions.sample(d, shape, seed)


def format_summary(fmt: Any) -> dict[str, Any]:
    """JSON-ready description of a format's grid geometry and storage (the ``formats`` entry)."""
    lb = level_bias(fmt)
    scale = None if fmt.scale is None else (fmt.scale.name or fmt.scale.kind)
    return {
        "element": fmt.element.name, "magnitudes": lb.levels.tolist(), "level_bias": lb.bias.tolist(),
        "block": None if fmt.block is None else list(fmt.block.shape), "scale": scale,
        "tensor_scale": fmt.tensor_scale != "none", "bits_per_element": fmt.bits_per_element,
        "description": fmt.description,
    }


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def run_compare(config: CompareConfig, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every (format, input, rht) case of ``config``; ``progress(label)`` is called after each case."""
    start = time.perf_counter()
    fmts = {name: get_format(name) for name in config.formats}
    for r in config.rht:
        if r not in (0, 16, 32, 64, 128, 256):
            raise ValueError(f"compare: RHT size {r} is not allowed; use 0 (none), 16, 32, 64, 128 or 256")
    results: list[dict[str, Any]] = []
    shapes: dict[str, list[int]] = {}
    for spec in config.inputs:
        label, x = load_input(spec, tuple(config.shape), config.seed)
        shapes[label] = list(x.shape)
        for name, fmt in fmts.items():
            base: dict[str, float] | None = None
            for r in config.rht:
                m, qt = metrics.evaluate(x, fmt, rht=r or None, rht_seed=config.rht_seed, rounding=config.rounding)
                rec: dict[str, Any] = {"format": name, "input": label, "rht": r, **m.as_dict()}
                if r == 0:
                    base = rec
                rec["delta_sqnr_db"] = rec["sqnr_db"] - base["sqnr_db"] if (base and r) else None
                rec["delta_b_eff"] = rec["b_eff"] - base["b_eff"] if (base and r) else None
                small_scale = fmt.scale is not None and fmt.scale.bits <= 8
                rec["scale_code_histogram"] = (
                    {str(k): v for k, v in metrics.scale_code_histogram(qt).items()} if small_scale else None)
                results.append({k: _clean(v) for k, v in rec.items()})
                if progress is not None:
                    progress(f"{name} / {label} / rht {r}")
    return {
        "schema": SCHEMA,
        "config": {"formats": list(config.formats), "inputs": list(shapes), "input_shapes": shapes,
                   "rht": list(config.rht),
                   "shape": list(config.shape), "seed": config.seed, "rht_seed": config.rht_seed,
                   "rounding": config.rounding},
        "formats": {name: format_summary(fmt) for name, fmt in fmts.items()},
        "results": results,
        "elapsed_s": time.perf_counter() - start,
    }


def n_cases(config: CompareConfig) -> int:
    """Number of (format, input, rht) cases ``run_compare`` evaluates."""
    return len(config.formats) * len(config.inputs) * len(config.rht)
