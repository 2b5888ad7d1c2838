"""One integer per plan choice in every backend: the Triton constexprs (``fp4lab.kernels.codes``) and the numba
parameters (``fp4lab.emulator.nb_tables``) are the enums' ``code``s, every member has its named constant, kernel
code compares record fields with names only, and the records are built by keyword from the plans."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fp4lab
from fp4lab.emulator import nb_tables
from fp4lab.kernels import codes
from fp4lab.kernels.params import DeviceTables, ElementDecode, InputKind, element_params, scale_params
from fp4lab.numerics.plan import (
    Encoder,
    ExponentRule,
    Overflow,
    ScaleChoice,
    ScaleKind,
    ScaleRounding,
    element_plan,
    scale_plan,
)

KERNEL_PREFIXES = {Encoder: "ENCODER_", Overflow: "OVERFLOW_", ScaleChoice: "CHOICE_", ExponentRule: "RULE_",
                   ScaleRounding: "ROUND_", ScaleKind: "KIND_", ElementDecode: "DECODE_", InputKind: "INPUT_"}
NUMBA_PREFIXES = {Overflow: "OVERFLOW_", ScaleChoice: "CHOICE_", ExponentRule: "RULE_", ScaleRounding: "ROUND_",
                  ScaleKind: "KIND_"}


def _named(module, prefix: str) -> dict[str, int]:
    out = {}
    for name, v in vars(module).items():
        if name.startswith(prefix):
            out[name[len(prefix):]] = int(getattr(v, "value", v))
    return out


@pytest.mark.parametrize("enum", list(KERNEL_PREFIXES), ids=lambda e: e.__name__)
def test_kernel_constants_are_the_enum_codes(enum):
    assert _named(codes, KERNEL_PREFIXES[enum]) == {m.name: m.code for m in enum}


@pytest.mark.parametrize("enum", list(NUMBA_PREFIXES), ids=lambda e: e.__name__)
def test_numba_constants_are_the_enum_codes(enum):
    assert _named(nb_tables, NUMBA_PREFIXES[enum]) == {m.name: m.code for m in enum}


def test_codes_are_distinct_positions():
    for enum in KERNEL_PREFIXES:
        assert sorted(m.code for m in enum) == list(range(len(enum))), enum.__name__


def test_etab_positions_name_the_tables_they_index():
    tables = DeviceTables(*(f"<{f}>" for f in DeviceTables._fields))
    args = element_params(fp4lab.get_format("ufp4"), "sr").kernel_args(tables)
    assert args[codes.ETAB_LEVELS.value] == tables.levels
    assert args[codes.ETAB_VALUES.value] == tables.values


FIELDS = r"(ELEM\.(ENCODER|OVERFLOW)|SCALE\.(CHOICE|EXP_RULE|KIND|ROUNDING)|DEC\.KIND|IN_KIND|OVERFLOW|KIND|ROUNDING)"


def test_kernel_code_compares_choices_with_names():
    root = Path(fp4lab.__file__).parent / "kernels"
    bare = re.compile(FIELDS + r"\s*(==|!=|<=|>=|<|>)\s*-?\d")
    for path in sorted(root.glob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert not bare.search(line), f"{path.name}:{n}: compare with a name from fp4lab.kernels.codes: {line}"
    assert not re.search(r"etab\[\d", "".join(p.read_text() for p in root.glob("*.py")))


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "ufp4", "nvfp4-te", "mxfp4-even", "int4-b16-fp32",
                                  "nf4-b64-fp32", "e2m1"])
def test_records_carry_the_plan_choices(name):
    fmt = fp4lab.get_format(name)
    sp, cx = scale_plan(fmt), scale_params(fmt).cx
    assert cx.CHOICE == sp.choice.code
    if sp.choice != ScaleChoice.NONE:
        assert (cx.KIND, cx.ROUNDING) == (sp.kind.code, sp.rounding.code)
        assert (cx.DIVIDE_IDEAL, cx.DIVIDE_ELEMENTS, cx.ENCODE_ARITH) == (sp.divide_ideal, sp.divide_elements,
                                                                         sp.encode_arith)
        tab = nb_tables.tables_for(fmt, "rtne")
        assert tab.ip[nb_tables.P_KIND] == sp.kind.code and tab.ip[nb_tables.P_CHOICE] == sp.choice.code
        assert tab.ip[nb_tables.P_DIVIDE_IDEAL] == sp.divide_ideal
        assert tab.ip[nb_tables.P_DIVIDE_ELEMENTS] == sp.divide_elements
    for mode in ("rtne", "sr", "rtz"):
        ep, ecx = element_plan(fmt, mode), element_params(fmt, mode).cx
        assert (ecx.ENCODER, ecx.OVERFLOW, ecx.SR) == (ep.encoder.code, ep.overflow.code, ep.stochastic)
