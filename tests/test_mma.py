"""MMA emulation: numba kernels == pure-Python reference (bit for bit, random bit patterns with NaN/Inf/subnormals),
hand-derived probes of each model parameter, chaining, block-scale internal consistency, API errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fp4lab.hwspec as hwspec
from fp4lab.hwspec.mma import emulate_gemm, emulate_mma
from fp4lab.hwspec.operands import decode_codes, operand_format


def bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def rand_values(rng, fmt: str, shape, p_zero=0.1) -> np.ndarray:
    """Values of an operand format from a mix of code classes: uniform codes (all specials and exponents),
    a narrow exponent window (cancellation and truncation), the smallest exponents (subnormals), and zeros."""
    of = operand_format(fmt)
    if of.integer:
        return rng.integers(-(1 << of.man_bits), 1 << of.man_bits, size=shape).astype(np.float64)
    nb = of.exp_bits + of.man_bits + (1 if of.signed else 0)
    codes = rng.integers(0, 1 << nb, size=shape, dtype=np.int64)
    man = codes & ((1 << of.man_bits) - 1)
    sign = (codes >> (nb - 1)) << (nb - 1) if of.signed else 0
    top = (1 << of.exp_bits) - 2
    narrow = np.clip(of.bias + rng.integers(-3, 4, size=shape), 1, max(top, 1))
    tiny = rng.integers(0, min(3, top + 1), size=shape)
    cls = rng.integers(0, 3, size=shape)
    e = np.where(cls == 1, narrow, tiny)
    built = sign | (e << of.man_bits) | man
    codes = np.where(cls == 0, codes, built)
    v = decode_codes(codes, of)
    return np.where(rng.random(shape) < p_zero, 0.0, v)


def rand_scales(rng, fmt: str, shape, p_nan=0.02) -> np.ndarray:
    of = operand_format(fmt)
    if of.man_bits == 0:  # e8m0: exponents near 127 mostly
        codes = np.clip(127 + rng.integers(-6, 7, size=shape), 0, 254)
    else:
        codes = rng.integers(0, 127, size=shape)
    v = decode_codes(codes, of)
    return np.where(rng.random(shape) < p_nan, np.nan, v)


# (hw, kind, a format, b format, scale format, block)
CASES = [
    ("hopper-sm90", "wgmma.bf16", "bf16", "bf16", None, None),
    ("hopper-sm90", "wgmma.f16.f16acc", "f16", "f16", None, None),
    ("hopper-sm90", "wgmma.tf32", "tf32", "tf32", None, None),
    ("hopper-sm90", "wgmma.e4m3", "e4m3", "e5m2", None, None),
    ("blackwell-sm100", "tcgen05.f8f6f4", "e2m1", "e3m2", None, None),
    ("blackwell-sm100", "tcgen05.mxf8f6f4", "e4m3", "e2m3", "ue8m0", 32),
    ("blackwell-sm100", "tcgen05.mxf4", "e2m1", "e2m1", "ue8m0", 32),
    ("blackwell-sm100", "tcgen05.mxf4nvf4", "e2m1", "e2m1", "ue4m3", 16),
    ("blackwell-sm100", "mma.sync.e4m3", "e4m3", "e4m3", None, None),
    ("cdna3-mi300", "mfma.f16", "f16", "f16", None, None),
    ("cdna3-mi300", "mfma.xf32", "tf32", "tf32", None, None),
    ("cdna3-mi300", "mfma.fp8", "e4m3fnuz", "e5m2fnuz", None, None),
    ("cdna4-mi350", "mfma_scale.f8f6f4", "e2m1", "e4m3", "e8m0", 32),
    ("proposal-ufp4", "bsmma.e1m2", "e1m2", "e1m2", "ue4m3", 16),
    ("proposal-ufp4", "bsmma.int4", "int4", "int4", "ue8m0", 32),
]


def make_inputs(rng, case, M=3, N=4, n_instr=2):
    hw, kind_name, fa, fb, sf, block = case
    kind = hwspec.get_hw(hw).kind(kind_name)
    K = int(kind.k) * n_instr
    a, b = rand_values(rng, fa, (M, K)), rand_values(rng, fb, (K, N))
    if kind.tf32_truncate:
        a, b = a.astype(np.float32), b.astype(np.float32)
    c = rand_values(rng, kind.c_format, (M, N), p_zero=0.3)
    kw = dict(hw=hw, kind=kind_name, a_format=fa, b_format=fb)
    if sf is not None:
        kw.update(scale_a=rand_scales(rng, sf, (M, K // block)), scale_b=rand_scales(rng, sf, (K // block, N)),
                  scale_format=sf)
    return a, b, c, kw


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), case=st.sampled_from(CASES))
def test_numba_equals_reference(seed, case):
    rng = np.random.default_rng(seed)
    a, b, c, kw = make_inputs(rng, case)
    with np.errstate(all="ignore"):
        fast = emulate_mma(a, b, c, **kw)
        ref = emulate_mma(a, b, c, impl="reference", **kw)
    assert np.array_equal(bits(fast), bits(ref))


@pytest.mark.parametrize("case", CASES, ids=[c[1] for c in CASES])
def test_numba_equals_reference_larger(case):
    """A 16 x 12 tile with 4 chained instructions per case (exercises the vectorised N loop)."""
    rng = np.random.default_rng(7)
    a, b, c, kw = make_inputs(rng, case, M=16, N=12, n_instr=4)
    with np.errstate(all="ignore"):
        assert np.array_equal(bits(emulate_mma(a, b, c, **kw)), bits(emulate_mma(a, b, c, impl="reference", **kw)))


# ---- hand-derived probes (docs/tensor_cores.md section 1) ----------------------------------------------------------
def one_dot(a, b, c, kind, hw="hopper-sm90", **kw):
    K = len(a)
    c = np.array([[c]], dtype=np.float16 if "f16acc" in kind else np.float32)
    return emulate_mma(np.array([a], dtype=np.float64), np.array(b, dtype=np.float64).reshape(K, 1), c, hw=hw,
                       kind=kind, **kw)[0, 0]


def pad16(*vals):
    return list(vals) + [0.0] * (16 - len(vals))


def test_products_truncated_to_F25_then_rz():
    # 1 + eight products of 2^-26: each falls below 2^(0-25) and is dropped; IEEE would give 1 + 2^-23.
    a = pad16(1.0, *[2.0**-13] * 8)
    b = pad16(1.0, *[2.0**-13] * 8)
    assert one_dot(a, b, 0.0, "wgmma.bf16") == 1.0
    # two such products give 2^-25 each: kept (multiples of 2^-25), sum 1 + 2^-24, RZ to fp32 -> 1
    assert one_dot(pad16(1.0, 2.0**-13, 2.0**-12), pad16(1.0, 2.0**-12, 2.0**-13), 0.0, "wgmma.bf16") == 1.0


def test_round_toward_zero_both_signs():
    t = 3 * 2.0**-24  # fp16 subnormal; 1*2 + 1*t = 2 + 1.5*2^-23 -> RZ -> 2 (Fasi et al. rounding probe)
    assert one_dot(pad16(1.0, 1.0), pad16(2.0, t), 0.0, "wgmma.f16") == 2.0
    assert one_dot(pad16(-1.0, -1.0), pad16(2.0, t), 0.0, "wgmma.f16") == -2.0


def test_fp16_accumulator_rounds_to_nearest_even():
    # 1 + 2^-11 (a tie between 1 and 1 + 2^-10) -> 1 (even); 1 + 3*2^-11 -> 1 + 2^-9 (even)
    assert one_dot(pad16(1.0, 2.0**-11), pad16(1.0, 1.0), 0.0, "wgmma.f16.f16acc") == 1.0
    assert one_dot(pad16(1.0, 3 * 2.0**-11), pad16(1.0, 1.0), 0.0, "wgmma.f16.f16acc") == 1.0 + 2.0**-9


def test_e_zero_truncates_tiny_terms():
    # products 2^-148 and -2^-160 with C = 0: C's zero takes e_zero = -133, so the quantum is 2^-158 and the
    # -2^-160 term is truncated to 0: D = 2^-148. Without e_zero (exact): 2^-148 - 2^-160 -> RZ -> 2^-149.
    a, b = pad16(2.0**-74, 2.0**-80), pad16(2.0**-74, -(2.0**-80))
    assert one_dot(a, b, 0.0, "wgmma.bf16") == 2.0**-148


def test_hopper_fp8_keeps_13_bits_in_sum_and_output():
    a = [1.0, 2.0**-8] + [0.0] * 30  # 2^-8 * 2^-7 = 2^-15 < 2^-13: dropped
    b = [1.0, 2.0**-7] + [0.0] * 30
    e4 = dict(a_format="e4m3", b_format="e4m3")  # FP8 kinds take e4m3 and e5m2: the format is named
    assert one_dot(a, b, 0.0, "wgmma.e4m3", **e4) == 1.0
    assert one_dot(a, b, 0.0, "tcgen05.f8f6f4", hw="blackwell-sm100", **e4) == 1.0 + 2.0**-15  # F = 25 keeps it
    # the accumulator C enters the same 13-bit sum: C = 1 + 2^-20 comes out as 1
    assert one_dot([0.0] * 32, [0.0] * 32, 1.0 + 2.0**-20, "wgmma.e4m3") == 1.0


def test_canonical_nan_inf_and_positive_zero():
    inf, nan = np.inf, np.nan
    d = one_dot(pad16(inf, 0.0), pad16(0.0, 1.0), 0.0, "wgmma.bf16")  # 0 * Inf
    assert bits(d) == 0x7FFFFFFF
    assert bits(one_dot(pad16(inf, inf), pad16(1.0, -1.0), 0.0, "wgmma.bf16")) == 0x7FFFFFFF  # Inf - Inf
    assert bits(one_dot(pad16(nan), pad16(1.0), 0.0, "wgmma.bf16")) == 0x7FFFFFFF
    assert one_dot(pad16(inf, 1.0), pad16(-1.0, 1.0), 5.0, "wgmma.bf16") == -inf
    h = one_dot(pad16(inf), pad16(0.0), 0.0, "wgmma.f16.f16acc")
    assert bits(h) == 0x7FFFE000  # fp16 0x7FFF widened to fp32
    z = one_dot(pad16(-1.0, 1.0), pad16(1.0, 1.0), -0.0, "wgmma.bf16")
    assert bits(z) == 0  # +0, never -0
    assert bits(one_dot(pad16(-0.0), pad16(1.0), -0.0, "wgmma.bf16")) == 0


def test_overflow_gives_inf_even_under_rz():
    big = 2.0**127
    assert one_dot(pad16(big), pad16(big), 0.0, "wgmma.bf16") == np.inf
    # but a huge product cancelled inside the fused sum stays finite (products are exact)
    assert one_dot(pad16(big, big, 1.0), pad16(big, -big, 1.0), 0.0, "wgmma.bf16") == 0.0


def test_cdna3_floor_alignment_of_c():
    # C = -2^-30 is floored to 24 bits below 2^0: -2^-24; 1 - 2^-24 is an fp32, so D = 1 - 2^-24
    # (IEEE: 1 - 2^-30 rounds to 1; truncation toward zero would also give 1)
    d = one_dot([1.0] + [0.0] * 7, [1.0] * 8, -(2.0**-30), "mfma.f16", hw="cdna3-mi300")
    assert bits(d) == 0x3F7FFFFF


def test_b200_legacy_fp8_adds_c_separately_with_rne():
    # products 1 + 2^-18 (kept by RZ fp32), C = 0.75 ulp: the fused RZ rule would give 1 + 2^-18, the separate
    # round-to-nearest addition rounds up to 1 + 2^-18 + 2^-23
    a = [1.0, 2.0**-9] + [0.0] * 30
    b = [1.0, 2.0**-9] + [0.0] * 30
    c = 3 * 2.0**-25
    d = one_dot(a, b, c, "mma.sync.e4m3", hw="blackwell-sm100", a_format="e4m3", b_format="e4m3")
    assert d == np.float32(np.float32(1 + 2.0**-18) + np.float32(c))
    assert d == 1 + 2.0**-18 + 2.0**-23


def test_chain_equals_manual_chain():
    rng = np.random.default_rng(3)
    a = rand_values(rng, "bf16", (5, 64))
    b = rand_values(rng, "bf16", (64, 6))
    c = rand_values(rng, "f32", (5, 6), p_zero=0.3).astype(np.float32)
    with np.errstate(all="ignore"):
        full = emulate_mma(a, b, c)
        acc = c
        for k0 in range(0, 64, 16):
            acc = emulate_mma(a[:, k0:k0 + 16], b[k0:k0 + 16], acc)
    assert np.array_equal(bits(full), bits(acc))


# ---- block-scaled internal consistency --------------------------------------------------------------------------
def test_mxf8f6f4_unit_scales_equal_unscaled_kind():
    rng = np.random.default_rng(11)
    a, b = rand_values(rng, "e4m3", (6, 64)), rand_values(rng, "e3m2", (64, 5))
    c = rand_values(rng, "f32", (6, 5), p_zero=0.3).astype(np.float32)
    ones_a, ones_b = np.ones((6, 2)), np.ones((2, 5))
    with np.errstate(all="ignore"):
        fmts = dict(a_format="e4m3", b_format="e3m2")
        s = emulate_mma(a, b, c, hw="blackwell-sm100", kind="tcgen05.mxf8f6f4", scale_a=ones_a, scale_b=ones_b, **fmts)
        u = emulate_mma(a, b, c, hw="blackwell-sm100", kind="tcgen05.f8f6f4", **fmts)
    assert np.array_equal(bits(s), bits(u))


def test_mxf8f6f4_power_of_two_scales_shift_result():
    rng = np.random.default_rng(12)
    a = rand_values(rng, "e4m3", (4, 32), p_zero=0.0)
    b = rand_values(rng, "e4m3", (32, 4), p_zero=0.0)
    a, b = np.nan_to_num(a, nan=1.0), np.nan_to_num(b, nan=1.0)
    c = np.zeros((4, 4), np.float32)
    base = emulate_mma(a, b, c, hw="blackwell-sm100", kind="tcgen05.mxf8f6f4", scale_a=np.ones((4, 1)),
                       scale_b=np.ones((1, 4)))
    up = emulate_mma(a, b, c, hw="blackwell-sm100", kind="tcgen05.mxf8f6f4", scale_a=np.full((4, 1), 8.0),
                     scale_b=np.full((1, 4), 0.25))
    assert np.array_equal(bits(up), bits(base * np.float32(2.0)))


def _exact_rz(x: np.ndarray) -> np.ndarray:
    from fp4lab.hwspec.mma_kernels import round_output

    return np.vectorize(lambda v: round_output(float(v), False, 23, -126, 127))(x).astype(np.float32)


@pytest.mark.parametrize("kind,sf,block", [("tcgen05.mxf4nvf4", "ue4m3", 16), ("tcgen05.mxf4", "ue8m0", 32)])
def test_gst_unit_scales_give_exact_sum_rz(kind, sf, block):
    """Scales 1: every group sum (multiple of 1/4, |.| <= 576) is exact at F = 35, so D = RZ_fp32(exact)."""
    rng = np.random.default_rng(5)
    a, b = rand_values(rng, "e2m1", (8, 128)), rand_values(rng, "e2m1", (128, 7))
    c = (rng.integers(-2**20, 2**20, size=(8, 7)) * 2.0**-10).astype(np.float32)
    d = emulate_mma(a, b, c, hw="blackwell-sm100", kind=kind, scale_a=np.ones((8, 128 // block)),
                    scale_b=np.ones((128 // block, 7)), scale_format=sf)
    # two instructions chained: RZ after each
    mid = _exact_rz(a[:, :64] @ b[:64] + c.astype(np.float64))
    want = _exact_rz(a[:, 64:] @ b[64:] + mid.astype(np.float64))
    assert np.array_equal(bits(d), bits(want))


def test_gst_block32_equals_block16_with_duplicated_scales():
    rng = np.random.default_rng(9)
    a, b = rand_values(rng, "e2m1", (5, 64)), rand_values(rng, "e2m1", (64, 6))
    c = rand_values(rng, "f32", (5, 6), p_zero=0.3).astype(np.float32)
    sa, sb = rand_scales(rng, "ue8m0", (5, 2)), rand_scales(rng, "ue8m0", (2, 6))
    with np.errstate(all="ignore"):
        d32 = emulate_mma(a, b, c, hw="blackwell-sm100", kind="tcgen05.mxf4", scale_a=sa, scale_b=sb)
        d16 = emulate_mma(a, b, c, hw="blackwell-sm100", kind="tcgen05.mxf4nvf4", scale_a=np.repeat(sa, 2, 1),
                          scale_b=np.repeat(sb, 2, 0), scale_format="ue8m0")
    assert np.array_equal(bits(d32), bits(d16))


def test_gst_cancelled_group_keeps_scale_exponent_and_nan_scale():
    a = np.zeros((1, 64))
    b = np.zeros((64, 1))
    a[0, :2], b[:2, 0] = [1.0, 1.0], [1.0, -1.0]  # group 0 cancels to 0 but is not all-zero
    sa, sb = np.ones((1, 4)), np.ones((4, 1))
    sa[0, 0] = 2.0**20
    c = np.array([[2.0**-20]], np.float32)  # 40 binades below the group's exponent: truncated away at F = 35
    d = emulate_mma(a, b, c, hw="blackwell-sm100", kind="tcgen05.mxf4nvf4", scale_a=sa, scale_b=sb,
                    scale_format="ue8m0")
    assert bits(d)[0, 0] == 0
    a2, b2 = np.zeros((1, 64)), np.zeros((64, 1))  # all-zero groups take e_zero: C survives
    assert emulate_mma(a2, b2, c, hw="blackwell-sm100", kind="tcgen05.mxf4nvf4", scale_a=sa, scale_b=sb,
                       scale_format="ue8m0")[0, 0] == np.float32(2.0**-20)
    sa[0, 3] = np.nan
    d = emulate_mma(a2, b2, c, hw="blackwell-sm100", kind="tcgen05.mxf4nvf4", scale_a=sa, scale_b=sb,
                    scale_format="ue8m0")
    assert bits(d)[0, 0] == 0x7FFFFFFF


def test_proposal_e1m2_runs_any_value_table():
    """A proposed grid as a plain values table on the proposal's datapath: unit scales give the exact sum."""
    e1m2 = decode_codes(np.arange(16), operand_format("e1m2"))
    rng = np.random.default_rng(1)
    codes_a = rng.integers(0, 16, size=(4, 64)).astype(np.uint8)
    codes_b = rng.integers(0, 16, size=(64, 3)).astype(np.uint8)
    d = emulate_mma(codes_a, codes_b, None, hw="proposal-ufp4", kind="bsmma.e1m2", a_format=e1m2, b_format=e1m2,
                    scale_a=np.ones((4, 4)), scale_b=np.ones((4, 3)), scale_format="ue4m3")
    assert np.array_equal(d, (e1m2[codes_a] @ e1m2[codes_b]).astype(np.float32))
    # a table that is not on a common fine grid is refused (group sums would not be exact)
    bad = e1m2.copy()
    bad[1] = 2.0**-30
    with pytest.raises(ValueError, match="grid steps"):
        emulate_mma(codes_a, codes_b, None, hw="proposal-ufp4", kind="bsmma.e1m2", a_format=bad, b_format=e1m2,
                    scale_a=np.ones((4, 4)), scale_b=np.ones((4, 3)))


# ---- GEMM driver ------------------------------------------------------------------------------------------------
class _QT:
    """Minimal QuantizedTensor stand-in: codes, scales (blocked along the last axis), tensor scale, fmt."""

    class _Fmt:
        def __init__(self, values):
            self.element = type("El", (), {"values": values})()

    def __init__(self, codes, scales, tensor_scale, values):
        self.codes, self.scales, self.tensor_scale, self.fmt = codes, scales, tensor_scale, self._Fmt(values)


def test_emulate_gemm_block_scaled_and_dequantized_paths():
    e2m1 = decode_codes(np.arange(16), operand_format("e2m1"))
    rng = np.random.default_rng(4)
    M, N, K = 6, 5, 128
    qa = _QT(rng.integers(0, 16, (M, K)).astype(np.uint8), decode_codes(rng.integers(40, 80, (M, K // 16)),
             operand_format("ue4m3")).astype(np.float32), np.float32(0.5), e2m1)
    qb = _QT(rng.integers(0, 16, (N, K)).astype(np.uint8), decode_codes(rng.integers(40, 80, (N, K // 16)),
             operand_format("ue4m3")).astype(np.float32), None, e2m1)
    d = emulate_gemm(qa, qb, hw="blackwell-sm100", kind="tcgen05.mxf4nvf4", block_k=128)
    direct = emulate_mma(qa.codes, qb.codes.T, None, hw="blackwell-sm100", kind="tcgen05.mxf4nvf4",
                         a_format=e2m1, b_format=e2m1, scale_a=qa.scales, scale_b=qb.scales.T)
    assert np.array_equal(bits(d), bits(direct * np.float32(0.5)))
    # dequantized values (e2m1 x ue4m3) are exact in bf16: the Hopper path runs them through wgmma.bf16
    h = emulate_gemm(qa, qb, hw="hopper-sm90", kind="wgmma.bf16", block_k=64)
    va = e2m1[qa.codes] * np.repeat(qa.scales, 16, axis=1)
    vb = e2m1[qb.codes] * np.repeat(qb.scales, 16, axis=1)
    assert np.array_equal(bits(h), bits(emulate_mma(va, vb.T, None) * np.float32(0.5)))


def test_emulate_gemm_promotion_interval():
    rng = np.random.default_rng(8)
    a, b = rand_values(rng, "e4m3", (4, 128)), rand_values(rng, "e4m3", (3, 128))
    with np.errstate(all="ignore"):
        d = emulate_gemm(a, b, kind="wgmma.e4m3", block_k=64, promotion_interval=64)
        p0 = emulate_mma(a[:, :64], b[:, :64].T, None, kind="wgmma.e4m3")
        p1 = emulate_mma(a[:, 64:], b[:, 64:].T, None, kind="wgmma.e4m3")
        want = (np.float32(0) + p0) + p1
    nan = np.isnan(want)
    assert np.array_equal(bits(d)[~nan], bits(want)[~nan]) and (bits(d)[nan] == 0x7FFFFFFF).all()


def test_errors_are_one_line_and_specific():
    a = np.ones((2, 16))
    b = np.ones((16, 2))
    with pytest.raises(ValueError, match="not a multiple"):
        emulate_mma(a[:, :8], b[:8], None, kind="wgmma.bf16")
    with pytest.raises(ValueError, match="not representable"):
        emulate_mma(a * (1 + 2.0**-10), b, None, kind="wgmma.bf16")
    with pytest.raises(ValueError, match="no kind"):
        emulate_mma(a, b, None, kind="wgmma.fp64")
    with pytest.raises(ValueError, match="needs scale_a"):
        emulate_mma(np.ones((2, 64)), np.ones((64, 2)), None, hw="blackwell-sm100", kind="tcgen05.mxf4")
    with pytest.raises(ValueError, match="no scale"):
        emulate_mma(np.ones((2, 64)), np.ones((64, 2)), None, hw="blackwell-sm100", kind="tcgen05.mxf4",
                    scale_a=np.ones((2, 4)), scale_b=np.ones((4, 2)))
    with pytest.raises(ValueError, match="not representable in"):
        emulate_mma(np.ones((2, 32)), np.ones((32, 2)), None, hw="blackwell-sm100", kind="tcgen05.mxf8f6f4",
                    scale_a=np.full((2, 1), 3.0), scale_b=np.ones((1, 2)))


def test_emulate_gemm_k_order_permutes_within_block_k():
    rng = np.random.default_rng(10)
    a, b = rand_values(rng, "f16", (4, 64)), rand_values(rng, "f16", (3, 64))
    perm = np.r_[0:2, 4:6, 8:10, 12:14, 16:18, 20:22, 24:26, 28:30, 2:4, 6:8, 10:12, 14:16, 18:20, 22:24, 26:28, 30:32]
    P = np.concatenate([perm, 32 + perm])
    with np.errstate(all="ignore"):
        d = emulate_gemm(a, b, kind="mma.sync.f16", block_k=32, k_order=perm)
        want = emulate_gemm(a[:, P], b[:, P], kind="mma.sync.f16", block_k=32)
        same = emulate_gemm(a, b, kind="mma.sync.f16", block_k=32, k_order=np.arange(32))
        plain = emulate_gemm(a, b, kind="mma.sync.f16", block_k=32)
    assert np.array_equal(bits(d), bits(want)) and np.array_equal(bits(same), bits(plain))
    with pytest.raises(ValueError, match="permutation"):
        emulate_gemm(a, b, kind="mma.sync.f16", block_k=32, k_order=np.arange(16))


@pytest.mark.parametrize("name", ["ufp4", "e2m1-b16-fp32", "nvfp4", "mxfp4"])
def test_emulate_gemm_per_block_reproduces_exact_gemm_reference(name):
    """fp4lab's exact GEMM kernel, per-block path (fp4lab.numerics.gemm_reference defines its bits): each
    block's exact dot product, then acc + (P_b * Sa_b) * Sb_b in fp32, then the tensor scales."""
    import fp4lab
    from fp4lab.numerics.gemm_reference import gemm_reference

    rng = np.random.default_rng(2)
    qa = fp4lab.quantize(rng.standard_normal((8, 256)).astype(np.float32), name)
    qb = fp4lab.quantize(rng.standard_normal((6, 256)).astype(np.float32), name)
    d = emulate_gemm(qa, qb, kind="wgmma.bf16", block_k=64, scale_mode="per_block")
    assert np.array_equal(bits(d), bits(gemm_reference(qa, qb)))


@pytest.mark.parametrize("grid,kind", [("e1m2", "bsmma.e1m2"), ("int4", "bsmma.int4"), ("e2m1", "bsmma.e2m1")])
def test_registry_grids_run_on_the_proposal(grid, kind):
    """Registry element grids (objects with .values) as operand formats; unit scales give the exact sum, and the
    same values through the table path and the named operand format agree bit for bit."""
    import fp4lab

    g = fp4lab.get_format(grid)
    table = g.element.values if hasattr(g, "element") else g.values
    rng = np.random.default_rng(6)
    ca = rng.integers(0, 16, size=(3, 64)).astype(np.uint8)
    cb = rng.integers(0, 16, size=(64, 5)).astype(np.uint8)
    sa, sb = np.ones((3, 4)), np.ones((4, 5))
    d = emulate_mma(ca, cb, None, hw="proposal-ufp4", kind=kind, a_format=g, b_format=g, scale_a=sa, scale_b=sb,
                    scale_format="ue4m3")
    exact = table[ca].astype(np.float64) @ table[cb].astype(np.float64)
    assert np.array_equal(d, exact.astype(np.float32))
    named = emulate_mma(table[ca], table[cb], None, hw="proposal-ufp4", kind=kind, a_format=grid, b_format=grid,
                        scale_a=sa * 4, scale_b=sb, scale_format="ue4m3")
    assert np.array_equal(bits(named), bits(d * np.float32(4)))


@pytest.mark.parametrize("sf,block,lo,hi", [("ue4m3", 16, 40, 70), ("ue8m0", 32, 124, 131)])
def test_gst_scaled_group_sums_exact_when_exponents_are_close(sf, block, lo, hi):
    """Block scales within a few binades of each other and C = 0: every scaled group sum lies within F = 35 bits
    of the largest scale exponent, so one mxf4nvf4 instruction gives RZ_fp32(sum of exactly scaled products)."""
    rng = np.random.default_rng(13)
    a, b = rand_values(rng, "e2m1", (7, 64)), rand_values(rng, "e2m1", (64, 6))
    of = operand_format(sf)
    sa = decode_codes(rng.integers(lo, hi, size=(7, 64 // block)), of)
    sb = decode_codes(rng.integers(lo, hi, size=(64 // block, 6)), of)
    d = emulate_mma(a, b, None, hw="blackwell-sm100", kind="tcgen05.mxf4nvf4", scale_a=sa, scale_b=sb,
                    scale_format=sf)
    exact = (a * np.repeat(sa, block, axis=1)) @ (b * np.repeat(sb, block, axis=0))
    assert np.array_equal(bits(d), bits(_exact_rz(exact)))
    ref = emulate_mma(a, b, None, hw="blackwell-sm100", kind="tcgen05.mxf4nvf4", scale_a=sa, scale_b=sb,
                      scale_format=sf, impl="reference")
    assert np.array_equal(bits(d), bits(ref))


def test_hopper_fp8_chain_loses_precision_and_promotion_recovers_it():
    """DeepSeek-V3 3.3.2 in miniature: a K = 4096 FP8 GEMM on the 13-bit wgmma chain is much less accurate than
    with promotion every 128 K-elements (fp32 FADD), and the Blackwell F = 25 rule is better still."""
    rng = np.random.default_rng(0)
    e4m3 = decode_codes(np.arange(256), operand_format("e4m3"))
    fin = e4m3[np.isfinite(e4m3) & (np.abs(e4m3) <= 2) & (np.abs(e4m3) >= 0.25)]
    a, b = rng.choice(fin, size=(16, 4096)), np.abs(rng.choice(fin, size=(16, 4096)))
    exact = a @ b.T
    err = {}
    for name, kw in {"chain": {}, "promote128": {"promotion_interval": 128}}.items():
        d = emulate_gemm(a, b, kind="wgmma.e4m3", block_k=128, **kw)
        err[name] = np.max(np.abs(d - exact) / np.abs(exact))
    d = emulate_gemm(a, b, hw="blackwell-sm100", kind="tcgen05.f8f6f4", block_k=128)
    err["sm100"] = np.max(np.abs(d - exact) / np.abs(exact))
    assert err["chain"] > 4 * err["promote128"] and err["promote128"] > err["sm100"]


# ---- operand formats are never guessed -------------------------------------------------------------------------
def test_bf16_data_that_also_fits_f16_needs_a_name_on_tcgen05_f16():
    """2**-15 is a bf16 normal and an f16 subnormal: read as f16 it aligns at 2**-14, so the product 2**-15 * 2**15
    takes exponent 1 instead of 0 and the four 2**-25 terms fall below the quantum (1.0 instead of 1 + 2**-23).
    An unnamed call is refused; the name (or a typed bf16 array) decides."""
    import ml_dtypes

    a = np.zeros((1, 16))
    b = np.zeros((16, 1))
    a[0, :5], b[:5, 0] = [2.0**-15] + [2.0**-10] * 4, [2.0**15] + [2.0**-15] * 4
    kw = dict(hw="blackwell-sm100", kind="tcgen05.f16")
    with pytest.raises(ValueError, match="name the format"):
        emulate_mma(a, b, None, **kw)
    as_bf16 = emulate_mma(a, b, None, a_format="bf16", b_format="bf16", **kw)
    as_f16 = emulate_mma(a, b, None, a_format="f16", b_format="f16", **kw)
    assert as_bf16[0, 0] == 1 + 2.0**-23 and as_f16[0, 0] == 1.0
    typed = emulate_mma(a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), None, **kw)
    assert bits(typed)[0, 0] == bits(as_bf16)[0, 0]
    ones = np.ones((1, 16))  # values that decode alike in both formats need no name
    assert emulate_mma(ones, ones.T, None, **kw)[0, 0] == 16.0


def test_e2m1_data_on_f8f6f4_needs_a_name_and_codes_need_one_always():
    a = np.zeros((1, 32))
    b = np.zeros((32, 1))
    a[0, :2], b[:2, 0] = [6.0, 0.5], [6.0, 0.5]  # 0.5: e2m1 subnormal (exponent 0), e4m3 normal (exponent -1)
    kw = dict(hw="blackwell-sm100", kind="tcgen05.f8f6f4")
    with pytest.raises(ValueError, match="name the format"):
        emulate_mma(a, b, None, **kw)
    assert emulate_mma(a, b, None, a_format="e2m1", b_format="e2m1", **kw)[0, 0] == 36.25
    with pytest.raises(ValueError, match="integer codes"):
        emulate_mma(np.zeros((1, 32), np.uint8), np.zeros((32, 1), np.uint8), None, **kw)


def test_combinations_the_instruction_set_lacks_are_refused():
    a, b = np.ones((1, 16)), np.ones((16, 1))
    with pytest.raises(ValueError, match="same format"):  # tcgen05 kind::f16 is f16 x f16 or bf16 x bf16
        emulate_mma(a, b, None, hw="blackwell-sm100", kind="tcgen05.f16", a_format="f16", b_format="bf16")
    with pytest.raises(ValueError, match="not 'bf16'"):  # no bf16 MMA accumulates in f16
        emulate_mma(a, b, None, hw="blackwell-sm100", kind="tcgen05.f16.f16acc", a_format="bf16", b_format="bf16")


def test_typed_torch_fp8_operands_decode_as_their_codes():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    codes_a = rng.integers(0, 0x7F, size=(4, 32)).astype(np.uint8)
    codes_b = rng.integers(0, 0x7F, size=(32, 3)).astype(np.uint8)
    ta = torch.from_numpy(codes_a).view(torch.float8_e4m3fn)
    tb = torch.from_numpy(codes_b).view(torch.float8_e5m2)
    with np.errstate(all="ignore"):
        d = emulate_mma(ta, tb, None, hw="blackwell-sm100", kind="tcgen05.f8f6f4")
        want = emulate_mma(codes_a, codes_b, None, hw="blackwell-sm100", kind="tcgen05.f8f6f4", a_format="e4m3",
                           b_format="e5m2")
    assert np.array_equal(bits(d), bits(want))


def test_ue4m3_scale_bit7_is_padding():
    """PTX ISA 5.2.3: ue4m3 is 7 bits; the byte's top bit is ignored (0xB8 reads as 1.0, 0xFF as NaN)."""
    assert decode_codes(np.array([0x38, 0xB8, 0x7F, 0xFF]), operand_format("ue4m3")).tolist()[:2] == [1.0, 1.0]
    assert np.isnan(decode_codes(np.array([0xFF]), operand_format("ue4m3"))).all()
    with pytest.raises(ValueError):
        decode_codes(np.array([0x100]), operand_format("ue4m3"))


def test_scales_the_hardware_lacks_say_what_it_takes():
    a, b = np.ones((2, 64)), np.ones((64, 2))
    ue5m3 = 2.0**-20  # a UE5M3 value that no ue8m0/ue4m3 code holds (with a fraction)
    with pytest.raises(ValueError, match=r"takes block scales ue8m0/32 .*no hardware MMA applies them"):
        emulate_mma(a, b, None, hw="blackwell-sm100", kind="tcgen05.mxf4", scale_a=np.full((2, 2), 1.5 * ue5m3),
                    scale_b=np.ones((2, 2)))
