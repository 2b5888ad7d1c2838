"""Errors speak to the user: one line naming the file / field / argument, what was wrong and what is allowed."""

from __future__ import annotations

import numpy as np
import pytest

import fp4lab
from fp4lab.errors import InputError, SpecError, UnknownFormatError
from fp4lab.formats import QuantFormat

F32 = np.float32

SPECS = {
    "malformed": ('name = "x"\nelement = "e2m1\n', "not valid TOML"),
    "unknown_field": ('name = "x"\nelement = "e2m1"\ncolour = "red"\n', "colour: Extra inputs are not permitted"),
    "level_count": ('name = "x"\n[element]\nkind = "table"\nbits = 4\nvalues = [0.0, 1.0, 2.0]\n',
                    "'values' has 3 entries, 4 bits need 16"),
    "duplicate": ('name = "x"\n[element]\nkind = "table"\nbits = 2\nvalues = [0.0, 1.0, 1.0, -1.0]\n',
                  "repeats a non-zero value"),
    "no_zero": ('name = "x"\n[element]\nkind = "table"\nbits = 2\nvalues = [0.5, 1.0, 2.0, -1.0]\n',
                "zero must be one of the values"),
    "inexact": ('name = "x"\n[element]\nkind = "table"\nbits = 2\nvalues = [0.0, 0.1, 2.0, -1.0]\n',
                "0.1 is not exactly representable in float32; use 0.10000000149011612"),
    "unsorted_magnitudes": ('name = "x"\n[element]\nkind = "table"\nbits = 3\nmagnitudes = [0.0, 2.0, 1.0, 3.0]\n',
                            "'magnitudes' must start at 0 and be strictly ascending"),
    "unknown_element": ('name = "x"\nelement = "e9m9"\n', "element 'e9m9' is not a known name"),
    "unknown_scale": ('name = "x"\nelement = "e2m1"\nblock = 32\nscale = "e9m0"\n[scale_rule]\nmethod = "floor"\n',
                      "scale 'e9m0' is not a known name"),
    "block_zero": ('name = "x"\nelement = "e2m1"\nblock = { shape = [0] }\nscale = "e8m0"\n[scale_rule]\n'
                   'method = "floor"\n', "each extent must be between 1 and 4096"),
    "block_3d": ('name = "x"\nelement = "e2m1"\nblock = { shape = [2, 2, 2] }\nscale = "e8m0"\n[scale_rule]\n'
                 'method = "floor"\n', "block.shape"),
    "floor_needs_pow2": ('name = "x"\nelement = "e2m1"\nblock = 32\nscale = "ue4m3"\n[scale_rule]\nmethod = "floor"\n',
                         "'floor' is an exponent rule and needs a pow2 scale (e8m0), not 'float'"),
    "even_needs_float_grid": ('name = "x"\nelement = "int4"\nblock = 32\nscale = "e8m0"\n[scale_rule]\n'
                              'method = "even"\n', "it needs a float element grid"),
    "tensor_scale_fp32": ('name = "x"\nelement = "e2m1"\nblock = 16\nscale = "fp32"\ntensor_scale = "amax"\n'
                          '[scale_rule]\nmethod = "amax"\n', "a tensor scale needs a narrow block-scale format"),
    "scale_without_block": ('name = "x"\nelement = "e2m1"\nscale = "e8m0"\n[scale_rule]\nmethod = "floor"\n',
                            "needs both 'block' and 'scale'"),
    "bad_rounding": ('name = "x"\nelement = "e2m1"\nrounding = "nearest"\n', "rounding"),
    "bad_name": ('name = "has space"\nelement = "e2m1"\n', "name"),
    "overflow_nan_without_nan": ('name = "x"\nelement = "e2m1"\noverflow = "nan"\n', "element grid has no NaN code"),
    "clamps_reversed": ('name = "x"\nelement = "e2m1"\nblock = 16\nscale = "fp32"\n[scale_rule]\nmethod = "amax"\n'
                        'min_scale = 2.0\nmax_scale = 1.0\n', "min_scale 2.0 exceeds max_scale 1.0"),
    "wrong_type": ('name = "x"\n[element]\nkind = "float"\nexponent_bits = "two"\nmantissa_bits = 1\n',
                   "element.exponent_bits"),
}


@pytest.mark.parametrize("case", list(SPECS))
def test_spec_errors_are_one_line_naming_file_and_field(case, tmp_path):
    text, expected = SPECS[case]
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        fp4lab.load_format(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(str(path) + ": ")
    assert expected in msg


def test_missing_spec_file(tmp_path):
    with pytest.raises(SpecError, match=r"missing\.toml: spec file not found$"):
        fp4lab.load_format(tmp_path / "missing.toml")


def test_unknown_format_name_lists_the_known_ones():
    with pytest.raises(UnknownFormatError) as info:
        fp4lab.get_format("mxfp5")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("unknown format 'mxfp5'") and "mxfp4" in msg and "nvfp4" in msg


def test_register_refuses_builtin_and_conflicting_names():
    with pytest.raises(ValueError, match="'mxfp4' is a built-in format name"):
        fp4lab.register(QuantFormat(name="mxfp4", element="e2m1"))
    fp4lab.register(QuantFormat(name="test-errors-a", element="e2m1"))
    with pytest.raises(ValueError, match="a different format named 'test-errors-a' is already registered"):
        fp4lab.register(QuantFormat(name="test-errors-a", element="e1m2"))
    assert fp4lab.register(QuantFormat(name="test-errors-a", element="e1m2"), overwrite=True).element.name == "e1m2"


QUANTIZE_ERRORS = [
    (lambda: fp4lab.quantize(np.arange(32), "mxfp4"), InputError, "dtype int64; expected float16, float32 or float64"),
    (lambda: fp4lab.quantize(np.zeros(31, F32), "mxfp4"), InputError,
     "axis 0 has length 31, not a multiple of format 'mxfp4' block size 32"),
    (lambda: fp4lab.quantize(np.zeros((32, 31), F32), "mxfp4", axis=-1), InputError, "axis 1 has length 31"),
    (lambda: fp4lab.quantize(np.zeros((2, 32), F32), "mxfp4", axis=5), InputError,
     "axis 5 is out of range for a 2-D input"),
    (lambda: fp4lab.quantize(np.zeros(32, F32), "nvfp4-2d"), InputError, "16x16 tiles; input must be at least 2-D"),
    (lambda: fp4lab.quantize(np.zeros((16, 24), F32), "nvfp4-2d"), InputError, "tile extent 16"),
    (lambda: fp4lab.quantize(np.zeros(32, F32), "mxfp4", rounding="nearest"), ValueError,
     "rounding 'nearest' is unknown; use one of rtne, rtna, rtnz, rtz, sr"),
    (lambda: fp4lab.quantize(np.zeros(32, F32), "no-such-format"), UnknownFormatError, "unknown format 'no-such-format'"),
    (lambda: fp4lab.quantize(np.array(1.0, F32), "mxfp4"), InputError, "quantize"),
    (lambda: fp4lab.quantize(np.array(["a"] * 32), "mxfp4"), InputError, "expected float16, float32 or float64"),
]


@pytest.mark.parametrize("i", range(len(QUANTIZE_ERRORS)))
def test_quantize_errors(i):
    call, exc, expected = QUANTIZE_ERRORS[i]
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg and expected in msg


def test_torch_integer_tensor_is_rejected():
    torch = pytest.importorskip("torch")
    with pytest.raises(InputError, match="dtype torch.int64; expected a floating-point tensor"):
        fp4lab.quantize(torch.arange(32), "mxfp4")


def test_packing_needs_four_bit_codes():
    fmt = QuantFormat(name="test-e4m3-elem", element="e4m3")
    with pytest.raises(ValueError, match="has 8-bit codes; only <= 4 pack"):
        fp4lab.quantize(np.zeros(4, F32), fmt).packed()
