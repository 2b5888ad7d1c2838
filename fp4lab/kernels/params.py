"""The Triton kernels' constants for a ``QuantFormat`` (host side, no triton import): the element and scale plans
(``fp4lab.numerics.plan``) as constexpr records and runtime tables, so a grid defined in a spec file runs without
new kernel code. Kernels never see a format's name, only small tables and constexprs. Every choice travels as its
enum's ``code`` (the numbering the numba twin uses too); kernel code compares it with the named constants of
``fp4lab.kernels.codes``, derived from the same enums.

Element rounding (deterministic modes), the constexpr ``ELEM.ENCODER`` (``plan.Encoder``):

* SIGNED: ``idx = count(t >= thr)`` over the signed table, code ``ctab[idx + signbit(t) * n_levels]``;
* MAGNITUDE: ``m = count(|t| >= mthr)``, code ``ctab[m + signbit(t) * (z + 1)]``, z the index of level 0;
* SIGN_MAGNITUDE: ``code = m | signbit(t) * sign_or``, no table lookup.

``ElementCx.FBITS`` selects the bit-arithmetic encoders of ExMy grids for rtne and sr (``encoding.encode_fbits_det`` /
``encode_fbits_sr``, whose numpy twins in ``fp4lab.numerics.fbits`` were checked against the reference encoder).
Stochastic rounding always uses the signed levels (``p = (t - lo) / (hi - lo)`` is not sign-symmetric in fp32).

The kernels take these constants as three records, one constexpr each: ``ELEM`` (``ElementCx``, the element
encoder), ``SCALE`` (``ScaleCx``, choosing, encoding and decoding block scales) and ``DEC`` (``DecodeCx``,
decoding element codes in registers). Each field has one meaning; a launch passes ``ELEM=ep.cx, SCALE=sp.cx``
beside its tile geometry. The tables themselves (thresholds, levels, scale values) are runtime arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.grids import DIRECTED_MODES, FloatGrid, IntGrid
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.plan import (
    Coded,
    ElementPlan,
    ScaleChoice,
    ScaleKind,
    ScalePlan,
    ScaleRounding,
    cached_per_format,
    element_plan,
    scale_plan,
)
from fp4lab.numerics.range_policy import RangeEdges, kernel_constants

F32 = np.float32


class ElementDecode(Coded):
    """In-register decoding of element codes (``DecodeCx.KIND``): a sign-magnitude ExMy without specials by bit
    arithmetic, a two's-complement int times its step, or a lookup in the value table."""

    FLOAT = "float"
    INT = "int"
    TABLE = "table"


class InputKind(Coded):
    """How a kernel reads its input (``IN_KIND``): fp32 as is, bf16 as int16 bit patterns widened by a shift
    (exact, also for subnormals), fp16 converted."""

    F32 = "float32"
    BF16 = "bfloat16"
    F16 = "float16"


def _pow2_ok(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def _bit_length(a: np.ndarray) -> int:
    """Bit length of a table's entry count: the unrolled-compare / bisection choice of ``encoding.count_tab``."""
    return int(a.size).bit_length()


class ElementCx(NamedTuple):
    """The element encoder's constexprs (``ELEM`` in the kernels). ``ENCODER``: ``Encoder.code`` (module
    docstring); ``SIGN_OR``: the code's sign bit (sign-magnitude); ``OVERFLOW``: ``Overflow.code``, saturate or
    the NaN / signed Inf codes at |t| >= the overflow threshold; ``SZ_POS``: signed_zero "positive" (the sign
    column is t < 0, else the sign bit); ``SR``: stochastic rounding; ``POW2_GAPS``: SR with every level gap a
    normal power of two (the quotient is a product); ``N_THR`` / ``N_LVL``: threshold and level counts,
    ``L_THR`` / ``L_LVL`` their bit lengths; ``FBITS``: rtne / sr by bit arithmetic on an ExMy grid with
    ``FB_M`` mantissa bits, smallest normal exponent ``FB_EMIN`` and largest magnitude code ``FB_CMAX``;
    ``DIRECTED``: rtp / rtm, where a quotient that underflowed to +-0 counts as +-2^-149."""

    ENCODER: int
    SIGN_OR: int
    OVERFLOW: int
    SZ_POS: bool
    SR: bool
    POW2_GAPS: bool
    N_THR: int
    L_THR: int
    N_LVL: int
    L_LVL: int
    FBITS: bool
    FB_M: int
    FB_EMIN: int
    FB_CMAX: int
    DIRECTED: bool


class ScaleCx(NamedTuple):
    """Block-scale constexprs (``SCALE`` in the kernels), named after the ``ScalePlan`` fields they come from.
    ``CHOICE``: ``ScaleChoice.code`` (none, amax family, exponent rule); ``EXP_RULE``: ``ExponentRule.code``
    with ``EVEN_ADD`` and the element's ``EMAX``; ``KIND``: ``ScaleKind.code`` (``MB`` mantissa bits of the
    float-bits kind); ``ROUNDING``: ``ScaleRounding.code``; ``OVF_NAN``: pow2 ideals above the largest code take
    the NaN code; ``BIAS``: exponent bias; ``NAN``: the NaN scale code (-1: none, float-bits kind);
    ``DIVIDE_IDEAL``: ideal = amax / target by division (else times 1 / target); ``TWO_LEVEL`` / ``TS_FIRST``: a
    tensor scale, applied as value * (S * ts); ``HAS_MIN`` / ``HAS_MAX``: clamps of the ideal scale; ``STRICT``:
    float-table search counts levels < v; ``MAXV``: largest finite scale; ``HAS_ZB``: all-zero blocks take a
    fixed code; ``NAN_PROP``: Inf / NaN blocks take the inf / nan codes; ``DIVIDE_ELEMENTS``: elements x / S
    (else x * (1 / S)); ``DIV_POW2``: that division is exact as a product; ``ENCODE_ARITH``: TransformerEngine's
    encode arithmetic; ``N_TG``: amax targets (4-over-6 selection when > 1); ``N_TAB`` / ``L_TAB``: float-table
    size and bit length, ``N_POS``: positive scale codes; ``ERR_ABS``: 4-over-6 selection by absolute error
    (else squared); range edges (``range_policy.kernel_constants``): ``TS_LO`` / ``TS_HI``, ``BUMP_LO`` /
    ``BUMP_HI``, ``S_CRIT``."""

    CHOICE: int
    EXP_RULE: int
    EVEN_ADD: int
    EMAX: int
    KIND: int
    ROUNDING: int
    OVF_NAN: bool
    BIAS: int
    NAN: int
    MB: int
    DIVIDE_IDEAL: bool
    TWO_LEVEL: bool
    TS_FIRST: bool
    HAS_MIN: bool
    HAS_MAX: bool
    STRICT: bool
    MAXV: float
    HAS_ZB: bool
    NAN_PROP: bool
    DIVIDE_ELEMENTS: bool
    DIV_POW2: bool
    ENCODE_ARITH: bool
    N_TG: int
    N_TAB: int
    L_TAB: int
    N_POS: int
    ERR_ABS: bool
    TS_LO: int
    TS_HI: int
    BUMP_LO: int
    BUMP_HI: int
    S_CRIT: float


class DecodeCx(NamedTuple):
    """In-register decoding of element codes (``DEC`` in the kernels): ``KIND`` ``ElementDecode.code``: FLOAT
    (``EB`` exponent bits, ``MB`` mantissa bits, ``BIAS``), INT (an ``EB``-bit two's-complement int times
    ``STEP``) or TABLE."""

    KIND: int
    EB: int
    MB: int
    BIAS: int
    STEP: float


@dataclass(frozen=True, eq=False)
class ElementParams:
    """Runtime tables and constants for rounding float32 ``t`` onto the element grid with one rounding mode, and
    the constexpr record ``cx``. The deterministic tables are those ``cx.ENCODER`` counts; SR reads ``levels``,
    ``ctab_signed`` and ``inv_gaps``."""

    thr: np.ndarray  # float32 thresholds the encoder counts
    ctab: np.ndarray  # int32 code table of the encoder
    half: int  # offset of the negative half in ``ctab``
    levels: np.ndarray  # float32 signed levels (SR)
    ctab_signed: np.ndarray  # int32 [cpos, cneg] (SR)
    values: np.ndarray  # float32 value of every code (4-over-6 error, dequantize)
    inv_gaps: np.ndarray  # float32 1 / float32(levels[j+1] - levels[j]) (SR, used when every gap is a power of two)
    nan_code: int
    overflow_thr: float
    ovf_nan: int  # the grid's NaN code (overflow "nan")
    inf_pos: int  # +Inf / -Inf codes (overflow "inf")
    inf_neg: int
    cx: ElementCx

    @property
    def one_spacing(self) -> bool:
        """A uniform ExMy grid (one spacing: E1My) encoded by bit arithmetic, where the kernels may multiply by
        the reciprocal scale and divide exactly only near rounding boundaries (``quantize._encode_blocks``)."""
        cx = self.cx
        return cx.FBITS and ((cx.FB_CMAX + 1) >> cx.FB_M) == 2

    @property
    def fast_division(self) -> bool:
        """Every grid level is 0 or at least 2^-16 in magnitude, so every scaled element below 2^-42 gets the code
        that a zero of its sign gets, in every rounding mode (RTNE: below half the smallest level; SR: its
        probability of rounding away from zero is below 2^-26, under the 24-bit resolution of the draws;
        directed: only the sign counts). Dividing formats may then divide by ``tile.div_by_reciprocal``, which is
        exact down to 2^-42 (the lean tiles of ``quantize.quantize_halves``)."""
        mags = np.abs(self.levels[np.isfinite(self.levels) & (self.levels != 0)])
        return bool(mags.size) and float(mags.min()) >= 2.0 ** -16

    def kernel_args(self, tables: DeviceTables) -> tuple:
        """The element arguments of the quantize and fake-quant kernels, in their order (the tuple ``etab``)."""
        return (tables.thr, tables.ctab, self.half, tables.levels, tables.ctab_signed, tables.inv_gaps,
                tables.values, self.nan_code, self.overflow_thr, self.ovf_nan, self.inf_pos, self.inf_neg)


def element_params(fmt: QuantFormat, mode: str) -> ElementParams:
    """Element tables/constants of ``fmt`` for rounding ``mode`` (cached; read only)."""
    if fmt.element.bits > 8:
        raise InputError(f"kernels: format '{fmt.name}' has {fmt.element.bits}-bit element codes; the Triton "
                         "kernels support up to 8")
    return _element_params(element_plan(fmt, mode))


def _scale_params_of(fmt: QuantFormat) -> ScaleParams:
    """Scale constants of ``fmt`` (cached; read only)."""
    return _scale_params(scale_plan(fmt), kernel_constants(fmt))


scale_params = cached_per_format(_scale_params_of)


@lru_cache(maxsize=512)  # keyed by the plan's identity: plans are cached per format
def _element_params(ep: ElementPlan) -> ElementParams:
    m, emin, cmax = ep.float_bits or (0, 0, 0)
    inf_pos, inf_neg = ep.inf_codes or (0, 0)
    cx = ElementCx(
        ENCODER=ep.encoder.code, SIGN_OR=ep.sign_or, OVERFLOW=ep.overflow.code, SZ_POS=not ep.keep_sign,
        SR=ep.stochastic, POW2_GAPS=ep.pow2_gaps and ep.stochastic, N_THR=int(ep.table_thr.size),
        L_THR=_bit_length(ep.table_thr), N_LVL=int(ep.levels.size), L_LVL=_bit_length(ep.levels),
        FBITS=ep.float_bits is not None, FB_M=m, FB_EMIN=emin, FB_CMAX=cmax, DIRECTED=ep.mode in DIRECTED_MODES)
    return ElementParams(
        thr=ep.table_thr, ctab=ep.table_codes, half=ep.half, levels=ep.levels, ctab_signed=ep.codes,
        values=ep.values, inv_gaps=ep.inv_gaps, nan_code=ep.nan_code, overflow_thr=float(ep.overflow_thr),
        ovf_nan=ep.grid_nan_code or 0, inf_pos=inf_pos, inf_neg=inf_neg, cx=cx)


@dataclass(frozen=True, eq=False)
class ScaleParams:
    """Runtime tables and constants for choosing, encoding and decoding block scales, and the constexpr record
    ``cx`` (the flags host code reads too: ``cx.CHOICE``, ``cx.KIND``, ``cx.TWO_LEVEL``, ...)."""

    cx: ScaleCx
    targets: np.ndarray = field(default_factory=lambda: np.ones(1, F32))  # float32 amax targets
    inv_targets: np.ndarray = field(default_factory=lambda: np.ones(1, F32))  # float32(1 / target)
    ts_den: float = 1.0  # two-level: tensor scale = amax / ts_den
    min_scale: float = 0.0  # clamps of the ideal scale (read when cx.HAS_MIN / cx.HAS_MAX)
    max_scale: float = 0.0
    stab: np.ndarray = field(default_factory=lambda: np.zeros(1, F32))  # float-table encode thresholds/levels
    scpos: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int32))  # scale code of each table entry
    svals: np.ndarray = field(default_factory=lambda: np.zeros(1, F32))  # decoded value of every scale code
    zero_code: int = 0  # scale code of an all-zero block (read when cx.HAS_ZB)
    inf_code: int = 0
    nan_code: int = 0  # read only with nan_policy "propagate"

    @property
    def scaled(self) -> bool:
        """The format has block scales."""
        return self.cx.CHOICE != ScaleChoice.NONE.code

    @property
    def divides(self) -> bool:
        """Elements are divided by their scale one by one (not a product: see ``quantize._scale_elements``)."""
        cx = self.cx
        return cx.DIVIDE_ELEMENTS and not (cx.DIV_POW2 or cx.ENCODE_ARITH)

    def block_constants(self) -> tuple:
        """The block-scale constants that follow the tables (the tail of ``stab``): clamps, zero / Inf / NaN
        block codes."""
        return self.min_scale, self.max_scale, self.zero_code, self.inf_code, self.nan_code


class DeviceTables(NamedTuple):
    """The element and scale tables of one (format, rounding) on one device."""

    thr: Any
    ctab: Any
    levels: Any
    ctab_signed: Any
    inv_gaps: Any
    values: Any
    targets: Any
    inv_targets: Any
    stab: Any
    scpos: Any
    svals: Any

    def scale_tables(self) -> tuple:
        """The scale tables of the quantize and fake-quant kernels, in their order (the head of ``stab``)."""
        return self.targets, self.inv_targets, self.stab, self.scpos, self.svals


@lru_cache(maxsize=256)  # keyed by the plan's identity: plans are cached per format
def _scale_params(sp: ScalePlan, edges: RangeEdges) -> ScaleParams:
    if sp.choice == ScaleChoice.NONE:
        return ScaleParams(cx=ScaleCx(
            CHOICE=sp.choice.code, EXP_RULE=0, EVEN_ADD=0, EMAX=0, KIND=0, ROUNDING=0, OVF_NAN=False, BIAS=0,
            NAN=0, MB=0, DIVIDE_IDEAL=True, TWO_LEVEL=False, TS_FIRST=False, HAS_MIN=False, HAS_MAX=False,
            STRICT=False, MAXV=0.0, HAS_ZB=False, NAN_PROP=True, DIVIDE_ELEMENTS=True, DIV_POW2=False,
            ENCODE_ARITH=False, N_TG=1, N_TAB=1, L_TAB=1, N_POS=1, ERR_ABS=False, **edges._asdict()))
    stab, strict, scpos, smax = np.zeros(1, F32), False, np.zeros(1, np.int32), 0.0
    snan, mantissa_bits = sp.table_nan or 0, 0
    if sp.float_scale:
        scpos, smax = sp.level_codes, float(sp.max_value)
        if sp.rounding == ScaleRounding.RTNE:  # index = count(stab <= v)
            stab = sp.thresholds
        elif sp.rounding == ScaleRounding.CEIL:  # count(levels < v)
            stab, strict = sp.levels, True
        else:  # count(levels[1:] <= v)
            stab = sp.levels[1:]
        if sp.kind == ScaleKind.FLOAT_BITS:
            snan = sp.table_nan if sp.table_nan is not None else -1
            mantissa_bits = sp.mantissa_bits
    if sp.kind in (ScaleKind.FP32, ScaleKind.BF16):
        smax = float(sp.max_value)  # +Inf ideal scales saturate to the largest finite value
    exponent = sp.choice == ScaleChoice.EXPONENT
    cx = ScaleCx(
        CHOICE=sp.choice.code, EXP_RULE=sp.exponent_rule.code if exponent else 0,
        EVEN_ADD=sp.even_add if exponent else 0, EMAX=sp.emax_elem if exponent else 0, KIND=sp.kind.code,
        ROUNDING=sp.rounding.code, OVF_NAN=sp.overflow_nan, BIAS=sp.bias, NAN=snan, MB=mantissa_bits,
        DIVIDE_IDEAL=sp.divide_ideal, TWO_LEVEL=sp.two_level, TS_FIRST=sp.two_level and sp.scale_product_first,
        HAS_MIN=sp.min_scale is not None, HAS_MAX=sp.max_scale is not None, STRICT=strict, MAXV=smax,
        HAS_ZB=sp.zero_code is not None, NAN_PROP=sp.nan_propagate, DIVIDE_ELEMENTS=sp.divide_elements,
        DIV_POW2=sp.divide_elements and sp.kind == ScaleKind.POW2 and not sp.two_level and not sp.encode_arith,
        ENCODE_ARITH=sp.encode_arith, N_TG=int(sp.targets.size), N_TAB=int(stab.size), L_TAB=_bit_length(stab),
        N_POS=int(scpos.size), ERR_ABS=bool(sp.select_abs), **edges._asdict())
    return ScaleParams(
        cx=cx, targets=sp.targets, inv_targets=sp.inv_targets, ts_den=float(sp.ts_den),
        min_scale=0.0 if sp.min_scale is None else float(sp.min_scale),
        max_scale=0.0 if sp.max_scale is None else float(sp.max_scale), stab=stab, scpos=scpos,
        svals=sp.values if sp.values is not None else np.zeros(1, F32),
        zero_code=0 if sp.zero_code is None else sp.zero_code, inf_code=sp.inf_code,
        nan_code=0 if sp.nan_code is None else sp.nan_code)


def block_extents(fmt: QuantFormat) -> tuple[int, int]:
    """(rows, cols) of one block in the kernel's [M, K] view: (1, k) for 1-D blocks, (r, c) for 2-D tiles."""
    if fmt.block is None:
        return 1, 1
    shape = list(fmt.block.shape)
    tr, tc = (shape if len(shape) == 2 else [1, shape[0]])
    for e in (tr, tc):
        if not _pow2_ok(e):
            raise InputError(f"kernels: format '{fmt.name}' block extent {e} is not a power of two; "
                             "the Triton kernels need power-of-two blocks (use the CPU emulator)")
    return tr, tc


def bf16_exact(v: np.ndarray) -> bool:
    """True when every finite float32 value of ``v`` is exactly a bf16 (low 16 bits zero)."""
    v = np.asarray(v, dtype=F32)
    v = v[np.isfinite(v)]
    return bool(np.all((v.view(np.uint32) & 0xFFFF) == 0))


def scaled_values_bf16_exact(fmt: QuantFormat) -> bool:
    """True when every product value[code] * S of an element value and a decodable block scale is exact in
    fp32 and in bf16 (so dequantized bf16 needs no rounding and a bf16 MMA sees exact operands), e.g. MXFP4,
    NVFP4 without its tensor scale. Formats without block scales: the values themselves."""
    vals = fmt.element.values.astype(F32)
    if not bf16_exact(vals):
        return False
    if fmt.scale_rule.method == "none":
        return True
    if not fmt.scale.tabulated:
        return False
    prod = vals[:, None].astype(np.float64) * scale_plan(fmt).values[None, :].astype(np.float64)
    prod = prod[np.isfinite(prod) & (np.abs(prod) < 3e38)]
    return bf16_exact(prod.astype(F32)) and bool(np.array_equal(prod.astype(F32), prod))


def gemm_plan(fmt: QuantFormat) -> str:
    """'fold', 'perblock' or 'none' (no exact GEMM) for the exact GEMM kernel: see ``fp4lab.kernels.gemm``."""
    vals = fmt.element.values.astype(np.float32)
    if not bf16_exact(vals):
        return "none"
    if scaled_values_bf16_exact(fmt):
        return "fold"
    fin = vals[np.isfinite(vals)].astype(np.float64)
    q = next((2.0 ** e for e in range(7, -25, -1) if np.all(np.mod(fin, 2.0 ** e) == 0)), None)
    if q is None or fmt.block.is_2d:
        return "none"
    bound = fmt.block_size * float(np.max(np.abs(fin))) ** 2 / (q * q)
    return "perblock" if bound < 2**24 and fmt.block_size >= 16 else "none"


def element_decode_kind(fmt: QuantFormat) -> DecodeCx:
    """In-register decoding of element codes (dequantize, fake-quantize, GEMM): ``ElementDecode``."""
    g = fmt.element
    if isinstance(g, FloatGrid) and g.signed and g.specials == "none" and g.subnormals:
        return DecodeCx(KIND=ElementDecode.FLOAT.code, EB=g.exponent_bits, MB=g.mantissa_bits, BIAS=g.exponent_bias,
                        STEP=0.0)
    if isinstance(g, IntGrid):
        return DecodeCx(KIND=ElementDecode.INT.code, EB=g.bits, MB=0, BIAS=0, STEP=float(g.step))
    return DecodeCx(KIND=ElementDecode.TABLE.code, EB=0, MB=0, BIAS=0, STEP=0.0)
