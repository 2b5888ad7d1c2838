"""Stochastic-rounding random-bit width ``sr_bits`` (24, 16, 8, 4): the draws' contract
(``philox.sr_random_bits_reference``) and its numba twin, an independent re-derivation of the layout from
``philox4x32_reference``, the reference vs the numba emulator and the Triton quantize kernel (interpreter) at
every width, the default, the refused widths, and the unbiasedness property ``E[up] = floor(p * 2^w) / 2^w``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fp4lab
from fp4lab import QuantizeOptions
from fp4lab.emulator.nb_philox import sr_bits_for, sr_call_and_word, sr_random_bits
from fp4lab.emulator.quantize import quantize_emulated
from fp4lab.errors import InputError
from fp4lab.kernels.api import quantize_cuda
from fp4lab.kernels.quantize_launch import quantize_triton
from fp4lab.kernels.verify import make_input
from fp4lab.numerics.philox import philox4x32_reference, split_seed, sr_elements_per_call, sr_random_bits_reference
from fp4lab.numerics.ref_quantize import quantize_reference
from fp4lab.testing.bits import bit_patterns, same_bits

WIDTHS = (24, 16, 8, 4)
SEEDS = (0, 1, 12345, 2**32 + 7, 2**64 - 1, -5)
LENGTHS = (0, 1, 3, 5, 17, 31, 33, 63, 100, 129, 1000, 4099)
TWIN_FORMATS = ("ufp4", "nvfp4", "mxfp4", "int4-b16-fp32", "nf4-b64-fp32", "e2m1")


def _scale_codes(sc) -> np.ndarray:
    if isinstance(sc, torch.Tensor):
        sc = sc.view(torch.int16) if sc.dtype == torch.uint16 else sc
        sc = sc.numpy()
    return bit_patterns(sc)


def assert_same_qt(got, want) -> None:
    """Codes, scale codes, scales (fp32 bits) and tensor scale of two quantized tensors, bit for bit."""
    gc = got.codes.numpy() if isinstance(got.codes, torch.Tensor) else np.asarray(got.codes)
    assert np.array_equal(gc, np.asarray(want.codes)), f"codes differ at {np.argwhere(gc != want.codes)[:3]}"
    wsc = np.asarray(want.scale_codes)
    if wsc.size:
        assert np.array_equal(_scale_codes(got.scale_codes).astype(np.int64), bit_patterns(wsc).astype(np.int64))
        assert same_bits(got.scales, np.asarray(want.scales, np.float32))
    if want.tensor_scale is None:
        assert got.tensor_scale is None
    else:
        g = np.array([float(got.tensor_scale)], np.float32)
        assert bit_patterns(g)[0] == bit_patterns(np.array([want.tensor_scale], np.float32))[0]


# ---------------------------------------------------------------------------------------------------------
# (1) the draws: reference vs numba twin


@pytest.mark.parametrize("bits", WIDTHS)
def test_sr_random_bits_twin_equals_reference(bits):
    for seed in SEEDS:
        for n in LENGTHS:
            ref = sr_random_bits_reference(seed, n, bits)
            got = sr_random_bits(seed, n, bits)
            assert ref.dtype == np.uint32 and got.dtype == np.uint32 and ref.shape == (n,) == got.shape
            assert np.array_equal(ref, got), (seed, n, bits)


@pytest.mark.parametrize("bits", WIDTHS)
def test_sr_random_bits_prefix_and_scalar_agree(bits):
    """A stream of n elements is the prefix of a longer one (no dependence on n, so lengths that are not a
    multiple of the elements per call get the same draws), and the njit scalar ``sr_bits_for`` gives each one."""
    long = sr_random_bits_reference(99, 1000, bits)
    for n in (1, 7, 31, 33, 255, 999):
        assert np.array_equal(sr_random_bits_reference(99, n, bits), long[:n])
    lo, hi = split_seed(99)
    for i in (0, 1, 2, 3, 4, 5, 15, 16, 17, 31, 32, 33, 500, 999):
        assert int(sr_bits_for(lo, hi, i, bits)) == int(long[i]), i


# ---------------------------------------------------------------------------------------------------------
# (2) the layout, re-derived independently from the Philox words


def _layout_from_words(seed: int, n: int, bits: int) -> np.ndarray:
    """Element order = the little-endian order of the w-bit fields of words 0, 1, 2, 3 of call 0, then call 1, ...
    (numpy views of the uint32 words as uint16 / uint8, nibbles low first), comparand ``r << (24-w) | ones``."""
    per_call = 4 if bits == 24 else 128 // bits
    calls = -(-n // per_call) if n else 0
    words = philox4x32_reference(seed, np.arange(calls, dtype=np.uint64))  # (4, calls)
    stream = np.ascontiguousarray(words.T).astype("<u4")  # (calls, 4): call-major, word 0 first
    if bits == 24:
        return (stream.reshape(-1)[:n] >> 8).astype(np.uint32)
    if bits == 16:
        r = stream.view("<u2").reshape(-1)
    elif bits == 8:
        r = stream.view("<u1").reshape(-1)
    else:
        b = stream.view("<u1").reshape(-1)
        r = np.stack([b & 0xF, b >> 4], axis=-1).reshape(-1)  # low nibble first
    r = r[:n].astype(np.uint32)
    return (r << np.uint32(24 - bits)) | np.uint32((1 << (24 - bits)) - 1)


@pytest.mark.parametrize("bits", WIDTHS)
def test_sr_draws_layout_independent_rederivation(bits):
    for seed in (0, 7, 2**40 + 3):
        for n in (1, 5, 33, 200, 1027):
            assert np.array_equal(sr_random_bits_reference(seed, n, bits), _layout_from_words(seed, n, bits))


@pytest.mark.parametrize("bits", (16, 8, 4))
def test_sr_draws_layout_first_fields(bits):
    """For w < 24: element 0 is the low w bits of word 0 of call 0, element 1 the next field up; element 32/w is
    the low field of word 1; element 4*32/w the low field of word 0 of call 1; the comparand's low 24-w bits are
    ones, so ``floor(p*2^24) > comparand`` iff ``floor(p*2^w) > r``."""
    seed = 31337
    per = 32 // bits
    e = 4 * per
    assert sr_elements_per_call(bits) == e and sr_elements_per_call(24) == 4
    w0 = philox4x32_reference(seed, np.arange(2, dtype=np.uint64))
    d = sr_random_bits_reference(seed, 2 * e, bits)
    mask = (1 << bits) - 1
    ones = (1 << (24 - bits)) - 1
    r = d >> (24 - bits)
    assert np.all((d & ones) == ones) and np.all(d < (1 << 24))
    assert int(r[0]) == int(w0[0, 0]) & mask
    assert int(r[1]) == (int(w0[0, 0]) >> bits) & mask
    assert int(r[per - 1]) == int(w0[0, 0]) >> (32 - bits)
    assert int(r[per]) == int(w0[1, 0]) & mask
    assert int(r[3 * per]) == int(w0[3, 0]) & mask
    assert int(r[e]) == int(w0[0, 1]) & mask
    assert [tuple(int(v) for v in sr_call_and_word(i, bits)) for i in (0, per - 1, per, 3 * per, e, e + per)] == [
        (0, 0), (0, 0), (0, 1), (0, 3), (1, 0), (1, 1)]
    # 24 bits: word i % 4 of call i // 4, >> 8
    d24 = sr_random_bits_reference(seed, 8, 24)
    assert [int(v) for v in d24] == [int(w0[j % 4, j // 4]) >> 8 for j in range(8)]


def test_sr_draws_differ_across_widths():
    """The widths are different streams of comparands (not the 24-bit draws rounded): w-bit draws are the top
    bits of the comparand, and the 24-bit ones do not share them."""
    d = {b: sr_random_bits_reference(5, 4096, b) for b in WIDTHS}
    for b in (16, 8, 4):
        assert not np.array_equal(d[b] >> (24 - b), d[24] >> (24 - b))
        # uniform-looking: every w-bit value occurs (4 and 8 bits), the mean is near the middle
        if b <= 8:
            assert np.unique(d[b] >> (24 - b)).size == 1 << b
        assert abs(float((d[b] >> (24 - b)).mean()) / ((1 << b) - 1) - 0.5) < 0.03  # about 6 sigma


# ---------------------------------------------------------------------------------------------------------
# (3) quantize_reference vs the numba emulator at every width; (4) the default is 24


@pytest.mark.parametrize("name", TWIN_FORMATS)
@pytest.mark.parametrize("bits", WIDTHS)
def test_quantize_emulated_equals_reference_every_width(name, bits):
    fmt = fp4lab.get_format(name)
    for kind, axis, rht in (("adversarial", -1, None), ("random", 0, None), ("random", -1, 16),
                            ("adversarial", 0, 16)):
        x = make_input(kind, 64, 128, seed=bits + axis)
        opts = QuantizeOptions("sr", seed=21, axis=axis, rht=rht, rht_seed=3, sr_bits=bits)
        with np.errstate(all="ignore"):
            ref = quantize_reference(x, fmt, opts)
            got = quantize_emulated(x, fmt, opts)
        assert_same_qt(got, ref)


@pytest.mark.parametrize("name", TWIN_FORMATS)
def test_quantize_widths_change_the_codes(name):
    """sr_bits is not ignored anywhere on the way: different widths give different codes on random data."""
    fmt = fp4lab.get_format(name)
    x = make_input("random", 64, 128, seed=2)
    codes = {b: quantize_emulated(x, fmt, QuantizeOptions("sr", seed=4, sr_bits=b)).codes for b in WIDTHS}
    for b in (16, 8, 4):
        assert not np.array_equal(codes[b], codes[24]), b
    assert not np.array_equal(codes[8], codes[4])


@pytest.mark.parametrize("name", ("ufp4", "nvfp4", "mxfp4", "e2m1"))
def test_sr_bits_24_is_the_default(name):
    fmt = fp4lab.get_format(name)
    x = make_input("random", 64, 128, seed=8)
    assert np.array_equal(sr_random_bits_reference(3, 1000), sr_random_bits_reference(3, 1000, 24))
    assert np.array_equal(sr_random_bits(3, 1000), sr_random_bits(3, 1000, 24))
    explicit, default = QuantizeOptions("sr", 9, sr_bits=24), QuantizeOptions("sr", 9)
    assert_same_qt(quantize_reference(x, fmt, explicit), quantize_reference(x, fmt, default))
    assert_same_qt(quantize_emulated(x, fmt, explicit), quantize_emulated(x, fmt, default))
    assert_same_qt(fp4lab.quantize(x, fmt, "sr", 9, sr_bits=24), fp4lab.quantize(x, fmt, "sr", 9))
    assert_same_qt(fp4lab.quantize(x, fmt, "sr", 9), quantize_reference(x, fmt, default))
    xt = torch.from_numpy(x)
    with np.errstate(all="ignore"):  # the interpreter evaluates x / 0 of zero-scale paths with numpy
        assert_same_qt(quantize_cuda(xt, fmt, explicit), quantize_cuda(xt, fmt, default))
        assert_same_qt(quantize_cuda(xt, fmt, default), quantize_reference(x, fmt, default))


def test_sr_bits_is_keyword_only_in_quantize():
    x = make_input("random", 16, 32, seed=0)
    with pytest.raises(TypeError):
        fp4lab.quantize(x, "mxfp4", "sr", 0, -1, None, 0, 8)  # the 8th positional is not sr_bits


# ---------------------------------------------------------------------------------------------------------
# (5) refused widths


@pytest.mark.parametrize("bad", (7, 32, 24.0, True, 0, -8, "8", None, 12))
def test_invalid_sr_bits_raise_one_line_input_error(bad):
    x = make_input("random", 16, 32, seed=0)
    calls = [
        lambda: fp4lab.quantize(x, "mxfp4", "sr", sr_bits=bad),
        lambda: fp4lab.quantize(x, "mxfp4", "rtne", sr_bits=bad),
        lambda: fp4lab.quantize(torch.from_numpy(x), "nvfp4", "sr", sr_bits=bad),
        lambda: quantize_reference(x, fp4lab.get_format("ufp4"), QuantizeOptions("sr", sr_bits=bad)),
        lambda: quantize_emulated(x, fp4lab.get_format("ufp4"), QuantizeOptions("sr", sr_bits=bad)),
        lambda: quantize_cuda(torch.from_numpy(x), "mxfp4", QuantizeOptions("sr", sr_bits=bad)),
        lambda: sr_random_bits_reference(0, 10, bad),
        lambda: sr_random_bits(0, 10, bad),
    ]
    for call in calls:
        with pytest.raises(InputError) as err:
            call()
        msg = str(err.value)
        assert "\n" not in msg and "sr_bits" in msg and "4, 8, 16, 24" in msg, msg


def test_numpy_integer_widths_are_accepted():
    x = make_input("random", 16, 32, seed=1)
    assert_same_qt(fp4lab.quantize(x, "mxfp4", "sr", 2, sr_bits=np.int64(8)),
                   fp4lab.quantize(x, "mxfp4", "sr", 2, sr_bits=8))


# ---------------------------------------------------------------------------------------------------------
# (6) unbiasedness per width: E[up] = floor(p * 2^w) / 2^w exactly


# fractional positions between the E2M1 levels 2 and 3 (gap 1, so p = t - 2 exactly in fp32, t = fp32(2 + pos));
# chosen so that floor(p * 2^w) / 2^w is far from p at small widths (0.05 < 2^-4: never up at 4 bits; 0.5 + 7/2048
# is 3.5 * 2^-10 above the 8-bit level 0.5, seven of the band's sigma)
POSITIONS = (0.0, 2.0**-22, 0.05, 0.25, 0.3, 0.5 + 7 / 2048, 0.7, 0.93, 1 - 2.0**-20)


@pytest.mark.parametrize("bits", WIDTHS)
def test_sr_unbiased_to_the_width_bound(bits):
    seeds = 8
    per_seed = 1 << 17  # 2^20 draws per position
    n_pos = len(POSITIONS)
    # one row per position, +t then -t (t = 2 exactly is a level: never "up"; -2 is a level: always "up")
    t = (2.0 + np.array(POSITIONS)).astype(np.float32)
    p = t.astype(np.float64) - 2.0  # the reference's fp32 p = (t - 2) / 1 is exact, so this is p exactly
    x = np.empty((2 * n_pos, per_seed), np.float32)
    x[:n_pos] = t[:, None]
    x[n_pos:] = -t[:, None]
    # for -t in [-3, -2): a = -3, b = -2 and p' = (-t + 3) / 1 = 1 - p
    p_all = np.concatenate([p, 1.0 - p])
    up_level = np.concatenate([np.full(n_pos, 3.0), np.full(n_pos, -2.0)])
    down_level = np.concatenate([np.full(n_pos, 2.0), np.full(n_pos, -3.0)])
    ups = np.zeros(2 * n_pos, np.int64)
    for s in range(seeds):
        qt = fp4lab.quantize(x, "e2m1", "sr", seed=1000 + s, sr_bits=bits)
        v = fp4lab.dequantize(qt)
        is_up = v == up_level[:, None]
        assert np.all(is_up | (v == down_level[:, None]))  # one of the two neighbours
        ups += is_up.sum(axis=1)
    n = seeds * per_seed
    scale = float(1 << bits)
    for i, pp in enumerate(p_all):
        if pp == 1.0:  # -t = -2 exactly (p = 0 on the positive side): a level rounds to itself
            assert ups[i] == n
            continue
        q = np.floor(pp * scale) / scale  # E[up]; p is exact in float64 here
        assert -1.0 / scale <= q - pp <= 0.0
        freq = ups[i] / n
        sigma = np.sqrt(q * (1 - q) / n)
        assert abs(freq - q) <= 5 * sigma, (bits, pp, freq, q, 5 * sigma)
        assert -1.0 / scale - 5 * sigma <= freq - pp <= 5 * sigma
    # the width is visible in the statistics: at 4 bits p = 0.05 never rounds up, p = 0.3 rounds up 1/4 of the
    # time; at 24 bits they round up about 5 % and 30 % of the time
    i05, i03 = POSITIONS.index(0.05), POSITIONS.index(0.3)
    if bits == 4:
        assert ups[i05] == 0 and abs(ups[i03] / n - 0.25) < 0.005
    if bits == 24:
        assert abs(ups[i05] / n - 0.05) < 0.005 and abs(ups[i03] / n - 0.3) < 0.005


def test_sr_rule_is_floor_p_2w_greater_than_r():
    """Element by element: the reference rounds t in [2, 3) up iff floor(p * 2^w) > r, r the element's w-bit draw."""
    rng = np.random.default_rng(0)
    p = rng.integers(0, 1 << 22, 4096) / float(1 << 22)
    x = (2.0 + p).astype(np.float32).reshape(32, 128)
    fmt = fp4lab.get_format("e2m1")
    for bits in WIDTHS:
        v = fp4lab.dequantize(quantize_reference(x, fmt, QuantizeOptions("sr", seed=77, sr_bits=bits))).reshape(-1)
        r = sr_random_bits_reference(77, x.size, bits) >> np.uint32(24 - bits)
        want = np.where(np.floor(p * (1 << bits)) > r, 3.0, 2.0)
        assert np.array_equal(v, want), bits


# ---------------------------------------------------------------------------------------------------------
# (7) the Triton quantize kernel (interpreter) at every width


KERNEL_FORMATS = ("nvfp4", "mxfp4", "ufp4", "nf4-b64-fp32")


@pytest.mark.parametrize("name", KERNEL_FORMATS)
@pytest.mark.parametrize("bits", WIDTHS)
def test_triton_quantize_sr_every_width(name, bits):
    """Both axes, fp32 and bf16 inputs (bf16 along the last axis takes the packed-word path); axis 0 takes the
    kernel's general random-bit path (the fast path needs blocks along the last axis)."""
    fmt = fp4lab.get_format(name)
    for i, (axis, dtype, kind, rht) in enumerate([(-1, torch.float32, "adversarial", None),
                                                  (-1, torch.bfloat16, "random", None),
                                                  (0, torch.float32, "random", 16),
                                                  (0, torch.bfloat16, "adversarial", None)]):
        xt = torch.from_numpy(make_input(kind, 64, 128, seed=i)).to(dtype)
        x = xt.float().numpy()
        opts = QuantizeOptions("sr", seed=50 + i, axis=axis, rht=rht, rht_seed=2, sr_bits=bits)
        with np.errstate(all="ignore"):
            got = quantize_cuda(xt, fmt, opts)
            want = quantize_reference(x, fmt, opts)
        assert_same_qt(got, want)


def _edge_tile(bits: int, seed: int, rows: int = 16, cols: int = 128) -> np.ndarray:
    """An mxfp4 input [rows, cols] on the SR encoder's edges: each block of 32 starts with 6.0 (block
    scale 1, so t = x), the other elements are negative and below half the grid's finest step u = 0.5, within
    2^-25 u of v * u (v = (2^w - 1 - r) / 2^w of the element's own draw r), where the reference's p = fl(1 - x)
    rounds; the rest of the draws (v >= 1/2) get values around their own thresholds."""
    n = rows * cols
    r = sr_random_bits_reference(seed, n, bits).astype(np.int64) >> (24 - bits)
    v = ((1 << bits) - 1 - r) / 2.0**bits
    rng = np.random.default_rng(bits)
    off = rng.choice(np.array([-2.0, -1.0, -0.5, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0]) * 2.0**-25, n)
    x = np.where(v < 0.5, -(v + off) * 0.5, -(v - 0.5 + off * 2**20)).astype(np.float32)
    x = x.reshape(rows, cols)
    x[:, ::32] = 6.0
    return x


@pytest.mark.parametrize("bits", WIDTHS)
def test_triton_quantize_sr_encoder_edges(bits):
    """The bit-arithmetic SR encoder (``encoding.encode_fbits_sr``) on the inputs where its binade-0 rule must follow
    the reference's rounding of p = fl(1 - x): every code equals the reference's, and the inputs do reach the
    case (elements whose exact-arithmetic code differs from the reference's)."""
    fmt = fp4lab.get_format("mxfp4")
    x = _edge_tile(bits, 77)
    opts = QuantizeOptions("sr", seed=77, axis=-1, sr_bits=bits)
    got = quantize_triton(torch.from_numpy(x), fmt, opts)
    want = quantize_reference(x, fmt, opts)
    assert np.array_equal(got.codes.numpy(), want.codes)
    r = sr_random_bits_reference(77, x.size, bits).astype(np.int64) >> (24 - bits)
    v = ((1 << bits) - 1 - r) / 2.0**bits
    a = np.abs(x.reshape(-1).astype(np.float64)) / 0.5
    exact_up = (a > v) & (a < 0.5)  # exact arithmetic: magnitude u iff a / u > v
    ref_up = (np.asarray(want.codes).reshape(-1) & 7) == 1
    assert np.count_nonzero(exact_up != ref_up) >= 100


@pytest.mark.parametrize("bits", (4, 8, 16))
def test_triton_quantize_sr_general_random_path(bits):
    """Where one Philox call's elements (32, 16, 8 at 4, 8, 16 bits) do not line up with the row or the tile, the
    kernel takes its general random-bit path: K = 48 or 80 with blocks of 16 (at 4 bits), a tile 16 or 32 wide (at
    4 bits), blocks of 4 with K = 36 and 44 (every width below 24), and a 3-D input blocked along its middle axis
    (every width)."""
    from fp4lab.formats.quant_format import QuantFormat

    nv, mx = fp4lab.get_format("nvfp4"), fp4lab.get_format("mxfp4")
    b4 = QuantFormat(name="e2m1-b4-fp32", element="e2m1", block={"shape": [4]}, scale="fp32",
                     scale_rule={"method": "amax", "zero_block": "one"})
    runs = [
        (nv, make_input("random", 32, 48, seed=1), -1, None),
        (nv, make_input("adversarial", 32, 80, seed=2), -1, None),
        (nv, make_input("random", 32, 128, seed=3), -1, (16, 16)),
        (mx, make_input("random", 32, 96, seed=4), -1, (32, 32)),
        (mx, make_input("random", 4 * 64, 24, seed=5).reshape(4, 64, 24), 1, None),
        (b4, make_input("random", 32, 36, seed=6), -1, None),
        (b4, make_input("adversarial", 32, 44, seed=7), -1, None),
    ]
    for fmt, x, axis, tile in runs:
        for dtype in (torch.float32, torch.bfloat16):
            xt = torch.from_numpy(x).to(dtype)
            xf = xt.float().numpy()
            opts = QuantizeOptions("sr", 13, axis, sr_bits=bits)
            with np.errstate(all="ignore"):
                got = quantize_triton(xt, fmt, opts, tile=tile)
                want = quantize_reference(xf, fmt, opts)
            assert got.axis == want.axis
            assert np.array_equal(got.codes.numpy(), want.codes), (fmt.name, x.shape, tile, dtype)
            assert np.array_equal(_scale_codes(got.scale_codes).astype(np.int64),
                                  bit_patterns(want.scale_codes).astype(np.int64))
            assert same_bits(got.scales, np.asarray(want.scales, np.float32))
            if want.tensor_scale is not None:
                assert float(got.tensor_scale) == float(want.tensor_scale)
