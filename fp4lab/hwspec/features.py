"""Numerical-feature probes of an MMA kind, in the sense of Khattak & Mikaitis's methodology (HPEC 2025, "Generalized
Methodology for Determining Numerical Features of Hardware Floating-Point Matrix Multipliers: Part I"): each
feature is *measured* by running small dot products of powers of two through ``emulate_mma``, never read from the
spec's fields. ``load_published()`` reads the values they published per GPU (data/km_features.toml).

Features (names as in the data file):

* ``fused_size``: products summed in one fused block before the result is rounded (their "FMA size").
* ``extra_alignment_bits``: fraction bits kept below the largest term's leading bit, minus fp32's 23 (their
  n_eab; negative when the sum is narrower than fp32, as on the Ada/Hopper FP8 paths).
* ``alignment_rounding``: how terms are cut to that grid ("rz": truncation of the magnitude).
* ``rounding``: rounding of a block's result to the output format ("rz", "rne", "rna", "ru", "rd").
* ``inter_block_rounding``: rounding of a block's result before it enters the next block as C ("none" if the
  next block sees the unrounded sum).
* ``normalisation``: "late" (one normalisation per block) or "immediate" (after every addition).
* ``subnormal_inputs`` / ``subnormal_outputs``: subnormal operands are used / subnormal results are returned.
* ``carry_bits``: integer bits above the leading one that a block of ``fused_size`` products of significand
  below 2 needs, provided the model sums such a block exactly (their "extra carry bits").
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from fp4lab.errors import InputError, SpecError
from fp4lab.hwspec.operands import operand_format
from fp4lab.hwspec.registry import get_hw

PUBLISHED = Path(__file__).parent / "data" / "km_features.toml"
FEATURES: tuple[str, ...] = ("fused_size", "extra_alignment_bits", "alignment_rounding", "rounding",
                             "inter_block_rounding", "normalisation", "subnormal_inputs", "subnormal_outputs",
                             "carry_bits")
_K = 64  # probe length: a multiple of every instruction K probed here, longer than every fused block
_S = 2.0**6  # scale of the rounding probes: keeps their ulp-sized terms within the range of 8-bit inputs


class Probe:
    """Runs single dot products ``D = sum_i p_i + c`` on one kind; each product p_i is split into a*b exactly."""

    def __init__(self, hw: Any, kind: str, fmt: str | None = None):
        self.kind = get_hw(hw).kind(kind)
        self.fmt = fmt or self.kind.a_formats[0]
        if self.fmt not in self.kind.a_formats or self.fmt not in self.kind.b_formats:
            raise InputError(f"feature probe: kind {kind!r} does not take {self.fmt!r} operands; it takes "
                             f"{', '.join(self.kind.a_formats)}")
        if self.kind.block_scaled:
            raise InputError(f"feature probe: kind {kind!r} is block-scaled; the probes need unscaled kinds")
        self.of = operand_format(self.fmt)
        self.m = int(self.kind.output.mantissa_bits)  # fraction bits of the output
        self.out_emin = -126 if self.kind.output.format == "f32" else -14
        self.hw = hw
        ks = [int(self.kind.k)] + list(self.kind.k_alt)
        if _K % min(ks):
            raise InputError(f"feature probe: instruction K {ks} of kind {kind!r} does not divide {_K}")

    def split(self, v: float) -> tuple[float, float]:
        """Operands a, b of the probe format with a * b == v exactly (the most balanced such pair)."""
        if v == 0.0:
            return 0.0, 0.0
        half = math.frexp(abs(v))[1] // 2
        for d in sorted(range(-80, 81), key=abs):
            b = math.ldexp(1.0, half + d)
            a = v / b
            if self.of.representable(np.array([a, b])).all():
                return a, b
        raise InputError(f"feature probe: {v!r} is not a product of two {self.fmt} values")

    def dot(self, prods: dict[int, float | tuple[float, float]], c: float = 0.0) -> float:
        """D for products ``prods`` ({K position: value or (a, b)}, others zero) and accumulator c."""
        a, b = np.zeros((1, _K)), np.zeros((_K, 1))
        for i, v in prods.items():
            a[0, i], b[i, 0] = v if isinstance(v, tuple) else self.split(v)
        from fp4lab.hwspec.mma import emulate_mma

        if self.kind.tf32_truncate:  # these kinds take fp32 words; the probe values are exact tf32
            a, b = a.astype(np.float32), b.astype(np.float32)
        d = emulate_mma(a, b, np.array([[c]]), hw=self.hw, kind=self.kind.name, a_format=self.fmt,
                        b_format=self.fmt)
        return float(d[0, 0])

    def terms(self, *vals: float, c: float = 0.0) -> float:
        """D for products at positions 0, 1, ... (all in the first block)."""
        return self.dot(dict(enumerate(vals)), c)


def _classify(pos_up: bool, neg_up: bool) -> str:
    """Rounding mode from whether a positive / negative inexact value moved away from zero."""
    return {(False, False): "rz", (True, True): "rne", (True, False): "ru", (False, True): "rd"}[(pos_up, neg_up)]


def fused_size(p: Probe) -> int:
    """First position whose product is no longer cut against an earlier, cancelled pair: +-2^8 at 0 and 1 and
    2^-18 (26 bits below, under every fused sum probed here) at i survive only if i starts a new block (then it
    is summed on its own). Returns the probe length if no block boundary is reached."""
    for i in range(2, _K):
        if p.dot({0: 2.0**8, 1: -2.0**8, i: 2.0**-18}) != 0.0:
            return i
    return _K


def alignment_frac_bits(p: Probe) -> int:
    """Fraction bits F kept below the leading bit of the largest term: the last t at which a term 2^(8-t) next
    to 2^8 still changes the result (RZ outputs: it pulls 2^8 below itself; RNE outputs: it breaks the tie of
    2^8 + half an ulp). 2^8 keeps the small terms within the range of 8-bit inputs."""
    rne = p.kind.output.rounding == "rne"
    top, h = 2.0**8, 2.0 ** (7 - p.m)
    for t in range(p.m + 2 if rne else 1, 60):
        d = p.terms(top, h, 2.0 ** (8 - t)) if rne else p.terms(top, -(2.0 ** (8 - t)))
        if d == top:
            return t - 1
    raise InputError("feature probe: no term 60 bits below the largest was dropped")


def alignment_rounding(p: Probe, F: int) -> str:
    """+-1.5 * 2^(8-F) next to a cancelled pair +-2^8: kept as 2^(8-F) (cut toward zero) or 2^(9-F)."""
    q = 2.0 ** (8 - F)
    pos, neg = p.terms(2.0**8, -(2.0**8), 1.5 * q), p.terms(2.0**8, -(2.0**8), -1.5 * q)
    if {abs(pos), abs(neg)} - {q, 2 * q}:
        raise InputError(f"feature probe: alignment rounding gave {pos!r} / {neg!r}")
    return _classify(pos == 2 * q, neg == -2 * q)


def _near_four(p: Probe, sign: float, frac: float) -> dict[int, float]:
    """The block (1.75 + 1.25 + 1) * S + frac * ulp(4S), times ``sign``: four terms, the largest setting e_max."""
    u = _S * 2.0 ** (2 - p.m)
    return {0: sign * 1.75 * _S, 1: sign * 1.25 * _S, 2: sign * _S, 3: sign * frac * u}


def rounding(p: Probe) -> str:
    """Final rounding of one block: 4S + 0.75 ulp (both signs) and the tie 4S + 0.5 ulp."""
    four, u = 4.0 * _S, _S * 2.0 ** (2 - p.m)
    pos, neg = p.dot(_near_four(p, 1.0, 0.75)), p.dot(_near_four(p, -1.0, 0.75))
    if pos not in (four, four + u) or neg not in (-four, -four - u):
        raise InputError(f"feature probe: rounding gave {pos!r} / {neg!r}")
    mode = _classify(pos != four, neg != -four)
    if mode == "rne" and p.dot(_near_four(p, 1.0, 0.5)) != four:
        return "rna"
    return mode


def inter_block_rounding(p: Probe, L: int) -> str:
    """Block 1 = 4S + 0.75 ulp, block 2 = -4S exactly: D = what block 1 passed on, minus 4S."""
    if not 4 <= L < _K:
        raise InputError(f"feature probe: inter-block rounding needs a block size in [4, {_K}), got {L}")
    u = _S * 2.0 ** (2 - p.m)
    out = []
    for s in (1.0, -1.0):
        d = p.dot({**_near_four(p, s, 0.75), L: -s * 4.0 * _S})
        if d == s * 0.75 * u:
            return "none"
        if d not in (0.0, s * u):
            raise InputError(f"feature probe: inter-block rounding gave {d!r}")
        out.append(d != 0.0)
    return _classify(*out)


def normalisation(p: Probe) -> str:
    """S + S + q + q with q half an ulp of 2S: 2S + 2q if the block is normalised once, 2S if the sum is
    normalised (and cut to the output precision) after each addition."""
    q = _S * 2.0**-p.m
    d = p.terms(_S, _S, q, q)
    return {2 * _S + 2 * q: "late", 2 * _S: "immediate"}.get(d, "unknown")


def subnormal_inputs(p: Probe) -> bool:
    """The smallest subnormal of the input format times 1 comes out unchanged."""
    v = math.ldexp(1.0, p.of.emin - p.of.man_bits)
    return p.dot({0: (v, 1.0)}) == v


def subnormal_outputs(p: Probe) -> bool:
    """A result of half the output's smallest normal is returned, made by one product where the format allows,
    else passed in as C next to zero products."""
    v = math.ldexp(1.0, p.out_emin - 1)
    try:
        return p.dot({0: v}) == v
    except InputError:
        return p.dot({}, c=v) == v


def carry_bits(p: Probe, L: int) -> int:
    """floor(log2(L * (2 - ulp))): the carries of L products of the largest significand below 2 (the count the
    HPEC test bench derives from its FMA size), after checking that the model sums such a block exactly."""
    big = 2.0 - 2.0 ** -p.of.man_bits
    exact = L * big
    if p.dot({i: big for i in range(L)}) != exact:
        raise InputError(f"feature probe: a block of {L} products {big!r} is not summed exactly")
    return math.floor(math.log2(exact))


def measure(hw: Any, kind: str, fmt: str | None = None, features: tuple[str, ...] = FEATURES) -> dict[str, Any]:
    """The requested features of one kind, measured by the probes above on fp4lab's model."""
    bad = [f for f in features if f not in FEATURES]
    if bad:
        raise InputError(f"feature probe: unknown features {bad}; known: {', '.join(FEATURES)}")
    p = Probe(hw, kind, fmt)
    res: dict[str, Any] = {}
    L = fused_size(p)
    F = alignment_frac_bits(p)
    for f in features:
        res[f] = {
            "fused_size": lambda: L,
            "extra_alignment_bits": lambda: F - 23,
            "alignment_rounding": lambda: alignment_rounding(p, F),
            "rounding": lambda: rounding(p),
            "inter_block_rounding": lambda: inter_block_rounding(p, L),
            "normalisation": lambda: normalisation(p),
            "subnormal_inputs": lambda: subnormal_inputs(p),
            "subnormal_outputs": lambda: subnormal_outputs(p),
            "carry_bits": lambda: carry_bits(p, L),
        }[f]()
    return res


def load_published(path: str | Path = PUBLISHED) -> dict[str, Any]:
    """The published-feature file: ``sources`` (citations) and ``entries`` (one GPU / format pair each)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the published-feature file: {exc}") from None
    for i, e in enumerate(data.get("entries", [])):
        if e.get("source") not in data.get("sources", {}):
            raise SpecError(f"{path}: entry {i} ({e.get('gpu')}) cites unknown source {e.get('source')!r}")
        extra = set(e.get("features", {})) - set(FEATURES)
        if extra:
            raise SpecError(f"{path}: entry {i} ({e.get('gpu')}) has unknown features {sorted(extra)}")
    return data
