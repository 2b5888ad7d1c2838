"""Operand number formats that tensor-core instructions read and write (A/B inputs, C/D accumulators, scales).

These are the *hardware* encodings named in PTX / AMD ISA (bf16, f16, tf32, e4m3, e5m2, e3m2, e2m3, e2m1, the
CDNA3 FNUZ fp8s, ue8m0, ue4m3, f32). Each float one is a ``fp4lab.formats.floats.FloatFormat``, the description
the registry's element grids and scale formats use too. The MMA models read from it the exponent ``emin`` that a
subnormal keeps (the decode rule ``x = s * 2**e`` with ``1 <= |s| < 2``, or ``e = emin`` and ``|s| < 1``), the
number of fraction bits, the largest finite value and which specials exist. A proposed element grid (E1M2, INT4,
any value table) is not an operand format: block-scaled kinds take it as a values table (see hwspec/mma.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.floats import FloatFormat


@dataclass(frozen=True)
class OperandFormat:
    """A hardware operand format: a binary float (``encoding``, ``fp4lab.formats.floats.FloatFormat``) or, for INT4, a
    two's-complement integer of ``int_bits`` bits (``encoding`` None).

    ``container_bits``: codes come in this many bits and the bits above the format's own are ignored (UE4M3 in a
    byte). The float fields (``exp_bits``, ``man_bits``, ``bias``, ``specials``, ``signed``, ``subnormals``,
    ``max_finite``, ``emin``) read the encoding; for INT4 ``man_bits`` is the value bits (3) and ``emin`` 0.
    """

    name: str
    encoding: FloatFormat | None
    int_bits: int = 0
    container_bits: int = 0

    @property
    def integer(self) -> bool:
        return self.encoding is None

    @property
    def exp_bits(self) -> int:
        return 0 if self.encoding is None else self.encoding.exponent_bits

    @property
    def man_bits(self) -> int:
        return self.int_bits - 1 if self.encoding is None else self.encoding.mantissa_bits

    @property
    def bias(self) -> int:
        return 0 if self.encoding is None else self.encoding.exponent_bias

    @property
    def specials(self) -> str:
        return "none" if self.encoding is None else self.encoding.specials

    @property
    def signed(self) -> bool:
        return True if self.encoding is None else self.encoding.signed

    @property
    def subnormals(self) -> bool:
        """False only for UE8M0/E8M0, whose E = 0 code is 2^-127 (no zero, no subnormal)."""
        return self.encoding is None or self.encoding.zero_exponent == "subnormal"

    @property
    def max_finite(self) -> float:
        return float((1 << (self.int_bits - 1)) - 1) if self.encoding is None else self.encoding.max_finite

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal; subnormals keep this exponent with a significand below 1."""
        return 0 if self.encoding is None else self.encoding.emin

    @property
    def has_inf(self) -> bool:
        return self.encoding is not None and self.encoding.has_inf

    @property
    def has_nan(self) -> bool:
        return self.encoding is not None and self.encoding.has_nan

    def representable(self, x: np.ndarray) -> np.ndarray:
        """Boolean mask: which float64 values are exactly representable (specials only where the format has them)."""
        x = np.asarray(x, dtype=np.float64)
        if self.encoding is None:
            lo, hi = -(1 << self.man_bits), (1 << self.man_bits) - 1
            return np.isfinite(x) & (x == np.round(x)) & (x >= lo) & (x <= hi)
        return self.encoding.representable(x)


def _f(name: str, e: int, m: int, bias: int | None, specials: str, *, signed: bool = True,
       zero_exponent: str = "subnormal", container_bits: int = 0) -> OperandFormat:
    return OperandFormat(name, FloatFormat(exponent_bits=e, mantissa_bits=m, bias=bias, signed=signed,
                                           zero_exponent=zero_exponent, specials=specials),
                         container_bits=container_bits)


OPERAND_FORMATS: dict[str, OperandFormat] = {
    f.name: f
    for f in (
        _f("f32", 8, 23, None, "ieee"),
        _f("tf32", 8, 10, None, "ieee"),
        _f("bf16", 8, 7, None, "ieee"),
        _f("f16", 5, 10, None, "ieee"),
        _f("e4m3", 4, 3, None, "fn"),
        _f("e5m2", 5, 2, None, "ieee"),
        _f("e3m2", 3, 2, None, "none"),
        _f("e2m3", 2, 3, None, "none"),
        _f("e2m1", 2, 1, None, "none"),
        _f("e1m2", 1, 2, 1, "none"),  # uniform grid {0, 0.25, ..., 1.75} (UFP4 element)
        OperandFormat("int4", None, int_bits=4),
        _f("e4m3fnuz", 4, 3, 8, "fnuz"),
        _f("e5m2fnuz", 5, 2, 16, "fnuz"),
        # scales: ue8m0 is 2**(x-127), x = 0..254 (no zero, no subnormal), 0xFF NaN; ue4m3 is e4m3 without sign.
        _f("ue8m0", 8, 0, 127, "fn", signed=False, zero_exponent="normal"),
        # ue4m3: 7 bits in a byte; bit 7 is padding, ignored (masked) as the PTX ISA describes and MMA-Sim does
        # (truncate_e4m3_to_ue4m3: code & 0x7F). So 0xB8 is 1.0 like 0x38, and 0xFF is NaN like 0x7F.
        _f("ue4m3", 4, 3, None, "fn", signed=False, container_bits=8),
        _f("ue5m3", 5, 3, None, "fn", signed=False),  # the registry's UE5M3 scale: 8 bits, 0xFF NaN
        _f("e8m0", 8, 0, 127, "fn", signed=False, zero_exponent="normal"),
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
    return fmt.encoding.decode(codes & ((1 << nbits) - 1))  # bits above the format's own (ue4m3 bit 7) ignored
