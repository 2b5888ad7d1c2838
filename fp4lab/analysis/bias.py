"""Shrinkage bias of an element grid (paper Eq. 1-2).

Under round-to-nearest with a locally uniform input density, inputs that round to level ``g_i`` fill the bin
``[g_i - l_i, g_i + r_i]`` with half-widths ``l_i = (g_i - g_{i-1})/2`` and ``r_i = (g_{i+1} - g_i)/2``; their mean
rounding error is ``(l_i - r_i)/2``. Negative values pull magnitudes toward zero (shrinkage).
"""

from __future__ import annotations

import numpy as np

from fp4lab.formats.grids import _GridBase


def level_bias(grid: _GridBase) -> np.ndarray:
    """float64 ``[len(levels)]``: ``(l_i - r_i)/2`` per level, in grid units.

    The end levels have one half-bin: with amax scaling no input lies beyond the grid (``t <= max``), so the
    outer half-width is 0 (the top level's bias is ``+l/2``, the bottom level's ``-r/2``).
    """
    lv = np.asarray(grid.levels, dtype=np.float64)
    gaps = np.diff(lv) / 2.0
    left = np.concatenate([[0.0], gaps])
    right = np.concatenate([gaps, [0.0]])
    return (left - right) / 2.0
