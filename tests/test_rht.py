"""RHT: numba == numpy reference bit for bit, matrix form, orthogonality, round trips, axes, dtypes, errors."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fp4lab.emulator.nb_rht import rht, rht_block_inplace
from fp4lab.errors import InputError
from fp4lab.numerics.options import RHT_SIZES
from fp4lab.numerics.philox import philox4x32_reference
from fp4lab.numerics.rht import hadamard_matrix, rht_reference, rht_scale, rht_signs
from fp4lab.testing.bits import bit_patterns, same_bits

sizes = st.sampled_from(RHT_SIZES)
seeds = st.integers(min_value=-(2**63), max_value=2**64 - 1)
EXACT_SCALE_SIZES = (16, 64, 256)  # 1/sqrt(n) is a power of two


def value_bits(a: np.ndarray) -> np.ndarray:
    """Bits with -0 folded into +0: for comparisons with float64 matrix products, whose zero signs differ."""
    return bit_patterns(a + np.float32(0.0))


@st.composite
def blocked_arrays(draw, elements, max_blocks=3):
    """float32 array of shape (rows, k * n) and its n."""
    n = draw(sizes)
    rows = draw(st.integers(1, 3))
    k = draw(st.integers(1, max_blocks))
    return draw(hnp.arrays(np.float32, (rows, k * n), elements=elements)), n


# |x| <= 2**119 keeps every butterfly sum (at most 256 * max|x|) below float32 max: no inf, no NaN.
finite = st.floats(min_value=-(2.0**119), max_value=2.0**119, width=32, allow_nan=False)
# Exact-sum grid: integers in [-255, 255] times 2**e. Forward sums are < 2**16 ulps and the inverse's sums
# < 2**24 ulps of the input grid, so every butterfly is exact in float32 and order does not matter.
grid_ints = hnp.arrays(np.int32, st.just((2, 512)), elements=st.integers(-255, 255))


def exact_sum_input(ints: np.ndarray, n: int, exp: int) -> np.ndarray:
    return (ints[:, : 2 * n] * 2.0**exp).astype(np.float32)


@given(data=blocked_arrays(finite), seed=seeds, inverse=st.booleans())
def test_numba_equals_reference_bitwise(data, seed, inverse):
    x, n = data
    ref = rht_reference(x, n, seed, inverse=inverse)
    got = rht(x, n, seed, inverse=inverse)
    assert got.dtype == np.float32 and got.shape == x.shape
    assert same_bits(got, ref)


@given(data=blocked_arrays(st.floats(width=32)), seed=st.integers(0, 2**32), inverse=st.booleans())
def test_numba_equals_reference_nonfinite(data, seed, inverse):
    """Any float32 input (inf, NaN, overflow): same NaN positions, identical bits elsewhere (NaN payloads are
    not part of the contract)."""
    x, n = data
    ref = rht_reference(x, n, seed, inverse=inverse)
    got = rht(x, n, seed, inverse=inverse)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    keep = ~np.isnan(ref)
    assert np.array_equal(bit_patterns(got)[keep], bit_patterns(ref)[keep])


@pytest.mark.parametrize("n", RHT_SIZES)
def test_orthogonality_of_sign_applied_matrix(n):
    h = hadamard_matrix(n)
    assert h.dtype == np.float64 and np.array_equal(h, h.T)
    assert np.array_equal(np.abs(h), np.full((n, n), 1 / math.sqrt(n)))
    for seed in (0, 1, 2**40 + 3):
        s = rht_signs(n, seed).astype(np.float64)
        pm1 = s[:, None] * np.sign(h)  # diag(s) @ H with +-1 entries: integer arithmetic, always exact
        assert np.array_equal(pm1 @ pm1.T, n * np.eye(n))
        m = s[:, None] * h
        if n in EXACT_SCALE_SIZES:
            assert np.array_equal(m @ m.T, np.eye(n))
        else:
            # 1/sqrt(32) and 1/sqrt(128) are not float64 numbers: (1/sqrt(n))**2 * n lands 1 ulp below 1.
            assert np.abs(m @ m.T - np.eye(n)).max() <= 2.0**-52


@pytest.mark.parametrize("n", RHT_SIZES)
def test_scale_constant(n):
    c = rht_scale(n)
    assert c.dtype == np.float32
    expected = {16: 0x3E800000, 32: 0x3E3504F3, 64: 0x3E000000, 128: 0x3DB504F3, 256: 0x3D800000}[n]
    assert int(np.array(c).view(np.uint32)) == expected


@given(data=blocked_arrays(finite), seed=seeds)
def test_round_trip_within_fp32_bound(data, seed):
    """inverse(forward(x)) ~ x. Bound per block (2-norm), L = log2(n), u = 2**-24:
    forward: each of the L butterfly stages rounds every output with relative error <= u, and the later stages
    grow that error only as much as they grow the signal (sqrt(2) per stage), so the unnormalized result is
    off by <= L*u*||x||*sqrt(n); the fp32 scale c carries <= u relative error and its multiply rounds once more
    (<= u relative, or <= 2**-150 absolute when the product is subnormal; butterfly sums are exact when
    subnormal). So ||y - Hs x|| <= (L+2)*u*||x|| + sqrt(n)*2**-150, and the same again for the inverse.
    Total: 2*(L+2)*u*||x|| + 2*sqrt(n)*2**-150, times (1 + 1e-5) for second-order terms."""
    x, n = data
    y = rht(x, n, seed)
    back = rht(y, n, seed, inverse=True)
    L = int(math.log2(n))
    u = 2.0**-24
    xb = x.astype(np.float64).reshape(-1, n)
    err = np.linalg.norm(back.astype(np.float64).reshape(-1, n) - xb, axis=1)
    tol = (2 * (L + 2) * u * np.linalg.norm(xb, axis=1) + 2 * math.sqrt(n) * 2.0**-150) * (1 + 1e-5)
    assert np.all(err <= tol)


@given(ints=grid_ints, n=sizes, exp=st.integers(-30, 30), seed=seeds)
def test_exact_sum_inputs_match_float64_matrix_product(ints, n, exp, seed):
    x = exact_sum_input(ints, n, exp)
    s = rht_signs(n, seed).astype(np.float64)
    xb = x.astype(np.float64).reshape(-1, n)
    c = np.float64(rht_scale(n))
    pm1 = np.sign(hadamard_matrix(n))
    # forward: exact butterflies, then one fp32 rounding of z * c (z * c is exact in float64)
    fwd = rht(x, n, seed)
    want = ((s * xb) @ pm1 * c).astype(np.float32).reshape(x.shape)
    assert np.array_equal(value_bits(fwd), value_bits(want))
    # inverse on the same exact-sum input
    inv = rht(x, n, seed, inverse=True)
    want = (((xb @ pm1) * c).astype(np.float32) * s).astype(np.float32).reshape(x.shape)
    assert np.array_equal(value_bits(inv), value_bits(want))
    if n in EXACT_SCALE_SIZES:
        # the whole transform is exact: equals the float64 matrix product and round-trips exactly
        # (up to the sign of zero results, which follows the IEEE rules of the butterfly adds)
        assert np.array_equal(fwd.astype(np.float64).reshape(-1, n), (s * xb) @ hadamard_matrix(n))
        assert np.array_equal(value_bits(rht(fwd, n, seed, inverse=True)), value_bits(x))
        assert np.array_equal(value_bits(rht_reference(fwd, n, seed, inverse=True)), value_bits(x))


@given(
    x=hnp.arrays(np.float32, st.just((2, 32, 3)), elements=finite),
    axis=st.sampled_from([0, 1, 2, -1, -2, -3]),
    seed=st.integers(0, 100),
    inverse=st.booleans(),
)
def test_axis_handling(x, axis, seed, inverse):
    n = 16
    if x.shape[axis] % n:
        with pytest.raises(InputError, match=f"axis {axis} has length {x.shape[axis]}"):
            rht(x, n, seed, axis=axis)
        return
    want = np.moveaxis(rht(np.moveaxis(x, axis, -1), n, seed, inverse=inverse), -1, axis)
    got = rht(x, n, seed, axis=axis, inverse=inverse)
    assert got.shape == x.shape and got.flags.c_contiguous
    assert same_bits(got, want)
    assert same_bits(rht_reference(x, n, seed, axis=axis, inverse=inverse), want)


def test_blocks_are_consecutive_chunks():
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    whole = rht(x, 16, 9)
    for k in range(4):
        assert same_bits(whole[:, 16 * k : 16 * (k + 1)], rht(x[:, 16 * k : 16 * (k + 1)], 16, 9))


@pytest.mark.parametrize("dtype", [np.float64, np.float16, ml_dtypes.bfloat16])
def test_input_dtypes_convert_to_float32_first(dtype):
    x = np.random.default_rng(2).standard_normal((2, 64)).astype(dtype)
    got = rht(x, 32, 3)
    assert got.dtype == np.float32
    assert same_bits(got, rht(x.astype(np.float32), 32, 3))
    assert same_bits(rht_reference(x, 32, 3), got)


def test_input_not_modified_and_list_input():
    x = np.arange(32, dtype=np.float32)
    before = x.copy()
    rht(x, 32, 1)
    assert np.array_equal(x, before)
    assert same_bits(rht(x.tolist(), 32, 1), rht(x, 32, 1))


def test_block_inplace_matches_rht():
    rng = np.random.default_rng(3)
    for n in RHT_SIZES:
        x = rng.standard_normal(n).astype(np.float32)
        signs = rht_signs(n, 77)
        for inverse in (False, True):
            v = x.copy()
            rht_block_inplace(v, signs, inverse)
            assert same_bits(v, rht(x, n, 77, inverse=inverse))


@given(n=sizes, seed=seeds)
def test_signs_contract(n, seed):
    s = rht_signs(n, seed)
    assert s.dtype == np.float32 and s.shape == (n,)
    words = philox4x32_reference(seed, np.arange(n, dtype=np.uint64) // 4)[np.arange(n) % 4, np.arange(n)]
    assert np.array_equal(s, np.where(words & np.uint32(0x80000000), -1.0, 1.0).astype(np.float32))


def test_signs_depend_on_seed():
    signs = {rht_signs(256, seed).tobytes() for seed in range(8)}
    assert len(signs) == 8
    assert np.array_equal(rht_signs(16, 5), rht_signs(16, 5))
    assert np.array_equal(rht_signs(256, 5)[:16], rht_signs(16, 5))  # a prefix of the same stream


def test_errors():
    x = np.zeros((2, 48), np.float32)
    with pytest.raises(InputError, match="size must be one of 16, 32, 64, 128, 256, got 8"):
        rht(x, 8)
    with pytest.raises(InputError, match="size"):
        rht(x, 16.0)
    with pytest.raises(InputError, match="axis -1 has length 48, which is not a multiple of size=32"):
        rht(x, 32)
    with pytest.raises(InputError, match="axis 2 is out of range for a 2-D array"):
        rht(x, 16, axis=2)
    with pytest.raises(InputError, match="dtype int64"):
        rht(np.zeros((1, 16), np.int64), 16)
    with pytest.raises(InputError, match="size"):
        hadamard_matrix(512)
