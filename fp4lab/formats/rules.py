"""Scale rules and block layouts: how a block's stored scale is chosen from its values.

All arithmetic is float32 with round-to-nearest-even unless stated; ``amax`` is the float32 maximum of ``|x|`` over
the block. Methods:

* ``none``  — no scaling (element-only cast, scale 1).
* ``amax``  — ideal scale ``amax / target`` (``target`` defaults to the grid's largest magnitude, so the block
  amax lands exactly on the grid maximum: the paper's rule). Two-level formats then divide by the tensor scale.
  The ideal scale is clamped to ``[min_scale, max_scale]`` and encoded into the scale format with
  ``scale_rounding`` (``ceil`` onto a pow2 format is NVIDIA's RCEIL). ``scale_arithmetic`` picks the order of
  the float32 operations of two-level scaling: torchao's "decode" or TransformerEngine's "encode" convention.
  With two or more ``targets`` each block is quantized once per target and the candidate with the lower squared
  (``select_by = "sse"``) or absolute (``"sae"``) error is kept (ties keep the first): ``targets = [6, 4]`` is
  4-over-6. ``dequantize_order`` and ``scale_overflow`` pick between libraries' choices (docs/numerics.md, "What
  other libraries do").
* ``rceil`` — shorthand for ``amax`` with ``scale_rounding = "ceil"``.
* ``floor`` / ``ceil`` / ``even`` — OCP MX exponent rules on a pow2 scale:
  ``e = floor(log2 amax) - floor(log2 grid_max)`` (``ceil``: ``ceil(log2 amax)``; ``even``: amax first rounded to the
  element's mantissa width, as torchao's EVEN), clamped to the scale format's exponent range.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from fp4lab.formats.base import SpecModel

F32_TINY = float(np.finfo(np.float32).tiny)  # 2^-126
F32_MAX = float(np.finfo(np.float32).max)


AMAX_METHODS: tuple[str, ...] = ("amax", "rceil")  # ideal scale amax / target, rounded into the scale format
OCP_METHODS: tuple[str, ...] = ("floor", "ceil", "even")  # shared-exponent rules of the OCP MX specification
ScaleFamily = Literal["none", "amax", "exponent"]


class ScaleRule(SpecModel):
    """How block scales are computed and applied, including every edge-case policy."""

    method: Literal["none", "amax", "rceil", "floor", "ceil", "even"] = "amax"
    targets: list[Annotated[float, Field(allow_inf_nan=False)]] | None = Field(
        default=None, max_length=16,
        description="Grid value(s) the block amax maps onto (amax/rceil); default: the grid maximum.")
    scale_rounding: Literal["rtne", "ceil", "floor"] = Field(
        default="rtne", description="Rounding of the ideal scale into the scale format (amax method)."
    )
    scale_division: Literal["divide", "reciprocal"] = Field(
        default="divide", description="Ideal scale as amax / target, or amax * float32(1/target)."
    )
    element_scaling: Literal["divide", "reciprocal"] = Field(
        default="divide",
        description="Scaled element as x / S, or x * R with R = float32(1/S) "
        "(two-level: R = float32(float32(1/tensor_scale) / S)).",
    )
    scale_arithmetic: Literal["decode", "encode"] = Field(
        default="decode",
        description="decode: ts = amax_t/(target*smax), ideal = (amax/target)/ts, elements by element_scaling "
        "(torchao). encode: g = (target*smax)/amax_t, ts = 1/g, ideal = amax * float32(g * float32(1/target)), "
        "t = x * min(1/float32(S*ts), FLT_MAX) (TransformerEngine).",
    )
    min_scale: float | None = Field(default=None, gt=0.0, allow_inf_nan=False,
                                    description="Clamp the ideal scale from below.")
    max_scale: float | None = Field(default=None, gt=0.0, allow_inf_nan=False,
                                    description="Clamp the ideal scale from above.")
    zero_block: Literal["as_computed", "one", "min", "zero"] = Field(
        default="as_computed",
        description="Scale of an all-zero block: as computed by the rule and clamps, 1.0, the smallest positive "
        "scale, or 0 (scale formats with a zero).",
    )
    nan_policy: Literal["propagate", "ignore"] = Field(
        default="propagate",
        description="A NaN in a block makes its scale NaN (propagate), or is left out of the amax (ignore).",
    )
    inf_policy: Literal["propagate", "saturate"] = Field(
        default="propagate",
        description="A block with an infinite element gets a NaN scale (propagate) or the largest scale (saturate).",
    )
    select_by: Literal["sse", "sae"] = Field(
        default="sse",
        description="Several targets: the candidate with the smaller float32 sum, in element order, of squared "
        "(sse) or absolute (sae) dequantization errors is kept.",
    )
    dequantize_order: Literal["value_scale_first", "scale_product_first"] = Field(
        default="value_scale_first",
        description="Two-level dequantization (also the errors of target selection): (value * S) * ts, or "
        "value * (S * ts) (torchao NVFP4Tensor).",
    )
    scale_overflow: Literal["saturate", "nan"] = Field(
        default="saturate",
        description="pow2 scales, amax/rceil methods: an ideal scale that rounds above the largest exponent (or is "
        "Inf) takes the largest scale (saturate) or the NaN code (nan: torch and ml_dtypes float8_e8m0fnu casts).",
    )

    @property
    def family(self) -> ScaleFamily:
        """How the block scale is chosen: "none" (no block scale), "amax" (``AMAX_METHODS``: amax / target
        rounded into the scale format) or "exponent" (``OCP_METHODS``: an OCP MX shared exponent, a power of two
        from the block amax's exponent)."""
        if self.method in AMAX_METHODS:
            return "amax"
        return "exponent" if self.method in OCP_METHODS else "none"

    @property
    def ocp_exponent(self) -> bool:
        """Whether the block scale is an OCP MX shared exponent (``method`` floor, ceil or even)."""
        return self.method in OCP_METHODS

    @model_validator(mode="after")
    def _validate(self) -> "ScaleRule":
        if self.targets is not None and (not self.targets or any(t <= 0 for t in self.targets)):
            raise ValueError("scale_rule.targets must be a non-empty list of positive grid values")
        for t in self.targets or ():
            if not F32_TINY <= t <= F32_MAX:  # the rules divide by float32(target) and by its reciprocal
                raise ValueError(f"targets: {t!r} is outside the positive normal float32 range "
                                 f"[{F32_TINY!r}, {F32_MAX!r}]")
        for field in ("min_scale", "max_scale"):
            v = getattr(self, field)
            if v is not None and (v > F32_MAX or not float(np.float32(v)) > 0.0):
                raise ValueError(f"{field} {v!r} is not a positive finite float32 "
                                 f"(the clamp is applied in float32)")
        if self.scale_arithmetic == "encode" and self.method not in AMAX_METHODS:
            raise ValueError("scale_rule: scale_arithmetic 'encode' applies to the amax/rceil methods, "
                             f"not '{self.method}'")
        if self.select_by != "sse" and len(self.targets or ()) < 2:
            raise ValueError(f"scale_rule: select_by '{self.select_by}' chooses among targets; give two or more")
        if self.scale_overflow != "saturate" and self.method not in AMAX_METHODS:
            raise ValueError(f"scale_rule: scale_overflow '{self.scale_overflow}' applies to the amax/rceil methods, "
                             f"not '{self.method}'")
        if self.min_scale is not None and self.max_scale is not None and self.min_scale > self.max_scale:
            raise ValueError(f"scale_rule: min_scale {self.min_scale} exceeds max_scale {self.max_scale}")
        return self

    @property
    def effective_rounding(self) -> str:
        """Scale-cast rounding after expanding the ``rceil`` shorthand."""
        return "ceil" if self.method == "rceil" else self.scale_rounding


MAX_BLOCK_EXTENT = 4096  # elements along one axis of a block


class BlockLayout(SpecModel):
    """Which elements share a scale: ``shape = [k]`` is a 1-D block of k consecutive elements along the
    quantized axis; ``shape = [r, c]`` is a 2-D tile over the last two axes (e.g. 16x16 weight scaling)."""


    shape: list[int] = Field(min_length=1, max_length=2)

    @model_validator(mode="after")
    def _validate(self) -> "BlockLayout":
        if any(s < 1 or s > MAX_BLOCK_EXTENT for s in self.shape):
            raise ValueError(f"block.shape {self.shape}: each extent must be between 1 and {MAX_BLOCK_EXTENT}")
        return self

    @property
    def is_2d(self) -> bool:
        return len(self.shape) == 2

    @property
    def size(self) -> int:
        """Elements per block."""
        n = 1
        for s in self.shape:
            n *= s
        return n
