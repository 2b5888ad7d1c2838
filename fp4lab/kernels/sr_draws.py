"""Triton device functions that draw stochastic-rounding random bits: Philox (``tl.randint4x``) words split
into draws of 24, 16, 8 or 4 bits per element, as 24-bit comparands or as the fp32 values that the bit-arithmetic
encoder takes. The contract is ``fp4lab.numerics.philox.sr_random_bits_reference``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _sr_comparand(r, SRW: tl.constexpr):
    """int32 24-bit comparand of a SRW-bit draw r: ``r << (24 - SRW) | (2^(24 - SRW) - 1)``."""
    return (r << (24 - SRW)) | ((1 << (24 - SRW)) - 1)


@triton.jit
def _sr_draw(r, SRW: tl.constexpr, AS_V: tl.constexpr):
    """A SRW-bit draw r (int32) as the encoders take it: the 24-bit comparand c = ``r << (24 - SRW) | (2^(24 -
    SRW) - 1)``, or with AS_V the fp32 v = (2^24 - 1 - c) / 2^24 = (2^SRW - 1 - r) / 2^SRW (exact: at most 24
    bits), for ``encode_fbits_sr`` (``numerics.fbits.sr_v``)."""
    if AS_V:
        return (r ^ ((1 << SRW) - 1)).to(tl.float32) * (2.0 ** -SRW)
    else:
        return _sr_comparand(r, SRW)


@triton.jit
def _interleave4(a, b, c, d):
    """[..., 4 * n] from four [..., n]: a0 b0 c0 d0 a1 b1 ... along a new minor axis, flattened by the caller."""
    return tl.join(tl.join(a, c), tl.join(b, d))


@triton.jit
def _narrow_fields(w0, w1, w2, w3, R: tl.constexpr, C2: tl.constexpr, SRW: tl.constexpr, AS_V: tl.constexpr):
    """Even/odd-half draws [R, C2] (``_sr_draw``) of the elements served by calls w0..w3 [R, C2 // (2 * PER)] of one
    row, PER = 32 // SRW: call element o takes field o % PER of word o // PER, so the even elements of a call
    are (word j, even fields) in (j, field) order and the odd ones the odd fields."""
    M: tl.constexpr = (1 << SRW) - 1
    if SRW == 16:  # per call: even elements = low halves of w0..w3, odd elements = high halves
        re = _interleave4(w0 & M, w1 & M, w2 & M, w3 & M)
        ro = _interleave4(w0 >> 16, w1 >> 16, w2 >> 16, w3 >> 16)
    elif SRW == 8:  # even: bytes 0 and 2 of each word; odd: bytes 1 and 3
        re = tl.join(_interleave4(w0 & M, w1 & M, w2 & M, w3 & M),
                     _interleave4((w0 >> 16) & M, (w1 >> 16) & M, (w2 >> 16) & M, (w3 >> 16) & M))
        ro = tl.join(_interleave4((w0 >> 8) & M, (w1 >> 8) & M, (w2 >> 8) & M, (w3 >> 8) & M),
                     _interleave4(w0 >> 24, w1 >> 24, w2 >> 24, w3 >> 24))
    else:  # 4 bits: even: nibbles 0, 2, 4, 6; odd: 1, 3, 5, 7
        re = tl.join(tl.join(_interleave4(w0 & M, w1 & M, w2 & M, w3 & M),
                             _interleave4((w0 >> 16) & M, (w1 >> 16) & M, (w2 >> 16) & M, (w3 >> 16) & M)),
                     tl.join(_interleave4((w0 >> 8) & M, (w1 >> 8) & M, (w2 >> 8) & M, (w3 >> 8) & M),
                             _interleave4((w0 >> 24) & M, (w1 >> 24) & M, (w2 >> 24) & M, (w3 >> 24) & M)))
        ro = tl.join(tl.join(_interleave4((w0 >> 4) & M, (w1 >> 4) & M, (w2 >> 4) & M, (w3 >> 4) & M),
                             _interleave4((w0 >> 20) & M, (w1 >> 20) & M, (w2 >> 20) & M, (w3 >> 20) & M)),
                     tl.join(_interleave4((w0 >> 12) & M, (w1 >> 12) & M, (w2 >> 12) & M, (w3 >> 12) & M),
                             _interleave4(w0 >> 28, w1 >> 28, w2 >> 28, w3 >> 28)))
    re = tl.reshape(re, [R, C2]).to(tl.int32)
    ro = tl.reshape(ro, [R, C2]).to(tl.int32)
    return _sr_draw(re, SRW, AS_V), _sr_draw(ro, SRW, AS_V)


@triton.jit
def _draw_at(seed, addr, SRW: tl.constexpr, AS_V: tl.constexpr):
    """Draws (``_sr_draw``) of the elements at flat offsets ``addr`` (one Philox call per element)."""
    if SRW == 24:
        a0, a1, a2, a3 = tl.randint4x(seed, addr // 4)
        j = addr % 4
        return _sr_draw((tl.where(j == 0, a0, tl.where(j == 1, a1, tl.where(j == 2, a2, a3))) >> 8).to(tl.int32), 24,
                        AS_V)
    else:
        PER: tl.constexpr = 32 // SRW
        a0, a1, a2, a3 = tl.randint4x(seed, addr // (4 * PER))
        j = (addr // PER) % 4
        w = tl.where(j == 0, a0, tl.where(j == 1, a1, tl.where(j == 2, a2, a3)))
        r = (w >> ((addr % PER) * SRW).to(tl.uint32)) & ((1 << SRW) - 1)
        return _sr_draw(r.to(tl.int32), SRW, AS_V)


@triton.jit
def philox_pairs(seed, addr_e, addr_o, rows, k0, K, R: tl.constexpr, C2: tl.constexpr, FAST: tl.constexpr,
                 SRW: tl.constexpr = 24, FBITS: tl.constexpr = False):
    """SR draws for the even and odd halves at random-bit width SRW (the contract of
    ``fp4lab.numerics.philox.sr_random_bits_reference``; SRW = 24: word (i % 4) of randint4x(seed, i // 4) >> 8,
    i = address): 24-bit comparands (int32), or with FBITS (the element encoder is the bit-arithmetic one) the
    fp32 v that ``encode_fbits_sr`` takes (``_sr_draw``). FAST (rows contiguous, K and k0 multiples of the
    elements per call): one Philox call per 4 (SRW = 24) or 4 * 32 / SRW consecutive elements."""
    if FAST:
        if SRW == 24:
            g = rows[:, None] * (K // 4) + (k0 // 4 + tl.arange(0, C2 // 2))[None, :]
            w0, w1, w2, w3 = tl.randint4x(seed, g)
            re = tl.reshape(tl.join(w0, w2), [R, C2])
            ro = tl.reshape(tl.join(w1, w3), [R, C2])
            return _sr_draw((re >> 8).to(tl.int32), 24, FBITS), _sr_draw((ro >> 8).to(tl.int32), 24, FBITS)
        else:
            E: tl.constexpr = 4 * (32 // SRW)
            g = rows[:, None] * (K // E) + (k0 // E + tl.arange(0, (2 * C2) // E))[None, :]
            w0, w1, w2, w3 = tl.randint4x(seed, g)
            return _narrow_fields(w0, w1, w2, w3, R, C2, SRW, FBITS)
    else:
        return _draw_at(seed, addr_e, SRW, FBITS), _draw_at(seed, addr_o, SRW, FBITS)
