"""Search over symmetric 16-code element grids: SQNR against |shrinkage bias| on post-RHT data.

A symmetric 16-code grid is sign-magnitude: 8 magnitudes ``0 = m_0 < m_1 < ... < m_7`` (-0 duplicates +0, so 15
values). Grids are normalized to ``m_7 = 1`` (the block amax maps onto the top level), so a grid is its 6 interior
magnitudes. Candidates:

* ``lattice``: every choice of 6 interior magnitudes from ``{k / L : 0 < k < L}`` (``L`` a power of two so values
  are float32-exact; L = 32 gives C(31, 6) = 736,281 grids);
* parameterized families: ``power`` ``m_i = (i/7)^gamma``; ``normal`` quantiles ``m_i = Phi^-1(1/2 + q i/14) /
  Phi^-1(1/2 + q/2)``; ``two-slope`` (``k`` unit steps then steps of ``r``, E2M1-like for k = 4, r = 2);
  ``lloyd-max`` (the MSE-optimal grid for the data with ``m_7 = 1`` fixed, by Lloyd iteration, rounded to 2^-16);
* reference grids E2M1, E1M2 (= INT4 up to scale) and E3M0.

Scale schemes (how the per-block scale ``s`` is chosen; ``t = |x| / s`` in grid units, 1x16 blocks):

* ``fp32``: ``s = amax / m_7`` (the paper's single-level FP32 scale; no clipping);
* ``e4m3``: NVFP4-style two-level scale, UE4M3 block scale (RTNE) times an FP32 tensor scale; the rounded scale
  may clip the block amax (saturated at ``m_7``);
* ``e8m0``: MX-style power-of-two scale by RCEIL, ``s = 2^ceil(log2(amax / g))`` for a grid whose top level is
  ``g`` in {1, 1.25, 1.5, 1.75} times a power of two (the top level's mantissa is a design choice under pow2
  scales; each grid is reported with its best ``g``; E2M1's natural ``g`` is 1.5, E1M2's 1.75).

Scales come from ``fp4lab.quantize`` itself (a proxy format with the scheme's scale and a top level of 1 or ``g``);
errors are then evaluated for every grid at once from sorted samples and prefix sums: for a grid with RTNE
thresholds ``theta_i`` (midpoints) the squared error is ``sum_i m_i^2 W0_i - 2 m_i W1_i + W2_i`` with
``W0, W1, W2`` the sums of ``s^2, s^2 t, s^2 t^2`` over the samples in bin i. Reported per grid: ``sqnr_db``,
``bias = mean(rho(t) - t)`` over all elements in units of the top level (the paper's shrinkage bias), and
``alpha`` (Eq. 3). Exact midpoints (ties) are resolved downward in this fast evaluator; the Pareto front is
re-measured with the real quantizer (``verified_sqnr_db``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import fp4lab
from fp4lab.analysis import distributions
from fp4lab.errors import InputError

SCHEMES: tuple[str, ...] = ("fp32", "e4m3", "e8m0")
E8M0_TOPS: tuple[float, ...] = (1.0, 1.25, 1.5, 1.75)
REFERENCE_GRIDS: dict[str, list[float]] = {
    "e2m1": [0, 0.5, 1, 1.5, 2, 3, 4, 6],
    "e1m2/int4": [0, 1, 2, 3, 4, 5, 6, 7],
    "e3m0": [0, 0.25, 0.5, 1, 2, 4, 8, 16],
}
NATURAL_TOP: dict[str, float] = {"e2m1": 1.5, "e1m2/int4": 1.75, "e3m0": 1.0}


def post_rht_data(inputs: tuple[str, ...] = distributions.DEFAULT_DISTRIBUTIONS, shape: tuple[int, int] = (64, 1024),
                  rht: int = 16, seed: int = 0) -> np.ndarray:
    """float32 ``[len(inputs) * shape[0], shape[1]]``: each input sampled and rotated by RHT-``rht`` along the
    last axis (signs from seed 0), stacked. The search's default data."""
    parts = [fp4lab.rht(distributions.sample(spec, shape, seed + i), size=rht, seed=0) for i, spec in enumerate(inputs)]
    return np.concatenate(parts, axis=0).astype(np.float32)


def _proxy_format(scheme: str, top: float) -> Any:
    from fp4lab.formats.quant_format import QuantFormat

    mags = [0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 1.0]
    spec: dict[str, Any] = {"name": f"search-{scheme}", "block": {"shape": [16]},
                            "element": {"kind": "table", "bits": 4, "magnitudes": [m * top for m in mags]}}
    if scheme == "fp32":
        spec.update(scale="fp32", scale_rule={"method": "amax", "zero_block": "one"})
    elif scheme == "e4m3":
        spec.update(scale="ue4m3", tensor_scale="amax", scale_rule={"method": "amax", "element_scaling": "reciprocal"})
    elif scheme == "e8m0":
        spec.update(scale="e8m0", scale_rule={"method": "rceil"})
    else:
        raise InputError(f"search: unknown scale scheme '{scheme}'; use one of {', '.join(SCHEMES)}")
    return QuantFormat.model_validate(spec)


@dataclass
class Samples:
    """Sorted normalized magnitudes ``t`` (grid top = 1) and prefix sums for one scale scheme."""

    t: np.ndarray
    c0: np.ndarray  # prefix count
    c1: np.ndarray  # prefix sum of t
    w0: np.ndarray  # prefix sums of s^2, s^2 t, s^2 t^2
    w1: np.ndarray
    w2: np.ndarray

    @classmethod
    def from_data(cls, x: np.ndarray, scheme: str, top: float = 1.0) -> "Samples":
        fmt = _proxy_format(scheme, top)
        qt = fp4lab.quantize(x, fmt)
        s = np.repeat(np.asarray(qt.scales, np.float64), 16, axis=-1) * float(qt.tensor_scale or 1.0) * top
        t = (np.abs(x.astype(np.float64)) / s).ravel()
        w = (s * s).ravel()
        order = np.argsort(t, kind="stable")
        t, w = t[order], w[order]
        pre = lambda a: np.concatenate([[0.0], np.cumsum(a)])  # noqa: E731
        return cls(t, np.arange(t.size + 1, dtype=np.float64), pre(t), pre(w), pre(w * t), pre(w * t * t))

    def evaluate(self, mags: np.ndarray) -> dict[str, np.ndarray]:
        """``sqnr_db``, ``bias``, ``alpha`` for grids ``mags [G, 8]`` (ascending, ``m_0 = 0``, ``m_7 = 1``)."""
        mags = np.asarray(mags, np.float64)
        thr = (mags[:, :-1] + mags[:, 1:]) / 2.0
        idx = np.searchsorted(self.t, thr.ravel(), side="right").reshape(thr.shape)
        n = self.t.size
        edges = np.concatenate([np.zeros((mags.shape[0], 1), np.intp), idx, np.full((mags.shape[0], 1), n)], axis=1)
        seg = lambda p: p[edges[:, 1:]] - p[edges[:, :-1]]  # noqa: E731
        W0, W1, W2, C0, C1 = seg(self.w0), seg(self.w1), seg(self.w2), seg(self.c0), seg(self.c1)
        sse = np.sum(mags * mags * W0 - 2.0 * mags * W1 + W2, axis=1)
        energy = self.w2[-1]
        with np.errstate(divide="ignore"):
            sqnr = -10.0 * np.log10(np.maximum(sse, 0.0) / energy)
        return {"sqnr_db": sqnr, "bias": np.sum(mags * C0 - C1, axis=1) / n,
                "alpha": np.sum(mags * W1, axis=1) / energy}


def lattice_grids(lattice: int) -> np.ndarray:
    """All ``[G, 8]`` grids with interior magnitudes on ``{k/L}`` (``L`` a power of two, at most 64)."""
    if lattice < 8 or lattice > 64 or lattice & (lattice - 1):
        raise InputError(f"search: lattice must be a power of two between 8 and 64, got {lattice}")
    combos = np.array(list(itertools.combinations(range(1, lattice), 6)), dtype=np.float64) / lattice
    return np.concatenate([np.zeros((len(combos), 1)), combos, np.ones((len(combos), 1))], axis=1)


def family_grids() -> dict[str, np.ndarray]:
    """Named parameterized grids (``family:param``) as ``[8]`` magnitude arrays normalized to top 1."""
    from statistics import NormalDist

    out: dict[str, np.ndarray] = {}
    i = np.arange(8) / 7.0
    for g in np.round(np.arange(0.5, 2.51, 0.05), 2):
        out[f"power:gamma={g:g}"] = i ** g
    nd = NormalDist()
    for q in (0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995):
        out[f"normal:q={q:g}"] = np.array([nd.inv_cdf(0.5 + q * k / 14.0) for k in range(8)]) / nd.inv_cdf(0.5 + q / 2)
    for k in range(1, 7):
        for r in (1.25, 1.5, 2.0, 3.0):
            steps = np.array([1.0] * k + [r] * (7 - k))
            out[f"two-slope:k={k},r={r:g}"] = np.concatenate([[0.0], np.cumsum(steps)]) / steps.sum()
    for name, v in REFERENCE_GRIDS.items():
        out[name] = np.array(v, np.float64) / v[-1]
    return {k: _f32_exact(v) for k, v in out.items()}


def _f32_exact(m: np.ndarray, bits: int = 16) -> np.ndarray:
    """Round magnitudes to multiples of 2^-bits (float32-exact), keeping 0, 1 and strict order."""
    r = np.round(np.asarray(m, np.float64) * 2 ** bits) / 2 ** bits
    r[0], r[-1] = 0.0, 1.0
    if np.any(np.diff(r) <= 0):
        raise InputError(f"search: grid {m.tolist()} collapses when rounded to 2^-{bits}")
    return r


def lloyd_max(samples: Samples, iters: int = 200) -> np.ndarray:
    """MSE-optimal grid for ``samples`` with ``m_0 = 0`` and ``m_7 = 1`` fixed: Lloyd iteration (each interior level
    moves to the s^2-weighted centroid of its bin), started from the uniform grid."""
    m = np.arange(8) / 7.0
    for _ in range(iters):
        thr = (m[:-1] + m[1:]) / 2.0
        idx = np.concatenate([[0], np.searchsorted(samples.t, thr, side="right"), [samples.t.size]])
        W0 = samples.w0[idx[1:]] - samples.w0[idx[:-1]]
        W1 = samples.w1[idx[1:]] - samples.w1[idx[:-1]]
        new = m.copy()
        ok = W0[1:-1] > 0
        new[1:-1][ok] = (W1[1:-1] / np.where(W0[1:-1] > 0, W0[1:-1], 1.0))[ok]
        if np.allclose(new, m, atol=1e-12):
            break
        m = new
    return _f32_exact(m)


def pareto_front(sqnr: np.ndarray, abs_bias: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (higher SQNR, lower |bias|), ordered by decreasing SQNR."""
    order = np.lexsort((abs_bias, -sqnr))
    front, best = [], math.inf
    for i in order:
        if abs_bias[i] < best:
            front.append(int(i))
            best = abs_bias[i]
    return np.array(front, dtype=np.intp)


def verify(mags: np.ndarray, scheme: str, top: float, x: np.ndarray) -> float:
    """SQNR (dB) of the grid ``mags`` (top 1) scaled to ``top``, measured with ``fp4lab.quantize`` on ``x``."""
    from fp4lab.analysis.metrics import sqnr_db

    fmt = _proxy_format(scheme, top).model_copy(update={
        "element": _proxy_format(scheme, top).element.model_validate(
            {"kind": "table", "bits": 4, "magnitudes": [float(v) * top for v in mags]})})
    return sqnr_db(x, fp4lab.dequantize(fp4lab.quantize(x, fmt)))


def run_search(x: np.ndarray | None = None, lattice: int = 32, schemes: tuple[str, ...] = SCHEMES,
               progress: Callable[[str], None] | None = None, verify_front: bool = True,
               max_front: int = 12) -> dict[str, Any]:
    """Evaluate lattice and family grids under each scheme; return per-scheme reference rows and Pareto fronts.

    JSON-ready: ``{"lattice", "n_samples", "schemes": {scheme: {"n_grids", "named": [...], "front": [...]}}}``.
    ``named``: every family/reference grid (and ``lloyd-max``), best SQNR first; ``front``: the Pareto front (at
    most ``max_front`` rows, best SQNR first) over lattice and named grids together. Each row has ``name``,
    ``magnitudes`` (top = 1), ``top`` (e8m0 only: the top level's mantissa g), ``sqnr_db``, ``bias``, ``alpha``
    and, on the front, ``verified_sqnr_db`` (measured with ``fp4lab.quantize``).
    """
    x = post_rht_data() if x is None else np.asarray(x, np.float32)
    lat = lattice_grids(lattice)
    fam = family_grids()
    out: dict[str, Any] = {"lattice": lattice, "n_samples": int(x.size), "schemes": {}}
    for scheme in schemes:
        tops = E8M0_TOPS if scheme == "e8m0" else (1.0,)
        rows: list[dict[str, Any]] = []
        best_lat: dict[str, np.ndarray] | None = None
        for top in tops:
            smp = Samples.from_data(x, scheme, top)
            names = list(fam) + ["lloyd-max"]
            grids = np.stack(list(fam.values()) + [lloyd_max(smp)])
            res = smp.evaluate(grids)
            for j, name in enumerate(names):
                if scheme == "e8m0" and name in NATURAL_TOP and NATURAL_TOP[name] != top:
                    continue
                rows.append(_row(name, grids[j], top if scheme == "e8m0" else None, res, j))
            lres = {k: np.empty(len(lat)) for k in ("sqnr_db", "bias", "alpha")}
            for lo in range(0, len(lat), 100_000):
                part = smp.evaluate(lat[lo:lo + 100_000])
                for k in lres:
                    lres[k][lo:lo + 100_000] = part[k]
            lres["top"] = np.full(len(lat), top)
            if best_lat is None:
                best_lat = lres
            else:  # keep, per lattice grid, the top mantissa with the higher SQNR
                take = lres["sqnr_db"] > best_lat["sqnr_db"]
                best_lat = {k: np.where(take, lres[k], best_lat[k]) for k in best_lat}
            if progress is not None:
                progress(f"{scheme} top {top:g}")
        assert best_lat is not None
        named = sorted(rows, key=lambda r: -r["sqnr_db"])
        pool = [_row("lattice", lat[j], float(best_lat["top"][j]) if scheme == "e8m0" else None, best_lat, j)
                for j in pareto_front(best_lat["sqnr_db"], np.abs(best_lat["bias"]))] + named
        keep = pareto_front(np.array([r["sqnr_db"] for r in pool]), np.abs(np.array([r["bias"] for r in pool])))
        front = [pool[j] for j in keep[:max_front]]
        if verify_front:
            for row in front:
                row["verified_sqnr_db"] = verify(np.array(row["magnitudes"]), scheme, row["top"] or 1.0, x)
        out["schemes"][scheme] = {"n_grids": int(len(lat) + len(rows)), "named": named, "front": front}
    return out


def _row(name: str, mags: np.ndarray, top: float | None, res: dict[str, np.ndarray], j: int) -> dict[str, Any]:
    return {"name": name, "magnitudes": [float(v) for v in mags], "top": top,
            "sqnr_db": float(res["sqnr_db"][j]), "bias": float(res["bias"][j]), "alpha": float(res["alpha"][j])}
