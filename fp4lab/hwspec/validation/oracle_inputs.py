"""Inputs of the differential test against MMA-Sim (``mmasim_oracle``), as integer bit patterns that regenerate
from a seed:

* operands: random codes of the format, mixing raw codes (NaN, Inf), a narrow exponent window (cancellation,
  truncation), every finite exponent, the smallest exponents (subnormals) and signed zeros;
* C: signed zeros, raw bit patterns, a window near the products, and values that cancel the product sum
  (C = -RN(sum of the products), a few ulps off), so the fused sum's low bits reach the output;
* block scales over their whole code range (ue8m0 0..255 with 0xFF NaN; ue4m3 0..255, bit 7 included) mixed
  with a window around 1 that keeps results finite;
* precision probes (``probe_dots``): dot products built from powers of two that pin F, e_zero and the CDNA3 C-join
  width F2: a rounding tie of C plus one term 2..34 bits below C's ulp, and all-tiny sums around e_zero.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from fp4lab.hwspec.operands import decode_codes, operand_format
from fp4lab.hwspec.schema import MMAKind

_C_BITS = {"f32": (32, 8, 23), "f16": (16, 5, 10)}


def rand_codes(rng: np.random.Generator, fmt: str, shape: tuple[int, ...]) -> np.ndarray:
    """int64 codes (tf32: fp32 words with random low bits, which the hardware drops) of an operand format."""
    if fmt in ("tf32", "f32"):
        return (rand_codes(rng, "bf16", shape) << 16) | rng.integers(0, 1 << 16, size=shape)
    of = operand_format(fmt)
    E, Mb = of.exp_bits, of.man_bits
    nb = E + Mb + (1 if of.signed else 0)
    raw = rng.integers(0, 1 << nb, size=shape, dtype=np.int64)
    sign = (raw >> (nb - 1)) if of.signed else np.zeros(shape, np.int64)
    man = raw & ((1 << Mb) - 1)
    top = (1 << E) - 1
    narrow = np.clip(of.bias + rng.integers(-4, 5, size=shape), 1, max(top - 1, 1))
    wide = rng.integers(0, top + 1, size=shape)
    tiny = rng.integers(0, min(2, top + 1), size=shape)
    cls = rng.choice(5, size=shape, p=[0.04, 0.5, 0.2, 0.16, 0.1])
    e = np.select([cls == 1, cls == 2, cls == 3], [narrow, wide, tiny], 0)
    built = (sign << (E + Mb)) | (e << Mb) | man if of.signed else (e << Mb) | man
    zero = (sign << (E + Mb)) if (of.signed and of.specials != "fnuz") else np.zeros(shape, np.int64)
    codes = np.select([cls == 0, cls == 4], [raw, zero], built)
    v = decode_codes(codes, of)
    bad = ~np.isfinite(v) & (cls != 0)  # specials only from the raw class
    return np.where(bad, (np.clip(of.bias, 1, top) << Mb) | man, codes)


def values(codes: np.ndarray, fmt: str) -> np.ndarray:
    """float64 values of codes (tf32: the truncated word)."""
    if fmt in ("tf32", "f32"):
        w = codes.astype(np.uint32) & (np.uint32(0xFFFFE000) if fmt == "tf32" else np.uint32(0xFFFFFFFF))
        with np.errstate(invalid="ignore"):  # signalling NaN patterns
            return w.view(np.float32).astype(np.float64)
    return decode_codes(codes, operand_format(fmt))


def rand_scale_codes(rng: np.random.Generator, fmt: str, shape: tuple[int, ...]) -> np.ndarray:
    """Scale codes: 40% over the whole byte range, 60% within a few binades of 1."""
    whole = rng.integers(0, 256, size=shape)
    if fmt == "ue8m0":
        near = 127 + rng.integers(-6, 7, size=shape)
    else:
        near = (np.clip(7 + rng.integers(-3, 4, size=shape), 1, 14) << 3) | rng.integers(0, 8, size=shape)
    return np.where(rng.random(shape) < 0.4, whole, near).astype(np.int64)


def scale_values(codes: np.ndarray, fmt: str) -> np.ndarray:
    return decode_codes(codes, operand_format(fmt))


def _c_from_values(rng, x: np.ndarray, c_format: str) -> np.ndarray:
    """Bit patterns of -x rounded to the accumulator format, then 0..3 ulps off."""
    nbits = _C_BITS[c_format][0]
    dt, ut = (np.float32, np.uint32) if nbits == 32 else (np.float16, np.uint16)
    with np.errstate(all="ignore"):
        v = np.where(np.isfinite(x), -x, 0.0).astype(dt)
    bits = v.view(ut).astype(np.int64)
    jitter = rng.integers(-3, 4, size=x.shape)
    ok = np.isfinite(v) & (v != 0)
    return np.where(ok, bits + jitter, bits) & ((1 << nbits) - 1)


def make_c(rng, prods_sum: np.ndarray, c_format: str) -> np.ndarray:
    """Accumulator bit patterns [M, N]: 15% signed zeros, 5% raw, 45% cancelling, 35% near the products."""
    nbits, E, Mb = _C_BITS[c_format]
    shape = prods_sum.shape
    raw = rng.integers(0, 1 << nbits, size=shape)
    cancel = _c_from_values(rng, prods_sum, c_format)
    near = _c_from_values(rng, prods_sum * np.ldexp(1.0, rng.integers(-12, 13, size=shape))
                          * (1 + rng.random(shape)), c_format)
    zero = rng.integers(0, 2, size=shape) << (nbits - 1)
    cls = rng.choice(4, size=shape, p=[0.15, 0.05, 0.45, 0.35])
    return np.select([cls == 0, cls == 1, cls == 2], [zero, raw, cancel], near).astype(np.int64)


def gemm_inputs(rng, kind: MMAKind, a_fmt: str, b_fmt: str, scale: str | None, block: int | None, M: int, N: int,
                K: int) -> dict[str, np.ndarray | None]:
    """Codes a [M, K], b [K, N], scale codes sa [M, K/block], sb [K/block, N] and C bits [M, N]."""
    a, b = rand_codes(rng, a_fmt, (M, K)), rand_codes(rng, b_fmt, (K, N))
    va, vb = values(a, a_fmt), values(b, b_fmt)
    sa = sb = None
    if scale is not None:
        sa, sb = rand_scale_codes(rng, scale, (M, K // block)), rand_scale_codes(rng, scale, (K // block, N))
        va = va * np.repeat(scale_values(sa, scale), block, axis=1)
        vb = vb * np.repeat(scale_values(sb, scale), block, axis=0)
    with np.errstate(all="ignore"):
        s = np.nan_to_num(va, nan=0.0, posinf=0.0, neginf=0.0) @ np.nan_to_num(vb, nan=0.0, posinf=0.0, neginf=0.0)
    return {"a": a, "b": b, "sa": sa, "sb": sb, "c": make_c(rng, s, kind.c_format)}


# ---- precision probes -------------------------------------------------------------------------------------------
def _pow2_exponents(fmt: str) -> np.ndarray:
    """Exponents t with 2**t exactly representable (subnormals included)."""
    of = operand_format("tf32" if fmt == "tf32" else fmt)
    if of.integer:
        return np.arange(0, of.man_bits)
    lo = of.emin - of.man_bits if of.subnormals else of.emin
    hi = int(np.floor(np.log2(of.max_finite)))
    return np.arange(lo, hi + 1)


@lru_cache(maxsize=None)
def _code_table(fmt: str) -> np.ndarray:
    of = operand_format(fmt)
    return decode_codes(np.arange(1 << (of.exp_bits + of.man_bits + (1 if of.signed else 0))), of)


def _pow2_code(fmt: str, t: int, neg: bool) -> int:
    """Code (tf32: fp32 word) of +-2**t."""
    if fmt in ("tf32", "f32"):
        return int(np.array([-(2.0**t) if neg else 2.0**t], np.float32).view(np.uint32)[0])
    return int(np.flatnonzero(_code_table(fmt) == (-(2.0**t) if neg else 2.0**t))[0])


def probe_dots(rng, kind: MMAKind, a_fmt: str, b_fmt: str, P: int, scale: str | None = None,
               block: int | None = None) -> dict[str, np.ndarray | None] | None:
    """P dot products (one instruction's K) of terms +-2**t (products of powers of two, times power-of-two scales on
    block-scaled kinds) that pin F, F2 and e_zero; None if no probe is reachable. Half are ties: C (random
    significand) plus half its output ulp plus one term F-1..F2+2 bits (or a random 2..max+3 bits) below C; half
    are sums with C = +-0 around e_zero: a term 2**t1 near e_zero (RNE outputs: half the output's smallest ulp)
    and one of either sign near the truncation quantum 2**(max(e_zero, t1) - F). All terms in one fused step."""
    acc = kind.accumulation
    F = int(acc.frac_bits)
    F2 = int(acc.join_frac_bits) if acc.join_frac_bits is not None else F
    ez = int(acc.e_zero) if acc.e_zero is not None else -126
    mb, rne = int(kind.output.mantissa_bits), kind.output.rounding == "rne"
    gst = acc.algorithm == "gst_fdpa"
    K, L = int(kind.k), min(int(kind.k), int(acc.fused_len))
    nbits, cE, cM = _C_BITS[kind.c_format]
    o_emin = 2 - (1 << (_C_BITS[kind.output.format][1] - 1))
    c_lo, c_hi = 2 - (1 << (cE - 1)), (1 << (cE - 1)) - 1
    widths = sorted({w for w in (F - 1, F, F + 1, F2 - 1, F2, F2 + 1, F2 + 2) if w > mb + 1})
    place = _Placer(a_fmt, b_fmt, scale, block, K, L, gst)
    a, b, c = np.zeros((P, K), np.int64), np.zeros((P, K), np.int64), np.zeros(P, np.int64)
    sa = sb = None
    if scale is not None:
        one = _pow2_code(scale, 0, False)
        sa, sb = np.full((P, K // block), one, np.int64), np.full((P, K // block), one, np.int64)
    made = 0
    for i in range(P * 4):
        if made == P:
            break
        sgn = bool(rng.integers(0, 2))
        if i % 2 == 0:  # tie probe
            lo_e, hi_e = max(c_lo, place.tmin + mb + F2 + 6), min(c_hi, place.tmax + mb + 1)
            if lo_e > hi_e:
                continue
            ec = int(rng.integers(lo_e, hi_e + 1))
            sig = ((1 << cM) | int(rng.integers(0, 1 << cM))) & ~int(rng.integers(0, 2))
            cbits = _c_bits(np.ldexp(float(sig), ec - cM) * (-1 if sgn else 1), nbits)
            w = int(rng.choice(widths)) if rng.random() < 0.7 else int(rng.integers(mb + 2, max(F, F2) + 4))
            terms = [(ec - mb - 1, sgn), (ec - w, bool(rng.integers(0, 2)) if rng.random() < 0.3 else sgn)]
        else:  # around e_zero, C = +-0
            cbits = int(rng.integers(0, 2)) << (nbits - 1)
            t1 = (o_emin - mb - 1) if rne and rng.random() < 0.5 else ez + int(rng.integers(-8, 3))
            t2 = max(ez, t1) - F + int(rng.integers(-3, 4))
            terms = [(t1, sgn), (t2, sgn if (rne or rng.random() < 0.3) else not sgn)]
        row = place.row(rng, terms)
        if row is None:
            continue
        for k, (ca, cb) in row["elems"].items():
            a[made, k], b[made, k] = ca, cb
        for j, (ua, ub) in row["scales"].items():
            sa[made, j], sb[made, j] = ua, ub
        c[made] = cbits
        made += 1
    if made == 0:
        return None
    return {"a": a[:made], "b": b[:made], "c": c[:made], "sa": None if sa is None else sa[:made],
            "sb": None if sb is None else sb[:made]}


def _c_bits(v: float, nbits: int) -> int:
    dt, ut = (np.float32, np.uint32) if nbits == 32 else (np.float16, np.uint16)
    return int(np.array([v], dt).view(ut)[0])


class _Placer:
    """Puts terms +-2**t into one fused step of a dot product: as a product of two powers of two of A's and B's
    formats, on block-scaled kinds times a block's scale pair (GST: a group of its own, element product 1)."""

    def __init__(self, a_fmt, b_fmt, scale, block, K, L, gst):
        self.a_fmt, self.b_fmt, self.scale, self.block, self.K, self.L, self.gst = a_fmt, b_fmt, scale, block, K, L, gst
        self.ea, self.eb = _pow2_exponents(a_fmt), _pow2_exponents(b_fmt)
        self.prods = np.unique(np.add.outer(self.ea, self.eb))
        lo, hi = int(self.prods.min()), int(self.prods.max())
        if scale is not None:
            of = operand_format(scale)
            self.es = np.arange(of.emin, int(np.floor(np.log2(of.max_finite))) + 1)
            lo, hi = lo + 2 * int(self.es.min()), hi + 2 * int(self.es.max())
            if gst:
                lo, hi = 2 * int(self.es.min()), 2 * int(self.es.max())
        self.tmin, self.tmax = lo, hi

    def _split(self, t, xs, ys):
        ys = set(int(y) for y in ys)
        cand = [int(x) for x in xs if t - int(x) in ys]
        if not cand:
            return None
        x = min(cand, key=lambda x: abs(2 * x - t))
        return x, t - x

    def row(self, rng, terms):
        elems, scales = {}, {}
        if self.scale is None:
            pos = rng.choice(self.L, size=len(terms), replace=False)
            for (t, neg), k in zip(terms, pos):
                xy = self._split(t, self.ea, self.eb)
                if xy is None:
                    return None
                elems[int(k)] = (_pow2_code(self.a_fmt, xy[0], neg), _pow2_code(self.b_fmt, xy[1], False))
            return {"elems": elems, "scales": scales}
        nblk = self.L // self.block
        if nblk >= len(terms):  # each term in a block of its own
            blocks = rng.choice(nblk, size=len(terms), replace=False)
            for (t, neg), j in zip(terms, blocks):
                near = t - 2 * int(np.median(self.es))  # element product exponent for mid-range scales
                x = 0 if self.gst else int(self.prods[np.argmin(np.abs(self.prods - near))])
                uv = self._split(t - x, self.es, self.es)
                xy = self._split(x, self.ea, self.eb)
                if uv is None or xy is None:
                    return None
                k = int(j) * self.block + int(rng.integers(0, self.block))
                elems[k] = (_pow2_code(self.a_fmt, xy[0], neg), _pow2_code(self.b_fmt, xy[1], False))
                scales[int(j)] = (_pow2_code(self.scale, uv[0], False), _pow2_code(self.scale, uv[1], False))
            return {"elems": elems, "scales": scales}
        if self.gst:
            return None
        ts = [t for t, _ in terms]  # one block: a common scale pair, element products t - (u + v)
        mid = int(np.median(self.prods))
        uv = self._split(int(round(np.mean(ts))) - mid, self.es, self.es)
        if uv is None:
            return None
        pos = rng.choice(self.block, size=len(terms), replace=False)
        for (t, neg), k in zip(terms, pos):
            xy = self._split(t - uv[0] - uv[1], self.ea, self.eb)
            if xy is None:
                return None
            elems[int(k)] = (_pow2_code(self.a_fmt, xy[0], neg), _pow2_code(self.b_fmt, xy[1], False))
        scales[0] = (_pow2_code(self.scale, uv[0], False), _pow2_code(self.scale, uv[1], False))
        return {"elems": elems, "scales": scales}
