"""GEMM-level diagnostics: output SQNR of the three training GEMMs and multi-layer attenuation (paper Eq. 3-5).

A linear layer with ``X: [M, K]`` (tokens x in), ``W: [N, K]`` (out x in) and ``dY: [M, N]`` runs

=========  ================  ==============================  ==========================================
GEMM       product           reduction dim                   operands blocked (and rotated) along
=========  ================  ==============================  ==========================================
``fprop``  ``Y = X W^T``     K                               X axis 1, W axis 1
``dgrad``  ``dX = dY W``     N                               dY axis 1, W axis 0
``wgrad``  ``dW = dY^T X``   M                               dY axis 0, X axis 0
=========  ================  ==============================  ==========================================

Each operand is quantized with ``fp4lab.quantize`` along the reduction dim; with RHT both operands are rotated with
the same signs (``rht_seed``) so the product is unchanged in exact arithmetic, and the dequantized operands are
multiplied in the rotated basis (``dequantize(rotated=True)``). Products are float64 (no accumulation-rounding
model: this isolates the quantization error). ``sqnr_db = 10 log10(||Z||^2 / ||Z_q - Z||^2)`` against the float64
product of the unquantized float32 operands; ``eta = <Z_q, Z> / ||Z||^2`` is the GEMM's signal attenuation and
``alpha_a``, ``alpha_b`` the operands' Eq. 3 factors (``eta ~ alpha_a * alpha_b`` when the residuals are
incoherent, Eq. 4). ``dY`` may use stochastic rounding (``sr_dy``), as in both of the paper's recipes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import fp4lab
from fp4lab.analysis import distributions
from fp4lab.analysis.metrics import alpha as alpha_factor
from fp4lab.analysis.metrics import sqnr_db
from fp4lab.errors import InputError

GEMMS: tuple[str, ...] = ("fprop", "dgrad", "wgrad")


def _operands(name: str, x: np.ndarray, w: np.ndarray, dy: np.ndarray):  # type: ignore[no-untyped-def]
    """(A, axis_a, is_dy_a, B, axis_b, is_dy_b, product) with product(A, B) giving the GEMM output."""
    if name == "fprop":
        return x, 1, False, w, 1, False, lambda a, b: a @ b.T
    if name == "dgrad":
        return dy, 1, True, w, 0, False, lambda a, b: a @ b
    if name == "wgrad":
        return dy, 0, True, x, 0, False, lambda a, b: a.T @ b
    raise InputError(f"gemm: unknown GEMM '{name}'; use one of {', '.join(GEMMS)}")


def _quantized(a: np.ndarray, fmt: Any, axis: int, rht: int | None, rht_seed: int, sr: bool, seed: int):
    """(dequantized operand in the rotated basis, the operand itself in that basis), both float64."""
    qt = fp4lab.quantize(a, fmt, rounding="sr" if sr else None, seed=seed, axis=axis, rht=rht, rht_seed=rht_seed)
    basis = a if rht is None else fp4lab.rht(a, size=rht, seed=rht_seed, axis=axis)
    return np.asarray(fp4lab.dequantize(qt, rotated=True), np.float64), np.asarray(basis, np.float64)


def gemm_sqnr(x: np.ndarray, w: np.ndarray, dy: np.ndarray, fmt: Any, gemm: str, rht: int | None = None,
              rht_seed: int = 0, sr_dy: bool = False, seed: int = 0) -> dict[str, float]:
    """``{sqnr_db, eta, alpha_a, alpha_b}`` of one training GEMM (see the module docstring)."""
    x, w, dy = (np.asarray(t, np.float32) for t in (x, w, dy))
    if x.shape[1] != w.shape[1] or dy.shape != (x.shape[0], w.shape[0]):
        raise InputError(f"gemm: shapes X {x.shape}, W {w.shape}, dY {dy.shape} do not form X:[M,K], W:[N,K], dY:[M,N]")
    a, ax_a, sr_a, b, ax_b, sr_b, prod = _operands(gemm, x, w, dy)
    qa, ra = _quantized(a, fmt, ax_a, rht, rht_seed, sr_dy and sr_a, seed)
    qb, rb = _quantized(b, fmt, ax_b, rht, rht_seed, sr_dy and sr_b, seed + 1)
    z = prod(a.astype(np.float64), b.astype(np.float64))
    zq = prod(qa, qb)
    return {"sqnr_db": sqnr_db(z, zq), "eta": alpha_factor(z, zq), "alpha_a": alpha_factor(ra, qa),
            "alpha_b": alpha_factor(rb, qb)}


def training_gemms(x: np.ndarray, w: np.ndarray, dy: np.ndarray, fmt: Any, rht_scope: tuple[str, ...] = (),
                   rht: int = 16, rht_seed: int = 0, sr_dy: bool = True, seed: int = 0) -> dict[str, dict[str, float]]:
    """``gemm_sqnr`` for all three GEMMs; RHT of size ``rht`` on the GEMMs named in ``rht_scope``.

    The paper's E2M1 reference uses ``rht_scope=("wgrad",)``, UFP4 all three; both use SR on dY."""
    return {g: gemm_sqnr(x, w, dy, fmt, g, rht if g in rht_scope else None, rht_seed, sr_dy, seed) for g in GEMMS}


def attenuation_chain(fmt: Any, depth: int = 12, tokens: int = 256, width: int = 256, dist: str = "gaussian",
                      rht: int | None = None, rht_seed: int = 0, seed: int = 0) -> dict[str, Any]:
    """Chain of ``depth`` quantized linear maps ``h_{k+1} = Q(h_k) Q(W_k)^T`` (no nonlinearity) against the same
    chain in float64. ``W_k`` ~ N(0, 1/width) (norm-preserving on average); ``h_0`` from ``dist``.

    Per layer ``eta_k = <Q(h_k) Q(W_k)^T, h_k W_k^T> / ||h_k W_k^T||^2`` on the layer's actual (quantized-path)
    input, ``delta_k = 1 - eta_k``. Returns ``eta`` (list), ``prod_eta``, ``exp_minus_sum_delta`` (Eq. 5's
    approximation), and ``measured`` = ``<h_q, h_ref> / ||h_ref||^2`` of the final outputs.
    """
    rng = np.random.default_rng(seed + 1)
    h_ref = distributions.sample(dist, (tokens, width), seed).astype(np.float64)
    h_q = h_ref.astype(np.float32)
    etas = []
    for k in range(depth):
        w = (rng.standard_normal((width, width)) / math.sqrt(width)).astype(np.float32)
        qa, _ = _quantized(h_q, fmt, 1, rht, rht_seed + k, False, 0)
        qw, _ = _quantized(w, fmt, 1, rht, rht_seed + k, False, 0)
        z_q = qa @ qw.T
        etas.append(alpha_factor(h_q.astype(np.float64) @ w.astype(np.float64).T, z_q))
        h_q = z_q.astype(np.float32)
        h_ref = h_ref @ w.astype(np.float64).T
    deltas = [1.0 - e for e in etas]
    return {"eta": etas, "prod_eta": float(np.prod(etas)), "exp_minus_sum_delta": math.exp(-sum(deltas)),
            "measured": alpha_factor(h_ref, h_q.astype(np.float64))}
