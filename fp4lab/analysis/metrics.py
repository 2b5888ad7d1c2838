"""Quantization-quality metrics for one tensor and one format.

All sums are float64 over the finite elements of the reference ``x`` (non-finite inputs are left out).

* ``nmse = ||xhat - x||^2 / ||x||^2``; ``sqnr_db = -10 log10(nmse)`` (inf for an exact result).
* ``alpha = <xhat, x> / ||x||^2`` (paper Eq. 3): below 1 means the signal component shrank.
* ``bias``: mean signed error in normalized magnitude space, ``mean(|q| - |t|)`` with ``t = x / s`` the element
  divided by its full scale (block scale times tensor scale) and ``q`` the decoded grid value of its code, in grid
  units (paper: ``b_G = E[rho(t) - t]``).
* ``b_eff = exp(H) / K`` (paper Eq. 6-7): ``H = -sum p_i log(p_i + eps)``, ``eps = 1e-12``, over the ``K`` distinct
  grid magnitudes (sign pooled; the zero bucket included; 8 for E2M1/E1M2/INT4, 15 for NF4).
* ``clip_rate``: fraction of elements with ``|t|`` above the grid's largest magnitude by more than a relative
  ``2**-20`` (they saturate; the float32 rounding of an amax/g_max scale is not clipping).
* ``zero_block_rate``: fraction of blocks with a non-zero finite input whose dequantized values are all zero.
* ``scale_code_histogram``: ``{code: count}`` of the stored block-scale codes.

With an RHT every quantity is measured in the rotated basis (``x`` rotated exactly as ``quantize`` rotates it,
``dequantize(rotated=True)``), as in the paper's ``NMSE_A(G, T) = ||Q(TA) - TA||^2 / ||TA||^2``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

import fp4lab
from fp4lab.quantized import QuantizedTensor

EPS = 1e-12
CLIP_RTOL = 2.0**-20


def _np(a: Any) -> np.ndarray:
    if type(a).__module__.startswith("torch"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def _pair(x: Any, xhat: Any) -> tuple[np.ndarray, np.ndarray]:
    x64, y64 = _np(x).astype(np.float64).ravel(), _np(xhat).astype(np.float64).ravel()
    if _np(x).shape != _np(xhat).shape:
        raise ValueError(f"metrics: shapes differ: reference {_np(x).shape}, quantized {_np(xhat).shape}")
    keep = np.isfinite(x64)
    return (x64, y64) if keep.all() else (x64[keep], y64[keep])


def nmse(x: Any, xhat: Any) -> float:
    """``||xhat - x||^2 / ||x||^2`` (float64; NaN if ``x`` is all zero)."""
    a, b = _pair(x, xhat)
    den = float(np.dot(a, a))
    return float(np.dot(b - a, b - a)) / den if den > 0 else float("nan")


def sqnr_db(x: Any, xhat: Any) -> float:
    """``10 log10(||x||^2 / ||xhat - x||^2)`` in dB (inf if exact)."""
    e = nmse(x, xhat)
    return float("inf") if e == 0 else float(-10.0 * np.log10(e))


def alpha(x: Any, xhat: Any) -> float:
    """Attenuation factor ``<xhat, x> / ||x||^2`` (paper Eq. 3)."""
    a, b = _pair(x, xhat)
    den = float(np.dot(a, a))
    return float(np.dot(b, a)) / den if den > 0 else float("nan")


def element_scales(qt: QuantizedTensor) -> np.ndarray:
    """float64 per-element full scale (block scale times tensor scale), shape of ``qt.codes``."""
    fmt = qt.fmt
    shape = tuple(qt.codes.shape)
    if fmt.block is None:
        return np.ones(shape)
    s = _np(qt.scales).astype(np.float64)
    if fmt.block.is_2d:
        r, c = fmt.block.shape
        s = np.repeat(np.repeat(s, r, axis=-2), c, axis=-1)
    else:
        s = np.repeat(s, fmt.block.shape[0], axis=qt.axis)
    if qt.tensor_scale is not None:
        s = s * float(qt.tensor_scale)
    return s


def normalized(x_basis: Any, qt: QuantizedTensor) -> tuple[np.ndarray, np.ndarray]:
    """``(t, q)``: ``t = x / s`` (float64, in the basis the quantizer saw) and ``q`` = decoded grid value per code."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = _np(x_basis).astype(np.float64) / element_scales(qt)
    q = qt.fmt.element.values[_np(qt.codes).astype(np.intp)]
    return t, q


def mean_signed_error(t: np.ndarray, q: np.ndarray) -> float:
    """``mean(|q| - |t|)`` over elements where both are finite (grid units)."""
    keep = np.isfinite(t) & np.isfinite(q)
    return float(np.mean(np.abs(q[keep]) - np.abs(t[keep]))) if keep.any() else float("nan")


def bucket_proportions(qt: QuantizedTensor) -> tuple[np.ndarray, np.ndarray]:
    """``(magnitudes, p)``: the grid's distinct finite magnitudes and the fraction of finite codes in each."""
    values = qt.fmt.element.values
    mags = np.unique(np.abs(qt.fmt.element.levels))
    per_code = np.bincount(_np(qt.codes).ravel(), minlength=values.size).astype(np.float64)
    finite = np.isfinite(values)
    bucket = np.searchsorted(mags, np.abs(np.where(finite, values, 0.0)))
    counts = np.bincount(bucket[finite], weights=per_code[finite], minlength=mags.size)
    return mags, counts / max(counts.sum(), 1.0)


def b_eff(qt: QuantizedTensor, eps: float = EPS) -> float:
    """Effective bucket ratio ``exp(-sum p log(p + eps)) / K`` in ``[1/K, 1]`` (paper Eq. 6-7)."""
    mags, p = bucket_proportions(qt)
    return float(np.exp(-np.sum(p * np.log(p + eps))) / mags.size)


def clip_rate(t: np.ndarray, fmt: Any) -> float:
    """Fraction of finite ``t`` with ``|t| > g_max * (1 + 2**-20)`` (saturated elements)."""
    t = np.asarray(t)
    keep = np.isfinite(t)
    limit = fmt.element.amax * (1.0 + CLIP_RTOL)
    return float(np.mean(np.abs(t[keep]) > limit)) if keep.any() else 0.0


def _blocks_any(mask: np.ndarray, qt: QuantizedTensor) -> np.ndarray:
    """Per-block ``any`` of an element mask, shape of ``qt.scales``."""
    fmt = qt.fmt
    if fmt.block.is_2d:
        r, c = fmt.block.shape
        shp = mask.shape[:-2] + (mask.shape[-2] // r, r, mask.shape[-1] // c, c)
        return mask.reshape(shp).any(axis=(-3, -1))
    bs = fmt.block.shape[0]
    m = np.moveaxis(mask, qt.axis, -1)
    return np.moveaxis(m.reshape(m.shape[:-1] + (m.shape[-1] // bs, bs)).any(axis=-1), -1, qt.axis)


def zero_block_rate(x_basis: Any, xhat: Any, qt: QuantizedTensor) -> float:
    """Fraction of blocks with a non-zero finite input that dequantize to all zeros (element-only formats: 0)."""
    if qt.fmt.block is None:
        return 0.0
    x, y = _np(x_basis), _np(xhat)
    live = _blocks_any(np.isfinite(x) & (x != 0), qt)
    nonzero_out = _blocks_any(y != 0, qt)
    n = int(live.sum())
    return float(np.sum(live & ~nonzero_out)) / n if n else 0.0


def scale_code_histogram(qt: QuantizedTensor) -> dict[int, int]:
    """``{scale code: count}`` over all stored block scales (empty for element-only formats)."""
    codes, counts = np.unique(_np(qt.scale_codes).ravel(), return_counts=True)
    return {int(c): int(n) for c, n in zip(codes, counts)}


@dataclass(frozen=True)
class TensorMetrics:
    """All metrics of one (tensor, format, rounding, RHT) case; see the module docstring for definitions."""

    nmse: float
    sqnr_db: float
    alpha: float
    bias: float
    b_eff: float
    clip_rate: float
    zero_block_rate: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def measure(x_basis: Any, qt: QuantizedTensor, xhat: Any | None = None) -> TensorMetrics:
    """Metrics of ``qt`` against ``x_basis`` (the input in the basis the quantizer saw, i.e. after any RHT)."""
    y = _np(fp4lab.dequantize(qt, rotated=True)) if xhat is None else _np(xhat)
    t, q = normalized(x_basis, qt)
    a, b = _pair(x_basis, y)
    den = float(np.dot(a, a))
    err = float(np.dot(b - a, b - a)) / den if den > 0 else float("nan")
    snr = float("inf") if err == 0 else float(-10.0 * np.log10(err))
    return TensorMetrics(nmse=err, sqnr_db=snr, alpha=float(np.dot(b, a)) / den if den > 0 else float("nan"),
                         bias=mean_signed_error(t, q), b_eff=b_eff(qt), clip_rate=clip_rate(t, qt.fmt),
                         zero_block_rate=zero_block_rate(x_basis, y, qt))


def evaluate(x: Any, fmt: Any, rht: int | None = None, rht_seed: int = 0, rounding: str | None = None,
             seed: int = 0, axis: int = -1) -> tuple[TensorMetrics, QuantizedTensor]:
    """Quantize ``x`` with ``fmt`` (``fp4lab.quantize`` arguments) and measure it in the quantizer's basis."""
    x = _np(x).astype(np.float32)
    qt = fp4lab.quantize(x, fmt, rounding=rounding, seed=seed, axis=axis, rht=rht, rht_seed=rht_seed)
    basis = x if rht is None else _np(fp4lab.rht(x, size=rht, seed=rht_seed, axis=qt.axis))
    return measure(basis, qt), qt
