"""Scale formats: how a block (or tensor) scale is stored.

* ``pow2``  — exponent-only scale (OCP E8M0): code c holds 2^(c - bias); the all-ones code is NaN; no zero.
* ``float`` — an (usually unsigned) ExMy float such as UE4M3 / E4M3 (NVFP4) or UE5M3; encoded with RTNE,
  saturating at the largest finite value. Reuses ``FloatGrid`` for its value table.
* ``fp32`` / ``bf16`` — IEEE binary32 / bfloat16 (bf16 encoded from float32 with RTNE). Codes are the bit patterns.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

import numpy as np
from pydantic import Field, ValidationError, field_validator, model_validator

from fp4lab.formats.base import SpecModel, check_text
from fp4lab.formats.floats import FloatFormat, FloatSpecials, float_format_of
from fp4lab.formats.grids import FloatGrid

ScaleKind = Literal["pow2", "float", "fp32", "bf16"]
TABLE_KINDS: tuple[str, ...] = ("pow2", "float")  # narrow codes that index a table of decoded values


class ScaleFormat(SpecModel):
    """Storage format of a scale; ``kind`` selects the family (see module docstring)."""


    kind: ScaleKind
    name: str | None = Field(default=None, max_length=64)
    exponent_bits: int = Field(default=8, ge=1, le=8)
    mantissa_bits: int = Field(default=0, ge=0, le=7)
    bias: int | None = Field(default=None, ge=-300, le=300)
    signed: bool = False
    subnormals: bool = True
    specials: FloatSpecials = "fn"

    @field_validator("name")
    @classmethod
    def _printable(cls, v: str | None) -> str | None:
        return check_text(v)

    @model_validator(mode="after")
    def _validate(self) -> "ScaleFormat":
        if self.kind == "pow2" and self.mantissa_bits != 0:
            raise ValueError("scale format kind 'pow2' has no mantissa: mantissa_bits must be 0")
        if self.kind == "pow2":
            lo, hi = -self.exponent_bias, self.pow2_nan_code - 1 - self.exponent_bias
            if lo < -149 or hi > 127:
                raise ValueError(
                    f"scale format kind 'pow2': bias {self.exponent_bias} gives scales 2^{lo} .. 2^{hi}, but every "
                    f"scale must be a float32 (2^-149 .. 2^127): with {self.exponent_bits} exponent bits the bias "
                    f"must lie in [{self.pow2_nan_code - 1 - 127}, 149]")
        if self.kind == "float":
            try:
                _ = self.grid  # validates the ExMy fields
            except ValidationError as err:  # one line: the nested grid's first complaint
                raise ValueError(err.errors()[0]["msg"].removeprefix("Value error, ")) from None
        return self

    @property
    def label(self) -> str:
        """``name``, else one made from the fields for display: ``ue3m2`` / ``e4m3`` (float), ``e5m0`` (pow2),
        ``fp32``, ``bf16``."""
        if self.name:
            return self.name
        if self.kind == "float":
            return f"{'' if self.signed else 'u'}e{self.exponent_bits}m{self.mantissa_bits}"
        return f"e{self.exponent_bits}m0" if self.kind == "pow2" else self.kind

    @property
    def tabulated(self) -> bool:
        """Whether codes index a table of decoded values (``TABLE_KINDS``: pow2, float), ``decode(arange(
        n_codes))``; fp32 / bf16 codes are the IEEE bit patterns themselves."""
        return self.kind in TABLE_KINDS

    @property
    def n_codes(self) -> int:
        """Number of codes of a tabulated format: 2^exponent_bits (pow2), 2^bits (float)."""
        if not self.tabulated:
            raise TypeError(f"scale format kind '{self.kind}' has no code table")
        return 1 << (self.exponent_bits if self.kind == "pow2" else self.bits)

    @property
    def bits(self) -> int:
        return {"fp32": 32, "bf16": 16}.get(self.kind, int(self.signed) + self.exponent_bits + self.mantissa_bits)

    @property
    def storage_bits(self) -> int:
        """Bits one stored scale occupies (whole bytes: UE4M3 is 7 bits of information in 8)."""
        return -(-self.bits // 8) * 8

    @property
    def exponent_bias(self) -> int:
        return self.bias if self.bias is not None else (1 << (self.exponent_bits - 1)) - 1

    @property
    def code_dtype(self) -> type:
        """numpy dtype of stored scale codes: uint8 up to 8 bits, uint16 for bf16, uint32 for fp32 bit patterns."""
        return {"fp32": np.uint32, "bf16": np.uint16}.get(self.kind, np.uint8 if self.bits <= 8 else np.uint16)

    @cached_property
    def grid(self) -> FloatGrid:
        """The value table of a ``float`` scale format."""
        if self.kind != "float":
            raise TypeError(f"scale format kind '{self.kind}' has no finite value table")
        return FloatGrid(
            name=self.name,
            exponent_bits=self.exponent_bits,
            mantissa_bits=self.mantissa_bits,
            bias=self.bias,
            signed=self.signed,
            subnormals=self.subnormals,
            specials=self.specials,
        )

    @cached_property
    def float_format(self) -> FloatFormat:
        """The encoding as a ``FloatFormat``: ``pow2`` is an unsigned ExM0 whose E = 0 binade is 2^-bias (no zero)
        with the all-ones code NaN (OCP E8M0); ``fp32`` and ``bf16`` are IEEE E8M23 and E8M7."""
        if self.kind == "float":
            return float_format_of(self)
        if self.kind == "pow2":
            return FloatFormat(exponent_bits=self.exponent_bits, mantissa_bits=0, bias=self.exponent_bias,
                               signed=False, zero_exponent="normal", specials="fn")
        return FloatFormat(exponent_bits=8, mantissa_bits=23 if self.kind == "fp32" else 7, specials="ieee")

    @property
    def pow2_nan_code(self) -> int:
        return (1 << self.exponent_bits) - 1

    @property
    def max(self) -> float:
        """Largest finite scale value."""
        if self.kind == "pow2":
            return 2.0 ** (self.pow2_nan_code - 1 - self.exponent_bias)
        if self.kind == "float":
            return self.grid.max
        if self.kind == "bf16":
            return float(np.float32(np.uint32(0x7F7F0000).view(np.float32)))
        return float(np.finfo(np.float32).max)

    @property
    def min_positive(self) -> float:
        """Smallest positive scale value."""
        if self.kind == "pow2":
            return 2.0 ** (-self.exponent_bias)
        if self.kind == "float":
            lv = self.grid.levels
            return float(lv[lv > 0][0])
        if self.kind == "bf16":
            return float(np.uint32(0x00010000).view(np.float32))
        return float(np.uint32(1).view(np.float32))

    @property
    def has_zero(self) -> bool:
        return self.kind != "pow2"

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """float32 values of scale codes (``pow2``: 2^(c-bias), NaN for the all-ones code)."""
        codes = np.asarray(codes)
        if self.kind == "fp32":
            return codes.astype(np.uint32).view(np.float32)
        if self.kind == "bf16":
            return (codes.astype(np.uint32) << np.uint32(16)).view(np.float32)
        if self.kind == "float":
            return self.grid.values.astype(np.float32)[codes.astype(np.intp)]
        exps = np.arange(1 << self.exponent_bits) - self.exponent_bias
        table = np.where(exps > 127, np.nan, np.ldexp(1.0, np.minimum(exps, 127))).astype(np.float32)
        table[self.pow2_nan_code] = np.nan
        return table[codes.astype(np.intp)]
