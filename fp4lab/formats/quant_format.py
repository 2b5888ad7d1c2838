"""``QuantFormat``: an element grid + block layout + scale format + scale rule + edge-case policies."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from fp4lab.errors import SpecError
from fp4lab.formats.base import SpecModel, check_text
from fp4lab.formats.grids import ElementGrid, FloatGrid, RoundingMode
from fp4lab.formats.rules import BlockLayout, ScaleRule
from fp4lab.formats.scales import ScaleFormat

# Named building blocks a spec file may reference by string instead of spelling out a table.
NAMED_GRIDS: dict[str, dict[str, Any]] = {
    "e2m1": dict(kind="float", name="e2m1", exponent_bits=2, mantissa_bits=1, bias=1),
    "e1m2": dict(kind="float", name="e1m2", exponent_bits=1, mantissa_bits=2, bias=1),
    "e3m0": dict(kind="float", name="e3m0", exponent_bits=3, mantissa_bits=0, bias=3),
    "int4": dict(kind="int", name="int4", bits=4, range="symmetric"),
    "int4_twos_complement": dict(kind="int", name="int4_twos_complement", bits=4, range="twos_complement"),
    "e2m3": dict(kind="float", name="e2m3", exponent_bits=2, mantissa_bits=3, bias=1),
    "e3m2": dict(kind="float", name="e3m2", exponent_bits=3, mantissa_bits=2, bias=3),
    "e4m3": dict(kind="float", name="e4m3", exponent_bits=4, mantissa_bits=3, bias=7, specials="fn"),
    "e5m2": dict(kind="float", name="e5m2", exponent_bits=5, mantissa_bits=2, bias=15, specials="ieee"),
    "e4m3fnuz": dict(kind="float", name="e4m3fnuz", exponent_bits=4, mantissa_bits=3, bias=8, specials="fnuz"),
    "e5m2fnuz": dict(kind="float", name="e5m2fnuz", exponent_bits=5, mantissa_bits=2, bias=16, specials="fnuz"),
}
NAMED_SCALES: dict[str, dict[str, Any]] = {
    "e8m0": dict(kind="pow2", name="e8m0", exponent_bits=8, bias=127),
    "ue4m3": dict(kind="float", name="ue4m3", exponent_bits=4, mantissa_bits=3, bias=7, specials="fn"),
    "e4m3": dict(kind="float", name="e4m3", exponent_bits=4, mantissa_bits=3, bias=7, signed=True, specials="fn"),
    "ue5m3": dict(kind="float", name="ue5m3", exponent_bits=5, mantissa_bits=3, bias=15, specials="fn"),
    "e4m3fnuz": dict(kind="float", name="e4m3fnuz", exponent_bits=4, mantissa_bits=3, bias=8, signed=True,
                     specials="fnuz"),
    "fp32": dict(kind="fp32", name="fp32"),
    "bf16": dict(kind="bf16", name="bf16"),
}


def _resolve(value: Any, catalog: dict[str, dict[str, Any]], field: str) -> Any:
    if isinstance(value, str):
        if value not in catalog:
            raise SpecError(f"{field} '{value}' is not a known name; use one of {sorted(catalog)} or a table")
        return dict(catalog[value])
    return value


class QuantFormat(SpecModel):
    """A complete block-scaled format. Quantization of a block (see ``docs/numerics.md``):

    1. two-level formats: tensor scale ``ts = amax_tensor / float32(targets[0] * smax)``, ``amax_tensor`` over the
       finite elements, ``smax`` = ``scale_rule.max_scale`` or ``scale.max`` (float32; 1.0 if zero or not finite,
       then clamped to the range edges of docs/numerics.md; "encode" arithmetic derives it from ``1 / g``);
    2. block scale ``S`` from ``scale_rule`` and ``scale``;
    3. each element ``x`` is scaled (``x / S`` or ``x * R``) in float32 and rounded onto ``element`` with
       ``rounding``; values beyond the grid saturate (``overflow = "saturate"``);
    4. dequantization: ``value[code] * S`` (``* ts``), in float32.
    """


    name: str = Field(max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    description: str = Field(default="", max_length=1024)
    element: ElementGrid
    block: BlockLayout | None = None
    scale: ScaleFormat | None = None
    scale_rule: ScaleRule = Field(default_factory=lambda: ScaleRule(method="none"))
    tensor_scale: Literal["none", "amax"] = "none"
    rounding: RoundingMode = "rtne"
    nan_element: Literal["nan", "zero", "neg_zero"] = Field(
        default="nan",
        description="Code for a NaN element: the grid's NaN code; grids without one use +0 ('nan' and 'zero') "
        "or -0 ('neg_zero', as ml_dtypes).",
    )
    overflow: Literal["saturate", "nan", "inf"] = "saturate"
    signed_zero: Literal["keep", "positive"] = Field(
        default="keep",
        description="keep: a result of zero takes the sign of the scaled input (-0 code where the grid has one); "
        "positive: a scaled input that is exactly +-0 gets the +0 code (TransformerEngine), negative values that "
        "round to zero still get -0.",
    )
    matches: list[Annotated[str, Field(max_length=512)]] = Field(
        default_factory=list, max_length=32, description="Libraries this format reproduces bit for bit.")
    references: list[Annotated[str, Field(max_length=512)]] = Field(default_factory=list, max_length=32)

    @field_validator("description")
    @classmethod
    def _printable(cls, v: str) -> str:
        return check_text(v)

    @field_validator("matches", "references")
    @classmethod
    def _printable_items(cls, v: list[str]) -> list[str]:
        for item in v:
            check_text(item)
        return v

    @model_validator(mode="before")
    @classmethod
    def _resolve_names(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if "element" in data:
                data["element"] = _resolve(data["element"], NAMED_GRIDS, "element")
            if "scale" in data and data["scale"] is not None:
                data["scale"] = _resolve(data["scale"], NAMED_SCALES, "scale")
            if isinstance(data.get("block"), int):
                data["block"] = {"shape": [data["block"]]}
        return data

    @model_validator(mode="after")
    def _validate(self) -> "QuantFormat":
        rule = self.scale_rule
        scaled = rule.method != "none"
        if scaled and (self.block is None or self.scale is None):
            raise ValueError(f"format '{self.name}': scale_rule.method '{rule.method}' needs both 'block' and 'scale'")
        if not scaled and (self.block is not None or self.tensor_scale != "none"):
            raise ValueError(f"format '{self.name}': a block layout or tensor scale needs a scale_rule method")
        if rule.ocp_exponent and self.scale is not None and self.scale.kind != "pow2":
            raise ValueError(
                f"format '{self.name}': scale_rule.method '{rule.method}' is an exponent rule and needs a pow2 "
                f"scale (e8m0), not '{self.scale.kind}'"
            )
        if rule.method == "even" and not isinstance(self.element, FloatGrid):
            raise ValueError(f"format '{self.name}': method 'even' rounds amax to the element's mantissa width; "
                             "it needs a float element grid")
        if self.tensor_scale == "amax" and (self.scale is None or self.scale.kind in ("fp32",)):
            raise ValueError(f"format '{self.name}': a tensor scale needs a narrow block-scale format (e.g. ue4m3)")
        if rule.dequantize_order != "value_scale_first" and self.tensor_scale == "none":
            raise ValueError(f"format '{self.name}': scale_rule.dequantize_order orders the two scales of a "
                             "two-level format; this format has no tensor scale")
        if rule.scale_overflow != "saturate" and (self.scale is None or self.scale.kind != "pow2"):
            raise ValueError(f"format '{self.name}': scale_rule.scale_overflow '{rule.scale_overflow}' needs a pow2 "
                             "scale format (e8m0)")
        if self.overflow == "nan" and self.element.nan_code is None:
            raise ValueError(f"format '{self.name}': overflow 'nan' but element grid has no NaN code")
        if self.overflow == "inf" and self.element.inf_codes is None:
            raise ValueError(f"format '{self.name}': overflow 'inf' but element grid has no Inf codes")
        if rule.nan_policy == "propagate" and self.scale is not None and self.scale.kind == "float" \
                and self.scale.grid.nan_code is None:
            raise ValueError(f"format '{self.name}': nan_policy 'propagate' needs a scale format with a NaN code")
        if rule.inf_policy == "propagate" and self.scale is not None and self.scale.kind == "float" \
                and self.scale.grid.nan_code is None:
            raise ValueError(f"format '{self.name}': inf_policy 'propagate' needs a scale format with a NaN code; "
                             "use 'saturate'")
        if scaled and rule.targets:
            g = self.element.amax
            for t in rule.targets:
                if t > g:
                    raise ValueError(f"format '{self.name}': scale_rule.targets {t!r} is above the element grid's "
                                     f"largest magnitude {g!r}: every block's largest element would clip")
        if scaled and self.scale is not None:
            smax, smin = self.scale.max, self.scale.min_positive
            if rule.min_scale is not None and rule.min_scale > smax:
                raise ValueError(f"format '{self.name}': scale_rule.min_scale {rule.min_scale!r} is above the "
                                 f"largest scale {smax!r} the scale format can store")
            if rule.max_scale is not None and rule.max_scale < smin:
                raise ValueError(f"format '{self.name}': scale_rule.max_scale {rule.max_scale!r} is below the "
                                 f"smallest positive scale {smin!r} the scale format can store")
        return self

    # ---- derived -------------------------------------------------------------------------------------------
    @property
    def targets(self) -> list[float]:
        """Grid values the block amax maps onto (one for most rules, several for 4-over-6 style selection)."""
        return list(self.scale_rule.targets) if self.scale_rule.targets else [self.element.amax]

    @property
    def block_size(self) -> int:
        """Elements per block (1 for element-only formats)."""
        return self.block.size if self.block is not None else 1

    @property
    def emax_elem(self) -> int:
        """floor(log2(largest grid magnitude)): the OCP MX ``emax`` of the element grid."""
        return math.floor(math.log2(self.element.amax))

    @property
    def bits_per_element(self) -> float:
        """Storage cost: element bits plus the block scale amortised over the block (tensor scale ignored)."""
        blocked = self.scale is not None and self.block is not None
        extra = self.scale.storage_bits / self.block_size if blocked else 0.0
        return self.element.bits + extra
