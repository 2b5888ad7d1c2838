"""``fp4lab.gemm`` on CPU operands: ``exact`` emulates the GPU GEMM kernel bit for bit, ``fast`` is float32."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fp4lab
from fp4lab.errors import InputError
from fp4lab.kernels.params import gemm_plan
from fp4lab.numerics.gemm_reference import gemm_reference
from fp4lab.testing.bits import bit_patterns, same_bits


def _operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "nvfp4-2d", "ufp4", "e2m1-b16-fp32", "int4-b16-fp32", "e2m1"])
def test_exact_is_the_kernels_emulated_arithmetic(name):
    """Fold path = the kernel's wgmma.bf16 chain (emulate_gemm on the quantized operands); per-block path =
    gemm_reference (the kernel's fp32 operations); both on random data, bit for bit."""
    fmt = fp4lab.get_format(name)
    a, b = _operands(48, 32, 256, seed=3)
    qa, qb = fp4lab.quantize(a, fmt), fp4lab.quantize(b, fmt)
    c = fp4lab.gemm(qa, qb)
    assert isinstance(c, np.ndarray) and c.dtype == np.float32 and c.shape == (48, 32)
    if gemm_plan(fmt) == "fold" and fmt.scale_rule.method == "none":  # element-only: the values themselves
        want = fp4lab.emulate_gemm(fp4lab.dequantize(qa), fp4lab.dequantize(qb), hw="hopper-sm90", kind="wgmma.bf16")
    elif gemm_plan(fmt) == "fold":
        want = fp4lab.emulate_gemm(qa, qb, hw="hopper-sm90", kind="wgmma.bf16")
    else:
        want = gemm_reference(qa, qb)
    assert same_bits(c, want)
    f64 = np.asarray(fp4lab.dequantize(qa), np.float64) @ np.asarray(fp4lab.dequantize(qb), np.float64).T
    assert np.max(np.abs(c - f64)) <= 1e-5 * np.max(np.abs(f64))


def test_exact_truncates_like_the_tensor_cores():
    """1 * 1 + 1.5 * 2^-24: Hopper's wgmma keeps the sum with 25 fraction bits and truncates it to fp32 (1.0);
    a float32 matmul rounds to nearest (1 + 2^-23). K = 64 puts the two products in different instructions."""
    x, y = np.zeros((1, 64), np.float32), np.zeros((1, 64), np.float32)
    x[0, 0], x[0, 32], y[0, 0], y[0, 32] = 1.0, 1.5, 1.0, 2.0**-24
    qa, qb = fp4lab.quantize(x, "mxfp4"), fp4lab.quantize(y, "mxfp4")
    assert np.array_equal(fp4lab.dequantize(qa), x) and np.array_equal(fp4lab.dequantize(qb), y)
    assert fp4lab.gemm(qa, qb, "exact")[0, 0] == np.float32(1.0)
    assert fp4lab.gemm(qa, qb, "fast")[0, 0] == np.float32(1.0) + np.float32(2.0**-23)


def test_exact_pads_k_and_gives_canonical_nan():
    """K = 48 (not a multiple of the kernel's K tile of 64) and a NaN block scale: NaN results are 0x7FFFFFFF."""
    a, b = _operands(8, 4, 48, seed=5)
    a[2, 7] = np.nan
    qa, qb = fp4lab.quantize(a, "nvfp4"), fp4lab.quantize(b, "nvfp4")
    c = fp4lab.gemm(qa, qb)
    want = fp4lab.emulate_gemm(qa, qb, hw="hopper-sm90", kind="wgmma.bf16")
    assert same_bits(c, want)
    nan_rows = np.isnan(c).any(axis=1)
    assert nan_rows.any() and np.all(bit_patterns(c)[np.isnan(c)] == 0x7FFFFFFF)


def test_exact_matches_the_triton_kernel_in_the_interpreter():
    """Where the interpreter's fp32 dot order cannot matter (per-block path on random data; fold path on data
    whose partial sums are exact), the Triton kernel and the CPU path give the same bits."""
    from fp4lab.kernels.api import gemm as gemm_triton
    from fp4lab.kernels.api import quantize_cuda

    rng = np.random.default_rng(11)
    for name in ("ufp4", "mxfp4"):
        if name == "ufp4":
            a, b = _operands(16, 8, 64, seed=12)
        else:
            a = (rng.integers(-6, 7, (16, 64)) * 0.5).astype(np.float32)
            b = (rng.integers(-6, 7, (8, 64)) * 0.5).astype(np.float32)
        ta, tb = quantize_cuda(torch.from_numpy(a), name), quantize_cuda(torch.from_numpy(b), name)
        got = fp4lab.gemm(fp4lab.quantize(a, name), fp4lab.quantize(b, name))
        assert same_bits(got, gemm_triton(ta, tb, "exact"))


def test_torch_cpu_operands_give_a_tensor():
    a, b = _operands(16, 8, 64, seed=1)
    ta, tb = fp4lab.quantize(torch.from_numpy(a), "nvfp4"), fp4lab.quantize(torch.from_numpy(b), "nvfp4")
    for mode in ("exact", "fast"):
        c = fp4lab.gemm(ta, tb, mode)
        assert isinstance(c, torch.Tensor) and c.dtype == torch.float32 and c.device.type == "cpu"
        ref = fp4lab.gemm(fp4lab.quantize(a, "nvfp4"), fp4lab.quantize(b, "nvfp4"), mode)
        assert same_bits(c, ref)


def test_fast_is_float32_dequantize_and_matmul():
    a, b = _operands(32, 16, 128, seed=2)
    for name in ("nvfp4", "ufp4", "nf4-b64-fp32"):
        qa, qb = fp4lab.quantize(a, name), fp4lab.quantize(b, name)
        c = fp4lab.gemm(qa, qb, "fast")
        f64 = np.asarray(fp4lab.dequantize(qa), np.float64) @ np.asarray(fp4lab.dequantize(qb), np.float64).T
        assert c.dtype == np.float32 and np.max(np.abs(c - f64)) <= 1e-5 * np.max(np.abs(f64))


def test_rotated_operands_multiply_in_the_rotated_basis():
    a, b = _operands(16, 8, 64, seed=4)
    qa, qb = (fp4lab.quantize(t, "ufp4", rht=16, rht_seed=9) for t in (a, b))
    c = fp4lab.gemm(qa, qb)
    rot = np.asarray(fp4lab.dequantize(qa, rotated=True), np.float64) @ \
        np.asarray(fp4lab.dequantize(qb, rotated=True), np.float64).T
    assert np.max(np.abs(c - rot)) <= 1e-5 * np.max(np.abs(rot))
    with pytest.raises(InputError, match="rotated differently"):
        fp4lab.gemm(qa, fp4lab.quantize(b, "ufp4", rht=16, rht_seed=8))


def test_cpu_gemm_errors():
    a, b = _operands(16, 8, 64, seed=0)
    qa = fp4lab.quantize(a, "mxfp4")
    with pytest.raises(InputError, match="different formats"):
        fp4lab.gemm(qa, fp4lab.quantize(b, "nvfp4"))
    with pytest.raises(InputError, match="mode 'fastest' is unknown"):
        fp4lab.gemm(qa, qa, mode="fastest")
    with pytest.raises(InputError, match="use mode='fast'"):
        fp4lab.gemm(fp4lab.quantize(a, "nf4-b64-fp32"), fp4lab.quantize(b, "nf4-b64-fp32"))
    with pytest.raises(InputError, match="K differs"):
        fp4lab.gemm(qa, fp4lab.quantize(b[:, :32], "mxfp4"))
    with pytest.raises(InputError, match="blocked along its last axis"):
        fp4lab.gemm(qa, fp4lab.quantize(np.ascontiguousarray(b.T[:32]), "mxfp4", axis=0))
    with pytest.raises(InputError, match="expected a QuantizedTensor"):
        fp4lab.gemm(qa, b)


def test_gemm_reference_needs_no_triton():
    """The GEMM's numpy definition imports on a machine without triton."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['triton'] = None\n"
            "from fp4lab.numerics.gemm_reference import gemm_reference\n"
            "assert 'fp4lab.kernels.gemm' not in sys.modules\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-1500:]
