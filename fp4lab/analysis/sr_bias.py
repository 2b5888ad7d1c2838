"""Bias that each stochastic-rounding random-bit width (``sr_bits``) leaves, measured on data (docs/sr_bias.md).

With ``w`` random bits an element rounds up with probability ``floor(p 2^w) / 2^w`` instead of ``p`` (``p`` its
fractional position between the lower and upper *signed* neighbour levels; docs/numerics.md, "Stochastic-rounding
random bits"), so ``E[Q(x)] - x = -(p - floor(p 2^w) / 2^w) * gap``: toward the more negative neighbour, for either
sign of ``x``. :func:`sr_width_bias` measures this for each (format, width, distribution) and, as a reference, the
grid's own round-to-nearest-even (RTNE) shrinkage.

Unit: block amax. Every element's error is divided by the amax (largest finite ``|x|``) of the block it belongs to,
taken in the basis the quantizer saw (after the RHT, if any; the whole tensor for element-only formats), and the
quotients are averaged over all elements with a non-zero amax, then over the SR seeds. So ``-1e-3`` means the
dequantized tensor sits on average 0.1% of its block's largest magnitude below the input. The data of a
distribution are drawn once (``data_seed``) and only the SR seeds vary, so the standard errors are those of the
rounding noise alone.

Per row (format, width or "rtne", distribution):

* ``signed``: ``mean((xhat - x) / amax)`` over elements, mean over seeds; ``signed_se`` its standard error across
  seeds (``std(ddof=1) / sqrt(n_seeds)``; 0 for RTNE, which is deterministic). This is where the width deficit
  shows: it does not cancel between signs.
* ``magnitude``: ``mean((|xhat| - |x|) / amax)`` (``fp4lab.analysis.metrics.mean_signed_error`` on amax-normalised
  values), the paper's shrinkage bias in this unit; ``magnitude_se`` likewise. The RTNE row's shrinkage shows here.
  On sign-symmetric data the width deficit cancels in it (it shrinks positive elements and grows negative ones).
* ``alpha``: ``fp4lab.analysis.metrics.alpha`` (``<xhat, x> / ||x||^2``), mean over seeds; ``alpha_se``.
* ``expected_uniform``: ``-2^-(w+1) * mean(gap / amax)``, the deficit for ``p`` uniform in each gap, with ``gap``
  the element's grid gap in value space (``(hi - lo) * s``, ``s`` its full scale) for elements strictly between two
  levels and 0 for elements on a level or saturated.
* ``expected``: the exact expectation given the data, ``-mean((p - floor(p 2^w) / 2^w) * gap / amax)``, with ``p``
  recomputed from ``x / s`` (float64 division, then float32 as the emulator rounds ``p``). Both are None for RTNE,
  and for formats whose scale choice depends on the rounding (more than one target, e.g. ``nvfp4-4over6``).
* ``clip_signed`` / ``clip_magnitude``: the part of ``signed`` / ``magnitude`` that comes from elements outside
  the grid's range (``|x / s|`` above the largest level: saturated, e.g. under E8M0 floor scales or a UE4M3 scale
  rounded down; or in a block whose scale is 0). Their result does not depend on the rounding, so every row of a
  (format, distribution) has the same value, and for SR ``E[signed] = expected + clip_signed`` given the data.
  None where ``expected`` is None.
* ``grid_bias`` (RTNE rows only): ``metrics.mean_signed_error`` in grid units (``|q| - |x / s|``, the top level is
  the grid's largest magnitude), the quantity ``fp4lab compare`` reports as ``bias``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

import fp4lab
from fp4lab.analysis import metrics
from fp4lab.analysis.distributions import parse, sample
from fp4lab.errors import InputError
from fp4lab.formats.registry import get_format
from fp4lab.numerics.blocks import BlockView

DEFAULT_FORMATS: tuple[str, ...] = ("ufp4", "e2m1-b16-fp32", "nvfp4", "mxfp4")
DEFAULT_WIDTHS: tuple[int, ...] = (24, 16, 8, 4)
DEFAULT_DISTS: tuple[str, ...] = ("gaussian", "laplace", "student-t:nu=3")
DEFAULT_ROWS, DEFAULT_COLS, DEFAULT_SEEDS = 256, 2048, 8


@dataclass(frozen=True)
class SrBiasRow:
    """One (format, width, distribution) result; ``width`` is None for the RTNE reference row."""

    format: str
    width: int | None
    dist: str
    signed: float
    signed_se: float
    magnitude: float
    magnitude_se: float
    alpha: float
    alpha_se: float
    expected_uniform: float | None
    expected: float | None
    clip_signed: float | None
    clip_magnitude: float | None
    grid_bias: float | None
    n_seeds: int

    @property
    def rounding(self) -> str:
        return "rtne" if self.width is None else f"sr{self.width}"

    def as_dict(self) -> dict[str, Any]:
        return dict(asdict(self), rounding=self.rounding)


def block_amax(x_basis: np.ndarray, fmt: Any, axis: int) -> np.ndarray:
    """float64 per-element amax of the block each element belongs to (the tensor's amax for element-only formats)."""
    a = np.abs(np.asarray(x_basis, np.float64))
    a = np.where(np.isfinite(a), a, 0.0)
    if fmt.block is None:
        return np.full(a.shape, a.max() if a.size else 0.0)
    view = BlockView.for_format(a.shape, fmt, axis)
    b = view.to_blocks(a)
    return view.from_blocks(np.broadcast_to(b.max(axis=-1, keepdims=True), b.shape))


@dataclass(frozen=True)
class _Geometry:
    """Per-element quantities that do not depend on the rounding (single-target formats)."""

    p: np.ndarray         # float32 fractional position between the signed neighbours (0 where not inside)
    gap: np.ndarray       # (hi - lo) * s / amax for elements strictly between two levels, else 0
    clip_signed: float    # sum over out-of-range elements of (xhat - x) / amax, divided by n
    clip_magnitude: float  # the same for |xhat| - |x|


def _geometry(x64: np.ndarray, y64: np.ndarray, qt: Any, inv_amax: np.ndarray, keep: np.ndarray,
              n: int) -> _Geometry:
    s = metrics.element_scales(qt)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = x64 / s
    levels = np.unique(np.asarray(qt.fmt.element.levels, np.float64))
    levels = levels[np.isfinite(levels)]
    in_range = np.isfinite(t) & (t >= levels[0]) & (t <= levels[-1]) & (s > 0)
    inside = in_range & (t > levels[0]) & (t < levels[-1])
    tt = np.where(inside, t, levels[0])
    idx = np.clip(np.searchsorted(levels, tt, side="right"), 1, levels.size - 1)
    lo, hi = levels[idx - 1], levels[idx]
    inside &= tt != lo
    t32, lo32, hi32 = tt.astype(np.float32), lo.astype(np.float32), hi.astype(np.float32)
    p = ((t32 - lo32) / (hi32 - lo32)).astype(np.float64)
    out = keep & ~in_range
    cs = float(np.sum(((y64 - x64) * inv_amax)[out])) / n
    cm = float(np.sum(((np.abs(y64) - np.abs(x64)) * inv_amax)[out])) / n
    return _Geometry(np.where(inside, p, 0.0), np.where(inside, (hi - lo) * s * inv_amax, 0.0), cs, cm)


def _quantize(x: np.ndarray, fmt: Any, width: int | None, seed: int, rht: int | None, rht_seed: int) -> Any:
    if width is None:
        return fp4lab.quantize(x, fmt, rounding="rtne", rht=rht, rht_seed=rht_seed)
    return fp4lab.quantize(x, fmt, rounding="sr", seed=seed, sr_bits=width, rht=rht, rht_seed=rht_seed)


def _mean_se(v: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(v, np.float64)
    return float(a.mean()), (float(a.std(ddof=1) / np.sqrt(a.size)) if a.size > 1 else 0.0)


def sr_width_bias(formats: Iterable[Any] = DEFAULT_FORMATS, widths: Iterable[int] = DEFAULT_WIDTHS,
                  dists: Iterable[str] = DEFAULT_DISTS, rows: int = DEFAULT_ROWS, cols: int = DEFAULT_COLS,
                  seeds: int | Iterable[int] = DEFAULT_SEEDS, rht: int | None = None, rht_seed: int = 0,
                  data_seed: int = 0, rtne: bool = True,
                  progress: Callable[[str], None] | None = None) -> list[SrBiasRow]:
    """Measured and expected bias of each SR width (and of RTNE, ``rtne=True``) for each format and distribution.

    ``seeds``: a count ``n`` (SR seeds ``0..n-1``) or the SR seeds themselves. Inputs: ``rows x cols`` float32 from
    ``distributions.sample(dist, (rows, cols), data_seed)``, blocked along the last axis. ``progress(label)`` is
    called once per (format, distribution). Rows come format-major, then distribution, then RTNE, then ``widths``
    in the order given. See the module docstring for every field.
    """
    seed_list = list(range(seeds)) if isinstance(seeds, (int, np.integer)) else [int(s) for s in seeds]
    if not seed_list:
        raise InputError("sr_width_bias: need at least one SR seed")
    widths = [int(w) for w in widths]
    out: list[SrBiasRow] = []
    inputs = {d: (parse(d).label, sample(d, (rows, cols), data_seed)) for d in dists}
    for f in formats:
        fmt = get_format(f)
        for label, x in inputs.values():
            basis = x if rht is None else np.asarray(fp4lab.rht(x, size=rht, seed=rht_seed, axis=-1))
            amax = block_amax(basis, fmt, -1)
            keep = np.isfinite(basis) & (amax > 0)
            n = max(int(keep.sum()), 1)
            with np.errstate(divide="ignore"):
                inv = np.where(keep, 1.0 / amax, 0.0)
            x64 = np.where(keep, basis.astype(np.float64), 0.0)
            xn = x64 * inv
            geo: _Geometry | None = None
            for width in [None, *widths] if rtne else widths:
                sgn, mag, alp = [], [], []
                for seed in (seed_list[:1] if width is None else seed_list):
                    qt = _quantize(x, fmt, width, seed, rht, rht_seed)
                    y64 = np.where(keep, np.asarray(fp4lab.dequantize(qt, rotated=True), np.float64), 0.0)
                    yn = y64 * inv
                    sgn.append(float(np.sum(yn - xn)) / n)
                    mag.append(metrics.mean_signed_error(xn[keep], yn[keep]))
                    alp.append(metrics.alpha(basis, y64))
                    if geo is None and len(fmt.targets) == 1:
                        geo = _geometry(x64, y64, qt, inv, keep, n)
                grid_bias = exp_u = exp_x = None
                if width is None:
                    t, q = metrics.normalized(basis, qt)
                    grid_bias = metrics.mean_signed_error(t, q)
                elif geo is not None:
                    exp_u = -(2.0 ** -(width + 1)) * float(np.sum(geo.gap)) / n
                    frac = geo.p - np.floor(geo.p * 2.0**width) / 2.0**width
                    exp_x = -float(np.sum(frac * geo.gap)) / n
                (sm, sse), (mm, mse), (am, ase) = _mean_se(sgn), _mean_se(mag), _mean_se(alp)
                out.append(SrBiasRow(fmt.name, width, label, sm, sse, mm, mse, am, ase, exp_u, exp_x,
                                     None if geo is None else geo.clip_signed,
                                     None if geo is None else geo.clip_magnitude, grid_bias, len(sgn)))
            if progress is not None:
                progress(f"{fmt.name} {label}")
    return out


def run_sr_bias(formats: Iterable[Any] = DEFAULT_FORMATS, widths: Iterable[int] = DEFAULT_WIDTHS,
                dists: Iterable[str] = DEFAULT_DISTS, rows: int = DEFAULT_ROWS, cols: int = DEFAULT_COLS,
                seeds: int | Iterable[int] = DEFAULT_SEEDS, rht: int | None = None, rht_seed: int = 0,
                data_seed: int = 0, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """:func:`sr_width_bias` as a JSON-ready ``{"config", "unit", "results": [row dicts], "elapsed_s"}``."""
    formats, widths, dists = list(formats), [int(w) for w in widths], list(dists)
    seed_list = list(range(seeds)) if isinstance(seeds, (int, np.integer)) else [int(s) for s in seeds]
    t0 = time.perf_counter()
    rows_ = sr_width_bias(formats, widths, dists, rows, cols, seed_list, rht, rht_seed, data_seed,
                          progress=progress)
    return {
        "config": {"formats": [get_format(f).name for f in formats], "widths": widths,
                   "dists": [parse(d).label for d in dists], "shape": [rows, cols], "seeds": seed_list,
                   "rht": rht, "rht_seed": rht_seed, "data_seed": data_seed},
        "unit": "block amax: each element's error divided by the amax of its block (after any RHT), averaged "
                "over elements, then over SR seeds",
        "results": [r.as_dict() for r in rows_],
        "elapsed_s": time.perf_counter() - t0,
    }
