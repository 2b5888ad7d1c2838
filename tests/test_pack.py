"""Nibble packing: layout, round trip, numba == numpy, errors, and agreement with torchao's pack_uint4."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torchao.prototype.mx_formats.kernels import pack_uint4, unpack_uint4

from fp4lab.emulator.pack import pack_nibbles, unpack_nibbles
from fp4lab.errors import InputError
from fp4lab.layout import pack_nibbles_reference, unpack_nibbles_reference
from fp4lab.testing.bits import same_bits


@st.composite
def code_arrays(draw):
    lead = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4))
    k = 2 * draw(st.integers(0, 12))
    return draw(hnp.arrays(np.uint8, (*lead, k), elements=st.integers(0, 15)))


packed_arrays = hnp.arrays(np.uint8, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6))


def test_layout():
    codes = np.array([[1, 2, 15, 0, 7, 9]], dtype=np.uint8)
    want = np.array([[0x21, 0x0F, 0x97]], dtype=np.uint8)
    assert np.array_equal(pack_nibbles(codes), want)
    assert np.array_equal(pack_nibbles_reference(codes), want)
    assert np.array_equal(unpack_nibbles(want), codes)


@given(codes=code_arrays())
def test_round_trip_and_twin(codes):
    packed = pack_nibbles(codes)
    assert packed.dtype == np.uint8 and packed.shape == (*codes.shape[:-1], codes.shape[-1] // 2)
    assert np.array_equal(packed, pack_nibbles_reference(codes))
    assert np.array_equal(unpack_nibbles(packed), codes)
    assert np.array_equal(unpack_nibbles_reference(packed), codes)


@given(packed=packed_arrays)
def test_unpack_twin_and_inverse(packed):
    codes = unpack_nibbles(packed)
    assert codes.shape == (*packed.shape[:-1], 2 * packed.shape[-1]) and codes.max(initial=0) <= 15
    assert np.array_equal(codes, unpack_nibbles_reference(packed))
    assert np.array_equal(pack_nibbles(codes), packed)


@given(codes=code_arrays().filter(lambda a: a.size > 0))
def test_agrees_with_torchao(codes):
    t = torch.from_numpy(codes.copy())
    packed = pack_nibbles(codes)
    assert np.array_equal(pack_uint4(t).numpy(), packed)
    assert np.array_equal(unpack_uint4(torch.from_numpy(packed.copy())).numpy(), codes)


def test_non_contiguous_and_other_int_dtypes():
    codes = np.random.default_rng(0).integers(0, 16, (6, 8), dtype=np.uint8)
    view = codes.T  # (8, 6), not C-contiguous
    assert np.array_equal(pack_nibbles(view), pack_nibbles(np.ascontiguousarray(view)))
    assert np.array_equal(pack_nibbles(codes.astype(np.int64)), pack_nibbles(codes))
    assert np.array_equal(unpack_nibbles(pack_nibbles(view)[::2]), view[::2])


@pytest.mark.parametrize("pack", [pack_nibbles, pack_nibbles_reference])
def test_pack_errors(pack):
    with pytest.raises(InputError, match=r"codes must be in 0\.\.15, got values in \[0, 16\]"):
        pack(np.array([0, 16], dtype=np.uint8))
    with pytest.raises(InputError, match=r"0\.\.15, got values in \[0, 255\]"):
        pack(np.array([[3, 4], [255, 0]], dtype=np.uint8))
    with pytest.raises(InputError, match=r"got values in \[-1, 3\]"):
        pack(np.array([-1, 3], dtype=np.int16))
    with pytest.raises(InputError, match=r"even length, got shape \(2, 3\)"):
        pack(np.zeros((2, 3), dtype=np.uint8))
    with pytest.raises(InputError, match="even length"):
        pack(np.uint8(3))
    with pytest.raises(InputError, match="integer array, got dtype float32"):
        pack(np.zeros(4, dtype=np.float32))


@pytest.mark.parametrize("unpack", [unpack_nibbles, unpack_nibbles_reference])
def test_unpack_errors(unpack):
    with pytest.raises(InputError, match="uint8 array, got dtype int32"):
        unpack(np.zeros(4, dtype=np.int32))
    with pytest.raises(InputError, match="0-d"):
        unpack(np.uint8(3))


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "ufp4", "int4-b32-e8m0"])
def test_public_pack_unpack_round_trip_and_dequantize(name):
    import fp4lab

    x = np.random.default_rng(5).standard_normal((8, 64)).astype(np.float32)
    for q in (fp4lab.quantize(x, name), fp4lab.quantize(torch.from_numpy(x), name, "sr", seed=2)):
        p = fp4lab.pack(q)
        codes = q.codes if isinstance(q.codes, np.ndarray) else q.codes.numpy()
        packed = p.packed_codes if isinstance(p.packed_codes, np.ndarray) else p.packed_codes.numpy()
        assert p.codes is None and p.shape == q.shape and packed.shape == (8, 32)
        assert np.array_equal(packed, pack_nibbles_reference(codes))
        assert fp4lab.pack(p) is p and fp4lab.unpack(q) is q
        u = fp4lab.unpack(p)
        got = u.codes if isinstance(u.codes, np.ndarray) else u.codes.numpy()
        assert got.dtype == np.uint8 and np.array_equal(got, codes)
        assert same_bits(fp4lab.dequantize(p), fp4lab.dequantize(q))
    a, b = fp4lab.quantize(x, name), fp4lab.quantize(x[::-1].copy(), name)
    assert same_bits(fp4lab.gemm(fp4lab.pack(a), fp4lab.pack(b)), fp4lab.gemm(a, b))


def test_public_pack_refuses_what_cannot_pack():
    import fp4lab

    with pytest.raises(InputError, match="pack: format 'e4m3fnuz-b32-e8m0' has 8-bit codes"):
        fp4lab.pack(fp4lab.quantize(np.ones((2, 32), np.float32), fp4lab.QuantFormat(
            name="e4m3fnuz-b32-e8m0", element="e4m3fnuz", block=32, scale="e8m0",
            scale_rule={"method": "floor"})))
    with pytest.raises(InputError, match="even length"):
        fp4lab.pack(fp4lab.quantize(np.ones((2, 3), np.float32), "e2m1"))
    for fn in (fp4lab.pack, fp4lab.unpack):
        with pytest.raises(InputError, match="expected a QuantizedTensor"):
            fn(np.zeros(4, np.uint8))
