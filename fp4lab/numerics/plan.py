"""One lowering of a ``QuantFormat`` for every backend: the choices and tables of element rounding and of block
scaling, derived once from the format model and ``ref_encode``'s helpers (no format is special-cased by name).

``element_plan(fmt, mode)`` and ``scale_plan(fmt)`` return frozen plans; the numba emulator (``nb_tables``) and
the Triton kernels (``fp4lab.kernels.params``, ``fp4lab.kernels.codes``) pack them into parameters. Each choice
is a ``Coded`` enum whose one integer ``code`` both backends use, so neither keeps its own numbering. The numpy
reference (``ref_encode``, ``ref_quantize``) defines the bits; a plan says which of its equivalent evaluations
applies and holds the float32 / int32 tables they read. Arrays are read-only.

Element rounding, deterministic modes: ``t`` rounds to level ``count(t >= thresholds)`` (``Encoder``):

* ``SIGNED``: over the signed threshold table, code ``codes[idx + signbit(t) * n_levels]``;
* ``MAGNITUDE``: grids whose negative thresholds mirror the positive ones (``pos == nextup(-neg)``, so that
  ``t < neg`` is ``|t| >= pos``): ``m = count(|t| >= table_thr)``, code ``table_codes[m + signbit(t) * half]``;
* ``SIGN_MAGNITUDE``: ``MAGNITUDE`` where the codes are ``m | signbit(t) * sign_or``: no table lookup.

Stochastic rounding (``sr``) interpolates between the two neighbouring signed ``levels``; its plan carries the
rtne tables as well. ``float_bits = (m, emin, cmax)``: an ExMy grid whose codes the bit-arithmetic encoders
``fbits.fbits_det`` / ``fbits_sr`` reproduce (checked by ``fbits_ok``), for rtne and sr.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Callable, TypeVar

import numpy as np

from fp4lab.formats.grids import FloatGrid
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.fbits import fbits_ok
from fp4lab.numerics.ref_encode import nan_element_code, special_scale_code

F32 = np.float32


class Coded(StrEnum):
    """A plan choice: its value is the spec-file word, its ``code`` (the member's position in the class) the
    integer that the numba parameters and the Triton constexprs carry. A new choice appends a member."""

    @property
    def code(self) -> int:
        return list(type(self)).index(self)


class Encoder(Coded):
    """Evaluation of ``count(t >= thresholds)`` for deterministic rounding (module docstring)."""

    SIGN_MAGNITUDE = "sign_magnitude"
    MAGNITUDE = "magnitude"
    SIGNED = "signed"


class Overflow(Coded):
    """``QuantFormat.overflow``: magnitudes at or above ``overflow_thr`` saturate, or take the NaN / +-Inf code."""

    SATURATE = "saturate"
    NAN = "nan"
    INF = "inf"


class ScaleChoice(Coded):
    """``ScaleRule.family``: no block scale, amax / target rounded into the scale format, or an OCP exponent."""

    NONE = "none"
    AMAX = "amax"
    EXPONENT = "exponent"


class ExponentRule(Coded):
    """OCP MX shared exponent ``e = E(amax) - emax_elem`` with ``E`` = floor(log2), ceil(log2), or floor(log2)
    of amax rounded (RTNE) to the element's mantissa width (``even``)."""

    FLOOR = "floor"
    CEIL = "ceil"
    EVEN = "even"


class ScaleRounding(Coded):
    """``ScaleRule.effective_rounding``: rounding of the ideal scale into the scale format."""

    RTNE = "rtne"
    CEIL = "ceil"
    FLOOR = "floor"


class ScaleKind(Coded):
    """Scale storage: a power of two ``2^(c - bias)``; an ExMy float encoded by table search (``FLOAT_TABLE``),
    or one whose decode is also the bit arithmetic ``float32(c << (23 - m)) * 2^(127 - bias)`` (``FLOAT_BITS``,
    a table-search encode all the same); IEEE fp32 / bf16 bit patterns."""

    POW2 = "pow2"
    FLOAT_TABLE = "float_table"
    FP32 = "fp32"
    BF16 = "bf16"
    FLOAT_BITS = "float_bits"


def _frozen(a: np.ndarray, dtype) -> np.ndarray:
    out = np.ascontiguousarray(a, dtype=dtype).copy()
    out.setflags(write=False)
    return out


def _nextup(v: np.ndarray) -> np.ndarray:
    return np.nextafter(v.astype(F32), F32(np.inf)).astype(F32)


@dataclass(frozen=True, eq=False)
class ElementPlan:
    """Rounding float32 ``t`` onto ``fmt.element`` with one rounding ``mode`` (module docstring)."""

    mode: str
    encoder: Encoder  # the deterministic tables' evaluation (of ``mode``; rtne for sr)
    thresholds: np.ndarray  # float32 signed thresholds of ``mode`` (rtne for sr)
    table_thr: np.ndarray  # float32 thresholds ``encoder`` counts: ``thresholds`` or their non-negative half
    table_codes: np.ndarray  # int32 codes by [sign, count], ``half`` per sign
    half: int
    sign_or: int  # SIGN_MAGNITUDE: the sign bit of a code, else 0
    levels: np.ndarray  # float32 ascending signed levels
    codes: np.ndarray  # int32 [level_codes_pos, level_codes_neg]
    values: np.ndarray  # float32 value of every code
    inv_gaps: np.ndarray  # float32 1 / (levels[j+1] - levels[j]) where every gap is a normal power of two, else 1
    pow2_gaps: bool  # every gap a normal power of two: sr's p = (t - lo) * inv_gap is the division, exactly
    nan_code: int  # code of a NaN element (``ref_encode.nan_element_code``)
    keep_sign: bool  # signed_zero "keep": signbit(t) picks the sign column, else t < 0
    overflow: Overflow
    overflow_thr: np.float32  # ``grid.overflow_threshold``
    grid_nan_code: int | None  # the grid's NaN code (overflow "nan")
    inf_codes: tuple[int, int] | None  # (+Inf, -Inf) codes (overflow "inf")
    float_bits: tuple[int, int, int] | None  # (mantissa bits, emin, largest magnitude code) of the fbits encoders

    @property
    def stochastic(self) -> bool:
        return self.mode == "sr"


@dataclass(frozen=True, eq=False)
class ScalePlan:
    """Choosing, encoding and decoding the block scales of ``fmt`` (``scale_rule.block_scale_codes``)."""

    choice: ScaleChoice
    exponent_rule: ExponentRule | None = None
    kind: ScaleKind | None = None
    rounding: ScaleRounding = ScaleRounding.RTNE
    overflow_nan: bool = False  # scale_overflow "nan": pow2 ideals above the largest code take the NaN code
    bias: int = 0  # exponent bias (pow2, float)
    mantissa_bits: int = 0  # float scales
    table_nan: int | None = None  # NaN code of the code table (pow2: all ones; float: the grid's, if any)
    max_value: np.float32 = F32(0)  # largest finite scale
    levels: np.ndarray | None = None  # float: float32 ascending non-negative levels
    level_codes: np.ndarray | None = None  # float: int32 code of each of ``levels``
    thresholds: np.ndarray | None = None  # float: float32 rtne thresholds between ``levels``
    values: np.ndarray | None = None  # pow2 / float: float32 value of every code
    targets: np.ndarray | None = None  # float32 targets and their float32 reciprocals
    inv_targets: np.ndarray | None = None
    divide_ideal: bool = True  # ideal scale amax / target (else amax * float32(1 / target))
    divide_elements: bool = True  # elements x / S (else x * float32(1 / S))
    encode_arith: bool = False  # scale_arithmetic "encode" (TransformerEngine)
    min_scale: np.float32 | None = None
    max_scale: np.float32 | None = None
    two_level: bool = False
    ts_den: np.float32 = F32(1)  # two-level: float32(target * (max_scale or scale.max))
    scale_product_first: bool = False  # two-level dequantization value * (S * ts)
    select_abs: bool = False  # several targets: absolute instead of squared errors
    nan_propagate: bool = True
    zero_code: int | None = None  # scale code of an all-zero block (zero_block != "as_computed")
    inf_code: int = 0  # scale code of a block with an Inf (NaN, or the largest with inf_policy "saturate")
    nan_code: int | None = None  # scale code of NaN (``special_scale_code(scale, "nan")``); None: the format has none
    even_add: int = 0  # EVEN: 1 << (22 - element mantissa bits), the RTNE increment of amax's fp32 bits
    emax_elem: int = 0  # floor(log2(largest element magnitude))

    @property
    def float_scale(self) -> bool:
        """An ExMy float scale format (``levels``, ``level_codes`` and ``thresholds`` are set)."""
        return self.kind in (ScaleKind.FLOAT_TABLE, ScaleKind.FLOAT_BITS)


_P = TypeVar("_P")


def cached_per_format(build: Callable[..., _P]) -> Callable[..., _P]:
    """Memoize ``build(fmt, *args)``: by object identity first (formats are frozen; a repeat call costs a dict
    lookup), then by value (``QuantFormat.__hash__`` serializes the format)."""
    by_value = lru_cache(maxsize=256)(build)
    by_id: dict[tuple, tuple] = {}

    def get(fmt: QuantFormat, *args):
        key = (id(fmt), *args)
        hit = by_id.get(key)
        if hit is not None and hit[0] is fmt:  # the entry keeps fmt alive, so its id is not reused
            return hit[1]
        plan = by_value(fmt, *args)
        if len(by_id) > 256:
            by_id.clear()
        by_id[key] = (fmt, plan)
        return plan

    get.__doc__, get.__name__ = build.__doc__, build.__name__.lstrip("_")
    return get


def _element_plan(fmt: QuantFormat, mode: str) -> ElementPlan:
    """The element plan of ``fmt`` for rounding ``mode`` (cached; read only)."""
    g = fmt.element
    lv = g.levels.astype(F32)
    cpos, cneg = g.level_codes_pos.astype(np.int32), g.level_codes_neg.astype(np.int32)
    n = lv.size
    signed = np.concatenate([cpos, cneg])
    thr = g.thresholds("rtne" if mode == "sr" else mode).astype(F32)
    z = int(np.searchsorted(g.levels, 0.0))
    enc, tthr, tcodes, half, sign_or = Encoder.SIGNED, thr, signed, n, 0
    if g.is_sign_symmetric and z == n - 1 - z:
        pos, neg = thr[z:], _nextup(-thr[:z][::-1])
        if np.array_equal(pos.view(np.uint32), neg.view(np.uint32)):
            mpos, mneg = cpos[z:], cneg[z::-1]
            enc, tthr, tcodes, half = Encoder.MAGNITUDE, pos, np.concatenate([mpos, mneg]), z + 1
            m, so = np.arange(z + 1), 1 << (g.bits - 1)
            if np.array_equal(mpos, m) and np.array_equal(mneg, m | so):
                enc, sign_or = Encoder.SIGN_MAGNITUDE, so
    gaps = (lv[1:] - lv[:-1]).astype(F32)
    mant = gaps.view(np.uint32) & np.uint32(0x7FFFFF)
    expo = (gaps.view(np.uint32) >> np.uint32(23)) & np.uint32(0xFF)
    pow2 = bool(np.all(mant == 0) and np.all((expo > 1) & (expo < 253)))
    fb = None
    if (mode in ("rtne", "sr") and enc == Encoder.SIGN_MAGNITUDE and isinstance(g, FloatGrid) and g.signed
            and g.subnormals and g.specials == "none"):
        m, emin = g.mantissa_bits, 1 - g.exponent_bias
        cmax, vmax = (1 << (g.bits - 1)) - 1, float(lv[-1])
        if (m >= 1 and emin - m >= -125 and vmax < 2.0 ** 126
                and fbits_ok(fmt, m, emin, cmax, vmax, g.thresholds("rtne"))):
            fb = (m, emin, cmax)
    return ElementPlan(
        mode=mode, encoder=enc, thresholds=_frozen(thr, F32), table_thr=_frozen(tthr, F32),
        table_codes=_frozen(tcodes, np.int32), half=half, sign_or=sign_or, levels=_frozen(lv, F32),
        codes=_frozen(signed, np.int32), values=_frozen(g.values, F32),
        inv_gaps=_frozen((F32(1.0) / gaps) if pow2 else np.ones_like(gaps), F32), pow2_gaps=pow2,
        nan_code=nan_element_code(g, fmt.nan_element), keep_sign=fmt.signed_zero == "keep",
        overflow=Overflow(fmt.overflow), overflow_thr=F32(g.overflow_threshold), grid_nan_code=g.nan_code,
        inf_codes=g.inf_codes, float_bits=fb)


def _scale_plan(fmt: QuantFormat) -> ScalePlan:
    """The scale plan of ``fmt`` (cached; read only)."""
    rule, sfmt = fmt.scale_rule, fmt.scale
    choice = ScaleChoice(rule.family)
    if choice == ScaleChoice.NONE:
        return ScalePlan(choice=choice)
    f: dict = {}
    if choice == ScaleChoice.EXPONENT:
        f["exponent_rule"] = ExponentRule(rule.method)
        if rule.method == "even":
            f["even_add"] = 1 << (22 - fmt.element.mantissa_bits)
    if sfmt.kind == "pow2":
        f.update(kind=ScaleKind.POW2, bias=sfmt.exponent_bias, table_nan=sfmt.pow2_nan_code)
    elif sfmt.kind == "float":
        grid = sfmt.grid
        lv = grid.levels.astype(F32)
        keep = lv >= 0
        f.update(kind=ScaleKind.FLOAT_TABLE, bias=sfmt.exponent_bias, mantissa_bits=sfmt.mantissa_bits,
                 table_nan=grid.nan_code, levels=_frozen(lv[keep], F32),
                 level_codes=_frozen(grid.level_codes_pos[keep], np.int32),
                 thresholds=_frozen(grid.thresholds("rtne")[lv[:-1] >= 0], F32))
    else:
        f["kind"] = ScaleKind(sfmt.kind)
    if sfmt.tabulated:
        f["values"] = _frozen(sfmt.decode(np.arange(sfmt.n_codes)), F32)
    if f["kind"] == ScaleKind.FLOAT_TABLE and sfmt.subnormals and sfmt.exponent_bits <= 7 \
            and 0 <= sfmt.exponent_bias <= 127:  # bit arithmetic where it gives every finite value exactly (a
        # negative bias would need 2^(127 - bias), beyond float32: such scales keep the table)
        nan = sfmt.grid.nan_code
        codes = np.arange(sfmt.n_codes)
        arith = ((codes.astype(np.uint32) << np.uint32(23 - sfmt.mantissa_bits)).view(F32)
                 * F32(2.0 ** (127 - sfmt.exponent_bias))).astype(F32)
        arith = np.where(codes == (nan if nan is not None else -1), np.nan, arith).astype(F32)
        finite = np.isfinite(f["values"])
        if np.array_equal(finite, np.isfinite(arith)) and np.array_equal(arith[finite], f["values"][finite]):
            f["kind"] = ScaleKind.FLOAT_BITS
    tg = np.array(fmt.targets, dtype=np.float64).astype(F32)
    two_level = fmt.tensor_scale != "none"
    if two_level:
        with np.errstate(over="ignore"):
            f["ts_den"] = F32(fmt.targets[0] * (rule.max_scale or sfmt.max))
    if rule.zero_block != "as_computed":
        f["zero_code"] = special_scale_code(sfmt, rule.zero_block)
    return ScalePlan(
        choice=choice, rounding=ScaleRounding(rule.effective_rounding), overflow_nan=rule.scale_overflow == "nan",
        max_value=F32(sfmt.max), targets=_frozen(tg, F32), inv_targets=_frozen(F32(1.0) / tg, F32),
        divide_ideal=rule.scale_division == "divide", divide_elements=rule.element_scaling == "divide",
        encode_arith=rule.scale_arithmetic == "encode",
        min_scale=None if rule.min_scale is None else F32(rule.min_scale),
        max_scale=None if rule.max_scale is None else F32(rule.max_scale), two_level=two_level,
        scale_product_first=rule.dequantize_order == "scale_product_first", select_abs=rule.select_by == "sae",
        nan_propagate=rule.nan_policy == "propagate",
        inf_code=special_scale_code(sfmt, "nan" if rule.inf_policy == "propagate" else "max"),
        nan_code=None if sfmt.kind == "float" and sfmt.grid.nan_code is None else special_scale_code(sfmt, "nan"),
        emax_elem=fmt.emax_elem, **f)


element_plan = cached_per_format(_element_plan)
scale_plan = cached_per_format(_scale_plan)
