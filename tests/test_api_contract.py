"""The public API names (README.md, "Using it"), called exactly as outside tests call them."""

import numpy as np
import pytest

import fp4lab
from fp4lab.testing.bits import same_bits


def test_format_registry_names():
    names = fp4lab.list_formats()
    for required in ("mxfp4", "nvfp4", "ufp4", "e2m1-b16-fp32", "int4-b32-e8m0", "e2m1", "e1m2", "int4"):
        assert required in names
    fmt = fp4lab.get_format("ufp4")
    assert fmt.element.values.dtype == np.float64 and fmt.element.values.shape == (16,)
    assert fmt.element.amax == 1.75 and fmt.block_size == 16


def test_quantize_fields_and_dequantize():
    x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    qt = fp4lab.quantize(x, "nvfp4", rounding=None, seed=0, axis=-1, rht=None, rht_seed=0)
    assert qt.codes.dtype == np.uint8 and qt.codes.shape == x.shape
    assert qt.packed().shape == (32, 32)
    assert qt.scales.dtype == np.float32 and qt.scales.shape == (32, 4) and qt.scale_codes.dtype == np.uint8
    assert isinstance(qt.tensor_scale, np.float32)
    q32 = fp4lab.quantize(x, "ufp4")
    assert q32.scale_codes.dtype == np.uint32 and q32.tensor_scale is None
    assert same_bits(q32.scale_codes, q32.scales)
    y = fp4lab.dequantize(qt)
    assert y.dtype == np.float32 and y.shape == x.shape


def test_rht_and_spec_path_accepted_everywhere(tmp_path):
    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    back = fp4lab.rht(fp4lab.rht(x, size=16, seed=3, axis=-1), size=16, seed=3, axis=-1, inverse=True)
    assert np.max(np.abs(back - x)) < 1e-5
    spec = tmp_path / "g.toml"
    spec.write_text('name = "g"\nelement = "e1m2"\nblock = { shape = [16] }\nscale = "fp32"\n'
                    '[scale_rule]\nmethod = "amax"\nzero_block = "one"\n')
    fmt = fp4lab.load_format(spec)
    assert np.array_equal(fp4lab.quantize(x, str(spec)).codes, fp4lab.quantize(x, "ufp4").codes)
    fp4lab.register(fmt)
    assert "g" in fp4lab.list_formats() and fp4lab.get_format("g") == fmt


def test_hardware_emulation_names():
    assert {"hopper-sm90", "blackwell-sm100", "cdna3-mi300"} <= set(fp4lab.list_hw())
    assert "wgmma.bf16" in fp4lab.get_hw("hopper-sm90").kinds
    a = np.ones((16, 16), np.float32)
    c = fp4lab.emulate_mma(a, a, np.zeros((16, 16), np.float32), hw="hopper-sm90", kind="wgmma.bf16")
    assert c.dtype == np.float32 and np.all(c == 16.0)
    assert callable(fp4lab.emulate_gemm) and callable(fp4lab.gemm)


def test_unknown_format_is_a_clear_error():
    with pytest.raises(fp4lab.UnknownFormatError, match="unknown format 'nope'"):
        fp4lab.quantize(np.zeros((2, 16), np.float32), "nope")
