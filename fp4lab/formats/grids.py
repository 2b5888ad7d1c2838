"""Element grids: the finite set of values one element code can take.

Three families, all plain data (pydantic models that round-trip through TOML):

* ``FloatGrid``  — sign / exponent / mantissa fields (ExMy), with bias, subnormals and special-value encodings;
* ``IntGrid``    — two's-complement integers times a step, optionally restricted to a symmetric range;
* ``TableGrid``  — an explicit table of values, one per code (any ``2**bits`` values).

Every grid exposes the same derived quantities, computed once from the fields:

* ``values``      float64 ``[2**bits]``: decoded value of every code (NaN / +-Inf for special codes);
* ``levels``      float64, sorted, unique finite values that rounding may produce (+0 and -0 merged into 0);
* ``thresholds(mode)`` float32 ``[len(levels)-1]``: a float32 input ``t`` rounds to level
  ``count(t >= thresholds)``. Every deterministic rounding mode is just a different threshold table, which is
  what the numpy reference, the numba emulator and the Triton kernels all evaluate.

Rounding modes (``RTNE`` etc.) are defined on the *signed* level list, see ``docs/numerics.md``.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, ValidationError, field_validator, model_validator

from fp4lab.errors import SpecError
from fp4lab.formats.base import SpecModel, check_text
from fp4lab.formats.floats import FloatFormat, FloatSpecials, float_format_of

RoundingMode = Literal["rtne", "rtna", "rtnz", "rtz", "rtp", "rtm", "sr"]
DETERMINISTIC_MODES: tuple[str, ...] = ("rtne", "rtna", "rtnz", "rtz")  # round to nearest, and truncation
DIRECTED_MODES: tuple[str, ...] = ("rtp", "rtm")  # toward +Inf (ceiling) and toward -Inf (floor)
THRESHOLD_MODES: tuple[str, ...] = DETERMINISTIC_MODES + DIRECTED_MODES  # every mode that is a threshold table
ROUNDING_MODES: tuple[str, ...] = DETERMINISTIC_MODES + ("sr",) + DIRECTED_MODES  # every accepted name


def is_float32_exact(v: float) -> bool:
    """True if the float64 value ``v`` is exactly representable as a float32 (NaN/Inf count as exact)."""
    with np.errstate(over="ignore"):
        return bool(np.isnan(v)) or float(np.float32(v)) == v


def _next_float32_up(v: float) -> np.float32:
    return np.nextafter(np.float32(v), np.float32(np.inf))


def _float32_at_or_above(v: float) -> np.float32:
    """Smallest float32 >= the float64 ``v``."""
    f = np.float32(v)
    return f if float(f) >= v else _next_float32_up(float(f))


class _GridBase(SpecModel):
    """Derived quantities shared by every element grid. Subclasses define ``bits`` and ``_decode``."""


    name: str | None = Field(default=None, max_length=64, description="Short name, e.g. 'e2m1'.")
    description: str = Field(default="", max_length=1024)

    @field_validator("name", "description")
    @classmethod
    def _printable(cls, v: str | None) -> str | None:
        return check_text(v)

    @property
    def bits(self) -> int:  # overridden by fields or properties in subclasses
        raise NotImplementedError

    @property
    def label(self) -> str:
        """``name``, else one made from the fields for display: ``e1m2`` / ``ue2m1`` (float), ``int4``, ``table4``."""
        if self.name:
            return self.name
        if isinstance(self, FloatGrid):
            return f"{'' if self.signed else 'u'}e{self.exponent_bits}m{self.mantissa_bits}"
        return f"{self.kind}{self.bits}"

    @property
    def n_codes(self) -> int:
        return 1 << self.bits

    def _decode(self) -> np.ndarray:
        raise NotImplementedError

    def _non_encodable_codes(self) -> set[int]:
        """Codes that decode to a finite value but that rounding never produces (e.g. INT4's -8 when symmetric)."""
        return set()

    # ---- derived tables -------------------------------------------------------------------------------------
    @cached_property
    def values(self) -> np.ndarray:
        """float64 ``[2**bits]``: the decoded value of every code."""
        v = np.asarray(self._decode(), dtype=np.float64)
        v.setflags(write=False)
        return v

    @cached_property
    def _encode_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(levels, codes for non-negative inputs, codes for negative inputs).

        For each distinct finite level, the code rounding returns. The two code columns differ only at zero, where a
        negative input gets the grid's -0 code if it has one. Among duplicate values the lowest code wins.
        """
        vals = self.values
        skip = self._non_encodable_codes()
        pos: dict[float, int] = {}
        neg: dict[float, int] = {}
        for code in range(self.n_codes):
            v = float(vals[code])
            if code in skip or not np.isfinite(v):
                continue
            if v == 0.0:
                (neg if np.signbit(v) else pos).setdefault(0.0, code)
            else:
                pos.setdefault(v, code)
                neg.setdefault(v, code)
        if 0.0 in pos:
            neg.setdefault(0.0, pos[0.0])
        if 0.0 in neg:
            pos.setdefault(0.0, neg[0.0])
        levels = np.array(sorted(pos), dtype=np.float64)
        cpos = np.array([pos[float(x)] for x in levels], dtype=np.uint8 if self.bits <= 8 else np.uint16)
        cneg = np.array([neg[float(x)] for x in levels], dtype=cpos.dtype)
        return levels, cpos, cneg

    @property
    def levels(self) -> np.ndarray:
        """float64, ascending: the distinct finite values rounding can return (signed zeros merged)."""
        return self._encode_tables[0]

    @property
    def level_codes_pos(self) -> np.ndarray:
        """Code returned for each level when the input's sign bit is clear."""
        return self._encode_tables[1]

    @property
    def level_codes_neg(self) -> np.ndarray:
        """Code returned for each level when the input's sign bit is set (differs only at zero)."""
        return self._encode_tables[2]

    @property
    def max(self) -> float:
        """Largest finite level."""
        return float(self.levels[-1])

    @property
    def min(self) -> float:
        """Smallest (most negative) finite level."""
        return float(self.levels[0])

    @property
    def amax(self) -> float:
        """Largest finite magnitude: what a block's amax maps onto under amax scaling."""
        return float(max(abs(self.levels[0]), abs(self.levels[-1])))

    @cached_property
    def nan_code(self) -> int | None:
        """Lowest code that decodes to NaN, or None if the grid has no NaN."""
        idx = np.flatnonzero(np.isnan(self.values))
        return int(idx[0]) if idx.size else None

    @cached_property
    def inf_codes(self) -> tuple[int, int] | None:
        """(code of +Inf, code of -Inf), or None if the grid has no infinities."""
        pos = np.flatnonzero(self.values == np.inf)
        neg = np.flatnonzero(self.values == -np.inf)
        if pos.size and neg.size:
            return int(pos[0]), int(neg[0])
        return None

    @property
    def is_sign_symmetric(self) -> bool:
        """True if the level set is symmetric about zero (every level's negation is a level)."""
        lv = self.levels
        return bool(np.array_equal(lv, -lv[::-1]))

    @cached_property
    def overflow_threshold(self) -> np.float32:
        """float32 magnitude above which a value overflows under the 'inf'/'nan' overflow policies.

        Half a gap beyond the largest level (the last gap is reused as the would-be next spacing), ties staying
        finite: E4M3FN overflows above 464, as in ml_dtypes.
        """
        lv = self.levels
        gap = float(lv[-1] - lv[-2]) if lv.size > 1 else abs(float(lv[-1]))
        return _next_float32_up(self.amax + gap / 2.0)

    def thresholds(self, mode: str = "rtne") -> np.ndarray:
        """float32 ``[len(levels)-1]``: ``t`` rounds to ``levels[count(t >= thr)]`` under deterministic ``mode``.

        rtne: ties to the even code (if both neighbours' codes have the same parity: toward zero);
        rtna: ties away from zero; rtnz: ties toward zero; rtz: truncation toward zero;
        rtp: the smallest level >= t (toward +Inf); rtm: the largest level <= t (toward -Inf).
        Midpoints are computed exactly in float64 and moved to the float32 that realises the tie rule.
        """
        return self._thresholds[mode]

    @cached_property
    def _thresholds(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        lv, cpos, cneg = self._encode_tables
        for mode in THRESHOLD_MODES:
            thr = np.empty(max(lv.size - 1, 0), dtype=np.float32)
            for i in range(lv.size - 1):
                lo, hi = float(lv[i]), float(lv[i + 1])
                positive_side = hi > 0.0
                codes = cpos if positive_side else cneg
                if mode in ("rtz", "rtp", "rtm"):  # levels are float32: t reaches hi at hi or just above lo
                    up_at_lo = mode == "rtp" or (mode == "rtz" and not positive_side)
                    thr[i] = _next_float32_up(lo) if up_at_lo else np.float32(hi)
                    continue
                if mode == "rtne":
                    lo_even, hi_even = codes[i] % 2 == 0, codes[i + 1] % 2 == 0
                    tie_up = hi_even if lo_even != hi_even else not positive_side
                elif mode == "rtna":
                    tie_up = positive_side
                else:  # rtnz
                    tie_up = not positive_side
                mid = (lo + hi) / 2.0
                if is_float32_exact(mid):
                    thr[i] = np.float32(mid) if tie_up else _next_float32_up(mid)
                else:
                    thr[i] = _float32_at_or_above(mid)
            thr.setflags(write=False)
            out[mode] = thr
        return out

    # ---- shared validation ----------------------------------------------------------------------------------
    def _check_levels(self) -> None:
        vals = self.values
        finite = vals[np.isfinite(vals)]
        where = f"grid '{self.name}'" if self.name else "element grid"
        if not np.any(finite == 0.0):
            raise SpecError(f"{where}: zero must be one of the values")
        if not np.any(finite > 0.0):
            raise SpecError(f"{where}: needs at least one positive value (positive inputs would all round to 0)")
        big = float(np.max(np.abs(finite)))
        if big > float(np.finfo(np.float32).max):
            raise SpecError(f"{where}: value {big!r} is beyond the float32 range (at most 3.4028235e+38); "
                             "check the exponent bits, bias or step")
        bad = [float(v) for v in finite if not is_float32_exact(float(v))]
        if bad:
            raise SpecError(
                f"{where}: value {bad[0]!r} is not exactly representable in float32; "
                f"use {float(np.float32(bad[0]))!r}"
            )
        if self.levels.size < 2:
            raise SpecError(f"{where}: needs at least two distinct finite values")


class FloatGrid(_GridBase):
    """Sign-magnitude float with ``exponent_bits`` and ``mantissa_bits`` (ExMy), decoded by its ``FloatFormat``.

    Value of a code with biased exponent E and mantissa M: ``(1 + M/2^m) * 2^(E-bias)`` for E > 0, and
    ``(M/2^m) * 2^(1-bias)`` for E = 0 (subnormal; flushed to 0 if ``subnormals`` is false).
    ``specials``: ``none`` = every code finite (OCP FP4/FP6, E2M1); ``fn`` = only the all-ones exponent and
    mantissa code is NaN (E4M3FN); ``fnuz`` = no Inf and no -0, the negative-zero code is NaN (E4M3FNUZ,
    E5M2FNUZ); ``ieee`` = the all-ones exponent holds Inf (M = 0) and NaN (M != 0).
    """

    kind: Literal["float"] = "float"
    exponent_bits: int = Field(ge=1, le=8)
    mantissa_bits: int = Field(ge=0, le=23)
    bias: int | None = Field(default=None, ge=-300, le=300,
                             description="Exponent bias; default 2**(exponent_bits-1) - 1.")
    signed: bool = True
    subnormals: bool = True
    specials: FloatSpecials = "none"

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @cached_property
    def float_format(self) -> FloatFormat:
        """The encoding alone (``subnormals = false`` is ``zero_exponent = "flush"``)."""
        return float_format_of(self)

    @property
    def exponent_bias(self) -> int:
        return self.bias if self.bias is not None else (1 << (self.exponent_bits - 1)) - 1

    @model_validator(mode="after")
    def _validate(self) -> "FloatGrid":
        if self.bits > 16:
            raise ValueError(f"float grid E{self.exponent_bits}M{self.mantissa_bits}: at most 16 bits in all")
        try:
            _ = self.float_format
        except ValidationError as err:  # one line: the encoding's first complaint
            raise ValueError(err.errors()[0]["msg"].removeprefix("Value error, ")) from None
        self._check_levels()
        return self

    def _decode(self) -> np.ndarray:
        return self.float_format.decode(np.arange(self.n_codes))

    def _non_encodable_codes(self) -> set[int]:
        if self.subnormals:
            return set()
        m = self.mantissa_bits
        e_mask, m_mask = (1 << self.exponent_bits) - 1, (1 << m) - 1
        return {c for c in range(self.n_codes) if ((c >> m) & e_mask) == 0 and c & m_mask}


class IntGrid(_GridBase):
    """Two's-complement integer codes times ``step``: code c holds k = c (c < 2^(b-1)) or c - 2^b, value k*step.

    ``range = "symmetric"`` never produces the most negative code (INT4: levels -7..7), so the grid is sign
    symmetric; ``"twos_complement"`` uses the full range (INT4: -8..7).
    """

    kind: Literal["int"] = "int"
    int_bits: int = Field(default=4, ge=2, le=16, alias="bits")
    range: Literal["symmetric", "twos_complement"] = "symmetric"
    step: float = Field(default=1.0, gt=0.0)


    @property
    def bits(self) -> int:
        return self.int_bits

    @model_validator(mode="after")
    def _validate(self) -> "IntGrid":
        if not is_float32_exact(self.step):
            raise ValueError(f"int grid: step {self.step!r} is not exactly representable in float32")
        self._check_levels()
        return self

    def _decode(self) -> np.ndarray:
        b = self.int_bits
        k = np.arange(1 << b, dtype=np.int64)
        k = np.where(k >= (1 << (b - 1)), k - (1 << b), k)
        return k.astype(np.float64) * self.step

    def _non_encodable_codes(self) -> set[int]:
        return {1 << (self.int_bits - 1)} if self.range == "symmetric" else set()


class TableGrid(_GridBase):
    """An explicit grid: ``values[c]`` is the value of code c (all ``2**bits`` codes), or, for sign-magnitude
    grids, ``magnitudes`` (``2**(bits-1)`` ascending non-negative values starting at 0; the top bit is the sign).

    Values must be finite, exactly representable in float32 and distinct (only +0/-0 may repeat), and include 0.
    Ties under RTNE go to the even code; if both neighbours have the same code parity, toward zero.
    """

    kind: Literal["table"] = "table"
    table_bits: int = Field(default=4, ge=1, le=8, alias="bits")
    table: list[float] | None = Field(default=None, alias="values", max_length=256)
    magnitudes: list[float] | None = Field(default=None, max_length=128)


    @property
    def bits(self) -> int:
        return self.table_bits

    @model_validator(mode="after")
    def _validate(self) -> "TableGrid":
        where = f"table grid '{self.name}'" if self.name else "table grid"
        if (self.table is None) == (self.magnitudes is None):
            raise ValueError(f"{where}: give exactly one of 'values' (every code) or 'magnitudes' (sign-magnitude)")
        if self.table is not None:
            if len(self.table) != self.n_codes:
                raise ValueError(f"{where}: 'values' has {len(self.table)} entries, "
                                 f"{self.bits} bits need {self.n_codes}")
            nonzero = [v for v in self.table if v != 0.0]
            if len(set(nonzero)) != len(nonzero):
                raise ValueError(f"{where}: 'values' repeats a non-zero value; every code must be distinct")
        else:
            mags = self.magnitudes or []
            half = self.n_codes // 2
            if len(mags) != half:
                raise ValueError(f"{where}: 'magnitudes' has {len(mags)} entries, {self.bits} bits need {half}")
            if mags[0] != 0.0 or any(b <= a for a, b in zip(mags, mags[1:])):
                raise ValueError(f"{where}: 'magnitudes' must start at 0 and be strictly ascending")
        if any(not np.isfinite(v) for v in self._decode()):
            raise ValueError(f"{where}: values must be finite")
        self._check_levels()
        return self

    def _decode(self) -> np.ndarray:
        if self.table is not None:
            return np.asarray(self.table, dtype=np.float64)
        mags = np.asarray(self.magnitudes, dtype=np.float64)
        return np.concatenate([mags, -mags])


ElementGrid = Annotated[Union[FloatGrid, IntGrid, TableGrid], Field(discriminator="kind")]
"""Any element grid; the ``kind`` field ("float", "int", "table") selects the family."""
