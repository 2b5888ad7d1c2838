"""Training recipes as data: which format each GEMM operand uses, where the RHT applies, where SR applies.

A linear layer ``Y = X W^T`` (X: [M, K] tokens x inputs, W: [N, K]) runs three GEMMs (paper §3):

* FPROP ``Y = X W^T``   reduces over K: X and W blocked (and rotated) along K;
* DGRAD ``dX = dY W``   reduces over N: dY blocked along N, W along its axis 0 (N);
* WGRAD ``dW = dY^T X`` reduces over M: dY and X blocked along M (axis 0).

``rht`` lists the GEMMs whose two operands are rotated along the reduction axis with the same signs
(``rht_size``, ``rht_seed``); ``sr`` lists the operands quantized with stochastic rounding (the paper: dY only).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fp4lab.errors import UnknownFormatError
from fp4lab.formats.base import SpecModel
from fp4lab.formats.registry import get_format

Gemm = Literal["fprop", "dgrad", "wgrad"]
Operand = Literal["x", "w", "dy"]


class Recipe(SpecModel):
    """A 4-bit training recipe. ``format = None`` keeps operands in bf16 (the unquantized baseline)."""

    name: str
    description: str = ""
    format: str | None = Field(default=None, description="Format of every operand unless overridden below.")
    weight_format: str | None = Field(default=None, description="Format of W (e.g. a 16x16-tile format).")
    grad_format: str | None = Field(default=None, description="Format of dY.")
    rht: list[Gemm] = Field(default_factory=list)
    rht_size: int = 16
    rht_seed: int = 0
    sr: list[Operand] = Field(default_factory=lambda: ["dy"])

    @model_validator(mode="after")
    def _validate(self) -> "Recipe":
        for fmt in (self.format, self.weight_format, self.grad_format):
            if fmt is not None:
                try:
                    get_format(fmt)
                except UnknownFormatError as exc:
                    raise ValueError(f"recipe '{self.name}': {exc}") from None
        if self.format is None and (self.weight_format or self.grad_format or self.rht):
            raise ValueError(f"recipe '{self.name}': weight/grad formats and RHT need a base 'format'")
        return self

    def format_of(self, operand: Operand) -> str | None:
        """Format name used to quantize ``operand`` (None: bf16)."""
        if operand == "w" and self.weight_format:
            return self.weight_format
        if operand == "dy" and self.grad_format:
            return self.grad_format
        return self.format


BUILTIN_RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(name="bf16", description="Unquantized baseline: operands rounded to bf16, fp32 accumulation.",
               sr=[]),
        Recipe(name="e2m1-ref", format="e2m1-b16-fp32", rht=["wgrad"], sr=["dy"],
               description="The paper's tuned E2M1 reference: 1x16 FP32 scales, RHT-16 on WGRAD only, SR on dY."),
        Recipe(name="ufp4", format="ufp4", rht=["fprop", "dgrad", "wgrad"], sr=["dy"],
               description="UFP4 (paper): uniform E1M2 grid, 1x16 FP32 scales, RHT-16 on all GEMMs, SR on dY."),
        Recipe(name="nvfp4", format="nvfp4", weight_format="nvfp4-2d", rht=["wgrad"], sr=["dy"],
               description="NVFP4 recipe: two-level E4M3 scales, 16x16 weight tiles, RHT-16 on WGRAD, SR on dY."),
        Recipe(name="mxfp4", format="mxfp4", rht=["wgrad"], sr=["dy"], rht_size=32,
               description="MXFP4: E8M0 floor scales on 1x32 blocks, RHT-32 on WGRAD, SR on dY."),
    )
}


def get_recipe(name: str | Recipe) -> Recipe:
    """A built-in recipe by name (or ``name`` itself if it is a Recipe)."""
    if isinstance(name, Recipe):
        return name
    if name not in BUILTIN_RECIPES:
        raise ValueError(f"unknown recipe '{name}'; built-in recipes: {', '.join(BUILTIN_RECIPES)}")
    return BUILTIN_RECIPES[name]
