"""``QuantLinear``: a drop-in ``torch.nn.Linear`` whose three GEMMs run on fake-quantized 4-bit operands.

Each operand is quantized with ``fp4lab.quantize`` (numba emulator on CPU, Triton kernels on CUDA) and
dequantized *in the rotated basis* (``rotated=True``), so that the two RHT-rotated operands of a GEMM multiply to
the unrotated product; the GEMM itself accumulates in float32. Stochastic rounding seeds advance by one per
quantization call from ``seed``, so a run is reproducible.
"""

from __future__ import annotations

from typing import Any

import torch

from fp4lab.api import dequantize, quantize
from fp4lab.recipes.config import Gemm, Operand, Recipe, get_recipe


class _SeedCounter:
    """Reproducible stream of stochastic-rounding seeds."""

    def __init__(self, seed: int) -> None:
        self.next = seed

    def take(self) -> int:
        self.next += 1
        return self.next - 1


def fake_quantize(t: torch.Tensor, recipe: Recipe, operand: Operand, gemm: Gemm, axis: int,
                  seeds: _SeedCounter) -> torch.Tensor:
    """float32 ``t`` after quantize -> dequantize with the recipe's choices for ``operand`` in ``gemm``.

    bf16 recipes round to bfloat16 instead. Values stay in the RHT basis when the GEMM is rotated.
    """
    fmt = recipe.format_of(operand)
    if fmt is None:
        return t.to(torch.bfloat16).to(torch.float32)
    rounding = "sr" if operand in recipe.sr else None
    seed = seeds.take() if rounding == "sr" else 0
    rht = recipe.rht_size if gemm in recipe.rht else None
    qt = quantize(t.detach().to(torch.float32).contiguous(), fmt, rounding=rounding, seed=seed, axis=axis,
                  rht=rht, rht_seed=recipe.rht_seed)
    return dequantize(qt, rotated=True).to(t.device)


class _QuantLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, recipe: Recipe, seeds: _SeedCounter) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.recipe, ctx.seeds = recipe, seeds
        xq = fake_quantize(x, recipe, "x", "fprop", axis=-1, seeds=seeds)
        wq = fake_quantize(weight, recipe, "w", "fprop", axis=-1, seeds=seeds)
        return xq @ wq.T

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        recipe, seeds = ctx.recipe, ctx.seeds
        dx = dw = None
        if ctx.needs_input_grad[0]:  # DGRAD dX = dY W, reduction over N
            dyq = fake_quantize(dy, recipe, "dy", "dgrad", axis=-1, seeds=seeds)
            wq = fake_quantize(weight, recipe, "w", "dgrad", axis=0, seeds=seeds)
            dx = dyq @ wq
        if ctx.needs_input_grad[1]:  # WGRAD dW = dY^T X, reduction over M
            dyq = fake_quantize(dy, recipe, "dy", "wgrad", axis=0, seeds=seeds)
            xq = fake_quantize(x, recipe, "x", "wgrad", axis=0, seeds=seeds)
            dw = dyq.T @ xq
        return dx, dw, None, None


class QuantLinear(torch.nn.Linear):
    """``nn.Linear`` with a 4-bit training recipe (name or ``Recipe``). Inputs ``[..., in_features]`` are
    flattened to ``[M, in_features]``; M, in_features and out_features must be multiples of the block sizes."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, recipe: str | Recipe = "ufp4",
                 seed: int = 0, device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.recipe = get_recipe(recipe)
        self._seeds = _SeedCounter(seed)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, recipe: str | Recipe, seed: int = 0) -> "QuantLinear":
        """A QuantLinear sharing ``linear``'s parameters."""
        q = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, recipe=recipe, seed=seed,
                device=linear.weight.device, dtype=linear.weight.dtype)
        q.weight = linear.weight
        q.bias = linear.bias
        return q

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = _QuantLinearFunction.apply(x.reshape(-1, x.shape[-1]).to(torch.float32), self.weight.to(torch.float32),
                                       self.recipe, self._seeds)
        if self.bias is not None:
            y = y + self.bias.to(torch.float32)
        return y.reshape(*lead, self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.name}"


def quantize_model(model: torch.nn.Module, recipe: str | Recipe, seed: int = 0,
                   skip: tuple[str, ...] = ()) -> torch.nn.Module:
    """Replace every ``nn.Linear`` in ``model`` (except names in ``skip``) by a ``QuantLinear`` sharing its
    parameters; returns the model (modified in place)."""
    for name, child in list(model.named_children()):
        if name in skip:
            continue
        if isinstance(child, torch.nn.Linear) and not isinstance(child, QuantLinear):
            setattr(model, name, QuantLinear.from_linear(child, recipe, seed=seed))
            seed += 1_000_003
        else:
            quantize_model(child, recipe, seed=seed, skip=skip)
    return model
