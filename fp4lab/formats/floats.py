"""``FloatFormat``: the one description of a binary floating-point encoding (ExMy), shared by element grids
(``FloatGrid``), ``float`` scale formats (``ScaleFormat``) and the tensor-core operand formats of ``fp4lab.hwspec``.

A code is ``[sign][exponent E: e bits][mantissa M: m bits]`` (no sign bit when ``signed`` is false). With
``bias`` (default ``2^(e-1) - 1``) its magnitude is

* ``(1 + M / 2^m) * 2^(E - bias)`` for ``E > 0``;
* for ``E = 0``, by ``zero_exponent``: ``"subnormal"`` ``(M / 2^m) * 2^(1 - bias)`` (gradual underflow, IEEE 754);
  ``"flush"`` zero (codes with ``M != 0`` decode to zero and rounding never produces them); ``"normal"``
  ``(1 + M / 2^m) * 2^(-bias)``, an ordinary binade, so the format has no zero (OCP E8M0).

``specials`` says which codes are not finite numbers:

* ``"none"``: every code is finite (OCP FP4 and FP6: E2M1, E2M3, E3M2);
* ``"fn"``: only the all-ones magnitude (all-ones exponent and mantissa) is NaN, there is no Inf (OCP E4M3,
  the ``fn`` of ml_dtypes' ``float8_e4m3fn``; E8M0's 0xFF);
* ``"fnuz"``: no Inf and no negative zero: the negative-zero code (sign set, all else zero) is the one NaN
  (``float8_e4m3fnuz`` / ``float8_e5m2fnuz`` of CDNA3, and IEEE P3109's convention);
* ``"ieee"``: the all-ones exponent holds +-Inf (``M = 0``) and NaN (``M != 0``) (IEEE 754: fp32, bf16, E5M2).

``tests/test_floats.py`` checks ``decode`` against ml_dtypes on every code of its float types.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from fp4lab.errors import InputError
from fp4lab.formats.base import SpecModel

FloatSpecials = Literal["none", "fn", "fnuz", "ieee"]
ZeroExponent = Literal["subnormal", "flush", "normal"]


class FloatFormat(SpecModel):
    """A binary float encoding: ``exponent_bits`` / ``mantissa_bits`` / ``bias``, sign, the ``E = 0`` binade and
    the special codes (module docstring). Values are exact float64; at most 32 bits in all."""

    exponent_bits: int = Field(ge=1, le=8)
    mantissa_bits: int = Field(ge=0, le=23)
    bias: int | None = Field(default=None, ge=-300, le=300, description="Default 2**(exponent_bits-1) - 1.")
    signed: bool = True
    zero_exponent: ZeroExponent = "subnormal"
    specials: FloatSpecials = "none"

    @model_validator(mode="after")
    def _validate(self) -> "FloatFormat":
        if self.bits > 32:
            raise ValueError(f"float format E{self.exponent_bits}M{self.mantissa_bits}: at most 32 bits in all")
        if self.specials == "fnuz" and not self.signed:
            raise ValueError("specials 'fnuz' puts NaN at the negative-zero code: the format must be signed")
        return self

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def exponent_bias(self) -> int:
        return self.bias if self.bias is not None else (1 << (self.exponent_bits - 1)) - 1

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal binade (subnormals keep it, with a significand below 1)."""
        return -self.exponent_bias if self.zero_exponent == "normal" else 1 - self.exponent_bias

    @property
    def has_inf(self) -> bool:
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.specials != "none"

    @property
    def has_zero(self) -> bool:
        return self.zero_exponent != "normal"

    @cached_property
    def max_finite(self) -> float:
        """Largest finite value (float64, exact)."""
        e, m = self.exponent_bits, self.mantissa_bits
        top_e, top_m = (1 << e) - 1, (1 << m) - 1
        if self.specials == "ieee":
            top_e -= 1
        elif self.specials == "fn":
            if m == 0:
                top_e -= 1
            else:
                top_m -= 1
        return float(np.ldexp(1.0 + top_m / (1 << m), top_e - self.exponent_bias))

    @cached_property
    def nan_code(self) -> int | None:
        """Lowest code that decodes to NaN, or None."""
        e, m = self.exponent_bits, self.mantissa_bits
        if self.specials == "fn":
            return (1 << (e + m)) - 1
        if self.specials == "fnuz":
            return 1 << (e + m)
        if self.specials == "ieee":
            return (((1 << e) - 1) << m | 1) if m else None
        return None

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """float64 values of integer ``codes`` in ``[0, 2^bits)`` (NaN and +-Inf for the special codes)."""
        codes = np.asarray(codes, dtype=np.int64)
        if codes.size and (codes.min() < 0 or codes.max() >= (1 << self.bits)):
            raise InputError(f"float format E{self.exponent_bits}M{self.mantissa_bits}: codes must lie in "
                             f"[0, {1 << self.bits}), got [{codes.min()}, {codes.max()}]")
        e, m, bias = self.exponent_bits, self.mantissa_bits, self.exponent_bias
        mag_bits = e + m
        mag = codes & ((1 << mag_bits) - 1)
        E = mag >> m
        M = (mag & ((1 << m) - 1)).astype(np.float64) / (1 << m)
        v = np.ldexp(1.0 + M, E - bias)
        if self.zero_exponent == "subnormal":
            v = np.where(E == 0, np.ldexp(M, 1 - bias), v)
        elif self.zero_exponent == "flush":
            v = np.where(E == 0, 0.0, v)
        if self.signed:
            v = np.where((codes >> mag_bits) & 1, -v, v)
        if self.specials == "fn":
            v = np.where(mag == (1 << mag_bits) - 1, np.nan, v)
        elif self.specials == "fnuz":
            v = np.where(codes == 1 << mag_bits, np.nan, v)
        elif self.specials == "ieee":
            top = E == (1 << e) - 1
            v = np.where(top & (mag & ((1 << m) - 1) == 0), np.copysign(np.inf, v), np.where(top, np.nan, v))
        return v

    def representable(self, x: np.ndarray) -> np.ndarray:
        """Boolean mask: which float64 values the format holds exactly (NaN / Inf only if it has them; -0 counts as
        zero, even where the format has no negative-zero code)."""
        x = np.asarray(x, dtype=np.float64)
        ax = np.abs(x)
        finite = np.isfinite(x)
        with np.errstate(divide="ignore", invalid="ignore"):
            _, e2 = np.frexp(np.where(finite & (ax > 0), ax, 1.0))
            e = np.maximum(e2 - 1, self.emin)
            scaled = np.ldexp(ax, (self.mantissa_bits - e).astype(np.int64))
        ok = finite & (scaled == np.floor(scaled)) & (ax <= self.max_finite)
        if self.zero_exponent != "subnormal":  # no values between zero and the smallest normal
            ok &= (ax >= 2.0 ** self.emin) | (ax == 0)
        if not self.has_zero:
            ok &= ax != 0
        if not self.signed:  # a zero of either sign is the value zero
            ok &= ~np.signbit(x) | (x == 0)
        if self.has_nan:
            ok |= np.isnan(x)
        if self.has_inf:
            ok |= np.isinf(x)
        return ok


def float_format_of(spec: object) -> FloatFormat:
    """The ``FloatFormat`` of a model with ExMy fields (``FloatGrid``, a ``float`` ``ScaleFormat``): its
    ``subnormals = false`` flushes the E = 0 binade to zero. A ValueError (pydantic's) if the fields are invalid."""
    return FloatFormat(exponent_bits=spec.exponent_bits, mantissa_bits=spec.mantissa_bits, bias=spec.bias,
                       signed=spec.signed, zero_exponent="subnormal" if spec.subnormals else "flush",
                       specials=spec.specials)


def float32_text(v: float) -> str:
    """The shortest decimal text that reads back as the float32 ``v`` (``6``, ``1.75``, ``0.0795803``); every
    level and scale of a format is a float32, so this loses no digit of it."""
    f = np.float32(v)
    if not np.isfinite(f):
        return str(float(f))
    if f == 0 or 1e-4 <= abs(f) < 1e7:
        return np.format_float_positional(f, trim="-", unique=True)
    return np.format_float_scientific(f, trim="-", unique=True)
