"""Baseline for benchmarks/bench_training.py: the built-in recipes' fake quantization written the way a PyTorch user
would write it (tensor ops only: RHT as a matmul with a Hadamard matrix, block amax, scale, nearest-level rounding
by thresholds, stochastic rounding with ``torch.rand``), in eager mode or under ``torch.compile``.

It computes the same function as fp4lab's operands up to ties and the random stream (checked in the benchmark by
relative difference, not bit for bit); it exists to be timed against.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import fp4lab
from fp4lab.numerics.rht import hadamard_matrix, rht_signs


def _rht(t: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """Rotate consecutive n-chunks of the last axis: (t * s) @ H (fp32)."""
    h = torch.from_numpy(hadamard_matrix(n)).to(t.device, torch.float32)
    s = torch.from_numpy(rht_signs(n, seed)).to(t.device)
    return ((t.float().unflatten(-1, (-1, n)) * s) @ h).flatten(-2)


def _e4m3(v: torch.Tensor) -> torch.Tensor:
    return v.clamp(max=448.0).to(torch.float8_e4m3fn).float()


def naive_fake_quant(t: torch.Tensor, fmt_name: str, axis: int, rht: int | None, sr: bool) -> torch.Tensor:
    """bf16 fake-quantized copy of 2-D ``t`` blocked along ``axis`` (-1 or 0) for the recipes' formats."""
    fmt = fp4lab.get_format(fmt_name)
    x = t.float()
    if axis == 0:
        x = x.t()
    if rht:
        x = _rht(x, rht, 0)
    bs = fmt.block.shape[-1]
    levels = torch.tensor(fmt.element.levels, dtype=torch.float32, device=t.device)
    pos = levels[levels >= 0]
    vmax = float(pos[-1])
    if fmt.block.is_2d:
        r = fmt.block.shape[0]
        xb = x.unflatten(0, (-1, r)).unflatten(-1, (-1, bs)).transpose(1, 2)  # [M/r, K/c, r, c]
        amax = xb.abs().amax(dim=(-1, -2), keepdim=True)
    else:
        xb = x.unflatten(-1, (-1, bs))
        amax = xb.abs().amax(dim=-1, keepdim=True)
    ts = None
    if fmt.tensor_scale != "none":
        ts = (x.abs().amax() / (vmax * 448.0)).clamp(min=1e-30)
        s = _e4m3(amax / vmax / ts) * ts
    elif fmt.scale.kind == "pow2":
        s = torch.exp2(torch.floor(torch.log2(amax.clamp(min=1e-30))) - math.floor(math.log2(vmax)))
    else:
        s = amax / vmax
    s = torch.where(s > 0, s, torch.ones_like(s))
    q = (xb / s).clamp(-vmax, vmax)
    a = q.abs()
    idx = torch.bucketize(a, pos).clamp(max=pos.numel() - 1)  # first level >= a
    hi = pos[idx]
    lo = pos[(idx - 1).clamp(min=0)]
    if sr:
        p = (a - lo) / (hi - lo).clamp(min=1e-30)
        up = torch.rand_like(a) < p
    else:
        up = (a - lo) > (hi - a)
    v = torch.where(up | (a >= hi), hi, lo).copysign(q) * s
    if fmt.block.is_2d:
        v = v.transpose(1, 2).reshape(x.shape)
    else:
        v = v.flatten(-2)
    if axis == 0:
        v = v.t()
    return v.to(torch.bfloat16)


class NaiveQuantLinearFunction(torch.autograd.Function):
    """The recipe's three GEMMs on naive fake-quantized bf16 operands (saves X and W, like nn.Linear)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, recipe: Any, fq: Any) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.recipe, ctx.fq = recipe, fq
        r = recipe
        xk = fq(x, r.format_of("x"), -1, r.rht_size if "fprop" in r.rht else None, "x" in r.sr)
        wk = fq(w, r.format_of("w"), -1, r.rht_size if "fprop" in r.rht else None, "w" in r.sr)
        return xk @ wk.t()

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple:
        x, w = ctx.saved_tensors
        r, fq = ctx.recipe, ctx.fq
        dyn = fq(dy, r.format_of("dy"), -1, r.rht_size if "dgrad" in r.rht else None, "dy" in r.sr)
        wn = fq(w, r.format_of("w"), 0, r.rht_size if "dgrad" in r.rht else None, "w" in r.sr)
        dym = fq(dy, r.format_of("dy"), 0, r.rht_size if "wgrad" in r.rht else None, "dy" in r.sr)
        xm = fq(x, r.format_of("x"), 0, r.rht_size if "wgrad" in r.rht else None, "x" in r.sr)
        return dyn @ wn, (dym.t() @ xm).to(w.dtype), None, None
