"""Format registry and spec files: built-ins load and round-trip through TOML, grids decode to the documented
value tables, threshold tables realise each rounding mode's tie rule, scale formats have the documented ranges."""

from __future__ import annotations

import tomllib
from importlib import resources

import numpy as np
import pytest

import fp4lab
from fp4lab.formats import (
    BUILTIN_NAMES,
    FloatGrid,
    IntGrid,
    QuantFormat,
    ScaleFormat,
    TableGrid,
    model_to_toml,
)
from fp4lab.formats.spec_io import load_model
from fp4lab.testing.bits import same_bits

F32 = np.float32
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def builtin_path(name: str):
    return resources.files("fp4lab.formats") / "builtin" / f"{name}.toml"


def test_list_formats_starts_with_the_builtins():
    names = fp4lab.list_formats()
    assert names[: len(BUILTIN_NAMES)] == list(BUILTIN_NAMES)
    for required in ("mxfp4", "nvfp4", "ufp4", "e2m1-b16-fp32", "int4-b32-e8m0", "nf4-b64-fp32", "e2m1", "e1m2",
                     "int4", "nvfp4-torchao", "nvfp4-torchao-1level", "nvfp4-te"):
        assert required in names


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_builtin_loads_and_round_trips(name, tmp_path):
    """Every built-in: its file validates, the registry entry equals it, and dump -> load gives an equal format."""
    fmt = fp4lab.get_format(name)
    assert fmt.name == name and isinstance(fmt, QuantFormat)
    with resources.as_file(builtin_path(name)) as path:
        assert fp4lab.load_format(path) == fmt
        assert fp4lab.get_format(str(path)) == fmt  # a path is accepted wherever a name is
    out = tmp_path / f"{name}.toml"
    out.write_text(model_to_toml(fmt))
    back = load_model(QuantFormat, out)
    assert back == fmt
    assert tomllib.loads(out.read_text())["name"] == name
    assert same_bits(back.element.values.astype(F32), fmt.element.values.astype(F32))


def test_named_element_grids_decode_to_the_documented_tables():
    e2m1 = fp4lab.get_format("e2m1").element
    assert e2m1.values.tolist() == E2M1 + [-v for v in E2M1]
    assert np.signbit(e2m1.values[8])  # code 8 is -0
    e1m2 = fp4lab.get_format("e1m2").element
    assert e1m2.values[:8].tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    int4 = fp4lab.get_format("int4").element
    assert int4.levels.tolist() == list(range(-7, 8))
    assert int4.values[8] == -8.0  # decodes, but symmetric rounding never produces it
    nf4 = fp4lab.get_format("nf4-b64-fp32").element
    assert nf4.levels.size == 16 and nf4.max == 1.0 and nf4.min == -1.0 and not nf4.is_sign_symmetric


def test_grid_fields_and_specials():
    e4m3 = FloatGrid(exponent_bits=4, mantissa_bits=3, specials="fn")
    assert e4m3.max == 448.0 and e4m3.nan_code == 0x7F and e4m3.inf_codes is None
    assert e4m3.levels[e4m3.levels > 0][0] == 2.0**-9
    e5m2 = FloatGrid(exponent_bits=5, mantissa_bits=2, specials="ieee")
    assert e5m2.max == 57344.0 and e5m2.inf_codes == (0x7C, 0xFC) and e5m2.nan_code == 0x7D
    assert float(e4m3.overflow_threshold) == float(np.nextafter(F32(464), F32(np.inf)))
    no_sub = FloatGrid(exponent_bits=2, mantissa_bits=1, subnormals=False)
    assert no_sub.values[1] == 0.0 and 0.5 not in no_sub.levels
    twos = IntGrid(bits=4, range="twos_complement", step=0.5)
    assert twos.levels.tolist() == [k * 0.5 for k in range(-8, 8)] and not twos.is_sign_symmetric
    mags = TableGrid(bits=3, magnitudes=[0.0, 1.0, 2.0, 4.0])
    assert mags.values.tolist() == [0.0, 1.0, 2.0, 4.0, -0.0, -1.0, -2.0, -4.0]


# Tie rule per rounding mode on E2M1 (docs/numerics.md, "Element rounding"): t rounds up iff t >= threshold.
UP = F32(np.inf)


def _nu(v: float) -> float:
    return float(np.nextafter(F32(v), UP))


M = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]  # E2M1 midpoints (all float32-exact)
NEG_M = [-m for m in M[::-1]]


@pytest.mark.parametrize("mode,negative,positive", [
    # ties to the even code: 0.25 -> 0 (code 0), 0.75 -> 1 (code 2), ...; the negative side mirrors it
    ("rtne", [-5.0, _nu(-3.5), -2.5, _nu(-1.75), -1.25, _nu(-0.75), -0.25],
     [_nu(0.25), 0.75, _nu(1.25), 1.75, _nu(2.5), 3.5, _nu(5.0)]),
    ("rtna", [_nu(m) for m in NEG_M], M),  # ties away from zero
    ("rtnz", NEG_M, [_nu(m) for m in M]),  # ties toward zero
    ("rtz", [_nu(v) for v in [-6.0, -4.0, -3.0, -2.0, -1.5, -1.0, -0.5]], [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]),
])
def test_e2m1_threshold_tables(mode, negative, positive):
    """t rounds to levels[count(t >= thresholds)]: a tie that rounds up has the midpoint itself as threshold, a tie
    that rounds down the next float32 above it."""
    thr = fp4lab.get_format("e2m1").element.thresholds(mode).astype(np.float64)
    assert thr.tolist() == negative + positive


@pytest.mark.parametrize("mode,expected", [
    ("rtne", [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.0, -2.0]),
    ("rtna", [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.5, -3.0]),
    ("rtnz", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -0.0, -2.0]),
    ("rtz", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -0.0, -2.0]),
])
def test_e2m1_ties_per_mode(mode, expected):
    """The seven E2M1 midpoints and two negative ones under each deterministic mode."""
    x = F32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -2.5])
    got = fp4lab.dequantize(fp4lab.quantize(x, "e2m1", rounding=mode))
    assert same_bits(got, F32(expected))


def test_special_inputs_of_the_element_only_builtins():
    """NaN -> -0 for 'e2m1' (nan_element 'neg_zero', as ml_dtypes), +0 for 'e1m2' / 'int4'; Inf saturates; -0 kept
    where the grid has -0 (not in INT4, whose only zero is +0)."""
    x = F32([np.nan, np.inf, -np.inf, -0.0, 1e-30, -1e-30])
    assert fp4lab.quantize(x, "e2m1").codes.tolist() == [8, 7, 15, 8, 0, 8]
    assert fp4lab.quantize(x, "e1m2").codes.tolist() == [0, 7, 15, 8, 0, 8]
    assert fp4lab.dequantize(fp4lab.quantize(x, "int4")).tolist() == [0.0, 7.0, -7.0, 0.0, 0.0, 0.0]


def test_scale_format_ranges():
    e8m0 = ScaleFormat(kind="pow2", exponent_bits=8, bias=127)
    assert e8m0.max == 2.0**127 and e8m0.min_positive == 2.0**-127 and not e8m0.has_zero
    assert e8m0.decode(np.array([0, 127, 254, 255], np.uint8)).tolist()[:3] == [2.0**-127, 1.0, 2.0**127]
    assert np.isnan(e8m0.decode(np.array([255], np.uint8))[0])
    ue4m3 = fp4lab.get_format("nvfp4").scale
    assert ue4m3.max == 448.0 and ue4m3.min_positive == 2.0**-9 and ue4m3.storage_bits == 8
    ue5m3 = ScaleFormat(kind="float", exponent_bits=5, mantissa_bits=3, bias=15, specials="fn")
    assert ue5m3.max == 114688.0 and ue5m3.min_positive == 2.0**-17
    bf16 = ScaleFormat(kind="bf16")
    assert bf16.decode(np.array([0x3F80], np.uint16)).tolist() == [1.0] and bf16.code_dtype == np.uint16
    assert ScaleFormat(kind="fp32").code_dtype == np.uint32


def test_derived_format_quantities():
    assert fp4lab.get_format("mxfp4").bits_per_element == 4.25
    assert fp4lab.get_format("nvfp4").bits_per_element == 4.5
    assert fp4lab.get_format("ufp4").bits_per_element == 6.0
    assert fp4lab.get_format("mxfp4").emax_elem == 2
    assert fp4lab.get_format("nvfp4-4over6").targets == [6.0, 4.0]
    assert fp4lab.get_format("nvfp4-2d").block.is_2d and fp4lab.get_format("nvfp4-2d").block_size == 256


def test_register_and_lookup(tmp_path):
    fmt = QuantFormat(name="test-registered-e1m2-b8", element="e1m2", block=8, scale="fp32",
                      scale_rule={"method": "amax"})
    assert fp4lab.register(fmt) is fmt
    assert fp4lab.get_format("test-registered-e1m2-b8") == fmt
    assert "test-registered-e1m2-b8" in fp4lab.list_formats()[len(BUILTIN_NAMES):]
    assert fp4lab.register(fmt) is fmt  # registering an equal format again is harmless
    path = tmp_path / "mine.toml"
    path.write_text(model_to_toml(fmt))
    assert fp4lab.get_format(path) == fmt
    qt = fp4lab.quantize(np.linspace(-1, 1, 16, dtype=F32), path)
    assert qt.fmt == fmt and qt.scales.shape == (2,)


def test_json_specs_load(tmp_path):
    path = tmp_path / "f.json"
    path.write_text('{"name": "j", "element": "int4", "block": 16, "scale": "fp32", "scale_rule": {"method": "amax"}}')
    fmt = fp4lab.load_format(path)
    assert fmt.block.shape == [16] and fmt.scale.kind == "fp32"


@pytest.mark.parametrize("scale", ["fp32", "bf16", "ue4m3", "ue5m3", "e8m0"])
def test_amax_overflowing_the_scale_format_saturates(scale):
    """docs/numerics.md "Scale overflow": an ideal scale amax / target above the scale format's largest finite value
    (here 3e38 / 0.5 overflows float32) is stored as that largest value; elements then saturate on the grid."""
    from fp4lab.formats import ScaleRule, TableGrid
    from fp4lab.numerics.ref_quantize import dequantize_reference, quantize_reference

    fmt = QuantFormat(name="test-overflow", element=TableGrid(bits=2, magnitudes=[0.0, 0.5]), block=4, scale=scale,
                      scale_rule=ScaleRule(method="amax", nan_policy="propagate" if scale != "bf16" else "ignore"))
    qt = quantize_reference(F32([3e38, 1.0, -1e38, 0.0]), fmt)
    assert qt.scales.tolist() == [F32(fmt.scale.max)]
    assert fmt.element.values[qt.codes].tolist() == [0.5, 0.0, -0.5, 0.0]
    assert np.all(np.isfinite(dequantize_reference(qt)))


def test_builtin_files_are_the_registry():
    """Every builtin/*.toml is a built-in (formats and recipes): display order first, other files sorted after."""
    from pathlib import Path

    from fp4lab.recipes.config import BUILTIN_NAMES as RECIPES
    from fp4lab.registry import spec_names

    for names, folder in ((BUILTIN_NAMES, "formats"), (RECIPES, "recipes")):
        files = {p.stem for p in (Path(fp4lab.__file__).parent / folder / "builtin").glob("*.toml")}
        assert set(names) == files and len(names) == len(files)
    got = spec_names(Path(fp4lab.__file__).parent / "formats" / "builtin", ("ufp4", "no-such-file"))
    assert got[0] == "ufp4" and list(got[1:]) == sorted(set(BUILTIN_NAMES) - {"ufp4"})
