"""``FloatFormat``, the one ExMy description behind element grids, float scale formats and hwspec operand formats,
against ml_dtypes: every code decodes to ml_dtypes' value, and FNUZ grids round as ml_dtypes casts (numpy
reference, numba emulator and the Triton kernels in the interpreter)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import fp4lab
from fp4lab.errors import SpecError
from fp4lab.formats import NAMED_SCALES, FloatGrid, QuantFormat, ScaleFormat
from fp4lab.formats.floats import FloatFormat
from fp4lab.hwspec.operands import OPERAND_FORMATS, decode_codes
from fp4lab.numerics.ref_quantize import quantize_reference
from fp4lab.testing.bits import same_bits

# ml_dtypes type -> (exponent bits, mantissa bits, bias, signed, zero exponent, specials)
ML_DTYPES = {
    "float8_e4m3fn": (4, 3, None, True, "subnormal", "fn"),
    "float8_e4m3fnuz": (4, 3, 8, True, "subnormal", "fnuz"),
    "float8_e4m3b11fnuz": (4, 3, 11, True, "subnormal", "fnuz"),
    "float8_e4m3": (4, 3, None, True, "subnormal", "ieee"),
    "float8_e3m4": (3, 4, None, True, "subnormal", "ieee"),
    "float8_e5m2": (5, 2, None, True, "subnormal", "ieee"),
    "float8_e5m2fnuz": (5, 2, 16, True, "subnormal", "fnuz"),
    "float8_e8m0fnu": (8, 0, 127, False, "normal", "fn"),
    "float6_e2m3fn": (2, 3, None, True, "subnormal", "none"),
    "float6_e3m2fn": (3, 2, None, True, "subnormal", "none"),
    "float4_e2m1fn": (2, 1, None, True, "subnormal", "none"),
}
OPERAND_ML = {"e4m3": "float8_e4m3fn", "e4m3fnuz": "float8_e4m3fnuz", "e5m2": "float8_e5m2",
              "e5m2fnuz": "float8_e5m2fnuz", "ue8m0": "float8_e8m0fnu", "e8m0": "float8_e8m0fnu",
              "e3m2": "float6_e3m2fn", "e2m3": "float6_e2m3fn", "e2m1": "float4_e2m1fn"}


def _ml_values(name: str, n: int) -> np.ndarray:
    return np.arange(n, dtype=np.uint8).view(getattr(ml_dtypes, name)).astype(np.float64)


@pytest.mark.parametrize("name", sorted(ML_DTYPES))
def test_decode_every_code_like_ml_dtypes(name):
    e, m, bias, signed, zero, specials = ML_DTYPES[name]
    f = FloatFormat(exponent_bits=e, mantissa_bits=m, bias=bias, signed=signed, zero_exponent=zero,
                    specials=specials)
    n = 1 << f.bits
    want = _ml_values(name, n)
    assert same_bits(f.decode(np.arange(n)), want, nan="any")
    fi = ml_dtypes.finfo(getattr(ml_dtypes, name))
    assert f.max_finite == float(fi.max)
    nan = np.flatnonzero(np.isnan(want))
    assert f.nan_code == (int(nan[0]) if nan.size else None)
    assert f.has_inf == bool(np.isinf(want).any())
    assert f.representable(want[np.isfinite(want)]).all()
    finite = np.unique(want[np.isfinite(want)])
    assert not f.representable((finite[:-1] + finite[1:]) / 2).any()  # nothing between neighbours


@pytest.mark.parametrize("name, e, m", [("f32", 8, 23), ("bf16", 8, 7), ("f16", 5, 10)])
def test_wide_ieee_formats(name, e, m):
    f = OPERAND_FORMATS[name].encoding
    dt = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}[name]
    assert (f.exponent_bits, f.mantissa_bits) == (e, m)
    assert f.max_finite == float(ml_dtypes.finfo(dt).max)
    assert 2.0 ** f.emin == float(ml_dtypes.finfo(dt).smallest_normal)


@pytest.mark.parametrize("op", sorted(OPERAND_ML))
def test_operand_formats_decode_like_ml_dtypes(op):
    of = OPERAND_FORMATS[op]
    n = 1 << of.encoding.bits
    assert same_bits(decode_codes(np.arange(n), of), _ml_values(OPERAND_ML[op], n), nan="any")


@pytest.mark.parametrize("name, bias, e, m", [("float8_e4m3fnuz", 8, 4, 3), ("float8_e5m2fnuz", 16, 5, 2)])
def test_fnuz_grid_rounds_like_ml_dtypes(name, bias, e, m):
    """RTNE onto an FNUZ element grid (overflow and NaN to the NaN code): -0 and tiny negatives give +0."""
    fmt = QuantFormat.model_validate(dict(
        name=f"{name}-cast", element=dict(kind="float", exponent_bits=e, mantissa_bits=m, bias=bias,
                                          specials="fnuz"),
        scale_rule=dict(method="none"), overflow="nan", nan_element="nan"))
    grid = fmt.element
    assert grid.nan_code == 0x80 and grid.inf_codes is None and grid.level_codes_neg[grid.levels == 0] == 0
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(4096) * np.exp2(rng.integers(-24, 18, 4096))).astype(np.float32)
    edges = grid.levels.astype(np.float32)
    x = np.concatenate([x, edges, np.nextafter(edges, np.float32(np.inf)), (edges[1:] + edges[:-1]) / 2,
                        np.float32([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-30, -1e-30, 3e38, -3e38])])
    x = x.astype(np.float32)
    want = x.astype(getattr(ml_dtypes, name)).view(np.uint8)
    assert np.array_equal(quantize_reference(x, fmt).codes, want)
    assert np.array_equal(fp4lab.quantize(x, fmt).codes, want)
    from fp4lab.kernels.quantize_launch import quantize_triton

    codes = quantize_triton(torch.from_numpy(x), fmt).codes
    assert np.array_equal(codes.numpy(), want)


def test_fnuz_scale_format_decodes_and_unsigned_fnuz_is_refused(tmp_path):
    s = ScaleFormat(kind="float", exponent_bits=4, mantissa_bits=3, bias=8, signed=True, specials="fnuz")
    assert same_bits(s.decode(np.arange(256)).astype(np.float64), _ml_values("float8_e4m3fnuz", 256), nan="any")
    with pytest.raises(Exception, match="must be signed"):
        FloatGrid(exponent_bits=4, mantissa_bits=3, signed=False, specials="fnuz")
    spec = tmp_path / "bad.toml"
    spec.write_text('name = "bad"\nelement = { kind = "float", exponent_bits = 4, mantissa_bits = 3, '
                    'signed = false, specials = "fnuz" }\n[scale_rule]\nmethod = "none"\n')
    with pytest.raises(SpecError) as err:
        fp4lab.load_format(spec)
    assert "must be signed" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", sorted(NAMED_SCALES))
def test_every_named_scale_format_decodes_as_its_float_format(name):
    s = ScaleFormat.model_validate(NAMED_SCALES[name])
    f = s.float_format
    codes = np.arange(1 << min(f.bits, 16), dtype=np.int64)
    if s.kind == "fp32":  # every exponent and sign, a few mantissas
        codes = (np.arange(512, dtype=np.int64)[:, None] << 23 | np.array([0, 1, 0x400000, 0x7FFFFF])).ravel()
    if s.kind == "bf16":
        codes = np.arange(1 << 16, dtype=np.int64)
    with np.errstate(invalid="ignore"):  # NaN payloads in the float64 -> float32 cast
        want = f.decode(codes).astype(np.float32).astype(np.float64)
        assert same_bits(s.decode(codes).astype(np.float64), want, nan="any")
    assert s.max == np.float32(f.max_finite)
