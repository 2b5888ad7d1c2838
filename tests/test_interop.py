"""fp4lab.interop: bit-exact round trips between QuantizedTensor and torch dtypes, ml_dtypes views and torchao's
MXTensor / NVFP4Tensor (equal integer bit patterns in both directions), packed-code unpacking and dequantizing, and
one-line refusals of formats that do not coincide."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

import fp4lab
from fp4lab import interop
from fp4lab.errors import Fp4labError, InputError
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.layout import swizzle_scales
from fp4lab.testing.bits import bit_patterns, same_bits

try:  # in the test extra; without it only the torchao tests skip
    import torchao.prototype.mx_formats.mx_tensor as torchao_mx
    import torchao.prototype.mx_formats.nvfp4_tensor as torchao_nv
    from torchao.prototype.mx_formats.kernels import unpack_uint4
except ImportError:
    torchao_mx = torchao_nv = unpack_uint4 = None
needs_torchao = pytest.mark.skipif(torchao_mx is None, reason="torchao is not installed")

MXFP8 = QuantFormat(name="mxfp8-e4m3-test", element="e4m3", block={"shape": [32]}, scale="e8m0",
                    scale_rule={"method": "floor"})


def same_qt(a, b) -> None:
    """Equal codes, scale codes, decoded scales and tensor scale, as integer bits."""
    assert a.fmt == b.fmt and a.shape == b.shape and a.axis == b.axis
    assert same_bits(a.codes, b.codes)
    assert same_bits(a.scale_codes, b.scale_codes)
    assert same_bits(a.scales, b.scales)
    if a.tensor_scale is None:
        assert b.tensor_scale is None
    else:
        ta, tb = (np.float32(t.item() if isinstance(t, torch.Tensor) else t) for t in (a.tensor_scale, b.tensor_scale))
        assert same_bits(ta, tb)


def nibbles(packed: torch.Tensor) -> np.ndarray:
    """Codes of packed bytes by the stated convention: element 2i = bits 0-3, element 2i+1 = bits 4-7."""
    b = packed.view(torch.uint8).numpy()
    return np.stack((b & 15, b >> 4), axis=-1).reshape(*b.shape[:-1], 2 * b.shape[-1])


def data(shape=(130, 96), seed=0) -> np.ndarray:
    """Normal values with zeros, -0, tiny and large blocks (scale codes far apart)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(2.0) ** rng.integers(-20, 20, (shape[0], 1))
    x[0, :32] = 0.0
    x[1, :16] = -0.0
    return x.astype(np.float32)


def test_e2m1_table_is_ml_dtypes_float4_e2m1fn():
    """The OCP E2M1 decoding fp4lab uses for torch.float4_e2m1fn_x2 (torch cannot decode it) is ml_dtypes'."""
    from fp4lab.interop.common import e2m1_values

    theirs = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    assert np.array_equal(e2m1_values().view(np.uint64), theirs.view(np.uint64))


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "nvfp4-torchao-1level", "e2m1-b16-fp32", "e2m1", "mxfp8"])
def test_torch_dtypes_round_trip(name):
    fmt = MXFP8 if name == "mxfp8" else fp4lab.get_format(name)
    x = data()
    for qt in (fp4lab.quantize(x, fmt), fp4lab.quantize(torch.from_numpy(x), fmt)):
        tc = interop.to_torch(qt)
        elem, sdt = interop.torch_dtypes(fmt)
        assert tc.data.dtype == getattr(torch, elem) and (tc.scale is None) == (sdt is None)
        if elem == "float4_e2m1fn_x2":
            assert tc.data.shape == (130, 48) and np.array_equal(nibbles(tc.data), bit_patterns(qt.codes))
        if sdt is not None:
            assert tc.scale.dtype == getattr(torch, sdt) and same_bits(tc.scale, qt.scale_codes)
        back = interop.from_torch(tc.data, tc.scale, fmt, tc.tensor_scale)
        same_qt(back, qt)
        again = interop.to_torch(back)  # torch -> QuantizedTensor -> torch: the same bytes
        assert same_bits(again.data, tc.data)
        assert (sdt is None) or same_bits(again.scale, tc.scale)
        assert same_bits(fp4lab.dequantize(back), fp4lab.dequantize(qt))


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4"])
def test_torch_swizzled_scales_round_trip(name):
    qt = fp4lab.quantize(data(), name)
    tc = interop.to_torch(qt, swizzle=True)
    assert np.array_equal(bit_patterns(tc.scale), swizzle_scales(qt.scale_codes))
    back = interop.from_torch(tc.data, tc.scale, name, tc.tensor_scale, swizzled=True)
    same_qt(back, qt)


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "e2m1-b16-fp32", "int4", "int4-b32-e8m0", "mxfp8"])
def test_ml_dtypes_round_trip(name):
    fmt = MXFP8 if name == "mxfp8" else fp4lab.get_format(name)
    x = data()
    qt = fp4lab.quantize(x, fmt)
    m = interop.to_ml_dtypes(qt)
    elem, sdt = interop.ml_dtypes_types(fmt)
    assert m.elements.dtype == np.dtype(getattr(ml_dtypes, elem)) and m.elements.shape == qt.shape
    assert np.array_equal(bit_patterns(m.elements), qt.codes)
    # the views decode to fp4lab's values: element values, and for one-level formats value * scale
    assert np.array_equal(m.elements.astype(np.float64).view(np.uint64), fmt.element.values[qt.codes].view(np.uint64))
    if sdt is not None:
        assert same_bits(m.scale, qt.scale_codes)
        assert same_bits(m.scale.astype(np.float32), qt.scales)
    back = interop.from_ml_dtypes(m.elements, m.scale, fmt, m.tensor_scale)
    same_qt(back, qt)
    again = interop.to_ml_dtypes(back)
    assert same_bits(again.elements, m.elements)
    assert sdt is None or same_bits(again.scale, m.scale)


def test_ml_dtypes_along_axis_0():
    qt = fp4lab.quantize(data((64, 24)), "mxfp4", axis=0)
    m = interop.to_ml_dtypes(qt)
    same_qt(interop.from_ml_dtypes(m.elements, m.scale, "mxfp4", axis=0), qt)


@needs_torchao
@pytest.mark.parametrize("elem", ["fp4", "fp8"])
@pytest.mark.parametrize("swizzle", [False, True])
def test_torchao_mxtensor_round_trip(elem, swizzle):
    MXTensor = torchao_mx.MXTensor
    x = torch.from_numpy(data())
    dt, fmt = (torch.float4_e2m1fn_x2, "mxfp4") if elem == "fp4" else (torch.float8_e4m3fn, MXFP8)
    theirs = MXTensor.to_mx(x, dt, 32, is_swizzled_scales=swizzle)
    qt = interop.from_torchao(theirs) if elem == "fp4" else interop.from_torchao(theirs, MXFP8)
    plain = MXTensor.to_mx(x, dt, 32)
    assert same_bits(qt.scale_codes, plain.scale)
    codes = unpack_uint4(plain.qdata) if elem == "fp4" else plain.qdata.view(torch.uint8)
    assert same_bits(qt.codes, codes)
    again = interop.to_torchao(qt, swizzle=swizzle)  # torchao -> fp4lab -> torchao: the same bits
    assert type(again) is MXTensor and again.elem_dtype == dt and again.block_size == 32
    assert again.is_swizzled_scales == swizzle and again.scale.shape == theirs.scale.shape
    assert same_bits(again.qdata, theirs.qdata)
    assert same_bits(again.scale, theirs.scale)
    # fp4lab -> torchao -> fp4lab, and both dequantize v * S to the same float32 bits
    ours = fp4lab.quantize(x.numpy(), fmt)
    same_qt(interop.from_torchao(interop.to_torchao(ours, swizzle=swizzle), fmt), ours)
    assert same_bits(theirs.dequantize(torch.float32), fp4lab.dequantize(qt))


@needs_torchao
@pytest.mark.parametrize("two_level", [False, True])
@pytest.mark.parametrize("swizzle", [False, True])
def test_torchao_nvfp4tensor_round_trip(two_level, swizzle):
    NVFP4Tensor, amax_to_scale = torchao_nv.NVFP4Tensor, torchao_nv.per_tensor_amax_to_scale
    x = torch.from_numpy(data())
    ts = amax_to_scale(x.abs().max()) if two_level else None
    theirs = NVFP4Tensor.to_nvfp4(x, per_tensor_scale=ts, is_swizzled_scales=swizzle)
    qt = interop.from_torchao(theirs)
    assert qt.fmt.name == ("nvfp4-torchao" if two_level else "nvfp4-torchao-1level")
    plain = NVFP4Tensor.to_nvfp4(x, per_tensor_scale=ts)
    assert same_bits(qt.codes, unpack_uint4(plain.qdata))
    assert same_bits(qt.scale_codes, plain.scale)
    again = interop.to_torchao(qt, swizzle=swizzle)
    assert type(again) is NVFP4Tensor and again.is_swizzled_scales == swizzle
    assert again.scale.shape == theirs.scale.shape
    assert same_bits(again.qdata, theirs.qdata) and same_bits(again.scale, theirs.scale)
    assert (again.per_tensor_scale is None) == (not two_level)
    if two_level:
        assert bit_patterns(again.per_tensor_scale) == bit_patterns(theirs.per_tensor_scale)
    ours = fp4lab.quantize(x.numpy(), qt.fmt)
    same_qt(interop.from_torchao(interop.to_torchao(ours, swizzle=swizzle)), ours)
    # dequantize: torchao v * (ts * S), which the preset nvfp4-torchao computes too (dequantize_order
    # "scale_product_first"; fp4lab's default (v * S) * ts is one ulp away on some elements, docs/numerics.md L3)
    a = bit_patterns(theirs.dequantize(torch.float32)).astype(np.int64)
    b = bit_patterns(fp4lab.dequantize(qt)).astype(np.int64)
    assert np.array_equal(a, b)


def test_unpack_and_dequantize_packed():
    for name in ("nvfp4", "mxfp4", "e2m1", "ufp4"):
        qt = fp4lab.quantize(data(), name)
        packed = qt.packed()
        assert np.array_equal(interop.unpack_codes(packed), qt.codes)
        tp = torch.from_numpy(packed)
        assert np.array_equal(bit_patterns(interop.unpack_codes(tp)), nibbles(tp))
        assert np.array_equal(bit_patterns(interop.unpack_codes(tp.view(torch.float4_e2m1fn_x2))), qt.codes)
        want = bit_patterns(fp4lab.dequantize(qt))
        ts = qt.tensor_scale
        sc = None if qt.fmt.scale_rule.method == "none" else qt.scale_codes
        assert np.array_equal(bit_patterns(interop.dequantize_packed(packed, sc, name, ts)), want)
        tsc = None if sc is None else torch.from_numpy(sc.view(np.int32) if sc.dtype == np.uint32 else sc)
        out = interop.dequantize_packed(tp, tsc, name, ts)
        assert isinstance(out, torch.Tensor) and np.array_equal(bit_patterns(out), want)
        if sc is not None:
            swz = swizzle_scales(sc)
            assert np.array_equal(bit_patterns(interop.dequantize_packed(packed, swz, name, ts, swizzled=True)), want)
    with pytest.raises(InputError, match="4-bit codes pack"):
        interop.from_packed(np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8), MXFP8)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) < 300
    return msg


def test_formats_that_do_not_coincide_are_refused():
    x = data()
    with pytest.raises(Fp4labError, match="grid 'e1m2' is not torch.float4_e2m1fn_x2") as e:
        interop.to_torch(fp4lab.quantize(x, "ufp4"))
    _one_line(e)
    with pytest.raises(Fp4labError, match="'e1m2' is not ml_dtypes.float4_e2m1fn") as e:
        interop.to_ml_dtypes(fp4lab.quantize(x, "ufp4"))
    _one_line(e)
    ue5m3 = QuantFormat(name="e2m1-ue5m3-test", element="e2m1", block={"shape": [16]}, scale="ue5m3",
                        scale_rule={"method": "amax"})
    with pytest.raises(Fp4labError, match="block scale 'ue5m3' is none of torch.float8_e8m0fnu") as e:
        interop.to_torch(fp4lab.quantize(x, ue5m3))
    _one_line(e)


def test_ue5m3_scales_are_ml_dtypes_float8_e5m3fnu():
    """ml_dtypes 0.7's float8_e5m3fnu decodes every code as fp4lab's UE5M3 (0xFF NaN), so UE5M3 scales convert both
    ways, bit for bit."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if not hasattr(ml_dtypes, "float8_e5m3fnu"):
        pytest.skip("this ml_dtypes has no float8_e5m3fnu (0.7 and later)")
    fmt = QuantFormat(name="e2m1-ue5m3-test", element="e2m1", block={"shape": [16]}, scale="ue5m3",
                      scale_rule={"method": "amax"})
    codes = np.arange(256, dtype=np.uint8)
    ours, theirs = fmt.scale.decode(codes).astype(np.float32), codes.view(ml_dtypes.float8_e5m3fnu).astype(np.float32)
    assert np.array_equal(np.isnan(ours), np.isnan(theirs))
    assert np.array_equal(ours.view(np.uint32)[~np.isnan(ours)], theirs.view(np.uint32)[~np.isnan(theirs)])
    qt = fp4lab.quantize(data() * np.float32(1e4), fmt)
    m = interop.to_ml_dtypes(qt)
    assert m.scale.dtype == np.dtype(ml_dtypes.float8_e5m3fnu)
    back = interop.from_ml_dtypes(m.elements, m.scale, fmt)
    assert np.array_equal(back.codes, qt.codes) and np.array_equal(back.scale_codes, qt.scale_codes)


@needs_torchao
def test_torchao_refusals():
    m8 = torchao_mx.MXTensor.to_mx(torch.from_numpy(data()), torch.float8_e4m3fn, 32)
    with pytest.raises(InputError, match="no default fp4lab format; pass fmt="):
        interop.from_torchao(m8)
    nvt = torchao_nv.NVFP4Tensor.to_nvfp4(torch.from_numpy(data()))
    with pytest.raises(InputError, match="is not stored as format 'mxfp4'"):
        interop.from_torchao(nvt, "mxfp4")
    with pytest.raises(InputError, match="is not stored as format 'nvfp4-torchao'"):
        interop.from_torchao(nvt, "nvfp4-torchao")  # a one-level tensor has no tensor scale to carry
    with pytest.raises(InputError, match="expected a torchao MXTensor or NVFP4Tensor"):
        interop.from_torchao(torch.zeros(4))
    x = data()
    with pytest.raises(Fp4labError, match="neither torchao MX .* nor NVFP4") as e:
        interop.to_torchao(fp4lab.quantize(x, "e2m1-b16-fp32"))
    _one_line(e)
    with pytest.raises(Fp4labError, match="16x16 tiles"):
        interop.to_torchao(fp4lab.quantize(data((128, 96)), "nvfp4-2d"))
    with pytest.raises(Fp4labError, match="blocks along the last axis"):
        interop.to_torchao(fp4lab.quantize(data((64, 96)), "mxfp4", axis=0))


def test_foreign_tensors_that_do_not_fit_are_refused():
    tc = interop.to_torch(fp4lab.quantize(data(), "mxfp4"))
    with pytest.raises(InputError, match="block scales are torch.float8_e8m0fnu"):
        interop.from_torch(tc.data, tc.scale.view(torch.uint8).view(torch.float8_e4m3fn), "mxfp4")
    with pytest.raises(InputError, match="element codes are torch.float4_e2m1fn_x2"):
        interop.from_torch(tc.data.view(torch.uint8), tc.scale, "mxfp4")
    nv = interop.to_torch(fp4lab.quantize(data(), "nvfp4-torchao-1level"))
    neg = nv.scale.clone().view(torch.uint8)
    neg[0, 0] = 0xB8  # -1.0 in float8_e4m3fn: not a UE4M3 code
    with pytest.raises(InputError, match="scale code 184 is not a code of the 7-bit scale format") as e:
        interop.from_torch(nv.data, neg.view(torch.float8_e4m3fn), "nvfp4-torchao-1level")
    _one_line(e)
    with pytest.raises(InputError, match="swizzled scales need a 2-D tensor"):
        interop.from_torch(tc.data, tc.scale, "mxfp4", swizzled=True, axis=0)
    with pytest.raises(InputError, match="axis 2 is out of range for a 2-D tensor"):
        interop.from_torch(tc.data, tc.scale, "mxfp4", axis=2)
    m = interop.to_ml_dtypes(fp4lab.quantize(data(), "mxfp4"))
    with pytest.raises(InputError, match="scale has type float8_e4m3fn; format 'mxfp4' needs float8_e8m0fnu"):
        interop.from_ml_dtypes(m.elements, m.scale.view(ml_dtypes.float8_e4m3fn), "mxfp4")
    with pytest.raises(InputError, match="scale_codes have dtype float32; format 'mxfp4' stores its scale codes"):
        interop.from_packed(np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.float32), "mxfp4")


def test_interop_imports_no_foreign_library():
    code = ("import sys, fp4lab, fp4lab.interop; "
            "print([m for m in ('torch', 'torchao', 'ml_dtypes', 'triton') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_errors_name_an_unnamed_grid_and_scale_by_their_fields():
    """A spec file's grid and scale without names are called what their fields say (int4, ue3m2), not "4-bit grid"
    or "float scale"."""
    x = np.ones((2, 32), np.float32)
    grid = QuantFormat.model_validate({"name": "g", "block": {"shape": [16]}, "scale": "fp32",
                                       "scale_rule": {"method": "amax"},
                                       "element": {"kind": "int", "bits": 4, "range": "twos_complement", "step": 0.5}})
    with pytest.raises(InputError, match="element grid 'int4' is not torch.float4_e2m1fn_x2"):
        interop.to_torch(fp4lab.quantize(x, grid))
    scale = QuantFormat.model_validate({"name": "s", "element": "e2m1", "block": {"shape": [16]},
                                        "scale_rule": {"method": "amax"},
                                        "scale": {"kind": "float", "exponent_bits": 3, "mantissa_bits": 2}})
    with pytest.raises(InputError, match="block scale 'ue3m2' is none of"):
        interop.to_torch(fp4lab.quantize(x, scale))


def test_first_torchao_use_prints_nothing():
    """A fresh process that converts to torchao and runs the conformance checks against it writes nothing to
    stderr: torchao's "Failed to load" lines for CUDA extensions on a CPU-only machine and torch's notes on its
    enums are not fp4lab's findings."""
    code = ("import numpy as np, fp4lab; from fp4lab import interop; from fp4lab.analysis import conformance as C; "
            "interop.to_torchao(fp4lab.quantize(np.ones((2, 32), np.float32), 'mxfp4')); "
            "C._torchao_mx('FLOOR'); C._torchao_nvfp4()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr[-2000:]


@needs_torchao
def test_interop_md_example_and_error_lines_hold():
    """docs/interop.md runs as written: its python block (with the dtypes and shapes its comments state, and
    torchao's dequantize giving fp4lab's bits), and its two example error lines are the messages raised."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "interop.md").read_text()
    (block,) = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    ns: dict = {}
    exec(compile(block, "docs/interop.md", "exec"), ns)
    t, qt, mx = ns["t"], ns["qt"], ns["mx"]
    assert (t.data.dtype, tuple(t.data.shape)) == (torch.float4_e2m1fn_x2, (128, 128))
    assert (t.scale.dtype, tuple(t.scale.shape)) == (torch.float8_e8m0fnu, (128, 8))
    assert isinstance(mx, torchao_mx.MXTensor)
    assert same_bits(mx.dequantize(torch.float32).numpy(), fp4lab.dequantize(qt))
    lines = re.findall(r"^(to_torch(?:ao)?: .*)$", text, flags=re.M)
    ones = np.ones((16, 32), np.float32)
    raised = []
    for call, name in ((interop.to_torch, "ufp4"), (interop.to_torchao, "e2m1-b16-fp32")):
        with pytest.raises(InputError) as e:
            call(fp4lab.quantize(ones, name))
        raised.append(str(e.value))
    assert lines == raised
