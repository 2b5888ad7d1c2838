"""``fp4lab schema`` describes exactly what the spec loader accepts: built-ins and README's example validate, the
string forms of ``element``/``scale``/``block`` are there, defaults and required fields are the loader's, and on a
set of specs around each rule the schema and the loader agree."""

from __future__ import annotations

import json
import re
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from fp4lab.cli import main
from fp4lab.errors import SpecError
from fp4lab.formats import load_format
from fp4lab.formats.registry import BUILTIN_NAMES

jsonschema = pytest.importorskip("jsonschema")
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def validator():
    """A draft 2020-12 validator of what ``fp4lab schema`` prints."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["schema"]) == 0
    schema = json.loads(buf.getvalue())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_schema_is_the_format_schema(validator):
    from fp4lab.formats.schema import format_schema

    assert validator.schema == format_schema() and validator.schema["$schema"].endswith("2020-12/schema")


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_every_builtin_spec_validates(validator, name):
    with resources.as_file(resources.files("fp4lab.formats") / "builtin" / f"{name}.toml") as path:
        data = tomllib.loads(path.read_text())
    assert [e.message for e in validator.iter_errors(data)] == []


def readme_specs() -> list[str]:
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no TOML example"
    return blocks


@pytest.mark.parametrize("i", range(len(readme_specs())))
def test_every_readme_spec_validates_and_loads(validator, tmp_path, i):
    text = readme_specs()[i]
    assert [e.message for e in validator.iter_errors(tomllib.loads(text))] == []
    path = tmp_path / "readme.toml"
    path.write_text(text)
    load_format(path)


def test_defaults_and_required_are_the_loaders(validator, tmp_path):
    schema = validator.schema
    assert schema["required"] == ["name", "element"]
    path = tmp_path / "minimal.toml"
    path.write_text('name = "minimal"\nelement = "e2m1"\n')
    dumped = load_format(path).model_dump(mode="json", by_alias=True)
    for key, prop in schema["properties"].items():
        if "default" in prop:
            want = prop["default"]
            got = dumped[key]
            if key == "scale_rule":  # the table given as default, completed by ScaleRule's own defaults
                from fp4lab.formats.rules import ScaleRule

                want = ScaleRule.model_validate(want).model_dump(mode="json", by_alias=True)
            assert got == want, key
    rule_defaults = {k: v["default"] for k, v in schema["$defs"]["ScaleRule"]["properties"].items() if "default" in v}
    path.write_text('name = "r"\nelement = "e2m1"\nblock = 32\nscale = "fp32"\n[scale_rule]\n')
    rule = load_format(path).scale_rule.model_dump(mode="json", by_alias=True)
    assert {k: rule[k] for k in rule_defaults} == rule_defaults  # a [scale_rule] table without method: amax
    for grid in ("FloatGrid", "IntGrid", "TableGrid"):
        assert "kind" in schema["$defs"][grid]["required"]


BASE = 'name = "t"\n'
SCALED = 'block = 32\nscale = "e8m0"\n[scale_rule]\nmethod = "floor"\n'
AGREEMENT = {  # spec text -> accepted by the loader (the schema must say the same)
    "named element": (BASE + 'element = "e1m2"\n', True),
    "named scale and int block": (BASE + 'element = "e2m1"\n' + SCALED, True),
    "scale table": (BASE + 'element = "e2m1"\nblock = 32\n[scale]\nkind = "pow2"\nexponent_bits = 8\n'
                    '[scale_rule]\nmethod = "floor"\n', True),
    "2-D block table": (BASE + 'element = "e2m1"\nblock = { shape = [16, 16] }\nscale = "ue4m3"\n'
                        '[scale_rule]\nmethod = "amax"\n', True),
    "float table": (BASE + '[element]\nkind = "float"\nexponent_bits = 1\nmantissa_bits = 2\nbias = 1\n', True),
    "int table with bits": (BASE + '[element]\nkind = "int"\nbits = 3\n', True),
    "value table": (BASE + '[element]\nkind = "table"\nbits = 2\nvalues = [0.0, 1.0, 2.0, -1.0]\n', True),
    "rule table without method": (BASE + 'element = "e2m1"\nblock = 16\nscale = "fp32"\n[scale_rule]\n', True),
    "tensor scale": (BASE + 'element = "e2m1"\nblock = 16\nscale = "ue4m3"\ntensor_scale = "amax"\n'
                     '[scale_rule]\nmethod = "amax"\n', True),
    "even on float grid": (BASE + 'element = "e2m1"\nblock = 32\nscale = "e8m0"\n[scale_rule]\nmethod = "even"\n',
                           True),
    "unknown field": (BASE + 'element = "e2m1"\ntensorscale = "amax"\n', False),
    "unknown rule field": (BASE + 'element = "e2m1"\nblock = 16\nscale = "fp32"\n[scale_rule]\nmethd = "amax"\n',
                           False),
    "missing element": (BASE, False),
    "missing name": ('element = "e2m1"\n', False),
    "unknown element name": (BASE + 'element = "e9m9"\n', False),
    "unknown scale name": (BASE + 'element = "e2m1"\nblock = 32\nscale = "e9m0"\n[scale_rule]\nmethod = "floor"\n',
                           False),
    "element table without kind": (BASE + '[element]\nexponent_bits = 1\nmantissa_bits = 2\n', False),
    "python attribute name": (BASE + '[element]\nkind = "int"\nint_bits = 3\n', False),
    "number as a string": (BASE + '[element]\nkind = "int"\nbits = "3"\n', False),
    "block without scale_rule": (BASE + 'element = "e2m1"\nblock = 32\nscale = "e8m0"\n', False),
    "block with method none": (BASE + 'element = "e2m1"\nblock = 32\nscale = "e8m0"\n[scale_rule]\n'
                               'method = "none"\n', False),
    "scale_rule without block": (BASE + 'element = "e2m1"\nscale = "e8m0"\n[scale_rule]\nmethod = "floor"\n',
                                 False),
    "tensor scale alone": (BASE + 'element = "e2m1"\ntensor_scale = "amax"\n', False),
    "tensor scale on fp32": (BASE + 'element = "e2m1"\nblock = 16\nscale = "fp32"\ntensor_scale = "amax"\n'
                             '[scale_rule]\nmethod = "amax"\n', False),
    "floor on ue4m3": (BASE + 'element = "e2m1"\nblock = 32\nscale = "ue4m3"\n[scale_rule]\nmethod = "floor"\n',
                       False),
    "ceil on a float scale table": (BASE + 'element = "e2m1"\nblock = 32\n[scale]\nkind = "float"\n'
                                    'exponent_bits = 4\nmantissa_bits = 3\n[scale_rule]\nmethod = "ceil"\n', False),
    "even on int4": (BASE + 'element = "int4"\nblock = 32\nscale = "e8m0"\n[scale_rule]\nmethod = "even"\n', False),
    "block of 0": (BASE + 'element = "e2m1"\nblock = 0\nscale = "e8m0"\n[scale_rule]\nmethod = "floor"\n', False),
    "block extent 5000": (BASE + 'element = "e2m1"\nblock = { shape = [5000] }\nscale = "e8m0"\n[scale_rule]\n'
                          'method = "floor"\n', False),
    "3-D block": (BASE + 'element = "e2m1"\nblock = { shape = [2, 2, 2] }\nscale = "e8m0"\n[scale_rule]\n'
                  'method = "floor"\n', False),
    "boolean block": (BASE + 'element = "e2m1"\nblock = true\nscale = "e8m0"\n[scale_rule]\nmethod = "floor"\n',
                      False),
    "bad rounding": (BASE + 'element = "e2m1"\nrounding = "nearest"\n', False),
    "bad name": ('name = "has space"\nelement = "e2m1"\n', False),
    "select_by sae with two targets": (BASE + 'element = "e2m1"\nblock = 16\nscale = "ue4m3"\n[scale_rule]\n'
                                       'targets = [6.0, 4.0]\nselect_by = "sae"\n', True),
    "select_by sae with one target": (BASE + 'element = "e2m1"\nblock = 16\nscale = "ue4m3"\n[scale_rule]\n'
                                      'select_by = "sae"\n', False),
    "scale_overflow nan on e8m0": (BASE + 'element = "e2m1"\nblock = 32\nscale = "e8m0"\n[scale_rule]\n'
                                   'scale_overflow = "nan"\n', True),
    "scale_overflow nan on ue4m3": (BASE + 'element = "e2m1"\nblock = 32\nscale = "ue4m3"\n[scale_rule]\n'
                                    'scale_overflow = "nan"\n', False),
    "scale_overflow nan with floor": (BASE + 'element = "e2m1"\nblock = 32\nscale = "e8m0"\n[scale_rule]\n'
                                      'method = "floor"\nscale_overflow = "nan"\n', False),
    "scale_arithmetic encode with floor": (BASE + 'element = "e2m1"\nblock = 32\nscale = "e8m0"\n[scale_rule]\n'
                                           'method = "floor"\nscale_arithmetic = "encode"\n', False),
    "dequantize_order with a tensor scale": (BASE + 'element = "e2m1"\nblock = 16\nscale = "ue4m3"\n'
                                             'tensor_scale = "amax"\n[scale_rule]\n'
                                             'dequantize_order = "scale_product_first"\n', True),
    "dequantize_order without a tensor scale": (BASE + 'element = "e2m1"\nblock = 16\nscale = "ue4m3"\n'
                                                '[scale_rule]\ndequantize_order = "scale_product_first"\n', False),
}


@pytest.mark.parametrize("case", list(AGREEMENT))
def test_schema_and_loader_agree(validator, tmp_path, case):
    text, accepted = AGREEMENT[case]
    path = tmp_path / "spec.toml"
    path.write_text(text)
    try:
        load_format(path)
        loaded = True
    except SpecError:
        loaded = False
    assert loaded is accepted
    assert validator.is_valid(tomllib.loads(text)) is accepted


def test_json_null_scale_and_block_agree(validator, tmp_path):
    path = tmp_path / "spec.json"
    data = {"name": "j", "element": "e2m1", "block": None, "scale": None}
    path.write_text(json.dumps(data))
    load_format(path)
    assert validator.is_valid(data)
