"""Pydantic schema of an accelerator spec (hwspec): its MMA instruction kinds and their accumulation models.

A spec is data (a TOML file under ``specs/``). Every numeric field is a :class:`Num` carrying its value, a
``provenance`` ("measured" here, "published" by others, "assumed", or "unknown" = a placeholder guess) and a
``source``. In TOML a bare number is allowed and takes the enclosing kind's (or spec's) ``provenance`` and
``source``; the loader expands it, so every number in the model carries both.

The accumulation model family (docs/tensor_cores.md; what was checked: docs/hardware_validation.md):

* ``t_fdpa``  truncated fused dot-product-add: K products (exact, not renormalised, exponent ea+eb) and C are
  aligned to the largest exponent, each truncated toward zero to ``frac_bits`` fraction bits below it, summed
  exactly and rounded once (``output``). Zero terms take exponent ``e_zero``.
* ``st_fdpa`` the same with each product's exponent raised by the two power-of-two block-scale exponents.
* ``gst_fdpa`` groups of ``group`` products summed exactly, each group sum multiplied by the scale significands
  and aligned by the scale exponents only; then the truncated fused sum with C.
* ``tr_fdpa`` / ``gtr_fdpa`` (AMD CDNA3): products truncated to ``frac_bits`` below their own maximum (gtr: even
  and odd products separately, then floored together), then aligned with C by floor (round toward -inf): the
  product sum to ``join_frac_bits + 1`` bits, C to ``frac_bits``; normalised, floored to ``join_frac_bits``,
  rounded to fp32 by RNE. gtr drops C when its exponent is below e_max - frac_bits - 1.

K longer than ``fused_len`` is a chain: each chunk's rounded output is the next chunk's C.

Non-numeric model choices that a source can disagree on (``output.zero_sign``) are :class:`Rule` records: a
value with the same ``provenance`` and ``source`` as a number (a bare string in TOML expands like a bare number).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from fp4lab.errors import InputError, SpecError
from fp4lab.formats.base import SpecModel, check_text
from fp4lab.hwspec.operands import OPERAND_FORMATS

Text = Annotated[str, Field(max_length=2048)]
ShortText = Annotated[str, Field(max_length=256)]

Provenance = Literal["measured", "published", "assumed", "unknown"]
Algorithm = Literal["t_fdpa", "st_fdpa", "gst_fdpa", "tr_fdpa", "gtr_fdpa"]


class _Model(SpecModel):
    """The formats' spec base (frozen, unknown fields refused, no true/false for numbers or names, equality and
    hashing by the declared fields) plus a printable-text check of every string field."""

    @model_validator(mode="after")
    def _printable_text(self):  # spec text is printed to terminals, where escape sequences would act
        for name in type(self).model_fields:
            v = getattr(self, name)
            for item in (v if isinstance(v, list) else [v]):
                if isinstance(item, str):
                    try:
                        check_text(item)
                    except ValueError as exc:
                        raise ValueError(f"{name}: {exc}") from None
        return self


class Num(_Model):
    """A number with where it comes from."""

    value: float | int
    provenance: Provenance
    source: Text = Field(min_length=1)

    @field_validator("value", mode="before")
    @classmethod
    def _real(cls, v):
        if isinstance(v, bool):
            raise ValueError(f"expected a number, got {v!r}")
        return v

    @field_validator("value")
    @classmethod
    def _finite(cls, v: float | int) -> float | int:
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"expected a finite number, got {v!r}")
        return v

    def __int__(self) -> int:
        return int(self.value)


class Rule(_Model):
    """A named model choice with where it comes from (e.g. ``output.zero_sign``)."""

    value: ShortText
    provenance: Provenance
    source: Text = Field(min_length=1)


ZERO_SIGN_RULES = {
    "positive": "every zero result is +0 (a negative result that rounds to zero gives +0)",
    "keep_underflow_sign": "a nonzero result that rounds to zero keeps its sign (-0 for negative ones); exact "
                           "zero sums give +0",
}


def integral(n: "Num | None", lo: int, hi: int) -> "Num | None":
    """``n`` if its value is an integer in [lo, hi] (None passes), else a ValueError saying what is allowed."""
    if n is None:
        return n
    v = n.value
    if isinstance(v, float) and not v.is_integer():
        raise SpecError(f"must be an integer, got {v!r}")
    if not lo <= v <= hi:
        raise SpecError(f"must be an integer in [{lo}, {hi}], got {v!r}")
    return n


# Ranges of the integer fields. frac_bits / join_frac_bits: the models sum truncated terms exactly in float64,
# which holds while frac_bits + 2 + ceil(log2(fused_len + 1)) <= 53 (checked per kind); fused_len, k, blocks: at
# most 4096 elements; e_zero: an exponent the float64 kernels can scale by.
MAX_K = 4096


class ScaleOption(_Model):
    """One allowed block-scale configuration of a block-scaled kind: scale format and K-elements per scale."""

    format: ShortText
    block: Num

    @field_validator("format")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in OPERAND_FORMATS:
            raise ValueError(f"scale format {v!r} unknown; known: {', '.join(OPERAND_FORMATS)}")
        return v

    @field_validator("block")
    @classmethod
    def _block(cls, v: Num) -> Num:
        return integral(v, 1, MAX_K)


class Accumulation(_Model):
    """Parameters of the accumulation datapath of one instruction kind (see module docstring)."""

    algorithm: Algorithm
    fused_len: Num = Field(description="L_max: K-elements summed in one fused step; longer K chains.")
    frac_bits: Num = Field(description="F: fraction bits kept below the largest exponent.")
    e_zero: Num | None = Field(default=None, description="Exponent given to zero terms (t/st/gst).")
    group: Num | None = Field(default=None, description="G: products summed exactly before scaling (gst).")
    join_frac_bits: Num | None = Field(default=None, description="F2 of the C join (tr/gtr).")
    c_add: Literal["fused", "separate_rn"] = Field(
        default="fused",
        description="'separate_rn': D = RN_fp32(RZ_fp32(T-FDPA(products, C=0)) + C) (B200 legacy fp8 mma.sync).",
    )

    @field_validator("fused_len", "group")
    @classmethod
    def _lengths(cls, v: Num | None) -> Num | None:
        return integral(v, 1, MAX_K)

    @field_validator("frac_bits", "join_frac_bits")
    @classmethod
    def _bits(cls, v: Num | None) -> Num | None:
        return integral(v, 0, 50)

    @field_validator("e_zero")
    @classmethod
    def _exponent(cls, v: Num | None) -> Num | None:
        return integral(v, -1000, 1000)

    @model_validator(mode="after")
    def _check(self) -> "Accumulation":
        L, F = int(self.fused_len), int(self.frac_bits)
        if F + 2 + math.ceil(math.log2(L + 1)) > 53:
            raise ValueError(f"accumulation: frac_bits {F} with fused_len {L} needs sums of "
                             f"{F + 2 + math.ceil(math.log2(L + 1))} bits, beyond the 53 the model computes "
                             f"exactly; use frac_bits <= {51 - math.ceil(math.log2(L + 1))}")
        if self.algorithm == "gst_fdpa" and self.group is not None and L % int(self.group):
            raise ValueError(f"accumulation: fused_len {L} is not a multiple of group {int(self.group)}")
        need = {
            "t_fdpa": ("e_zero",),
            "st_fdpa": ("e_zero",),
            "gst_fdpa": ("e_zero", "group"),
            "tr_fdpa": ("join_frac_bits",),
            "gtr_fdpa": ("join_frac_bits",),
        }[self.algorithm]
        for f in need:
            if getattr(self, f) is None:
                raise ValueError(f"accumulation.{f} is required for algorithm {self.algorithm!r}")
        return self


class Output(_Model):
    """Rounding of each instruction's result into the accumulator format."""

    format: Literal["f32", "f16"]
    rounding: Literal["rz", "rne"]
    mantissa_bits: Num = Field(description="Fraction bits kept: 23 (fp32), 13 (Hopper fp8 'e8m13'), 10 (fp16).")
    nan_bits: Num = Field(description="Bit pattern of every NaN result, in the output format.")
    zero_sign: Rule = Field(
        default=Rule(value="positive", provenance="assumed",
                     source="default: every zero result is +0 (the rule measured on the H200)"),
        description="Sign of zero results: " + "; ".join(f"'{k}': {v}" for k, v in ZERO_SIGN_RULES.items()) + ".")

    @field_validator("mantissa_bits")
    @classmethod
    def _mbits(cls, v: Num) -> Num:
        return integral(v, 0, 23)

    @field_validator("nan_bits")
    @classmethod
    def _nbits(cls, v: Num) -> Num:
        return integral(v, 0, 2**32 - 1)

    @model_validator(mode="after")
    def _check(self) -> "Output":
        mb, nb = int(self.mantissa_bits), int(self.nan_bits)
        width, exp_mask, man_mask, top = {"f32": (32, 0x7F800000, 0x7FFFFF, 23), "f16": (16, 0x7C00, 0x3FF, 10)}[
            self.format]
        if mb > top:
            raise ValueError(f"output: mantissa_bits {mb} exceeds the {top} fraction bits of {self.format}")
        if nb >> width or (nb & exp_mask) != exp_mask or not nb & man_mask:
            raise ValueError(f"output: nan_bits {nb:#x} is not a NaN bit pattern of {self.format}")
        if self.zero_sign.value not in ZERO_SIGN_RULES:
            raise ValueError(f"output: zero_sign {self.zero_sign.value!r} unknown; known: {', '.join(ZERO_SIGN_RULES)}")
        return self


class MMAKind(_Model):
    """One instruction kind: operand formats, shape, block scaling, accumulation model and peak rate."""

    name: ShortText
    instruction: ShortText
    description: Text = ""
    shape: ShortText = Field(description="Instruction shape as the ISA writes it, e.g. 'm64nNk16'.")
    k: Num = Field(description="K of one instruction.")
    k_alt: list[Annotated[int, Field(ge=1, le=MAX_K)]] = Field(
        default_factory=list, max_length=16, description="Other instruction K's of this kind (e.g. tf32 k4).")
    a_formats: list[ShortText] = Field(max_length=32)
    b_formats: list[ShortText] = Field(max_length=32)
    c_format: Literal["f32", "f16"]
    tf32_truncate: bool = Field(default=False, description="Inputs are fp32 words whose low 13 bits are dropped.")
    any_value_table: bool = Field(default=False, description="A programmable element decoder: codes of any value "
                                  "table run (a proposal's what-if). Otherwise a block-scaled kind takes a value "
                                  "table only where its values are values of one of the kind's operand formats.")
    ab_same_format: bool = Field(default=False, description="A and B must have the same format (e.g. tcgen05 "
                                 "kind::f16: f16 x f16 or bf16 x bf16, never mixed).")
    scales: list[ScaleOption] = Field(default_factory=list, max_length=32)
    accumulation: Accumulation
    output: Output
    peak_tflops: Num | None = Field(default=None, description="Dense peak, 10^12 MMA flops (2 per MAC) per s.")
    provenance: Provenance
    source: Text

    @field_validator("k")
    @classmethod
    def _k(cls, v: Num) -> Num:
        return integral(v, 1, MAX_K)

    @field_validator("peak_tflops")
    @classmethod
    def _peak(cls, v: Num | None) -> Num | None:
        if v is not None and not v.value >= 0:
            raise ValueError(f"must be a number >= 0, got {v.value!r}")
        return v

    @field_validator("a_formats", "b_formats")
    @classmethod
    def _known_formats(cls, v: list[str]) -> list[str]:
        bad = [f for f in v if f not in OPERAND_FORMATS]
        if bad or not v:
            raise ValueError(f"operand formats {bad or v} not allowed; known: {', '.join(OPERAND_FORMATS)}")
        return v

    @model_validator(mode="after")
    def _check(self) -> "MMAKind":
        alg = self.accumulation.algorithm
        if self.c_format == "f16" and "bf16" in set(self.a_formats) | set(self.b_formats):
            raise ValueError(f"kind {self.name!r}: bf16 operands with an f16 accumulator; no MMA instruction has "
                             "that combination (bf16 MMAs accumulate in f32)")
        if self.ab_same_format and set(self.a_formats) != set(self.b_formats):
            raise ValueError(f"kind {self.name!r}: ab_same_format needs the same a_formats and b_formats")
        scaled = alg in ("st_fdpa", "gst_fdpa") or bool(self.scales)
        if alg in ("st_fdpa", "gst_fdpa") and not self.scales:
            raise ValueError(f"kind {self.name!r}: algorithm {alg} needs at least one [[scales]] entry")
        if alg == "gst_fdpa":
            g = int(self.accumulation.group)
            for s in self.scales:
                if int(s.block) % g:
                    raise ValueError(f"kind {self.name!r}: scale block {int(s.block)} is not a multiple of group {g}")
        if scaled:
            for s in self.scales:
                if int(s.block) % int(self.accumulation.fused_len) and int(self.accumulation.fused_len) % int(s.block):
                    raise ValueError(f"kind {self.name!r}: scale block and fused_len must nest")
        if int(self.k) % int(self.accumulation.fused_len) and int(self.accumulation.fused_len) % int(self.k):
            raise ValueError(f"kind {self.name!r}: k and fused_len must nest")
        return self

    @property
    def block_scaled(self) -> bool:
        return bool(self.scales)

    def nums(self) -> dict[str, Num | Rule]:
        """Every numeric field (and :class:`Rule`) of the kind, by dotted name (for provenance reports)."""
        out: dict[str, Num | Rule] = {}

        def walk(prefix: str, m: BaseModel) -> None:
            for name in type(m).model_fields:
                v = getattr(m, name)
                if isinstance(v, (Num, Rule)):
                    out[prefix + name] = v
                elif isinstance(v, BaseModel):
                    walk(prefix + name + ".", v)
                elif isinstance(v, list):
                    for i, x in enumerate(v):
                        if isinstance(x, BaseModel):
                            walk(f"{prefix}{name}[{i}].", x)

        walk("", self)
        return out


class NativeCombo(_Model):
    """A natively supported element/scale/block combination and the kind that runs it."""

    element: ShortText
    scale: ShortText | None = None
    block: int | None = Field(default=None, ge=1, le=MAX_K)
    kind: ShortText
    note: Text = ""


class HWSpec(_Model):
    """An accelerator: its MMA kinds (by name) and its native format combinations."""

    name: ShortText
    vendor: ShortText
    arch: ShortText
    description: Text = ""
    inherits: ShortText | None = None
    provenance: Provenance
    source: Text
    kinds: dict[ShortText, MMAKind] = Field(max_length=256)
    native: list[NativeCombo] = Field(default_factory=list, max_length=256)

    @model_validator(mode="after")
    def _check(self) -> "HWSpec":
        for key, k in self.kinds.items():
            if k.name != key:
                raise ValueError(f"spec {self.name!r}: kind key {key!r} differs from its name {k.name!r}")
        for c in self.native:
            if c.kind not in self.kinds:
                raise ValueError(f"spec {self.name!r}: native combo names unknown kind {c.kind!r}")
        return self

    def kind(self, name: str) -> MMAKind:
        """The kind called ``name``; raises ValueError listing the kinds of this spec."""
        try:
            return self.kinds[name]
        except KeyError:
            raise InputError(f"hw {self.name!r} has no kind {name!r}; kinds: {', '.join(self.kinds)}") from None

    def provenance_counts(self) -> dict[str, int]:
        """How many numeric fields of each provenance the spec holds."""
        counts: dict[str, int] = {}
        for k in self.kinds.values():
            for n in k.nums().values():
                counts[n.provenance] = counts.get(n.provenance, 0) + 1
        return counts


# --- JSON Schema of an hwspec file (``fp4lab schema --kind hwspec``) ---------------------------------------------

# Integer ranges of the numeric fields (the ``integral`` checks above), by field name.
_INT_RANGES = {"k": (1, MAX_K), "block": (1, MAX_K), "fused_len": (1, MAX_K), "group": (1, MAX_K),
               "frac_bits": (0, 50), "join_frac_bits": (0, 50), "e_zero": (-1000, 1000), "mantissa_bits": (0, 23),
               "nan_bits": (0, 2**32 - 1)}
_NEEDS = {"t_fdpa": ["e_zero"], "st_fdpa": ["e_zero"], "gst_fdpa": ["e_zero", "group"],
          "tr_fdpa": ["join_frac_bits"], "gtr_fdpa": ["join_frac_bits"]}
_FINITE = {"minimum": -1.7976931348623157e308, "maximum": 1.7976931348623157e308}  # refuses TOML's inf


def _num(value: dict[str, Any], description: str | None) -> dict[str, Any]:
    """A bare number, or a {value, provenance, source?} table whose value obeys ``value``."""
    out: dict[str, Any] = {"anyOf": [value, {"allOf": [{"$ref": "#/$defs/Num"},
                                                       {"properties": {"value": value}}]}]}
    if description:
        out["description"] = description
    return out


def file_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of an hwspec TOML file: exactly the structure the loader
    (:func:`fp4lab.hwspec.load_hw`) accepts before it resolves ``extends``/``inherits`` and expands numbers.

    pydantic's schema of :class:`HWSpec` describes the expanded model; a file may also write a bare number (or a bare
    ``zero_sign`` string) that takes its kind's provenance and source, a ``{value, provenance}`` table without
    ``source``, a kind without ``provenance``/``source`` (the spec's), ``extends`` in a kind (start from another
    kind of the file and deep-merge; such a kind and every kind of a spec that ``inherits`` a built-in may be
    partial) and no ``kinds`` at all.
    """
    from fp4lab.hwspec.registry import HW

    schema = HWSpec.model_json_schema()
    defs = schema["$defs"]
    defs["Num"]["required"] = ["value", "provenance"]
    defs["Num"]["properties"]["value"] = {"type": "number", **_FINITE}
    defs["Num"]["description"] += " Without 'source' it takes its kind's source."
    defs["Rule"]["required"] = ["value", "provenance"]
    for model in ("Accumulation", "Output", "MMAKind", "ScaleOption"):
        props = defs[model]["properties"]
        for key, prop in props.items():
            if key in _INT_RANGES:
                lo, hi = _INT_RANGES[key]
                props[key] = _num({"type": "integer", "minimum": lo, "maximum": hi}, prop.get("description"))
    defs["MMAKind"]["properties"]["peak_tflops"] = _num(
        {"type": "number", "minimum": 0, "maximum": _FINITE["maximum"]},
        defs["MMAKind"]["properties"]["peak_tflops"]["description"])
    for key in ("a_formats", "b_formats"):
        defs["MMAKind"]["properties"][key]["items"] = {"enum": list(OPERAND_FORMATS)}
        defs["MMAKind"]["properties"][key]["minItems"] = 1
    defs["ScaleOption"]["properties"]["format"] = {"enum": list(OPERAND_FORMATS)}
    zero_sign = {"enum": list(ZERO_SIGN_RULES)}
    out_props = defs["Output"]["properties"]
    out_props["zero_sign"] = {
        "anyOf": [zero_sign, {"allOf": [{"$ref": "#/$defs/Rule"}, {"properties": {"value": zero_sign}}]}],
        "default": out_props["zero_sign"]["default"], "description": out_props["zero_sign"]["description"]}
    # Kinds, accumulations and outputs are deep-merged by extends/inherits, so their tables say no field is
    # required; KindRoot adds what a kind that starts from nothing must give.
    root: dict[str, Any] = {"required": [r for r in defs["MMAKind"]["required"]
                                         if r not in ("name", "provenance", "source")],
                            "properties": {m.lower(): {"required": defs[m]["required"]}
                                           for m in ("Accumulation", "Output")}}
    root["allOf"] = [{"if": {"properties": {"accumulation": {"properties": {"algorithm": {"const": alg}}}}},
                      "then": {"properties": {"accumulation": {"required": need}}}} for alg, need in _NEEDS.items()]
    root["allOf"].append({"if": {"properties": {"accumulation": {"properties": {
        "algorithm": {"enum": ["st_fdpa", "gst_fdpa"]}}}}}, "then": {"required": ["scales"],
                                                                    "properties": {"scales": {"minItems": 1}}}})
    root["description"] = "A kind without 'extends' in a spec without 'inherits': complete by itself."
    for model in ("MMAKind", "Accumulation", "Output"):
        defs[model].pop("required")
    kind_props = defs["MMAKind"]["properties"]
    kind_props["name"] = {"description": "Ignored: the kind's table key is its name."}
    kind_props["extends"] = {"type": "string", "description": "Start from this kind of the same file and deep-merge "
                             "this table into it."}
    for key in ("provenance", "source"):
        kind_props[key]["description"] = f"Default: the spec's {key}; also the {key} of this kind's bare numbers."
    defs["KindRoot"] = root
    props = schema["properties"]
    props["inherits"] = {"enum": list(HW.builtin_names), "description": "Start from this built-in spec's kinds (merged "
                         "with this file's kinds of the same name) and native combos (unless 'native' is given); "
                         "with provenance 'assumed' or 'unknown', every inherited kind and number takes that "
                         "provenance."}
    props["kinds"]["description"] = "MMA instruction kinds by name. Default: none (or the inherited ones)."
    schema["required"] = [r for r in schema["required"] if r != "kinds"]
    schema["allOf"] = [{"if": {"not": {"required": ["inherits"]}},
                        "then": {"properties": {"kinds": {"additionalProperties": {
                            "if": {"not": {"required": ["extends"]}}, "then": {"$ref": "#/$defs/KindRoot"}}}}},
                        "description": "Without 'inherits', a kind that does not extend another is complete."}]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$comment"] = ("Checks after extends/inherits are resolved (merged kinds complete, k, fused_len and scale "
                          "blocks nest, fused_len a multiple of group, frac_bits within what float64 sums hold, NaN "
                          "bit patterns, native combos naming kinds of the spec, 'extends' naming a kind of the "
                          "file, printable text) are made by `fp4lab spec validate --kind hwspec`, not by this "
                          "schema.")
    return schema
