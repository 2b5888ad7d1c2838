"""Host-side derivation of the constants a Triton kernel needs from a ``QuantFormat`` (no triton import here).

Kernels never see a format's name: they get threshold/level/code tables (small arrays) and integer/float
constants, all derived below from the format model, so a grid defined in a spec file runs without new kernel code.

Element rounding (deterministic modes) is ``count(t >= thr)`` over a threshold table, as in the reference:

* path 2 (signed): ``idx = count(t >= thr)`` over the signed table, code ``= ctab[idx + signbit(t) * n_levels]``;
* path 1 (magnitude): for sign-symmetric grids whose negative-side thresholds mirror the positive ones,
  ``m = count(|t| >= mthr)`` (the strict negative-side comparison ``t < thr`` becomes ``|t| >= nextup(-thr)``),
  code ``= ctab[m + signbit(t) * (z + 1)]`` with z the index of level 0;
* path 0: path 1 where the codes are sign-magnitude (``code = m | signbit * sign_or``): no table lookup.

Float grids ExMy (subnormals, no specials, sign-magnitude codes, every value an fp32 normal) take a bit-arithmetic
fast path (``fbits``) for rtne and sr instead of the tables: see ``tile.encode_fbits_det``/``encode_fbits_sr``.
It is enabled only after ``fp4lab.emulator.fbits`` (numpy twins of those kernel formulas) reproduced
``encode_elements`` on every threshold and level and their fp32 neighbours, plus random data.

Stochastic rounding always uses the signed levels (``p = (t - lo) / (hi - lo)`` is not sign-symmetric in fp32).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fp4lab.emulator.fbits import fbits_ok
from fp4lab.errors import InputError
from fp4lab.formats.grids import FloatGrid, IntGrid
from fp4lab.formats.quant_format import QuantFormat

F32 = np.float32


def _nextup(v: np.ndarray) -> np.ndarray:
    return np.nextafter(v.astype(F32), F32(np.inf)).astype(F32)


def _pow2_ok(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


@dataclass
class ElementParams:
    """Tables and constants for rounding float32 ``t`` onto the element grid with one rounding mode."""

    path: int  # 0 sign-magnitude, 1 magnitude + table, 2 signed + table; SR uses levels/ctab_signed
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
    overflow: int  # 0 saturate, 1 nan, 2 inf
    overflow_thr: float
    ovf_nan: int
    inf_pos: int
    inf_neg: int
    fbits: bool = False  # bit-arithmetic encode (rtne, sr) of a float grid, see fbits_det / fbits_sr
    fb_m: int = 0  # mantissa bits
    fb_emin: int = 0  # exponent of the smallest normal (1 - bias)
    fb_cmax: int = 0  # largest magnitude code

    @property
    def fbits_key(self) -> int:
        """The kernels' FB constexpr: 0 off, else 1 | m << 1 | (emin + 128) << 5 | cmax << 13."""
        return (1 | self.fb_m << 1 | (self.fb_emin + 128) << 5 | self.fb_cmax << 13) if self.fbits else 0


_CACHE: dict[tuple, object] = {}
_BY_ID: dict[tuple, tuple] = {}  # (kind, id(fmt), mode) -> (fmt, constants): skips the JSON key on repeat calls


def _cached(kind: str, fmt: QuantFormat, mode: str, build):
    """Derived constants are pure functions of the format: build once per (format JSON, mode), so launches do
    not repeat the derivation (and the fbits checks) on the host. The cached objects are shared: read only."""
    same = _BY_ID.get((kind, id(fmt), mode))  # formats are frozen: the same object gives the same constants
    if same is not None and same[0] is fmt:
        return same[1]
    key = (kind, fmt.model_dump_json(), mode)
    hit = _CACHE.get(key)
    if hit is None:
        if len(_CACHE) > 256:
            _CACHE.clear()
        hit = _CACHE[key] = build(fmt, mode)
    if len(_BY_ID) > 256:
        _BY_ID.clear()
    _BY_ID[(kind, id(fmt), mode)] = (fmt, hit)
    return hit


def element_params(fmt: QuantFormat, mode: str) -> ElementParams:
    """Element tables/constants of ``fmt`` for rounding ``mode`` (cached; read only)."""
    return _cached("element", fmt, mode, _element_params)


def scale_params(fmt: QuantFormat) -> ScaleParams:
    """Scale constants of ``fmt`` (cached; read only)."""
    return _cached("scale", fmt, "", lambda f, _m: _scale_params(f))


def _element_params(fmt: QuantFormat, mode: str) -> ElementParams:
    from fp4lab.emulator.ref_encode import nan_element_code

    g = fmt.element
    if g.bits > 8:
        raise InputError(f"kernels: format '{fmt.name}' has {g.bits}-bit element codes; the Triton kernels support up to 8")
    lv = g.levels.astype(F32)
    cpos = g.level_codes_pos.astype(np.int32)
    cneg = g.level_codes_neg.astype(np.int32)
    n = lv.size
    signed_tab = np.concatenate([cpos, cneg]).astype(np.int32)
    det_mode = "rtne" if mode == "sr" else mode
    thr = g.thresholds(det_mode).astype(F32)
    z = int(np.searchsorted(g.levels, 0.0))
    path, mthr, mtab, half, sign_or = 2, thr, signed_tab, n, 0
    if g.is_sign_symmetric and z == n - 1 - z:
        pos = thr[z:]
        neg = _nextup(-thr[:z][::-1])
        if np.array_equal(pos.view(np.uint32), neg.view(np.uint32)):
            mpos = cpos[z:]
            mneg = cneg[z::-1]
            mtab = np.concatenate([mpos, mneg]).astype(np.int32)
            path, mthr, half = 1, pos, z + 1
            m = np.arange(z + 1)
            for so in (1 << (g.bits - 1),):
                if np.array_equal(mpos, m) and np.array_equal(mneg, m | so):
                    path, sign_or = 0, so
    vals = g.values.astype(F32)
    inf = g.inf_codes or (0, 0)
    gaps = (lv[1:] - lv[:-1]).astype(F32)
    mant = gaps.view(np.uint32) & np.uint32(0x7FFFFF)
    expo = (gaps.view(np.uint32) >> np.uint32(23)) & np.uint32(0xFF)
    pow2 = bool(np.all(mant == 0) and np.all((expo > 1) & (expo < 253)))
    inv = (F32(1.0) / gaps).astype(F32) if pow2 else np.ones_like(gaps)
    fb = None
    if (mode in ("rtne", "sr") and path == 0 and isinstance(g, FloatGrid) and g.signed and g.subnormals
            and g.specials == "none" and sign_or == 1 << (g.bits - 1)):
        m, emin = g.mantissa_bits, 1 - g.exponent_bias
        cmax, vmax = (1 << (g.bits - 1)) - 1, float(lv[-1])
        if m >= 1 and emin - m >= -125 and vmax < 2.0 ** 126 and fbits_ok(fmt, m, emin, cmax, vmax, g.thresholds("rtne")):
            fb = (m, emin, cmax)
    return ElementParams(
        path=path, thr=np.ascontiguousarray(mthr), ctab=mtab, half=half, sign_or=sign_or,
        levels=lv, ctab_signed=signed_tab, values=vals, inv_gaps=inv, pow2_gaps=pow2,
        nan_code=nan_element_code(g, fmt.nan_element),
        overflow={"saturate": 0, "nan": 1, "inf": 2}[fmt.overflow],
        overflow_thr=float(g.overflow_threshold), ovf_nan=int(g.nan_code or 0), inf_pos=inf[0], inf_neg=inf[1],
        fbits=fb is not None, fb_m=fb[0] if fb else 0, fb_emin=fb[1] if fb else 0, fb_cmax=fb[2] if fb else 0,
    )


@dataclass
class ScaleParams:
    """Constants for choosing, encoding and decoding block scales."""

    method: int  # 0 none, 1 amax family, 2 exponent rule (floor/ceil/even)
    exp_mode: int = 0  # 0 floor, 1 ceil, 2 even
    even_add: int = 0
    emax: int = 0
    skind: int = 0  # 0 pow2, 1 float table, 2 fp32, 3 bf16, 4 float by bit arithmetic (snan = mb << 16 | nan+1)
    sround: int = 0  # 0 rtne, 1 ceil, 2 floor; + 4: pow2 codes above the largest become NaN (scale_overflow)
    sbias: int = 0
    snan: int = 0  # pow2 NaN code / float-table NaN code
    targets: np.ndarray = field(default_factory=lambda: np.ones(1, F32))
    inv_targets: np.ndarray = field(default_factory=lambda: np.ones(1, F32))
    sdiv: bool = True
    two_level: bool = False
    ts_first: bool = False  # two-level values as value * (S * ts) (dequantize_order "scale_product_first")
    err: int = 0  # target selection error: bit 0 absolute (select_by "sae"), bit 1 value * (S * ts)
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
    encode: bool = False  # TransformerEngine "encode" arithmetic (g = target*smax/amax_t, t = x * min(1/(S*ts), FLT_MAX))


def _scale_params(fmt: QuantFormat) -> ScaleParams:
    from fp4lab.emulator.ref_encode import special_scale_code

    rule, sfmt = fmt.scale_rule, fmt.scale
    if rule.method == "none":
        return ScaleParams(method=0)
    p = ScaleParams(method=2 if rule.ocp_exponent else 1)
    p.skind = {"pow2": 0, "float": 1, "fp32": 2, "bf16": 3}[sfmt.kind]
    p.sbias = sfmt.exponent_bias if sfmt.kind in ("pow2", "float") else 0
    if p.method == 2:
        p.exp_mode = {"floor": 0, "ceil": 1, "even": 2}[rule.method]
        if rule.method == "even":
            p.even_add = 1 << (22 - fmt.element.mantissa_bits)
        p.emax = fmt.emax_elem
    p.sround = {"rtne": 0, "ceil": 1, "floor": 2}[rule.effective_rounding] + 4 * (rule.scale_overflow == "nan")
    if sfmt.kind == "pow2":
        p.snan = sfmt.pow2_nan_code
    tg = np.array(fmt.targets, dtype=np.float64)
    p.targets = tg.astype(F32)
    p.inv_targets = (F32(1.0) / tg.astype(F32)).astype(F32)
    p.sdiv = rule.scale_division == "divide"
    p.two_level = fmt.tensor_scale != "none"
    p.ts_first = p.two_level and rule.dequantize_order == "scale_product_first"
    p.err = int(rule.select_by == "sae") | 2 * int(p.ts_first)
    if p.two_level:
        smax = rule.max_scale or sfmt.max
        p.ts_den = float(F32(fmt.targets[0] * smax))
    p.min_scale = None if rule.min_scale is None else float(F32(rule.min_scale))
    p.max_scale = None if rule.max_scale is None else float(F32(rule.max_scale))
    if sfmt.kind == "float":
        grid = sfmt.grid
        lv = grid.levels.astype(F32)
        nonneg = lv >= 0
        lvn = lv[nonneg]
        p.scpos = grid.level_codes_pos[nonneg].astype(np.int32)
        p.smax = float(lvn[-1])
        p.snan = int(grid.nan_code or 0)
        r = rule.effective_rounding
        if r == "rtne":
            p.stab = grid.thresholds("rtne")[lv[:-1] >= 0].astype(F32)
        elif r == "ceil":
            p.stab, p.strict = lvn.copy(), True
        else:
            p.stab = lvn[1:].copy()
    if sfmt.kind in ("fp32", "bf16"):
        p.smax = float(F32(sfmt.max))  # +Inf ideal scales saturate to the largest finite value
    if sfmt.kind in ("pow2", "float"):
        p.svals = sfmt.decode(np.arange(1 << sfmt.bits)).astype(F32)
    if sfmt.kind == "float" and sfmt.subnormals and sfmt.exponent_bits <= 7 and sfmt.exponent_bias <= 127:
        nan = sfmt.grid.nan_code
        p.skind = 4
        p.snan = (sfmt.mantissa_bits << 16) | ((nan if nan is not None else -1) + 1)
        codes = np.arange(1 << sfmt.bits)
        arith = ((codes.astype(np.uint32) << np.uint32(23 - sfmt.mantissa_bits)).view(F32)
                 * F32(2.0 ** (127 - sfmt.exponent_bias))).astype(F32)
        arith = np.where(codes == (nan if nan is not None else -1), np.nan, arith).astype(F32)
        finite = np.isfinite(p.svals)
        if not (np.array_equal(finite, np.isfinite(arith)) and np.array_equal(arith[finite], p.svals[finite])):
            p.skind = 1
            p.snan = int(sfmt.grid.nan_code or 0)
    if rule.zero_block != "as_computed":
        p.zero_code = special_scale_code(sfmt, rule.zero_block)
    p.inf_code = special_scale_code(sfmt, "nan" if rule.inf_policy == "propagate" else "max")
    p.nan_code = special_scale_code(sfmt, "nan")
    p.nan_prop = rule.nan_policy == "propagate"
    p.ediv = rule.element_scaling == "divide"
    p.encode = rule.scale_arithmetic == "encode"
    p.div_pow2 = p.ediv and sfmt.kind == "pow2" and not p.two_level and not p.encode
    return p


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
    if fmt.scale.kind not in ("pow2", "float"):
        return False
    prod = vals[:, None].astype(np.float64) * scale_params(fmt).svals[None, :].astype(np.float64)
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


def element_decode_kind(fmt: QuantFormat) -> tuple[int, int, int, int, float]:
    """(kind, e_bits, m_bits, bias, step) for in-register decoding of element codes (dequantize, GEMM):
    kind 0 sign-magnitude float without specials, 1 two's-complement int times step, 2 table lookup."""
    g = fmt.element
    if isinstance(g, FloatGrid) and g.signed and g.specials == "none" and g.subnormals:
        return 0, g.exponent_bits, g.mantissa_bits, g.exponent_bias, 0.0
    if isinstance(g, IntGrid):
        return 1, g.bits, 0, 0, float(g.step)
    return 2, 0, 0, 0, 0.0
