"""The Triton kernels' constants for a ``QuantFormat`` (host side, no triton import): the element and scale plans
(``fp4lab.numerics.plan``) in the kernels' integer vocabulary, so a grid defined in a spec file runs without new
kernel code. Kernels never see a format's name, only small tables and constexprs.

Element rounding (deterministic modes), the constexpr ``PATH`` (``plan.Encoder``):

* 2 (signed): ``idx = count(t >= thr)`` over the signed table, code ``ctab[idx + signbit(t) * n_levels]``;
* 1 (magnitude): ``m = count(|t| >= mthr)``, code ``ctab[m + signbit(t) * (z + 1)]``, z the index of level 0;
* 0 (sign-magnitude): ``code = m | signbit(t) * sign_or``, no table lookup.

``ElementCx.FBITS`` selects the bit-arithmetic encoders of ExMy grids for rtne and sr (``tile.encode_fbits_det`` /
``encode_fbits_sr``, whose numpy twins in ``fp4lab.numerics.fbits`` were checked against the reference encoder).
Stochastic rounding always uses the signed levels (``p = (t - lo) / (hi - lo)`` is not sign-symmetric in fp32).

The kernels take these constants as three records, one constexpr each: ``ELEM`` (``ElementCx``, the element
encoder), ``SCALE`` (``ScaleCx``, choosing, encoding and decoding block scales) and ``DEC`` (``DecodeCx``,
decoding element codes in registers). Each field has one meaning; a launch passes ``ELEM=ep.cx, SCALE=sp.cx``
beside its tile geometry. The tables themselves (thresholds, levels, scale values) are runtime arguments.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.grids import FloatGrid, IntGrid
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.plan import (
    ElementPlan,
    Encoder,
    Overflow,
    ScaleChoice,
    ScaleKind,
    ScalePlan,
    ScaleRounding,
    cached_per_format,
    element_plan,
    scale_plan,
)
from fp4lab.numerics.range_policy import kernel_constants

F32 = np.float32

PATH = {Encoder.SIGN_MAGNITUDE: 0, Encoder.MAGNITUDE: 1, Encoder.SIGNED: 2}
OVF = {Overflow.SATURATE: 0, Overflow.NAN: 1, Overflow.INF: 2}
METHOD = {ScaleChoice.NONE: 0, ScaleChoice.AMAX: 1, ScaleChoice.EXPONENT: 2}
SKIND = {ScaleKind.POW2: 0, ScaleKind.FLOAT_TABLE: 1, ScaleKind.FP32: 2, ScaleKind.BF16: 3, ScaleKind.FLOAT_BITS: 4}
SROUND = {ScaleRounding.RTNE: 0, ScaleRounding.CEIL: 1, ScaleRounding.FLOOR: 2}


def _pow2_ok(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def _sized(a: np.ndarray) -> tuple[int, int]:
    """(entries, bit length of the entry count) of a table: the unrolled-compare / bisection choice of count_tab."""
    return int(a.size), int(a.size).bit_length()


class ElementCx(NamedTuple):
    """The element encoder's constexprs (``ELEM`` in the kernels). ``PATH``: 0 sign-magnitude, 1 magnitude +
    table, 2 signed + table (module docstring); ``SIGN_OR``: the code's sign bit (PATH 0); ``OVF``: 0 saturate,
    1 NaN code, 2 signed Inf codes at |t| >= the overflow threshold; ``SZ_POS``: signed_zero "positive" (the
    sign column is t < 0, else the sign bit); ``SR``: stochastic rounding; ``POW2_GAPS``: SR with every level
    gap a normal power of two (the quotient is a product); ``N_THR`` / ``N_LVL``: threshold and level counts,
    ``L_THR`` / ``L_LVL`` their bit lengths; ``FBITS``: rtne / sr by bit arithmetic on an ExMy grid with
    ``FB_M`` mantissa bits, smallest normal exponent ``FB_EMIN`` and largest magnitude code ``FB_CMAX``;
    ``DIRECTED``: rtp / rtm, where a quotient that underflowed to +-0 counts as +-2^-149."""

    PATH: int
    SIGN_OR: int
    OVF: int
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
    DIRECTED: bool = False


class ScaleCx(NamedTuple):
    """Block-scale constexprs (``SCALE`` in the kernels). ``METHOD``: 0 none, 1 amax family, 2 exponent rule
    (``EXP_MODE`` 0 floor, 1 ceil, 2 even, with ``EVEN_ADD`` and the element's ``EMAX``); ``KIND``: 0 pow2,
    1 float table, 2 fp32 bits, 3 bf16 bits, 4 ExMy float by bit arithmetic (``MB`` mantissa bits); ``ROUND``:
    0 rtne, 1 ceil, 2 floor; ``OVF_NAN``: pow2 ideals above the largest code take the NaN code; ``BIAS``:
    exponent bias; ``NAN``: the NaN scale code (-1: none, float-bits kind); ``DIV``: ideal = amax / target by
    division (else times 1 / target); ``TWO_LEVEL`` / ``TS_FIRST``: a tensor scale, applied as value * (S * ts);
    ``HAS_MIN`` / ``HAS_MAX``: clamps of the ideal scale; ``STRICT``: float-table search counts levels < v;
    ``MAXV``: largest finite scale; ``HAS_ZB``: all-zero blocks take a fixed code; ``NAN_PROP``: Inf / NaN
    blocks take the inf / nan codes; ``EDIV``: elements x / S (else x * (1 / S)); ``DIV_POW2``: that division
    is exact as a product; ``ENCODE``: TransformerEngine's encode arithmetic; ``N_TG``: amax targets (4-over-6
    selection when > 1); ``N_TAB`` / ``L_TAB``: float-table size and bit length, ``N_POS``: positive scale
    codes; ``ERR_ABS``: 4-over-6 selection by absolute error (else squared); range edges
    (``range_policy.kernel_constants``): ``TS_LO`` / ``TS_HI``, ``BUMP_LO`` / ``BUMP_HI``, ``S_CRIT``."""

    METHOD: int
    EXP_MODE: int
    EVEN_ADD: int
    EMAX: int
    KIND: int
    ROUND: int
    OVF_NAN: bool
    BIAS: int
    NAN: int
    MB: int
    DIV: bool
    TWO_LEVEL: bool
    TS_FIRST: bool
    HAS_MIN: bool
    HAS_MAX: bool
    STRICT: bool
    MAXV: float
    HAS_ZB: bool
    NAN_PROP: bool
    EDIV: bool
    DIV_POW2: bool
    ENCODE: bool
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
    """In-register decoding of element codes (``DEC`` in the kernels): ``KIND`` 0 sign-magnitude ExMy without
    specials (``EB`` exponent bits, ``MB`` mantissa bits, ``BIAS``), 1 two's-complement ``EB``-bit int times
    ``STEP``, 2 value-table lookup."""

    KIND: int
    EB: int
    MB: int
    BIAS: int
    STEP: float


@dataclass(frozen=True, eq=False)
class ElementParams:
    """Tables and constants for rounding float32 ``t`` onto the element grid with one rounding mode."""

    path: int  # PATH: 0 sign-magnitude, 1 magnitude + table, 2 signed + table; SR uses levels/ctab_signed
    thr: np.ndarray  # float32 thresholds for ``path``
    ctab: np.ndarray  # int32 code table for ``path``
    half: int  # offset of the negative half in ``ctab``
    sign_or: int
    levels: np.ndarray  # float32 signed levels (SR)
    ctab_signed: np.ndarray  # int32 [cpos, cneg] (SR)
    values: np.ndarray  # float32 value of every code (4-over-6 error, dequantize)
    inv_gaps: np.ndarray  # float32 1 / float32(levels[j+1] - levels[j]) (SR, used when every gap is a power of two)
    pow2_gaps: bool  # SR: p = (t - lo) * inv_gap equals div_rn(t - lo, hi - lo) exactly
    nan_code: int
    overflow: int  # OVF: 0 saturate, 1 nan, 2 inf
    overflow_thr: float
    ovf_nan: int
    inf_pos: int
    inf_neg: int
    cx: ElementCx | None = None  # the constexpr record (also: FBITS, the bit-arithmetic encoders of ExMy grids)

    @property
    def one_spacing(self) -> bool:
        """A uniform ExMy grid (one spacing: E1My) encoded by bit arithmetic, where the kernels may multiply by
        the reciprocal scale and divide exactly only near rounding boundaries (``quantize._encode_blocks``)."""
        cx = self.cx
        return cx.FBITS and ((cx.FB_CMAX + 1) >> cx.FB_M) == 2


def element_params(fmt: QuantFormat, mode: str) -> ElementParams:
    """Element tables/constants of ``fmt`` for rounding ``mode`` (cached; read only)."""
    if fmt.element.bits > 8:
        raise InputError(f"kernels: format '{fmt.name}' has {fmt.element.bits}-bit element codes; the Triton "
                         "kernels support up to 8")
    return _element_params(element_plan(fmt, mode))


def _scale_params_of(fmt: QuantFormat) -> ScaleParams:
    """Scale constants of ``fmt`` (cached; read only)."""
    sp = _scale_params(scale_plan(fmt))
    edges = kernel_constants(fmt)
    cx = ScaleCx(
        sp.method, sp.exp_mode, sp.even_add, sp.emax, sp.skind, sp.sround, sp.overflow_nan, sp.sbias, sp.snan,
        sp.mantissa_bits, sp.sdiv, sp.two_level, sp.ts_first, sp.min_scale is not None, sp.max_scale is not None,
        sp.strict, sp.smax, sp.zero_code >= 0, sp.nan_prop, sp.ediv, sp.div_pow2, sp.encode, int(sp.targets.size),
        *_sized(sp.stab), int(sp.scpos.size), sp.select_abs, edges["TS_LO"], edges["TS_HI"], edges["BUMP_LO"],
        edges["BUMP_HI"], edges["S_CRIT"])
    return dataclasses.replace(sp, cx=cx)


scale_params = cached_per_format(_scale_params_of)


@lru_cache(maxsize=512)  # keyed by the plan's identity: plans are cached per format
def _element_params(ep: ElementPlan) -> ElementParams:
    fb = ep.float_bits or (0, 0, 0)
    inf = ep.inf_codes or (0, 0)
    cx = ElementCx(PATH[ep.encoder], ep.sign_or, OVF[ep.overflow], not ep.keep_sign, ep.stochastic,
                   ep.pow2_gaps and ep.stochastic, *_sized(ep.table_thr), *_sized(ep.levels),
                   ep.float_bits is not None, *fb, ep.mode in ("rtp", "rtm"))
    return ElementParams(
        path=PATH[ep.encoder], thr=ep.table_thr, ctab=ep.table_codes, half=ep.half, sign_or=ep.sign_or,
        levels=ep.levels, ctab_signed=ep.codes, values=ep.values, inv_gaps=ep.inv_gaps, pow2_gaps=ep.pow2_gaps,
        nan_code=ep.nan_code, overflow=OVF[ep.overflow], overflow_thr=float(ep.overflow_thr),
        ovf_nan=ep.grid_nan_code or 0, inf_pos=inf[0], inf_neg=inf[1], cx=cx)


@dataclass(frozen=True, eq=False)
class ScaleParams:
    """Constants for choosing, encoding and decoding block scales."""

    method: int  # METHOD: 0 none, 1 amax family, 2 exponent rule (floor/ceil/even)
    exp_mode: int = 0  # EXP_MODE: plan.ExponentRule.code (0 floor, 1 ceil, 2 even)
    even_add: int = 0
    emax: int = 0
    skind: int = 0  # KIND: 0 pow2, 1 float table, 2 fp32, 3 bf16, 4 float by bit arithmetic
    sround: int = 0  # ROUND: 0 rtne, 1 ceil, 2 floor
    overflow_nan: bool = False  # pow2 codes above the largest become NaN (scale_overflow "nan")
    sbias: int = 0
    snan: int = 0  # pow2 / float NaN code (float bits: -1 for none)
    mantissa_bits: int = 0  # float-bits scales
    targets: np.ndarray = field(default_factory=lambda: np.ones(1, F32))
    inv_targets: np.ndarray = field(default_factory=lambda: np.ones(1, F32))
    sdiv: bool = True
    two_level: bool = False
    ts_first: bool = False  # two-level values as value * (S * ts) (dequantize_order "scale_product_first")
    select_abs: bool = False  # 4-over-6 target selection by absolute error (select_by "sae"), else squared
    ts_den: float = 1.0
    min_scale: float | None = None
    max_scale: float | None = None
    stab: np.ndarray = field(default_factory=lambda: np.zeros(1, F32))  # float-table encode thresholds/levels
    strict: bool = False
    scpos: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int32))
    smax: float = 0.0
    svals: np.ndarray = field(default_factory=lambda: np.zeros(1, F32))  # decoded value of every scale code
    zero_code: int = -1
    inf_code: int = 0
    nan_code: int = 0
    nan_prop: bool = True
    ediv: bool = True  # element scaling x / S (else x * (1/S))
    div_pow2: bool = False  # x / S == x * (1/S) exactly (single-level pow2 scales)
    # TransformerEngine "encode" arithmetic (g = target*smax/amax_t, t = x * min(1/(S*ts), FLT_MAX))
    encode: bool = False
    cx: ScaleCx | None = None  # the constexpr record (scale_params)


@lru_cache(maxsize=256)  # keyed by the plan's identity: plans are cached per format
def _scale_params(sp: ScalePlan) -> ScaleParams:
    if sp.choice == ScaleChoice.NONE:
        return ScaleParams(method=0)
    f: dict = {}
    if sp.choice == ScaleChoice.EXPONENT:
        f.update(exp_mode=sp.exponent_rule.code, even_add=sp.even_add, emax=sp.emax_elem)
    snan = sp.table_nan or 0
    if sp.float_scale:
        f.update(scpos=sp.level_codes, smax=float(sp.max_value))
        if sp.rounding == ScaleRounding.RTNE:  # index = count(stab <= v)
            f["stab"] = sp.thresholds
        elif sp.rounding == ScaleRounding.CEIL:  # count(levels < v)
            f.update(stab=sp.levels, strict=True)
        else:  # count(levels[1:] <= v)
            f["stab"] = sp.levels[1:]
        if sp.kind == ScaleKind.FLOAT_BITS:
            snan = sp.table_nan if sp.table_nan is not None else -1
            f["mantissa_bits"] = sp.mantissa_bits
    if sp.kind in (ScaleKind.FP32, ScaleKind.BF16):
        f["smax"] = float(sp.max_value)  # +Inf ideal scales saturate to the largest finite value
    if sp.values is not None:
        f["svals"] = sp.values
    two_level = sp.two_level
    ts_first = two_level and sp.scale_product_first
    ediv = sp.divide_elements
    return ScaleParams(
        method=METHOD[sp.choice], skind=SKIND[sp.kind], sround=SROUND[sp.rounding], overflow_nan=sp.overflow_nan,
        sbias=sp.bias, snan=snan, targets=sp.targets, inv_targets=sp.inv_targets, sdiv=sp.divide_ideal,
        two_level=two_level, ts_first=ts_first, select_abs=bool(sp.select_abs),
        ts_den=float(sp.ts_den), min_scale=None if sp.min_scale is None else float(sp.min_scale),
        max_scale=None if sp.max_scale is None else float(sp.max_scale),
        zero_code=-1 if sp.zero_code is None else sp.zero_code, inf_code=sp.inf_code,
        nan_code=0 if sp.nan_code is None else sp.nan_code,  # read only with nan_policy "propagate"
        nan_prop=sp.nan_propagate, ediv=ediv, encode=sp.encode_arith,
        div_pow2=ediv and sp.kind == ScaleKind.POW2 and not two_level and not sp.encode_arith, **f)


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
    """In-register decoding of element codes (dequantize, fake-quantize, GEMM): kind 0 sign-magnitude float
    without specials, 1 two's-complement int times step, 2 table lookup."""
    g = fmt.element
    if isinstance(g, FloatGrid) and g.signed and g.specials == "none" and g.subnormals:
        return DecodeCx(0, g.exponent_bits, g.mantissa_bits, g.exponent_bias, 0.0)
    if isinstance(g, IntGrid):
        return DecodeCx(1, g.bits, 0, 0, float(g.step))
    return DecodeCx(2, 0, 0, 0, 0.0)
