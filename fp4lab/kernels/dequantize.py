"""Triton dequantize kernel: ``value[code] * S`` (``* ts``) in fp32, optional inverse RHT, fp32 or bf16 output.

Same [M, K] view as quantize.py. Scales are decoded from the stored scale codes in the kernel (pow2 from bits,
float formats by table). bf16 output rounds the fp32 result to nearest-even on its bit pattern (NaN -> 0x7FC0
with the sign kept), never through a ``.to(bf16)`` cast. Codes may be packed (two per byte along the last axis).
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.codes import CHOICE_NONE, DECODE_TABLE, KIND_BF16
from fp4lab.kernels.encoding import decode_elements, decode_scale
from fp4lab.kernels.hadamard import rht_pairs
from fp4lab.kernels.tile import bits_of, blocks_of, expand_blocks, pair_tile, scale_tile


@triton.jit
def bf16_bits_rtne(v):
    """int32 holding the bf16 bit pattern of fp32 v rounded to nearest-even (NaN -> quiet NaN, sign kept)."""
    b = bits_of(v)
    m = b & 0x7FFFFFFF
    s = (b >> 16) & 0x8000
    r = (m + 0x7FFF + ((m >> 16) & 1)) >> 16
    return tl.where(m > 0x7F800000, 0x7FC0, r) | s


@triton.jit
def _bf16_pair_rtne(ve, vo):
    """int32 word ``bf16(ve) | bf16(vo) << 16``, both rounded to nearest-even on their bit patterns; valid for
    finite and infinite inputs only (a NaN would carry into the sign)."""
    be = bits_of(ve)
    bo = bits_of(vo)
    re = be + 0x7FFF + ((be >> 16) & 1)
    ro = bo + 0x7FFF + ((bo >> 16) & 1)
    return ((re >> 16) & 0xFFFF) | (ro & -65536)


@triton.jit
def _dequantize_kernel(codes_ptr, sc_ptr, ts_ptr, out_ptr, out16_ptr, vals_ptr, svals_ptr, signs_ptr, rscale,
                       M, K, K2, INNER,
                       BM: tl.constexpr, BK: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr,
                       TWO_D: tl.constexpr, INNER1: tl.constexpr, PACKED: tl.constexpr, WORDS: tl.constexpr,
                       APPLY_TS: tl.constexpr, RHT_N: tl.constexpr, OUT_BF16: tl.constexpr, LEAN: tl.constexpr,
                       EXACT: tl.constexpr, INTERP: tl.constexpr, SCALE: tl.constexpr, DEC: tl.constexpr):
    """Tile held as even/odd column halves (as in quantize): packed bytes split into two codes elementwise,
    bf16 pairs written as one int32 word (WORDS). ``SCALE`` / ``DEC``: params.ScaleCx / DecodeCx; APPLY_TS: a
    two-level format with its tensor scale applied (as value * (S * ts) when ``SCALE.TS_FIRST``).

    LEAN (1-D blocks on the last axis, even K, bf16 output, no RHT; codes packed or read as int16 pairs): element
    values are decoded in registers (value table gather for table grids); on the GPU the bf16 words come from the
    hardware conversion; in the interpreter, when no block of the tile has a NaN/Inf scale (nor the
    tensor scale), the bf16 words are built without NaN handling: by truncation when every value x scale product
    is exact in bf16 (EXACT, host-checked), else by the integer RTNE formula. Same bits as the general path."""
    C2: tl.constexpr = BK // 2
    SCALED: tl.constexpr = SCALE.CHOICE != CHOICE_NONE
    TWO_LEVEL: tl.constexpr = APPLY_TS
    TS_FIRST: tl.constexpr = APPLY_TS and SCALE.TS_FIRST
    pid_k = tl.program_id(1)
    rows, kw, ce, addr_e, addr_o, rmask, me, mo, mw = pair_tile(M, K, K2, INNER, BM, C2, INNER1)
    if LEAN:
        p = tl.load(codes_ptr + rows[:, None] * K2 + kw[None, :], mask=mw, other=0).to(tl.int32)
        if PACKED:  # one byte per pair: even code in the low nibble
            code_e = p & 15
            code_o = (p >> 4) & 15
        else:  # unpacked codes read as int16 pairs: even code in the low byte
            code_e = p & 255
            code_o = (p >> 8) & 255
        if DEC.KIND == DECODE_TABLE:
            ve = tl.load(vals_ptr + code_e)
            vo = tl.load(vals_ptr + code_o)
        else:
            ve = decode_elements(code_e, vals_ptr, DEC)
            vo = decode_elements(code_o, vals_ptr, DEC)
        if SCALED:
            scols = pid_k * (BK // TC) + tl.arange(0, BK // TC)
            sc = tl.load(sc_ptr + rows[:, None] * (K // TC) + scols[None, :], mask=rmask & (scols < K // TC)[None, :],
                         other=0).to(tl.int32)
            if SCALE.KIND == KIND_BF16:
                sc = sc & 0xFFFF
            S = decode_scale(sc, svals_ptr, SCALE)
            special = tl.max(tl.max(((bits_of(S) & 0x7F800000) == 0x7F800000).to(tl.int32), axis=1), axis=0)
            if TWO_LEVEL:
                ts = tl.load(ts_ptr)
                special = special | ((bits_of(ts) & 0x7F800000) == 0x7F800000).to(tl.int32)
                if TS_FIRST:  # value * (S * ts)
                    S = S * ts
                    special = special | tl.max(tl.max(((bits_of(S) & 0x7F800000) == 0x7F800000).to(tl.int32),
                                                      axis=1), axis=0)
            ve = tl.reshape(blocks_of(ve, BM, C2, 1, TC // 2, False) * S[:, :, None], [BM, C2])
            vo = tl.reshape(blocks_of(vo, BM, C2, 1, TC // 2, False) * S[:, :, None], [BM, C2])
            if TWO_LEVEL and not TS_FIRST:
                ve = ve * ts
                vo = vo * ts
        else:
            special = 0
        if not INTERP:
            # hardware cvt.rn.bf16x2.f32: IEEE round-to-nearest-even, the same bits as the integer formula
            # below (the interpreter's bf16 cast truncates, so it takes the formula)
            word = tl.reshape(tl.join(ve, vo).to(tl.bfloat16), [BM, BK]).to(tl.int16, bitcast=True)
        elif EXACT:
            word = ((bits_of(ve) >> 16) & 0xFFFF) | (bits_of(vo) & -65536)  # a NaN stays a NaN
        elif special == 0:
            word = _bf16_pair_rtne(ve, vo)
        else:
            word = bf16_bits_rtne(ve) | (bf16_bits_rtne(vo) << 16)
        if INTERP:
            tl.store(out_ptr + rows[:, None] * K2 + kw[None, :], word, mask=mw)
        else:
            cols = pid_k * BK + tl.arange(0, BK)
            tl.store(out16_ptr + rows[:, None] * K + cols[None, :], word, mask=rmask & (cols < K)[None, :])
        return
    if PACKED:
        p = tl.load(codes_ptr + rows[:, None] * K2 + kw[None, :], mask=mw, other=0).to(tl.int32)
        code_e = p & 15
        code_o = p >> 4
    else:
        code_e = tl.load(codes_ptr + addr_e, mask=me, other=0).to(tl.int32)
        code_o = tl.load(codes_ptr + addr_o, mask=mo, other=0).to(tl.int32)
    ve = decode_elements(code_e, vals_ptr, DEC)
    vo = decode_elements(code_o, vals_ptr, DEC)
    if SCALED:
        saddr, smask = scale_tile(rows, rmask, M, K, INNER, BM, BK, TR, TC, TWO_D, INNER1)
        sc = tl.load(sc_ptr + saddr, mask=smask, other=0).to(tl.int32)
        if SCALE.KIND == KIND_BF16:
            sc = sc & 0xFFFF
        S = decode_scale(sc, svals_ptr, SCALE)
        if TWO_LEVEL:
            ts = tl.load(ts_ptr)
            if TS_FIRST:  # value * (S * ts)
                S = S * ts
        S = expand_blocks(S, TWO_D)
        ve = tl.reshape(blocks_of(ve, BM, C2, TR, TC // 2, TWO_D) * S, [BM, C2])
        vo = tl.reshape(blocks_of(vo, BM, C2, TR, TC // 2, TWO_D) * S, [BM, C2])
        if TWO_LEVEL and not TS_FIRST:
            ve = ve * ts
            vo = vo * ts
    if RHT_N > 0:
        ve, vo = rht_pairs(ve, vo, signs_ptr, ce, rscale, BM, C2, RHT_N, True)
    if OUT_BF16:
        if WORDS:
            tl.store(out_ptr + rows[:, None] * K2 + kw[None, :],
                     bf16_bits_rtne(ve) | (bf16_bits_rtne(vo) << 16), mask=mw)
        else:
            tl.store(out_ptr + addr_e, bf16_bits_rtne(ve), mask=me)
            tl.store(out_ptr + addr_o, bf16_bits_rtne(vo), mask=mo)
    else:
        tl.store(out_ptr + addr_e, ve, mask=me)
        tl.store(out_ptr + addr_o, vo, mask=mo)
