"""Differential tests: fp4lab against ml_dtypes, torch and torchao wherever their options coincide with a format of
ours, bit for bit; and every deliberate disagreement (docs/numerics.md, "Where fp4lab differs from libraries")
pinned by a test that fixes both sides' behaviour.

Case count (parametrizations x hypothesis examples) is listed in docs/numerics.md.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.kernels import unpack_uint4
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import (
        nvfp4_quantize,
        per_tensor_amax_to_scale,
    )

import fp4lab  # noqa: E402
from fp4lab.formats import QuantFormat  # noqa: E402
from fp4lab.numerics.range_policy import range_clamp_scale  # noqa: E402
from fp4lab.numerics.ref_encode import decode_elements, encode_elements, encode_scale  # noqa: E402
from fp4lab.testing import block_inputs, float32_arrays  # noqa: E402
from fp4lab.testing.bits import same_bits  # noqa: E402

F32 = np.float32
FLT_MAX = np.finfo(F32).max
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
N_CAST = 200  # examples per element/scale cast comparison
N_BLOCK = 100  # examples per block-scaled comparison


def element_format(grid: str, overflow: str = "saturate", nan_element: str = "nan") -> QuantFormat:
    return QuantFormat(name=f"diff-{grid}-{overflow}", element=grid, overflow=overflow, nan_element=nan_element)


# ---- element casts ---------------------------------------------------------------------------------------------
@settings(max_examples=N_CAST, deadline=None)
@given(x=float32_arrays())
def test_e2m1_equals_ml_dtypes_float4_e2m1fn(x):
    """'e2m1' codes == ml_dtypes float4_e2m1fn bits for every float32 except NaNs with the sign bit set: RTNE, -0
    kept, NaN -> -0 (code 8), +-Inf -> +-6 (saturation; the format has no Inf/NaN)."""
    x = np.where(np.isnan(x), F32(np.nan), x)  # NaN with a clear sign bit (see test_negative_nan_disagreement)
    ours = fp4lab.quantize(x, "e2m1").codes
    assert np.array_equal(ours, x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8))


def test_negative_nan_disagreement():
    """Disagreement D2: ml_dtypes casts a NaN whose sign bit is set to +0 (code 0) and a positive NaN to -0; fp4lab
    writes one code for every NaN (nan_element), whatever its sign or payload."""
    x = np.array([0x7FC00000, 0xFFC00000, 0x7F800001], np.uint32).view(F32)
    assert fp4lab.quantize(x, "e2m1").codes.tolist() == [8, 8, 8]
    assert x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).tolist() == [8, 0, 8]


E4M3_ML = element_format("e4m3", overflow="nan")
E4M3_TORCH = element_format("e4m3", overflow="saturate")
E5M2_IEEE = element_format("e5m2", overflow="inf")
E5M2_TIE = F32(61440.0)  # 57344 + half an ulp: the only overflow tie of E5M2


@settings(max_examples=N_CAST, deadline=None)
@given(x=float32_arrays())
def test_e4m3_with_nan_overflow_equals_ml_dtypes(x):
    """E4M3FN element grid with overflow 'nan' == ml_dtypes float8_e4m3fn: |x| > 464 -> NaN, 464 ties to 448."""
    ours = fp4lab.dequantize(fp4lab.quantize(x, E4M3_ML))
    assert same_bits(ours, x.astype(ml_dtypes.float8_e4m3fn).astype(F32), nan="any")


@settings(max_examples=N_CAST, deadline=None)
@given(x=float32_arrays())
def test_e4m3_with_saturation_equals_torch_cast(x):
    """E4M3FN element grid with overflow 'saturate' == torch 2.13 .to(float8_e4m3fn), which saturates (Inf -> 448)."""
    qt = fp4lab.quantize(x, E4M3_TORCH)
    theirs = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    finite = ~np.isnan(x)
    assert np.array_equal(qt.codes[finite], theirs[finite])
    want = torch.from_numpy(theirs).view(torch.float8_e4m3fn).float().numpy()
    assert same_bits(fp4lab.dequantize(qt), want, nan="any")


@pytest.mark.parametrize("library", ["ml_dtypes", "torch"])
@settings(max_examples=N_CAST, deadline=None)
@given(x=float32_arrays())
def test_e5m2_with_inf_overflow_equals_ieee_casts(library, x):
    """E5M2 element grid with overflow 'inf' == ml_dtypes / torch float8_e5m2 casts, except at |x| = 61440
    (pinned in test_e5m2_overflow_tie_disagreement)."""
    x = np.where(np.abs(x) == E5M2_TIE, F32(1.0), x)
    if library == "ml_dtypes":
        theirs = x.astype(ml_dtypes.float8_e5m2).astype(F32)
    else:
        theirs = torch.from_numpy(x).to(torch.float8_e5m2).float().numpy()
    assert same_bits(fp4lab.dequantize(fp4lab.quantize(x, E5M2_IEEE)), theirs, nan="any")


def test_e5m2_overflow_tie_disagreement():
    """Disagreement D3: 61440 = 57344 + half an ulp. IEEE RTNE (ml_dtypes, torch) rounds it to the even neighbour,
    +Inf; fp4lab decides overflow by magnitude (|t| > threshold, ties finite) and returns 57344."""
    x = F32([61440.0, -61440.0, np.nextafter(F32(61440.0), F32(np.inf))])
    ours = fp4lab.dequantize(fp4lab.quantize(x, E5M2_IEEE))
    assert ours.tolist() == [57344.0, -57344.0, np.inf]
    assert x.astype(ml_dtypes.float8_e5m2).astype(F32).tolist() == [np.inf, -np.inf, np.inf]
    assert torch.from_numpy(x).to(torch.float8_e5m2).float().tolist() == [np.inf, -np.inf, np.inf]


def test_e4m3_nan_sign_disagreement():
    """Disagreement D13: with overflow 'nan', every NaN result (|x| > 464, +-Inf, NaN of either sign) is the grid's
    one NaN code 0x7F; ml_dtypes float8_e4m3fn keeps the input's sign (0xFF for negatives). Values agree (NaN)."""
    x = np.array([500.0, -500.0, np.inf, -np.inf, 1e30, -1e30, np.nan, np.nan], F32)
    x[7] = np.uint32(0xFFC00000).view(F32)
    assert fp4lab.quantize(x, E4M3_ML).codes.tolist() == [0x7F] * 8
    assert x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).tolist() == [0x7F, 0xFF] * 4


@pytest.mark.parametrize("grid,dtype", [("e2m3", ml_dtypes.float6_e2m3fn), ("e3m2", ml_dtypes.float6_e3m2fn)])
def test_fp6_nan_disagreement(grid, dtype):
    """Disagreement D2 on the FP6 grids: ml_dtypes casts +NaN to -0 (0x20) and a NaN with the sign bit set to +0;
    fp4lab writes the ``nan_element`` code for every NaN: +0 by default, -0 with ``nan_element = "neg_zero"``
    (which then matches ml_dtypes on positive NaNs)."""
    x = np.array([0x7FC00000, 0xFFC00000], np.uint32).view(F32)
    assert x.astype(dtype).view(np.uint8).tolist() == [0x20, 0x00]
    assert fp4lab.quantize(x, element_format(grid)).codes.tolist() == [0x00, 0x00]
    assert fp4lab.quantize(x, element_format(grid, nan_element="neg_zero")).codes.tolist() == [0x20, 0x20]


# ---- scale-format casts ----------------------------------------------------------------------------------------
UE4M3 = fp4lab.get_format("nvfp4").scale
E8M0 = fp4lab.get_format("mxfp4").scale
non_negative = hnp.arrays(F32, st.integers(1, 64), elements=st.one_of(
    st.floats(0, 1e4, width=32), st.floats(0, 2.0**-6, width=32), st.sampled_from([448.0, 464.0, 480.0, np.inf])))


@settings(max_examples=N_CAST, deadline=None)
@given(v=non_negative)
def test_ue4m3_scale_encoder_equals_torch_float8_e4m3fn(v):
    """The UE4M3 scale encoder (RTNE, saturating at 448, subnormal scales) == torch .to(float8_e4m3fn) on
    non-negative inputs, Inf included."""
    theirs = torch.from_numpy(v).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    assert np.array_equal(encode_scale(v, UE4M3, "rtne"), theirs)


@settings(max_examples=N_CAST, deadline=None)
@given(v=non_negative.map(lambda a: np.minimum(a, F32(464.0))))
def test_ue4m3_scale_encoder_equals_ml_dtypes_up_to_464(v):
    """Same encoder == ml_dtypes float8_e4m3fn for 0 <= v <= 464 (above, ml_dtypes gives NaN, we saturate)."""
    assert np.array_equal(encode_scale(v, UE4M3, "rtne"), v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))


e8m0_inputs = st.builds(lambda m, k: F32(np.ldexp(m, k)), st.floats(1.0, 2.0, exclude_max=True, width=32),
                        st.integers(-126, 126))


@pytest.mark.parametrize("library", ["ml_dtypes", "torch"])
@settings(max_examples=N_CAST, deadline=None)
@given(v=hnp.arrays(F32, st.integers(1, 64), elements=e8m0_inputs))
def test_e8m0_rtne_encoder_equals_library_casts_off_ties(library, v):
    """E8M0 encoding with 'rtne' == ml_dtypes / torch float8_e8m0fnu casts for positive normal float32 values below
    2^127 whose significand is not exactly 1.5 (ties and float32 subnormals: disagreement D4)."""
    m = np.frexp(v.astype(np.float64))[0]
    v = np.where(m == 0.75, F32(1.0), v)
    theirs = v.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8) if library == "ml_dtypes" \
        else torch.from_numpy(v).to(torch.float8_e8m0fnu).view(torch.uint8).numpy()
    assert np.array_equal(encode_scale(v, E8M0, "rtne"), theirs)


def test_e8m0_tie_disagreement():
    """Disagreement D4: at significand 1.5 ml_dtypes and torch round up (1.5 -> 2, 6 -> 8); fp4lab's 'rtne'
    rounds to the even exponent (1.5 -> 1, 3 -> 4, 6 -> 4, 12 -> 16); 'ceil' and 'floor' are also offered.
    A float32 subnormal 1.25 * 2^-127 is nearer 2^-127 (code 0): torch gives 2^-126 (code 1); ml_dtypes did too
    before 0.7 and gives code 0 from 0.7 on. The tie 1.5 * 2^-127 goes to 2^-126 in all three (even exponent)."""
    v = F32([1.5, 3.0, 6.0, 12.0, 0.75, 1.25 * 2.0**-127, 1.5 * 2.0**-127])
    assert encode_scale(v, E8M0, "rtne").tolist() == [127, 129, 129, 131, 127, 0, 1]
    ml_sub = 1 if tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2]) < (0, 7) else 0
    assert v.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8).tolist() == [128, 129, 130, 131, 127, ml_sub, 1]
    assert (torch.from_numpy(v).to(torch.float8_e8m0fnu).view(torch.uint8).numpy().tolist()
            == [128, 129, 130, 131, 127, 1, 1])


def test_e8m0_zero_and_negative_disagreement():
    """Disagreement D5: a zero ideal scale encodes to code 0 (2^-127, E8M0 has no zero); ml_dtypes gives NaN for 0
    and negatives, torch gives code 0 for 0 and drops the sign of -1."""
    assert encode_scale(F32([0.0]), E8M0, "rtne").tolist() == [0]
    assert F32([0.0, -1.0]).astype(ml_dtypes.float8_e8m0fnu).view(np.uint8).tolist() == [255, 255]
    assert torch.tensor([0.0, -1.0]).to(torch.float8_e8m0fnu).view(torch.uint8).tolist() == [0, 127]


# ---- torchao to_mx ---------------------------------------------------------------------------------------------
MX_MODES = {
    "mxfp4": ScaleCalculationMode.FLOOR,
    "mxfp4-ceil": ScaleCalculationMode.CEIL,
    "mxfp4-even": ScaleCalculationMode.EVEN,
    "mxfp4-rceil": ScaleCalculationMode.RCEIL,
}


def torchao_mx(x: np.ndarray, mode) -> tuple[np.ndarray, np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, d = to_mx(torch.from_numpy(np.ascontiguousarray(x)), torch.float4_e2m1fn_x2, 32, mode)
    return s.view(torch.uint8).numpy(), unpack_uint4(d.view(torch.uint8)).numpy()


def rceil_log2_hazard(amax: np.ndarray) -> np.ndarray:
    """Blocks where torchao 0.18's eager RCEIL (ceil(float32 log2(amax/6))) can differ from the exact ceiling:
    amax/6 within 2^-20 (relative) above a power of two."""
    d = (amax / F32(6)).astype(np.float64)
    with np.errstate(divide="ignore"):
        m = np.frexp(d)[0] * 2  # significand in [1, 2)
    return (m > 1.0) & (m < 1.0 + 2.0**-20)


@pytest.mark.parametrize("name", list(MX_MODES))
@settings(max_examples=N_BLOCK, deadline=None)
@given(data=st.data())
def test_mx_formats_equal_torchao_to_mx(name, data):
    """mxfp4 / -ceil / -even / -rceil == torchao 0.18 to_mx(FLOOR / CEIL / EVEN / RCEIL): scale codes and element
    codes on finite inputs, except blocks that hit a documented disagreement: scale code 0 (D6: torchao
    scales by 2^-126, RCEIL by 1), for RCEIL amax/6 just above a power of two (D7: float32 log2), and blocks with
    scales of 2^126 and up, where fp4lab caps elements that would decode to +-Inf (D11)."""
    fmt = fp4lab.get_format(name)
    x = data.draw(block_inputs(fmt, allow_nan=False, allow_inf=False, exp_range=(-135, 125)))
    qt = fp4lab.quantize(x, fmt)
    s, codes = torchao_mx(x, MX_MODES[name])
    ours_s = np.asarray(qt.scale_codes).reshape(s.shape)
    amax = np.abs(x.reshape(*s.shape, 32)).max(axis=-1)
    skip = ((ours_s == 0) | (s == 0)) & (amax > 0)  # all-zero blocks agree (code 0, zero elements)
    if name == "mxfp4-rceil":
        skip |= rceil_log2_hazard(amax)
    crit = range_clamp_scale(fmt)
    if crit is not None:  # D11: decoded-range caps where a level times the scale overflows float32
        skip |= fmt.scale.decode(ours_s) >= crit
    assert np.array_equal(ours_s[~skip], s[~skip])
    keep = np.repeat(~skip, 32, axis=-1).reshape(x.shape)
    assert np.array_equal(np.asarray(qt.codes)[keep], codes[keep])


def test_mx_scale_code_zero_disagreement():
    """Disagreement D6: a block whose E8M0 code is 0 is scaled by 2^-127 in fp4lab; torchao clamps the float32
    scale to 2^-126 (FLOOR/CEIL/EVEN), and RCEIL multiplies by 1.0 when the code is 0."""
    x = np.zeros((1, 32), F32)
    x[0, :4] = [2.0**-126 * 1.5, 2.0**-127, -(2.0**-128), 2.0**-129]
    ours = fp4lab.quantize(x, "mxfp4")
    assert ours.scale_codes.tolist() == [[0]] and ours.codes[0, :4].tolist() == [5, 2, 9, 0]  # 3, 1, -0.5, 0
    s, codes = torchao_mx(x, ScaleCalculationMode.FLOOR)
    assert s.tolist() == [[0]] and codes[0, :4].tolist() == [3, 1, 8, 0]  # divided by 2^-126: 1.5, 0.5, -0, 0
    s, codes = torchao_mx(x, ScaleCalculationMode.RCEIL)  # multiplied by 1.0: everything rounds to +-0
    assert s.tolist() == [[0]] and codes[0, :4].tolist() == [0, 0, 8, 0]
    assert fp4lab.quantize(x, "mxfp4-rceil").codes[0, :4].tolist() == [5, 2, 9, 0]


def test_rceil_float32_log2_disagreement():
    """Disagreement D7: amax = 6 * 2^k + 1 ulp needs exponent k + 1. fp4lab (exact, from the bits)
    gives k + 1 for every k; torchao 0.18's eager ceil(log2(amax / 6)) in float32 gives k for some k."""
    ks = np.arange(-20, 20)
    amax = np.nextafter((6.0 * np.ldexp(1.0, ks)).astype(F32), F32(np.inf))
    x = np.zeros((ks.size, 32), F32)
    x[:, 0] = amax
    ours = fp4lab.quantize(x, "mxfp4-rceil").scale_codes.reshape(-1).astype(int) - 127
    assert np.array_equal(ours, ks + 1)
    theirs = torchao_mx(x, ScaleCalculationMode.RCEIL)[0].reshape(-1).astype(int) - 127
    assert np.any(theirs == ks) and np.all((theirs == ks) | (theirs == ks + 1))


def test_mx_nan_and_inf_block_disagreement():
    """Disagreement D8: a block holding Inf gets the NaN scale (0xFF) and zero codes in fp4lab (inf_policy
    'propagate'); torchao FLOOR gives exponent bits 255 - 127 - 2 = 126 (code 253) and codes +-6 for the Inf,
    RCEIL gives 0xFE. A NaN block: both give 0xFF; fp4lab writes code 0, torchao code 3 for the NaN."""
    x = np.ones((3, 32), F32)
    x[0, 3], x[1, 3], x[2, 3] = np.nan, np.inf, -np.inf
    ours = fp4lab.quantize(x, "mxfp4")
    assert ours.scale_codes.reshape(-1).tolist() == [255, 255, 255]
    assert not ours.codes.any()
    s, codes = torchao_mx(x, ScaleCalculationMode.FLOOR)
    assert s.reshape(-1).tolist() == [255, 253, 253] and codes[:, 3].tolist() == [3, 7, 15]
    assert torchao_mx(x, ScaleCalculationMode.RCEIL)[0].reshape(-1).tolist() == [255, 254, 254]


def test_mx_decoded_range_disagreement():
    """Disagreement D11: CEIL / EVEN / RCEIL pick 2^126 for a block of amax FLT_MAX, where E2M1's 4 and 6 times the
    scale overflow float32. fp4lab caps those elements at 3 (3 * 2^126 = 2.55e38, finite); torchao writes 4 and 6,
    which decode to +-Inf."""
    x = np.full((1, 32), FLT_MAX, F32)
    x[0, 1::2] = -3.1e38
    for name in ("mxfp4-ceil", "mxfp4-even", "mxfp4-rceil"):
        qt = fp4lab.quantize(x, name)
        assert np.asarray(qt.scale_codes).tolist() == [[253]] and np.isfinite(fp4lab.dequantize(qt)).all()
        assert set(np.asarray(qt.codes).ravel().tolist()) == {5, 13}  # +-3
        s, codes = torchao_mx(x, MX_MODES[name])
        assert s.tolist() == [[253]] and set(codes.ravel().tolist()) == {6, 14}  # +-4: 4 * 2^126 = Inf


# ---- torchao nvfp4_quantize -------------------------------------------------------------------------------------
def torchao_nvfp4(x: np.ndarray, two_level: bool) -> tuple[np.ndarray, np.ndarray]:
    t = torch.from_numpy(np.ascontiguousarray(x))
    pts = per_tensor_amax_to_scale(t.abs().max()) if two_level else None
    s, d = nvfp4_quantize(t, 16, pts)
    return s.view(torch.uint8).numpy(), d.numpy()


@pytest.mark.parametrize("name,two_level", [("nvfp4-torchao", True), ("nvfp4-torchao-1level", False)])
@settings(max_examples=N_BLOCK, deadline=None)
@given(data=st.data())
def test_nvfp4_torchao_formats_equal_nvfp4_quantize(name, two_level, data):
    """'nvfp4-torchao' == nvfp4_quantize(x, 16, per_tensor_amax_to_scale(amax)) and 'nvfp4-torchao-1level' ==
    nvfp4_quantize(x, 16, None): E4M3 scale codes and packed bytes, on finite tensors (two-level: not all-zero,
    D9) and, single level, with +-Inf too."""
    fmt = fp4lab.get_format(name)
    x = data.draw(block_inputs(fmt, allow_nan=False, allow_inf=not two_level, exp_range=(-40, 40)))
    if two_level and not np.any(x):
        x[0, 0] = 1.0
    qt = fp4lab.quantize(x, fmt)
    s, packed = torchao_nvfp4(x, two_level)
    assert np.array_equal(qt.scale_codes, s)
    assert np.array_equal(qt.packed(), packed)


@settings(max_examples=N_BLOCK, deadline=None)
@given(data=st.data())
def test_nvfp4_equals_torchao_where_block_scales_are_normal(data):
    """'nvfp4' (subnormal E4M3 block scales allowed, as TransformerEngine) == torchao two-level nvfp4_quantize on
    every block whose scale code is >= 8 (2^-6); below, torchao clamps to 2^-6 (D10)."""
    fmt = fp4lab.get_format("nvfp4")
    x = data.draw(block_inputs(fmt, allow_nan=False, allow_inf=False, exp_range=(-30, 30)))
    if not np.any(x):
        x[0, 0] = 1.0
    qt = fp4lab.quantize(x, fmt)
    s, packed = torchao_nvfp4(x, True)
    normal = np.asarray(qt.scale_codes) >= 8
    assert np.array_equal(np.asarray(qt.scale_codes)[normal], s[normal])
    keep = np.repeat(normal, 8, axis=-1)
    assert np.array_equal(np.asarray(qt.packed())[keep], packed[keep])
    assert np.all(s[~normal] == 8)


def test_nvfp4_subnormal_block_scale_disagreement():
    """Disagreement D10: a block 1e5 times below the tensor amax. 'nvfp4' stores the subnormal E4M3 scale 2 * 2^-9
    (as TransformerEngine); 'nvfp4-torchao' and torchao clamp the block scale to 2^-6 (code 8)."""
    x = np.ones((1, 32), F32)
    x[0, 16:] *= F32(1e-5)
    assert fp4lab.quantize(x, "nvfp4").scale_codes.tolist() == [[126, 2]]
    assert fp4lab.quantize(x, "nvfp4-torchao").scale_codes.tolist() == [[126, 8]]
    assert torchao_nvfp4(x, True)[0].tolist() == [[126, 8]]


def test_nvfp4_tiny_tensor_disagreement():
    """Disagreement D12: a tensor with amax 1e-38. ts = amax / 2688 is finite but 1/ts overflows float32; fp4lab
    clamps ts to 2^-128 + 2^-149 (the smallest float32 with a finite reciprocal) and raises block scales whose
    multiplier still overflows to the smallest one that has a finite multiplier, so the tensor keeps its values;
    torchao multiplies by the infinite reciprocal and every non-zero element saturates to +-6 (codes 7 / 15)."""
    x = (np.random.default_rng(0).standard_normal((2, 32)) * 1e-38).astype(F32)
    qt = fp4lab.quantize(x, "nvfp4-torchao")
    assert np.abs(fp4lab.dequantize(qt) - x).max() <= 0.2 * np.abs(x).max()
    s, packed = torchao_nvfp4(x, True)
    codes = np.stack([packed & 15, packed >> 4], axis=-1).reshape(x.shape)
    assert set(codes.ravel().tolist()) <= {7, 15}


def test_nvfp4_all_zero_tensor_disagreement():
    """Disagreement D9: an all-zero tensor. fp4lab uses tensor scale 1 and writes zero codes;
    torchao's per-tensor scale 0 makes every block scale NaN and the packed codes non-zero."""
    x = np.zeros((2, 32), F32)
    qt = fp4lab.quantize(x, "nvfp4-torchao")
    assert float(qt.tensor_scale) == 1.0 and not qt.codes.any()
    assert np.array_equal(fp4lab.dequantize(qt), x)
    s, packed = torchao_nvfp4(x, True)
    assert np.all((s & 0x7F) == 0x7F) and np.any(packed)  # E4M3 NaN codes


# ---- decode tables vs library decoders ------------------------------------------------------------------------
@pytest.mark.parametrize("grid,dtype", [("e2m1", ml_dtypes.float4_e2m1fn), ("e4m3", ml_dtypes.float8_e4m3fn),
                                        ("e5m2", ml_dtypes.float8_e5m2), ("e2m3", ml_dtypes.float6_e2m3fn),
                                        ("e3m2", ml_dtypes.float6_e3m2fn)])
def test_grid_value_tables_equal_ml_dtypes(grid, dtype):
    """Every code of our ExMy grids decodes to the same float32 bits as ml_dtypes' decoder (NaN to NaN)."""
    fmt = element_format(grid)
    codes = np.arange(fmt.element.n_codes, dtype=np.uint8)
    theirs = codes.view(dtype).astype(F32)
    assert same_bits(decode_elements(codes, fmt.element), theirs, nan="any")


@pytest.mark.parametrize("grid,dtype", [("e2m3", ml_dtypes.float6_e2m3fn), ("e3m2", ml_dtypes.float6_e3m2fn)])
@settings(max_examples=N_CAST, deadline=None)
@given(x=float32_arrays(allow_nan=False))
def test_fp6_grids_equal_ml_dtypes_casts(grid, dtype, x):
    """E2M3 / E3M2 (OCP FP6) element grids, saturating, == ml_dtypes float6 casts (which saturate, no Inf/NaN)."""
    codes = encode_elements(x, element_format(grid).element, "rtne")
    assert np.array_equal(codes, x.astype(dtype).view(np.uint8))
