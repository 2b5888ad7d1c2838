"""128x4 swizzled scale layout: round trip, the tile formula, and torchao's to_blocked."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4lab.errors import InputError
from fp4lab.layout import swizzle_scales, unswizzle_scales


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 20), seed=st.integers(0, 2**31))
def test_round_trip_and_padding_is_zero(rows, cols, seed):
    s = np.random.default_rng(seed).integers(1, 256, (rows, cols), dtype=np.uint8)
    flat = swizzle_scales(s)
    assert flat.size == 512 * -(-rows // 128) * -(-cols // 4)
    assert np.array_equal(unswizzle_scales(flat, rows, cols), s)
    assert np.count_nonzero(flat) == s.size  # every padding entry is zero, every scale lands somewhere once


def test_first_tile_positions():
    s = np.arange(128 * 4, dtype=np.int32).reshape(128, 4)
    flat = swizzle_scales(s)
    assert flat[0:4].tolist() == [0, 1, 2, 3]           # row 0
    assert flat[4:8].tolist() == s[32].tolist()         # row 32 follows row 0 in the same 16-entry line
    assert flat[16:20].tolist() == s[1].tolist()        # next line: row 1


@pytest.mark.parametrize("shape", [(128, 4), (256, 8), (200, 6), (3, 1), (129, 5)])
def test_matches_torchao_to_blocked(shape):
    torch = pytest.importorskip("torch")
    utils = pytest.importorskip("torchao.prototype.mx_formats.utils")
    s = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    ref = utils.to_blocked(torch.from_numpy(s)).numpy()
    assert np.array_equal(swizzle_scales(s), ref)


def test_errors():
    with pytest.raises(InputError, match="2-D"):
        swizzle_scales(np.zeros(5))
    with pytest.raises(InputError, match="expected 512"):
        unswizzle_scales(np.zeros(10), 3, 2)


def test_quantized_tensor_swizzled_scale_codes():
    import fp4lab

    x = np.random.default_rng(3).standard_normal((144, 96)).astype(np.float32)
    qt = fp4lab.quantize(x, "nvfp4")
    flat = qt.swizzled_scale_codes()
    assert np.array_equal(unswizzle_scales(flat, 144, 6), qt.scale_codes)
    with pytest.raises(ValueError, match="last axis"):
        fp4lab.quantize(x, "nvfp4", axis=0).swizzled_scale_codes()
