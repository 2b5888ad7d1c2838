"""Operand number formats that tensor-core instructions read and write (A/B inputs, C/D accumulators, scales).

These are the *hardware* encodings named in PTX / AMD ISA (bf16, f16, tf32, e4m3, e5m2, e3m2, e2m3, e2m1, the
CDNA3 FNUZ fp8s, ue8m0, ue4m3, f32). The MMA models only need, per format: the exponent ``emin`` that a
subnormal keeps (the decode rule ``x = s * 2**e`` with ``1 <= |s| < 2``, or ``e = emin`` and ``|s| < 1``), the
number of fraction bits, the largest finite value and which specials exist. A proposed element grid (E1M2, INT4,
any value table) is not an operand format: block-scaled kinds take it as a values table (see hwspec/mma.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from fp4lab.errors import InputError

import numpy as np


@dataclass(frozen=True)
class OperandFormat:
    """A binary floating-point operand format: ``exp_bits`` exponent bits, ``man_bits`` fraction bits, ``bias``.

    ``specials``: "ieee" (Inf and NaN), "fn" (NaN only, e4m3's all-ones code), "fnuz" (NaN is the -0 code, no
    Inf), "none". ``signed=False`` for the unsigned scale formats. ``max_finite`` is the largest finite value.
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    specials: str
    max_finite: float
    signed: bool = True
    subnormals: bool = True
    integer: bool = False  # two's-complement integer grid (INT4): man_bits = value bits, exp_bits = 0
    container_bits: int = 0  # codes come in this many bits and the bits above the format's own are ignored

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal; subnormals keep this exponent with a significand below 1."""
        if self.integer:
            return 0
        return 1 - self.bias if self.subnormals else -self.bias

    @property
    def has_inf(self) -> bool:
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.specials != "none"

    def representable(self, x: np.ndarray) -> np.ndarray:
        """Boolean mask: which float64 values are exactly representable (specials only where the format has them)."""
        x = np.asarray(x, dtype=np.float64)
        if self.integer:
            lo, hi = -(1 << self.man_bits), (1 << self.man_bits) - 1
            return np.isfinite(x) & (x == np.round(x)) & (x >= lo) & (x <= hi)
        ax = np.abs(x)
        finite = np.isfinite(x)
        with np.errstate(divide="ignore", invalid="ignore"):
            _, e2 = np.frexp(np.where(finite & (ax > 0), ax, 1.0))
            e = np.maximum(e2 - 1, self.emin)
            if not self.subnormals:
                e = e2 - 1
            scaled = np.ldexp(ax, (self.man_bits - e).astype(np.int64))
        ok = finite & (scaled == np.floor(scaled)) & (ax <= self.max_finite)
        if not self.subnormals:
            ok &= ax >= 2.0**self.emin
        if not self.signed:
            ok &= ~np.signbit(x) | (x == 0)
        if self.subnormals:  # formats without subnormals here (e8m0) have no zero either
            ok |= (ax == 0) & finite
        if self.has_nan:
            ok |= np.isnan(x)
        if self.has_inf:
            ok |= np.isinf(x)
        return ok


def _f(name: str, e: int, m: int, bias: int | None, specials: str, max_finite: float, **kw) -> OperandFormat:
    return OperandFormat(name, e, m, (1 << (e - 1)) - 1 if bias is None else bias, specials, max_finite, **kw)


OPERAND_FORMATS: dict[str, OperandFormat] = {
    f.name: f
    for f in (
        _f("f32", 8, 23, None, "ieee", float(np.finfo(np.float32).max)),
        _f("tf32", 8, 10, None, "ieee", (2 - 2.0**-10) * 2.0**127),
        _f("bf16", 8, 7, None, "ieee", (2 - 2.0**-7) * 2.0**127),
        _f("f16", 5, 10, None, "ieee", 65504.0),
        _f("e4m3", 4, 3, None, "fn", 448.0),
        _f("e5m2", 5, 2, None, "ieee", 57344.0),
        _f("e3m2", 3, 2, None, "none", 28.0),
        _f("e2m3", 2, 3, None, "none", 7.5),
        _f("e2m1", 2, 1, None, "none", 6.0),
        _f("e1m2", 1, 2, 1, "none", 1.75),  # uniform grid {0, 0.25, ..., 1.75} (UFP4 element)
        OperandFormat("int4", 0, 3, 0, "none", 7.0, integer=True),
        _f("e4m3fnuz", 4, 3, 8, "fnuz", 240.0),
        _f("e5m2fnuz", 5, 2, 16, "fnuz", 57344.0),
        # scales: ue8m0 is 2**(x-127), x = 0..254 (no zero, no subnormal), 0xFF NaN; ue4m3 is e4m3 without sign.
        _f("ue8m0", 8, 0, 127, "fn", 2.0**127, signed=False, subnormals=False),
        # ue4m3: 7 bits in a byte; bit 7 is padding, ignored (masked) as the PTX ISA describes and MMA-Sim does
        # (truncate_e4m3_to_ue4m3: code & 0x7F). So 0xB8 is 1.0 like 0x38, and 0xFF is NaN like 0x7F.
        _f("ue4m3", 4, 3, None, "fn", 448.0, signed=False, container_bits=8),
        _f("e8m0", 8, 0, 127, "fn", 2.0**127, signed=False, subnormals=False),
    )
}


def operand_format(name: str) -> OperandFormat:
    """Look up an operand format by name; raises ValueError listing the known names."""
    try:
        return OPERAND_FORMATS[name]
    except KeyError:
        raise InputError(
            f"unknown operand format {name!r}; known: {', '.join(OPERAND_FORMATS)}"
        ) from None


def decode_codes(codes: np.ndarray, fmt: OperandFormat) -> np.ndarray:
    """float64 values of integer codes of an 8-bit-or-narrower operand format (sign in the top bit if signed)."""
    codes = np.asarray(codes).astype(np.int64)
    if fmt.integer:
        n = fmt.man_bits + 1
        if codes.size and (codes.min() < 0 or codes.max() >= (1 << n)):
            raise InputError(f"codes for {fmt.name} must be in [0, {1 << n}), got [{codes.min()}, {codes.max()}]")
        return np.where(codes >= (1 << fmt.man_bits), codes - (1 << n), codes).astype(np.float64)
    nbits = fmt.exp_bits + fmt.man_bits + (1 if fmt.signed else 0)
    width = max(nbits, fmt.container_bits)
    if codes.size and (codes.min() < 0 or codes.max() >= (1 << width)):
        raise InputError(f"codes for {fmt.name} must be in [0, {1 << width}), got [{codes.min()}, {codes.max()}]")
    codes = codes & ((1 << nbits) - 1)  # padding bits above the format's own (ue4m3 bit 7) are ignored
    mag = codes & ((1 << (fmt.exp_bits + fmt.man_bits)) - 1)
    ebits = mag >> fmt.man_bits
    mbits = mag & ((1 << fmt.man_bits) - 1)
    if fmt.man_bits == 0:  # ue8m0 / e8m0: pure powers of two
        v = np.ldexp(1.0, (ebits - fmt.bias).astype(np.int64))
    else:
        normal = np.ldexp(1.0 + mbits / (1 << fmt.man_bits), (ebits - fmt.bias).astype(np.int64))
        sub = np.ldexp(mbits / (1 << fmt.man_bits), fmt.emin)
        v = np.where(ebits == 0, sub, normal)
    if fmt.signed:
        v = np.where((codes >> (nbits - 1)) & 1, -v, v)
    allones = (1 << (fmt.exp_bits + fmt.man_bits)) - 1
    if fmt.specials == "fn":
        v = np.where(mag == allones, np.nan, v)
    elif fmt.specials == "ieee":
        v = np.where(ebits == (1 << fmt.exp_bits) - 1, np.where(mbits == 0, np.copysign(np.inf, v), np.nan), v)
    elif fmt.specials == "fnuz":
        v = np.where(codes == (1 << (nbits - 1)), np.nan, v)
    return v
