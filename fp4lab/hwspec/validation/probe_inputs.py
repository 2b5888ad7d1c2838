"""Configurations and inputs of the tl.dot probe (``gpu_probe``), without torch or triton: the input bit
patterns regenerate from a seed, so stored GPU outputs can be re-checked on any machine.

Inputs mix four classes by row block of A and column block of B: raw random bit patterns (NaN, Inf, subnormals
included), random finite patterns, a narrow exponent window (cancellation, truncation) and tiny values
(subnormals, products below e_zero), with 10% zeros in the last two. C mixes four classes by column block:
zero, a narrow window near the products, raw fp32 bit patterns, and tiny/huge values.
"""

from __future__ import annotations

import numpy as np

from fp4lab.hwspec.mma import emulate_gemm, resolve_kind
from fp4lab.hwspec.operands import decode_codes, operand_format

# (label, hopper kind, input bits, exp bits, man bits, torch dtype, BLOCK_K, acc dtype, imprecise-acc interval,
#  K multiplier, tile M = N (64: 4 warps, wgmma; 16: 1 warp, which makes Triton fall back to mma.sync),
#  alternative (hw, kind) models whose match counts are also reported)
_FP8_ALTS = (("hopper-sm90", "wgmma.e4m3"), ("blackwell-sm100", "tcgen05.f8f6f4"))
CONFIGS = [
    ("bf16", "wgmma.bf16", 16, 8, 7, "bfloat16", 64, "f32", None, 1, 64, ()),
    ("bf16_bk32", "wgmma.bf16", 16, 8, 7, "bfloat16", 32, "f32", None, 1, 64, ()),
    ("fp16", "wgmma.f16", 16, 5, 10, "float16", 64, "f32", None, 1, 64, ()),
    ("fp16_f16acc", "wgmma.f16.f16acc", 16, 5, 10, "float16", 64, "f16", None, 1, 64, ()),
    ("tf32", "wgmma.tf32", 32, 8, 10, "float32", 32, "f32", None, 1, 64, ()),
    ("e4m3", "wgmma.e4m3", 8, 4, 3, "float8_e4m3fn", 64, "f32", None, 1, 64, ()),
    ("e5m2", "wgmma.e5m2", 8, 5, 2, "float8_e5m2", 128, "f32", None, 1, 64, ()),
    ("e4m3_promote32", "wgmma.e4m3", 8, 4, 3, "float8_e4m3fn", 64, "f32", 32, 1, 64, ()),
    ("e4m3_k8x", "wgmma.e4m3", 8, 4, 3, "float8_e4m3fn", 128, "f32", None, 8, 64, ()),
    ("bf16_k8x", "wgmma.bf16", 16, 8, 7, "bfloat16", 64, "f32", None, 8, 64, ()),
    ("bf16_mmav2", "mma.sync.bf16", 16, 8, 7, "bfloat16", 32, "f32", None, 1, 16, ()),
    ("fp16_mmav2", "mma.sync.f16", 16, 5, 10, "float16", 32, "f32", None, 1, 16, ()),
    ("e4m3_mmav2", "mma.sync.f16", 8, 4, 3, "float8_e4m3fn", 32, "f32", None, 1, 16, _FP8_ALTS),
]
# Triton 3.6's MMAv2 fp8 path on sm_90 converts e4m3 to fp16 and feeds each 32-wide K tile to two m16n8k16
# instructions as K-element pairs: {0,1,4,5,...,28,29} first, then {2,3,6,7,...,30,31} (found from the H200
# outputs of run 2, docs/hardware_validation.md).
_PAIRS = np.arange(0, 32, 4)[:, None] + np.array([0, 1])
K_ORDERS = {"e4m3_mmav2": np.concatenate([_PAIRS, _PAIRS + 2]).ravel()}


def _classes(rng, shape, nbits, ebits, mbits, blocks_axis):
    """Random bit patterns of an ExMy (or fp32) format, one input class per quarter along ``blocks_axis``."""
    bits = rng.integers(0, 1 << nbits, size=shape, dtype=np.uint64)
    n = shape[blocks_axis]
    cls = (np.arange(n) * 4 // n).reshape((-1, 1) if blocks_axis == 0 else (1, -1))
    cls = np.broadcast_to(cls, shape)
    bias = (1 << (ebits - 1)) - 1
    sign = bits >> (nbits - 1)
    man = bits & ((1 << mbits) - 1)
    ef = (bits >> mbits) & ((1 << ebits) - 1)
    allones = (1 << ebits) - 1
    # class 1: finite patterns (e4m3: only the all-ones exponent with all-ones mantissa is NaN)
    if ebits == 4 and mbits == 3:
        fin_e = np.where((ef == allones) & (man == 7), allones, ef)
        fin_m = np.where((ef == allones) & (man == 7), rng.integers(0, 7, size=shape, dtype=np.uint64), man)
    else:
        fin_e = np.where(ef == allones, rng.integers(0, allones, size=shape, dtype=np.uint64), ef)
        fin_m = man
    narrow_e = (bias + rng.integers(-6, 7, size=shape)).clip(1, allones - 1).astype(np.uint64)
    tiny_e = rng.integers(0, 5, size=shape, dtype=np.uint64)
    e = np.select([cls == 0, cls == 1, cls == 2], [ef, fin_e, narrow_e], tiny_e)
    m = np.where(cls == 1, fin_m, man)
    out = (sign << (nbits - 1)) | (e << mbits) | m
    zero = (cls >= 2) & (rng.random(shape) < 0.1)
    out = np.where(zero, sign << (nbits - 1), out)
    return out


def _c_bits(rng, shape):
    """fp32 C bit patterns; class per quarter of columns: zero, narrow window, raw bits, tiny/huge."""
    raw = rng.integers(0, 1 << 32, size=shape, dtype=np.uint64)
    n = shape[1]
    cls = np.broadcast_to((np.arange(n) * 4 // n)[None, :], shape)
    sign, man = raw >> 31, raw & 0x7FFFFF
    narrow = (127 + rng.integers(-8, 13, size=shape)).astype(np.uint64)
    extreme = np.where(rng.random(shape) < 0.5, rng.integers(0, 9, size=shape), rng.integers(200, 255, size=shape))
    e = np.where(cls == 1, narrow, extreme.astype(np.uint64))
    built = (sign << 31) | (e << 23) | man
    return np.select([cls == 0, cls == 2], [np.zeros_like(raw), raw], built).astype(np.uint32)


def _values(bits, label, nbits, ebits, mbits):
    """Exact float values (float32 for 16/32-bit inputs, float64 for fp8) of the input bit patterns."""
    if nbits == 16 and ebits == 8:
        return (bits.astype(np.uint32) << 16).view(np.float32)
    if nbits == 16:
        return bits.astype(np.uint16).view(np.float16).astype(np.float32)
    if nbits == 32:
        return bits.astype(np.uint32).view(np.float32)
    return decode_codes(bits, operand_format("e4m3" if ebits == 4 else "e5m2"))


def make_inputs(cfg, n: int, K: int, seed: int):
    """Bit patterns (uint64 arrays) of A [n, K], B [K, n] and C [n, n] for one config, from ``seed``."""
    label, kind, nbits, ebits, mbits, dtype, BK, acc, imprecise, kmul, tile, alts = cfg
    rng = np.random.default_rng(seed)
    if nbits == 32:  # tf32: exact tf32 words (low 13 bits zero) so that no input conversion is involved
        ab = _classes(rng, (n, K), 19, ebits, mbits, 0) << np.uint64(13)
        bb = _classes(rng, (K, n), 19, ebits, mbits, 1) << np.uint64(13)
    else:
        ab = _classes(rng, (n, K), nbits, ebits, mbits, 0)
        bb = _classes(rng, (K, n), nbits, ebits, mbits, 1)
    cb = _c_bits(rng, (n, n))
    if acc == "f16":  # fp16 accumulator: C as fp16 bit patterns
        cb = _classes(rng, (n, n), 16, 5, 10, 1).astype(np.uint16)
    return ab, bb, cb


def emulate_config(cfg, ab, bb, cb, hw: str = "hopper-sm90", model: str | None = None) -> np.ndarray:
    """The model's D (uint32 bits; fp16 accumulators widened) for one config's input bits (default: its kind)."""
    label, kind, nbits, ebits, mbits, dtype, BK, acc, imprecise, kmul, tile, alts = cfg
    a_v, b_v = _values(ab, label, nbits, ebits, mbits), _values(bb, label, nbits, ebits, mbits)
    c = cb.view(np.float16) if acc == "f16" else cb.view(np.float32)
    with np.errstate(all="ignore"):
        fmt = None if nbits != 8 else ("e4m3" if ebits == 4 else "e5m2")  # FP8 kinds take both: name it
        if fmt not in resolve_kind(hw, model or kind).a_formats:  # e.g. fp8 data on the fp16 instruction
            fmt = None
        d = emulate_gemm(a_v, np.ascontiguousarray(b_v.T), hw=hw, kind=model or kind, block_k=BK,
                         promotion_interval=imprecise, c=c, k_order=K_ORDERS.get(label), a_format=fmt,
                         b_format=fmt)
    return d.view(np.uint32)
