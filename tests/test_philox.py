"""Philox4x32-10: numpy reference == numba twin == Triton's tl.randint4x (interpreter), plus Random123 answers."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fp4lab.emulator.nb_philox import (
    philox4x32,
    philox4x32_10,
    philox_rounds,
    sr_bits_for,
    sr_random_bits,
)
from fp4lab.errors import InputError
from fp4lab.numerics.philox import (
    philox4x32_reference,
    philox_rounds_reference,
    split_seed,
    sr_random_bits_reference,
)


@triton.jit
def _randint4x_kernel(seed, off_ptr, out_ptr, N, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < N
    off = tl.load(off_ptr + idx, mask=mask, other=0)
    r0, r1, r2, r3 = tl.randint4x(seed, off)
    tl.store(out_ptr + idx, r0, mask=mask)
    tl.store(out_ptr + N + idx, r1, mask=mask)
    tl.store(out_ptr + 2 * N + idx, r2, mask=mask)
    tl.store(out_ptr + 3 * N + idx, r3, mask=mask)


def _triton_randint4x(seed: int, offsets: torch.Tensor) -> np.ndarray:
    n = offsets.numel()
    out = torch.empty(4 * n, dtype=torch.uint32)
    _randint4x_kernel[(1,)](seed, offsets, out, n, BLOCK=triton.next_power_of_2(n))
    return out.numpy().reshape(4, n)


OFFSETS = np.array(
    [0, 1, 2, 3, 4, 1000, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 3, 2**62 + 17, 2**63 - 1],
    dtype=np.int64,
)
# Triton accepts any Python int in [-2**63, 2**64) as seed (typed i32, i64 or u64) and casts it to uint64.
SEEDS = [0, 1, 16, 12345, 2**31, 2**32 + 5, 2**63 - 1, 2**63, 2**64 - 1, -1, -(2**63)]


@pytest.mark.parametrize("seed", SEEDS)
def test_matches_triton_randint4x_int64_offsets(seed):
    got = _triton_randint4x(seed, torch.from_numpy(OFFSETS.copy()))
    assert got.dtype == np.uint32
    assert np.array_equal(got, philox4x32_reference(seed, OFFSETS))
    assert np.array_equal(got, philox4x32(seed, OFFSETS))


@pytest.mark.parametrize("seed", [0, 2**32 + 5])
def test_matches_triton_randint4x_uint64_offsets(seed):
    off = np.array([0, 7, 2**32 + 1, 2**63, 2**63 + 2**32 + 9, 2**64 - 1], dtype=np.uint64)
    got = _triton_randint4x(seed, torch.from_numpy(off.copy()))
    assert np.array_equal(got, philox4x32_reference(seed, off))
    assert np.array_equal(got, philox4x32(seed, off))


def test_matches_triton_randint4x_int32_offsets():
    off = np.arange(0, 4096, 37, dtype=np.int32)
    got = _triton_randint4x(7, torch.from_numpy(off.copy()))
    assert np.array_equal(got, philox4x32(7, off))


def test_random123_known_answers():
    """Philox4x32-10 known-answer vectors of Random123 (kat_vectors), full 4-word counter."""
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for ctr, key, want in cases:
        ref = philox_rounds_reference(*[np.array([c], dtype=np.uint32) for c in ctr], *key)
        assert [int(v) for v in ref[:, 0]] == list(want)
        assert [int(v) for v in philox_rounds(*ctr, *key)] == list(want)
    # randint4x(0, 0) is the all-zero counter and key
    assert [int(v) for v in philox4x32_reference(0, np.array([0]))[:, 0]] == list(cases[0][2])


seeds = st.integers(min_value=-(2**63), max_value=2**64 - 1)
offset_arrays = hnp.arrays(
    np.uint64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), elements=st.integers(0, 2**64 - 1)
)


@given(seed=seeds, offsets=offset_arrays)
def test_numba_equals_numpy(seed, offsets):
    ref = philox4x32_reference(seed, offsets)
    assert ref.shape == (4, *offsets.shape) and ref.dtype == np.uint32
    got = philox4x32(seed, offsets)
    assert got.dtype == np.uint32
    assert np.array_equal(got, ref)


@given(seed=seeds, offset=st.integers(0, 2**64 - 1))
def test_scalar_twin_equals_numpy(seed, offset):
    lo, hi = split_seed(seed)
    ref = philox4x32_reference(seed, np.array([offset], dtype=np.uint64))[:, 0]
    got = philox4x32_10(lo, hi, offset & 0xFFFFFFFF, offset >> 32)
    assert [int(v) for v in got] == [int(v) for v in ref]


@given(seed=seeds, n=st.integers(0, 70))
def test_sr_bits_contract(seed, n):
    """Element i uses word i % 4 of randint4x(seed, i // 4), top 24 bits."""
    ref = sr_random_bits_reference(seed, n)
    words = philox4x32_reference(seed, np.arange(n, dtype=np.uint64) // 4)
    expect = words[np.arange(n) % 4, np.arange(n)] >> np.uint32(8)
    assert ref.dtype == np.uint32 and ref.shape == (n,)
    assert np.array_equal(ref, expect)
    assert np.array_equal(sr_random_bits(seed, n), ref)
    assert ref.max(initial=0) < 2**24
    lo, hi = split_seed(seed)
    for i in range(n):
        assert int(sr_bits_for(lo, hi, i)) == int(ref[i])


def test_sr_bits_for_large_index():
    i = 2**34 + 6  # offset i // 4 = 2**32 + 1 needs the high counter word
    lo, hi = split_seed(99)
    word = philox4x32_reference(99, np.array([i // 4], dtype=np.uint64))[i % 4, 0]
    assert int(sr_bits_for(lo, hi, i)) == int(word >> np.uint32(8))


def test_seed_and_offset_errors():
    with pytest.raises(InputError, match="seed"):
        split_seed(2**64)
    with pytest.raises(InputError, match="seed"):
        split_seed(1.5)
    with pytest.raises(InputError, match="non-negative"):
        philox4x32(0, np.array([-1], dtype=np.int64))
    with pytest.raises(InputError, match="integer"):
        philox4x32_reference(0, np.array([1.0]))
    assert split_seed(-1) == (0xFFFFFFFF, 0xFFFFFFFF)
    assert split_seed(2**32 + 5) == (5, 1)
