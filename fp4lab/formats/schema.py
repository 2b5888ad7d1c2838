"""JSON Schema (draft 2020-12) of a format spec file: exactly the structure the loader accepts.

pydantic's schema of ``QuantFormat`` describes the model after its ``before`` validators, so it misses what a spec
file may write and the loader resolves: ``element`` and ``scale`` as names of the built-in building blocks,
``block`` as one integer. It also shows ``kind`` of an element table as optional (the discriminated union needs it)
and no default for ``scale_rule`` (omitted, it is ``{method = "none"}``: no block scaling). :func:`format_schema`
starts from pydantic's schema and adds these, plus the cross-field rules of ``QuantFormat`` that JSON Schema can
state (a block, a scale and a scaling ``scale_rule`` go together; exponent rules need a pow2 scale; ``even`` needs a
float element grid; a tensor scale needs a block scale that is not FP32). Checks on values (float32 exactness,
targets within the grid, clamps within the scale range, ...) are left to ``fp4lab spec validate``.
"""

from __future__ import annotations

from typing import Any

from fp4lab.formats.quant_format import NAMED_GRIDS, NAMED_SCALES, QuantFormat
from fp4lab.formats.rules import MAX_BLOCK_EXTENT, OCP_METHODS

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _not_null(key: str) -> dict[str, Any]:
    return {"required": [key], "properties": {key: {"not": {"type": "null"}}}}


def _scaling() -> dict[str, Any]:
    """A spec whose ``scale_rule`` scales blocks: the table is there and its method (default amax) is not none."""
    return {"required": ["scale_rule"],
            "properties": {"scale_rule": {"not": {"required": ["method"],
                                                  "properties": {"method": {"const": "none"}}}}}}


def _cross_field_rules() -> list[dict[str, Any]]:
    pow2 = {"anyOf": [{"const": "e8m0"}, {"type": "object", "required": ["kind"],
                                          "properties": {"kind": {"const": "pow2"}}}]}
    fp32 = {"anyOf": [{"const": "fp32"}, {"type": "object", "required": ["kind"],
                                          "properties": {"kind": {"const": "fp32"}}}]}
    float_grid = {"anyOf": [{"enum": sorted(n for n, g in NAMED_GRIDS.items() if g["kind"] == "float")},
                            {"type": "object", "required": ["kind"], "properties": {"kind": {"const": "float"}}}]}
    method_in = lambda *m: {"required": ["scale_rule"],  # noqa: E731
                            "properties": {"scale_rule": {"required": ["method"],
                                                          "properties": {"method": {"enum": list(m)}}}}}
    rule_field_not = lambda key, default: {"required": ["scale_rule"],  # noqa: E731
                                           "properties": {"scale_rule": {"required": [key], "properties": {
                                               key: {"not": {"const": default}}}}}}
    return [
        {"if": _scaling(), "then": {"allOf": [_not_null("block"), _not_null("scale")]},
         "else": {"allOf": [{"not": _not_null("block")},
                            {"not": {"required": ["tensor_scale"],
                                     "properties": {"tensor_scale": {"const": "amax"}}}}]},
         "description": "A scaling scale_rule needs a block and a scale; without one there is no block and no "
                        "tensor scale."},
        {"if": method_in(*OCP_METHODS), "then": {"properties": {"scale": pow2}},
         "description": f"Exponent rules ({', '.join(OCP_METHODS)}) need a pow2 scale (e8m0)."},
        {"if": method_in("even"), "then": {"properties": {"element": float_grid}},
         "description": "Method 'even' rounds amax to the element's mantissa width: it needs a float element grid."},
        {"if": {"required": ["tensor_scale"], "properties": {"tensor_scale": {"const": "amax"}}},
         "then": {"allOf": [_not_null("scale"), {"properties": {"scale": {"not": fp32}}}]},
         "description": "A tensor scale needs a narrow block-scale format (not fp32)."},
        {"if": rule_field_not("select_by", "sse"),
         "then": {"properties": {"scale_rule": {"required": ["targets"], "properties": {"targets": {"minItems": 2}}}}},
         "description": "select_by other than 'sse' chooses among targets: give two or more."},
        {"if": {"anyOf": [rule_field_not("scale_overflow", "saturate"), rule_field_not("scale_arithmetic", "decode")]},
         "then": {"not": method_in(*OCP_METHODS, "none")},
         "description": "scale_overflow 'nan' and scale_arithmetic 'encode' apply to the amax/rceil methods."},
        {"if": rule_field_not("scale_overflow", "saturate"), "then": {"properties": {"scale": pow2}},
         "description": "scale_overflow 'nan' needs a pow2 scale (e8m0)."},
        {"if": rule_field_not("dequantize_order", "value_scale_first"),
         "then": {"required": ["tensor_scale"], "properties": {"tensor_scale": {"const": "amax"}}},
         "description": "dequantize_order orders the two scales of a two-level format: it needs a tensor scale."},
    ]


def format_schema() -> dict[str, Any]:
    """The JSON Schema of a format spec file (``fp4lab schema``)."""
    schema = QuantFormat.model_json_schema(by_alias=True)
    defs = schema["$defs"]
    for grid in ("FloatGrid", "IntGrid", "TableGrid"):  # the discriminator: a table must say its kind
        req = defs[grid].setdefault("required", [])
        defs[grid]["required"] = ["kind"] + [r for r in req if r != "kind"]
        defs[grid]["properties"]["kind"].pop("default", None)
    defs["BlockLayout"]["properties"]["shape"]["items"].update(minimum=1, maximum=MAX_BLOCK_EXTENT)
    props = schema["properties"]
    element = props["element"]
    element.pop("discriminator", None)  # an OpenAPI keyword; "kind" is required in each alternative instead
    props["element"] = {
        "description": "A built-in grid by name, or a table whose 'kind' picks the family.",
        "anyOf": [{"enum": sorted(NAMED_GRIDS)}, element]}
    props["scale"] = {
        "description": "A built-in scale format by name, a table whose 'kind' picks the family, or null "
                       "(element-only formats).",
        "anyOf": [{"enum": sorted(NAMED_SCALES)}, {"$ref": "#/$defs/ScaleFormat"}, {"type": "null"}],
        "default": None}
    props["block"] = {
        "description": f"Elements per block along the quantized axis (an integer 1..{MAX_BLOCK_EXTENT}), a "
                       "layout table, or null (element-only formats).",
        "anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_BLOCK_EXTENT}, {"$ref": "#/$defs/BlockLayout"},
                  {"type": "null"}],
        "default": None}
    props["scale_rule"] = {
        "$ref": "#/$defs/ScaleRule", "default": {"method": "none"},
        "description": "Omitted: no block scaling (method 'none'). A [scale_rule] table without 'method' uses "
                       "'amax'."}
    schema["allOf"] = _cross_field_rules()
    schema["$schema"] = DIALECT
    schema["$comment"] = ("Checks on values (float32-exact tables, targets within the grid, clamps within the scale "
                          "range) are made by `fp4lab spec validate`, not by this schema.")
    return schema
