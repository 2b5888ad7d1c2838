"""The numba emulator (``quantize_emulated`` / ``dequantize_emulated``) equals the numpy reference bit for bit.

Compared on integer bit patterns: element codes, scale codes (values and dtype), decoded scales and the tensor
scale as uint32, and the dequantized float32 output as uint32 (each side dequantizing its own result).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fp4lab
from fp4lab import QuantizeOptions
from fp4lab.emulator.quantize import dequantize_emulated, quantize_emulated
from fp4lab.formats import ROUNDING_MODES
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.ref_quantize import dequantize_reference, quantize_reference
from fp4lab.testing import block_inputs, float32_arrays, quant_formats, rounding_modes
from fp4lab.testing.bits import bit_patterns, same_bits

MODES = ROUNDING_MODES  # every mode fp4lab.quantize accepts
F32 = np.float32


def assert_twin(x: np.ndarray, fmt: QuantFormat, **kw) -> None:
    ref = quantize_reference(x, fmt, QuantizeOptions(**kw))
    got = quantize_emulated(x, fmt, QuantizeOptions(**kw))
    for field in ("codes", "scale_codes", "scales"):
        a, b = getattr(ref, field), getattr(got, field)
        assert a.dtype == b.dtype and a.shape == b.shape, (field, a.dtype, b.dtype, a.shape, b.shape)
        assert same_bits(a, b), f"{fmt.name} {kw}: {field} differ"
    assert (ref.tensor_scale is None) == (got.tensor_scale is None)
    if ref.tensor_scale is not None:
        assert type(ref.tensor_scale) is type(got.tensor_scale)
        assert bit_patterns(F32(ref.tensor_scale)) == bit_patterns(F32(got.tensor_scale))
    assert (ref.axis, ref.rounding, ref.seed, ref.rht, ref.rht_seed) == \
        (got.axis, got.rounding, got.seed, got.rht, got.rht_seed)
    for rotated in (False, True) if kw.get("rht") else (False,):
        a, b = dequantize_reference(ref, rotated=rotated), dequantize_emulated(got, rotated=rotated)
        assert a.dtype == b.dtype == np.float32 and same_bits(a, b), f"{fmt.name} {kw}: dequantize"


def _edge_tensor(fmt: QuantFormat, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Grid levels, midpoints (ties) and their +-1 ulp neighbours times power-of-two scales, uniform values,
    powers of two +-1 ulp, +-0, subnormals, huge values, NaN, +-Inf, and all-zero stretches."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    lv = fmt.element.levels
    mids = (lv[:-1] + lv[1:]) / 2
    P = np.ldexp(1.0, rng.integers(-30, 30, n // 16 + 1)).repeat(16)[:n]
    kind = rng.integers(0, 6, n)
    pick = rng.integers(0, 1 << 20, n)
    with np.errstate(over="ignore"):
        vals = np.select(
            [kind == 0, kind == 1, kind == 2, kind == 3, kind == 4],
            [lv[pick % lv.size] * P, mids[pick % mids.size] * P, rng.uniform(-1, 1, n) * fmt.element.amax * P,
             np.ldexp(1.0, pick % 80 - 40), lv[pick % lv.size] * P],
            rng.standard_normal(n) * 3,
        ).astype(F32)
    ulp = rng.integers(-1, 2, n)
    vals = np.where(ulp > 0, np.nextafter(vals, F32(np.inf)), np.where(ulp < 0, np.nextafter(vals, F32(-np.inf)),
                                                                          vals)).astype(F32)
    special = np.array([0.0, -0.0, 1e-45, -3e-40, 3.0e38, -3.3e38, np.nan, np.inf, -np.inf], F32)
    where = rng.random(n) < 0.01
    vals[where] = special[rng.integers(0, special.size, where.sum())]
    vals[:48] = 0.0  # whole zero blocks along the last axis
    vals[48:64] = -0.0
    vals = vals.reshape(shape)
    vals[-1, ...] = 0.0  # zero blocks along the first axis
    return vals


def _layouts(fmt: QuantFormat):
    """(shape, axis) pairs: contiguous last axis, strided first axis; 2-D tiles on the last two axes."""
    if fmt.block is not None and fmt.block.is_2d:
        r, c = fmt.block.shape
        return [((2, 2 * r, 4 * c), -1)]
    return [((64, 2, 128), -1), ((64, 2, 128), 0)]


@pytest.mark.parametrize("name", fp4lab.list_formats())
def test_builtin_formats_all_modes_axes_rht(name: str) -> None:
    fmt = fp4lab.get_format(name)
    for i, (shape, axis) in enumerate(_layouts(fmt)):
        x = _edge_tensor(fmt, shape, seed=i)
        for mode in MODES:
            for rht in (None, 32):
                assert_twin(x, fmt, rounding=mode, seed=7 + i, axis=axis, rht=rht, rht_seed=3)


def test_large_tensor_many_work_items() -> None:
    """More blocks than one work item, uneven last chunk, both two-level and single-level formats."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 1056)) * np.exp2(rng.integers(-8, 8, (64, 1)))).astype(F32)
    for name in ("nvfp4", "mxfp4", "ufp4", "nvfp4-4over6"):
        assert_twin(x, fp4lab.get_format(name), rounding="sr", seed=11)
        assert_twin(x, fp4lab.get_format(name), axis=0)


def test_4d_input_middle_axis_and_empty() -> None:
    x = _edge_tensor(fp4lab.get_format("nvfp4"), (3, 32, 2, 5), seed=4)
    for name in ("nvfp4", "int4-b16-fp32", "e2m1"):
        assert_twin(x, fp4lab.get_format(name), axis=1)
    assert_twin(np.zeros((0, 32), F32), fp4lab.get_format("nvfp4"))


def test_scale_overflow_and_underflow_edges() -> None:
    """Ideal FP32/BF16 scales that overflow (saturate), reciprocals that overflow (0 * inf stays 0), subnormal
    block amaxes whose scale underflows to 0, with every scaling mode."""
    tiny, huge = F32(1e-45), F32(3.4e38)
    x = np.array([[tiny, 0.0, -0.0, -tiny] * 4, [huge, -0.0, 1.0, 0.0] * 4, [0.0] * 16, [-tiny, 3e-39, 0.0, 2.0] * 4],
                 F32)
    for scale in ("fp32", "bf16"):
        for scaling in ("divide", "reciprocal"):
            for arith in ("decode", "encode"):
                fmt = QuantFormat(name="edge", element=dict(kind="table", bits=3, magnitudes=[0.0, 0.25, 0.5, 1.0]),
                                  block=dict(shape=[16]), scale=scale,
                                  scale_rule=dict(method="amax", targets=[0.25], element_scaling=scaling,
                                                  scale_arithmetic=arith))
                for mode in MODES:
                    assert_twin(x, fmt, rounding=mode)


@pytest.mark.parametrize("element,overflow", [("e4m3", "nan"), ("e5m2", "inf"), ("e2m3", "saturate"),
                                              ("e3m2", "saturate"), ("int4_twos_complement", "saturate")])
def test_wider_and_asymmetric_grids(element: str, overflow: str) -> None:
    """8-bit grids (binary-search encoder, NaN / Inf overflow codes), 6-bit grids, two's-complement INT4."""
    fmt = QuantFormat(name="wide", element=element, block=dict(shape=[32]), scale="e8m0",
                      scale_rule=dict(method="floor"), overflow=overflow)
    x = _edge_tensor(fmt, (64, 2, 128), seed=9)
    for mode in MODES:
        assert_twin(x, fmt, rounding=mode, seed=5)
        assert_twin(x, fmt, rounding=mode, seed=5, axis=0)


def test_same_errors_as_reference() -> None:
    fmt = fp4lab.get_format("mxfp4")
    for bad in (dict(x=np.zeros((4, 30), F32)), dict(x=np.zeros((32,), F32), axis=3),
                dict(x=np.zeros((32,), F32), rounding="nearest")):
        x = bad.pop("x")
        with pytest.raises(ValueError) as e_ref:
            quantize_reference(x, fmt, QuantizeOptions(**bad))
        with pytest.raises(ValueError) as e_nb:
            quantize_emulated(x, fmt, QuantizeOptions(**bad))
        assert type(e_ref.value) is type(e_nb.value) and str(e_ref.value) == str(e_nb.value)


def _vary(fmt: QuantFormat, data: st.DataObject) -> QuantFormat:
    """Also draw the TransformerEngine-style options (signed zero, "encode" scale arithmetic)."""
    d = fmt.model_dump()
    d["signed_zero"] = data.draw(st.sampled_from(["keep", "positive"]))
    if fmt.scale_rule.family == "amax" and data.draw(st.booleans()):
        d["scale_rule"]["scale_arithmetic"] = "encode"
    try:
        return QuantFormat.model_validate(d)
    except ValueError:
        return fmt


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_random_formats_edge_blocks(data: st.DataObject) -> None:
    fmt = _vary(data.draw(quant_formats()), data)
    x = data.draw(block_inputs(fmt))
    mode = data.draw(rounding_modes())
    axis = -1
    if x.ndim == 2 and not (fmt.block is not None and fmt.block.is_2d) and data.draw(st.booleans()):
        x, axis = np.ascontiguousarray(x.T), 0
    assert_twin(x, fmt, rounding=mode, seed=data.draw(st.integers(-2**63, 2**64 - 1)), axis=axis)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_formats_any_values_with_rht(data: st.DataObject) -> None:
    fmt = data.draw(quant_formats(two_d=False))
    bs = fmt.block_size if fmt.block is not None else 1
    k = max(bs, 16) * data.draw(st.integers(1, 2))
    rows = data.draw(st.integers(1, 3))
    x = data.draw(float32_arrays(shape=(rows, k)))
    rht = data.draw(st.sampled_from([None, 16]))
    assert_twin(x, fmt, rounding=data.draw(rounding_modes()), seed=data.draw(st.integers(0, 2**32)), rht=rht,
                rht_seed=data.draw(st.integers(0, 100)))
