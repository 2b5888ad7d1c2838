"""RHT diagnostics: how a Random Hadamard Transform of a given size changes SQNR, B_eff, bias and alpha.

``delta_sqnr_db = 10 log10(NMSE_I / NMSE_H) = SQNR_H - SQNR_I`` (paper §6.1; positive = the rotation helped) and
``delta_b_eff = B_eff(H) - B_eff(I)``, each metric measured in the quantizer's basis (``metrics.evaluate``).
"""

from __future__ import annotations

from typing import Any

from fp4lab.analysis import metrics

DEFAULT_SIZES: tuple[int, ...] = (16, 32, 64, 128)


def rht_sweep(x: Any, fmt: Any, sizes: tuple[int, ...] = DEFAULT_SIZES, rht_seed: int = 0, axis: int = -1,
              rounding: str | None = None) -> list[dict[str, Any]]:
    """One record per RHT size (0 = none first): the ``TensorMetrics`` fields plus ``rht``, ``delta_sqnr_db``
    and ``delta_b_eff`` relative to no rotation (0.0 for the no-RHT record)."""
    base, _ = metrics.evaluate(x, fmt, rounding=rounding, axis=axis)
    out = [{"rht": 0, **base.as_dict(), "delta_sqnr_db": 0.0, "delta_b_eff": 0.0}]
    for size in sizes:
        m, _ = metrics.evaluate(x, fmt, rht=size, rht_seed=rht_seed, rounding=rounding, axis=axis)
        out.append({"rht": size, **m.as_dict(), "delta_sqnr_db": m.sqnr_db - base.sqnr_db,
                    "delta_b_eff": m.b_eff - base.b_eff})
    return out
