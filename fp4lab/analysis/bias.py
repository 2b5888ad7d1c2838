"""Shrinkage bias of an element grid (paper Eq. 1-2) and its expectation under a distribution of magnitudes.

Units: normalized magnitudes ``t = |x| / s`` (grid units: the block amax maps onto the grid's largest level).
Non-negative levels ``0 = q_0 < q_1 < ... < q_n``; RTNE bin of level i is
``((q_{i-1} + q_i)/2, (q_i + q_{i+1})/2)`` with half-widths ``l_i = (q_i - q_{i-1})/2``, ``r_i = (q_{i+1} - q_i)/2``.
Under a locally uniform density the conditional mean error in bin i is ``(l_i - r_i)/2`` (Eq. 2). The edge bins
follow the same formula with ``l_0 = 0`` (the zero bin ``[0, q_1/2)`` rounds toward zero) and ``r_n = 0`` (the top
half-bin rounds up); ``interior`` marks levels 1..n-1, the ones the paper's analysis covers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from fp4lab.errors import InputError


def magnitude_levels(grid: Any) -> np.ndarray:
    """float64 ascending non-negative levels ``G+`` of a QuantFormat, an element grid or a level array.

    For a grid that is not sign symmetric (e.g. NF4) this is its non-negative side.
    """
    levels = getattr(getattr(grid, "element", grid), "levels", grid)
    lv = np.unique(np.asarray(levels, dtype=np.float64))
    lv = lv[np.isfinite(lv) & (lv >= 0)]
    if lv.size < 2 or lv[0] != 0.0:
        raise InputError(f"magnitude_levels: need 0 and at least one positive level, got {lv.tolist()}")
    return lv


@dataclass(frozen=True)
class LevelBias:
    """Per-level bin geometry and locally-uniform bias (float64 arrays of length n+1, grid units)."""

    levels: np.ndarray
    left: np.ndarray      # l_i (0 for the zero level)
    right: np.ndarray     # r_i (0 for the top level)
    bias: np.ndarray      # (l_i - r_i) / 2
    interior: np.ndarray  # bool: levels 1..n-1

    def at(self, q: float) -> float:
        """Bias of the level equal to ``q``."""
        idx = np.flatnonzero(self.levels == q)
        if idx.size != 1:
            raise InputError(f"LevelBias.at: {q} is not a level of {self.levels.tolist()}")
        return float(self.bias[idx[0]])


def level_bias(grid: Any) -> LevelBias:
    """Closed-form shrinkage bias per non-negative level: ``(l_i - r_i)/2`` (paper Eq. 2)."""
    q = magnitude_levels(grid)
    half = np.diff(q) / 2.0
    left = np.concatenate([[0.0], half])
    right = np.concatenate([half, [0.0]])
    interior = np.zeros(q.size, bool)
    interior[1:-1] = True
    return LevelBias(q, left, right, (left - right) / 2.0, interior)


def signed_level_bias(grid: Any) -> np.ndarray:
    """Locally-uniform magnitude bias ``E[|q| - |x|]`` of every signed level (float64, aligned with
    ``grid.levels``, grid units), from the signed grid's own neighbours: for a level ``v != 0``, ``l`` is half the
    gap to its neighbour toward zero and ``r`` half the gap to its neighbour away from zero (0 at the most negative
    and the most positive level), and the bias is ``(l - r) / 2``. The zero level's bin ``[-a, b]`` (half-gaps to
    its neighbours, 0 where there is none) gives ``-(a^2 + b^2) / (2 (a + b))``. On a sign-symmetric grid this is
    :func:`level_bias` at ``|v|``; on an asymmetric grid (NF4, two's-complement INT4, value tables) each side keeps
    its own geometry."""
    lv = np.asarray(getattr(getattr(grid, "element", grid), "levels", grid), dtype=np.float64)
    if lv.size < 2 or not np.isfinite(lv).all() or np.any(np.diff(lv) <= 0) or 0.0 not in lv:
        raise InputError(f"signed_level_bias: need ascending finite levels including 0, got {lv.tolist()}")
    half = np.diff(lv) / 2.0
    below = np.concatenate([[0.0], half])  # half-gap to the next lower level (0 at the bottom)
    above = np.concatenate([half, [0.0]])  # half-gap to the next higher level (0 at the top)
    toward_zero = np.where(lv > 0, below, above)
    away = np.where(lv > 0, above, below)
    out = (toward_zero - away) / 2.0
    z = int(np.flatnonzero(lv == 0.0)[0])
    a, b = below[z], above[z]
    out[z] = -(a * a + b * b) / (2.0 * (a + b))
    return out


def round_magnitudes(grid: Any, t: np.ndarray) -> np.ndarray:
    """RTNE-nearest level for each magnitude ``t >= 0`` (float64); values above the top level saturate.

    Exact midpoints go to the lower level (a measure-zero set for continuous data; bit-exact rounding lives in the
    emulator).
    """
    q = magnitude_levels(grid)
    mids = (q[:-1] + q[1:]) / 2.0
    return q[np.searchsorted(mids, np.asarray(t, dtype=np.float64), side="left")]


def expected_bias(grid: Any, t: np.ndarray) -> float:
    """Empirical ``E[rho(t) - t]`` over magnitude samples ``t`` (grid units)."""
    t = np.abs(np.asarray(t, dtype=np.float64)).ravel()
    return float(np.mean(round_magnitudes(grid, t) - t))


def bin_bias(grid: Any, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-level bin probability ``P(rho(t) = q_i)`` and conditional mean error ``E[rho(t) - t | bin i]``
    (NaN for empty bins) over magnitude samples ``t``."""
    q = magnitude_levels(grid)
    t = np.abs(np.asarray(t, dtype=np.float64)).ravel()
    idx = np.searchsorted((q[:-1] + q[1:]) / 2.0, t, side="left")
    count = np.bincount(idx, minlength=q.size).astype(np.float64)
    err = np.bincount(idx, weights=q[idx] - t, minlength=q.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return count / max(t.size, 1), np.where(count > 0, err / count, np.nan)


def bias_under_density(grid: Any, pdf: Callable[[np.ndarray], np.ndarray], upper: float | None = None,
                       n: int = 400_000) -> float:
    """``E[rho(t) - t]`` for a density ``pdf`` on ``[0, upper]`` (default: the top level), midpoint quadrature
    with ``n`` cells; the density is normalized numerically over that interval."""
    q = magnitude_levels(grid)
    hi = float(q[-1] if upper is None else upper)
    t = (np.arange(n, dtype=np.float64) + 0.5) * (hi / n)
    w = np.asarray(pdf(t), dtype=np.float64)
    if np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise InputError("bias_under_density: pdf must be finite, non-negative and not all zero on [0, upper]")
    return float(np.sum(w * (round_magnitudes(q, t) - t)) / np.sum(w))
