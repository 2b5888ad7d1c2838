"""The comparison engine behind ``fp4lab compare``: formats x inputs x RHT sizes -> metrics, as JSON-ready data.

Defaults (``fp4lab compare`` with no arguments): the 4-bit built-ins in ``DEFAULT_FORMATS`` on the synthetic
inputs ``distributions.DEFAULT_DISTRIBUTIONS`` (each a float32 tensor of ``DEFAULT_SHAPE`` = 256 x 1024, seed 0,
blocks along the last axis), with RHT sizes 0 (none) and 16 (the paper's size, equal to the NVFP4/UFP4 block).

JSON document (``schema = "fp4lab.compare/1"``):

``config``   ``formats`` (names), ``inputs`` (canonical distribution specs or tensor files), ``input_shapes``
             (``{input: shape}``), ``rht`` (sizes; 0 = none), ``shape`` (of synthetic inputs), ``seed`` (input
             generator), ``rht_seed``, ``rounding`` (null = each format's default), ``backend`` (the one that ran:
             "reference" or "emulator", see below).
``formats``  per entry of ``config.formats``: ``name`` (the format's own name: a spec file's ``name`` field),
             ``element`` (grid name), ``magnitudes`` (non-negative levels, grid units),
             ``level_bias`` (locally-uniform bias ``(l_i - r_i)/2`` per magnitude, paper Eq. 2), ``block``
             (block shape or null), ``scale`` (scale-format name or kind), ``tensor_scale`` (bool),
             ``bits_per_element``, ``description``.
``results``  one record per (format, input, rht): ``format``, ``input``, ``rht`` (0 = none), ``sqnr_db``, ``nmse``,
             ``alpha`` (Eq. 3), ``bias`` (mean signed error of normalized magnitudes, grid units), ``bias_amax``
             (``mean((|xhat| - |x|) / amax)``, ``amax`` the element's block amax: comparable across formats),
             ``b_eff`` (Eq. 6-7), ``clip_rate``, ``zero_block_rate``, ``delta_sqnr_db`` (this SQNR minus the same
             format's
             and input's rht = 0 SQNR, null when rht = 0 or not run), ``delta_b_eff`` (likewise), and
             ``scale_code_histogram`` (``{"code": count}`` for scale formats of at most 8 bits, else null).
``verdicts`` per input: ``best_sqnr`` (``{"sqnr_db", "cases": [{"format", "rht"}, ...]}``, every case with the
             highest SQNR) and ``smallest_abs_bias`` (``{"bias_amax", "cases"}``, every case with the smallest
             ``|bias_amax|``), over every format; ``by_bits`` (``{"4.25": {"best_sqnr", "smallest_abs_bias"},
             ...}``): the same verdicts among the formats of equal bits per element; see :func:`verdicts`.
``elapsed_s`` wall time of the run in seconds.

Metric definitions: ``fp4lab.analysis.metrics``. Non-finite values are written as null.

Backend: the numpy reference (the definition of the bits) or the numba emulator (its bit-identical parallel twin).
``backend = "auto"`` runs the reference when the run quantizes at most ``REFERENCE_MAX_ELEMENTS`` elements in all
(formats x inputs x RHT sizes x input size) and the emulator above that. The reference costs about 70 ns per element
on one core and compiles nothing; the emulator about 6 ns, after about 13 s of one-time numba compilation on a
2-core machine. The default run quantizes 26M elements (about 2 s of reference time), so a first run after install
compiles nothing. Either backend gives the same results (tests/test_analysis_compare.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

import fp4lab
from fp4lab.analysis import distributions, metrics, tensors_io
from fp4lab.analysis.bias import level_bias
from fp4lab.errors import InputError
from fp4lab.formats.registry import get_format
from fp4lab.numerics.blocks import BlockView

SCHEMA = "fp4lab.compare/1"
DEFAULT_FORMATS: tuple[str, ...] = (
    "mxfp4", "mxfp4-rceil", "nvfp4", "nvfp4-4over6", "e2m1-b16-fp32",
    "ufp4", "ufp4-e4m3", "ufp4-e8m0", "int4-b32-e8m0", "nf4-b64-fp32",
)
DEFAULT_RHT: tuple[int, ...] = (0, 16)
DEFAULT_SHAPE: tuple[int, ...] = (256, 1024)
BACKENDS: tuple[str, ...] = ("auto", "reference", "emulator")
REFERENCE_MAX_ELEMENTS = 1 << 26  # about 5 s of reference time: less than the emulator's first-run compilation


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
    backend: str = "auto"


def load_input(spec: str, shape: tuple[int, ...], seed: int) -> tuple[str, np.ndarray]:
    """``(label, float32 tensor)`` for a distribution spec or a tensor file (``path[::key]``)."""
    if tensors_io.is_tensor_file(spec):
        return spec, tensors_io.load_tensor(spec)
    d = distributions.parse(spec)
    return d.label, distributions.sample(d, shape, seed)


def format_summary(fmt: Any) -> dict[str, Any]:
    """JSON-ready description of a format's grid geometry and storage (the ``formats`` entry)."""
    lb = level_bias(fmt)
    scale = None if fmt.scale is None else fmt.scale.label
    return {
        "name": fmt.name, "element": fmt.element.label, "magnitudes": lb.levels.tolist(),
        "level_bias": lb.bias.tolist(),
        "block": None if fmt.block is None else list(fmt.block.shape), "scale": scale,
        "tensor_scale": fmt.tensor_scale != "none", "bits_per_element": fmt.bits_per_element,
        "description": fmt.description,
    }


def amax_bias(x_basis: np.ndarray, xhat: np.ndarray, fmt: Any, axis: int = -1) -> float:
    """``mean((|xhat| - |x|) / amax)`` in float64 over the finite elements of blocks with a non-zero amax, ``amax``
    the largest finite ``|x|`` of the element's block (of the whole tensor for element-only formats), in the
    quantizer's basis: the shrinkage bias in a unit every format shares (the ``magnitude`` of ``fp4lab sr-bias``).
    NaN if no element counts. Blocks are taken ``metrics.CHUNK`` elements at a time."""
    x, y = np.asarray(x_basis, np.float32), np.asarray(xhat, np.float32)
    if fmt.block is None:
        xb, yb = x.reshape(1, -1), y.reshape(1, -1)
    else:
        view = BlockView.for_format(x.shape, fmt, axis)
        xb, yb = view.to_blocks(x), view.to_blocks(y)
        xb, yb = xb.reshape(-1, xb.shape[-1]), yb.reshape(-1, yb.shape[-1])
    step = max(1, metrics.CHUNK // max(xb.shape[1], 1))
    total, n = 0.0, 0
    for i in range(0, xb.shape[0], step):
        ax = np.abs(xb[i:i + step].astype(np.float64))
        finite = np.isfinite(ax)
        amax = np.where(finite, ax, 0.0).max(axis=1, keepdims=True)
        keep = finite & np.isfinite(yb[i:i + step]) & (amax > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = (np.abs(yb[i:i + step].astype(np.float64)) - ax) / amax
        total += float(np.sum(q[keep]))
        n += int(keep.sum())
    return total / n if n else float("nan")


def _quantize_dequantize(x: np.ndarray, fmt: Any, rht: int | None, rht_seed: int, rounding: str | None,
                         backend: str) -> tuple[Any, np.ndarray, np.ndarray]:
    """``(qt, basis, xhat)`` on ``backend`` ("reference" or "emulator"): the quantized tensor, ``x`` in the
    quantizer's basis and the dequantized values in that basis."""
    if backend == "emulator":
        qt = fp4lab.quantize(x, fmt, rounding=rounding, rht=rht, rht_seed=rht_seed)
        basis = x if rht is None else np.asarray(fp4lab.rht(x, size=rht, seed=rht_seed, axis=qt.axis))
        return qt, basis, np.asarray(fp4lab.dequantize(qt, rotated=True))
    from fp4lab.numerics.options import QuantizeOptions
    from fp4lab.numerics.ref_quantize import dequantize_reference, quantize_reference
    from fp4lab.numerics.rht import rht_reference

    qt = quantize_reference(x, fmt, QuantizeOptions(rounding=rounding, rht=rht, rht_seed=rht_seed))
    basis = x if rht is None else rht_reference(x, size=rht, seed=rht_seed, axis=qt.axis)
    return qt, basis, dequantize_reference(qt, rotated=True)


def _evaluate(x: np.ndarray, fmt: Any, rht: int | None, rht_seed: int, rounding: str | None,
              backend: str) -> tuple[dict[str, Any], Any]:
    """``(metrics, QuantizedTensor)``: ``metrics.evaluate``'s metrics plus ``bias_amax``, from one quantize and one
    dequantize."""
    x = np.asarray(x, dtype=np.float32)
    qt, basis, xhat = _quantize_dequantize(x, fmt, rht, rht_seed, rounding, backend)
    m = metrics.measure(basis, qt, xhat=xhat)
    return {**m.as_dict(), "bias_amax": amax_bias(basis, xhat, qt.fmt, qt.axis)}, qt


def choose_backend(config: CompareConfig, input_elements: int) -> str:
    """The backend that runs ``config`` whose inputs hold ``input_elements`` elements in all (module docstring)."""
    if config.backend != "auto":
        return config.backend
    total = input_elements * len(config.formats) * len(config.rht)
    return "reference" if total <= REFERENCE_MAX_ELEMENTS else "emulator"


VERDICTS = (("best_sqnr", "sqnr_db", lambda v: v), ("smallest_abs_bias", "bias_amax", lambda v: -abs(v)))


def _winners(recs: list[dict[str, Any]]) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    for key, metric, score in VERDICTS:
        vals = [r for r in recs if r[metric] is not None]
        best = max((score(r[metric]) for r in vals), default=None)
        winners = [r for r in vals if score(r[metric]) == best]
        entry[key] = None if not winners else {
            metric: winners[0][metric], "cases": [{"format": r["format"], "rht": r["rht"]} for r in winners]}
    return entry


def verdicts(results: list[dict[str, Any]], bits: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Per input: every (format, rht) case with the highest ``sqnr_db`` and every one with the smallest
    ``|bias_amax|`` (exact ties all listed; null values, i.e. NaN or an exact result's infinite SQNR, left out);
    and ``by_bits``, the same verdicts among the formats of each storage cost (``bits[format]`` bits per element,
    keyed by its shortest decimal text, cheapest first): more bits buy accuracy, so a 4.25-bit design is judged
    against its peers there."""
    from fp4lab.formats.floats import float32_text

    out: dict[str, dict[str, Any]] = {}
    for label in dict.fromkeys(r["input"] for r in results):
        recs = [r for r in results if r["input"] == label]
        entry = _winners(recs)
        entry["by_bits"] = {float32_text(b): _winners([r for r in recs if bits[r["format"]] == b])
                            for b in sorted({bits[r["format"]] for r in recs})}
        out[label] = entry
    return out


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def check_shapes(inputs: list[tuple[str, np.ndarray]], fmts: dict[str, Any], rht: list[int]) -> None:
    """Refuse, before any case runs, an input whose shape a format's blocks or an RHT size does not divide (blocks
    and rotations run along the last axis): one line naming the input, its shape and the format or size."""
    for label, x in inputs:
        where = f"compare: input {label} ({'x'.join(map(str, x.shape))})"
        for name, fmt in fmts.items():
            try:
                BlockView.for_format(x.shape, fmt, -1)
            except InputError as exc:
                raise InputError(f"{where}, format {name}: {exc}") from None
        for r in rht:
            if r and x.ndim and x.shape[-1] % r:
                raise InputError(f"{where}: the last axis ({x.shape[-1]}) is not a multiple of RHT size {r}; "
                                 "give --rht sizes that divide it")


def unique(config: CompareConfig) -> CompareConfig:
    """``config`` with repeated formats, inputs and RHT sizes given once (the first place each was given)."""
    return replace(config, formats=list(dict.fromkeys(config.formats)), inputs=list(dict.fromkeys(config.inputs)),
                   rht=list(dict.fromkeys(config.rht)))


def run_compare(config: CompareConfig, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every (format, input, rht) case of ``config``, each once (a format, input or RHT size given twice, or
    two input specs naming the same distribution, run once); ``progress(label)`` is called after each case."""
    start = time.perf_counter()
    config = unique(config)
    for what in ("formats", "inputs", "rht"):
        if not getattr(config, what):
            raise InputError(f"compare: no {'RHT sizes' if what == 'rht' else what} to compare; give at least one")
    fmts = {name: get_format(name) for name in config.formats}
    for r in config.rht:
        if r not in (0, 16, 32, 64, 128, 256):
            raise InputError(f"compare: RHT size {r} is not allowed; use 0 (none), 16, 32, 64, 128 or 256")
    if config.backend not in BACKENDS:  # before any input is loaded
        raise InputError(f"compare: backend must be one of {', '.join(BACKENDS)}, got {config.backend!r}"[:200])
    loaded: dict[str, np.ndarray] = {}
    for spec in config.inputs:
        label, x = load_input(spec, tuple(config.shape), config.seed)
        loaded.setdefault(label, x)
    inputs = list(loaded.items())
    check_shapes(inputs, fmts, config.rht)
    backend = choose_backend(config, sum(x.size for _, x in inputs))
    results: list[dict[str, Any]] = []
    shapes: dict[str, list[int]] = {}
    for label, x in inputs:
        shapes[label] = list(x.shape)
        for name, fmt in fmts.items():
            base: dict[str, float] | None = None
            for r in config.rht:
                m, qt = _evaluate(x, fmt, r or None, config.rht_seed, config.rounding, backend)
                rec: dict[str, Any] = {"format": name, "input": label, "rht": r, **m}
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
                   "rounding": config.rounding, "backend": backend},
        "formats": {name: format_summary(fmt) for name, fmt in fmts.items()},
        "results": results,
        "verdicts": verdicts(results, {name: fmt.bits_per_element for name, fmt in fmts.items()}),
        "elapsed_s": time.perf_counter() - start,
    }


def n_cases(config: CompareConfig) -> int:
    """Number of (format, input, rht) cases ``run_compare`` evaluates."""
    config = unique(config)
    return len(config.formats) * len(config.inputs) * len(config.rht)
