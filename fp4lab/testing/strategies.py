"""Hypothesis strategies for testing number formats, quantizers and kernels against fp4lab's contract.

Import them in your own test-suite (needs ``hypothesis``, a test dependency of fp4lab)::

    from hypothesis import given
    from fp4lab.testing import block_inputs, element_grids, quant_formats, rounding_modes

    @given(st.data())
    def test_my_kernel(data):
        fmt = data.draw(quant_formats())
        x = data.draw(block_inputs(fmt))
        assert np.array_equal(my_quantize(x, fmt).codes, fp4lab.quantize(x, fmt).codes)

Strategies (every generated grid value, scale and target is exactly representable in float32). The input
strategies draw their adversarial values from ``fp4lab.testing.inputs`` (the element kinds ``ELEMENT_KINDS``
through ``compose_elements``, the float32 specials ``SPECIAL_F32``): hypothesis only draws the parameters.

``element_grids(max_bits=8, kinds=("float", "int", "table"))``
    Random element grids: ``FloatGrid`` ExMy with a random bias, with or without subnormals, with specials
    ``none`` / ``fn`` / ``ieee``, signed or unsigned; ``IntGrid`` (symmetric or two's complement, step
    ``odd * 2^k``); ``TableGrid`` given by sign-magnitude ``magnitudes`` or by a full ``values`` table in random
    code order. Only grids that pass validation are produced.
``scale_formats(kinds=("pow2", "float", "fp32", "bf16"))``
    E8M0 or a narrower/rebiased pow2 format; UE4M3, signed E4M3, UE5M3 or a random unsigned ExMy float scale;
    FP32; BF16.
``quant_formats(element=None, two_d=True, ...)``
    Complete ``QuantFormat`` s: 1-D blocks of 4 to 64 elements or 2-D tiles (e.g. 4x4, 16x16); every scale
    format; rules ``amax`` (scale rounding rtne/ceil/floor, division or reciprocal, clamps, one or two
    targets), ``rceil``, and the MX exponent rules ``floor`` / ``ceil`` / ``even``; all-zero / NaN / Inf block
    policies; two-level (tensor scale) formats; every rounding mode, NaN-element and overflow policy the grid
    allows. ``element`` fixes the grid (a grid or a strategy of grids).
``block_inputs(fmt, max_blocks=4, allow_nan=True, allow_inf=True, allow_huge=True, exp_range=(-40, 40))``
    float32 arrays shaped for ``fmt`` (last axis, or the last two axes for 2-D tiles), built block by block
    around a power-of-two block scale ``P``: the block amax ``grid_max * P`` (so that FP32, MX and RCEIL rules
    all choose ``S = P`` and every element below lands exactly where intended), grid levels and midpoints
    between levels times ``P`` (rounding ties), both of them +-1 ulp, +-1 ulp around powers of two, uniform
    values, +0 and -0, float32 subnormals, huge values (up to float32 max), NaN and +-Inf (optional), and whole
    all-zero blocks. ``P = 2^k`` with k drawn from ``exp_range``; without ``allow_inf``, values that overflow
    float32 are replaced by +-float32 max.
``range_edge_inputs(fmt, max_blocks=4)``
    ``block_inputs`` of a whole tensor at one end of float32's range: every block scale ``P = 2^k`` with k in
    [-149, -100] (tensor amax below the two-level tensor-scale floor, float32-subnormal blocks) or in [100, 127]
    (values up to float32 max, never +-Inf from the construction).
``float32_arrays(shape=None, allow_nan=True, allow_inf=True)``
    float32 arrays of any values with the same adversarial mix, not tied to a format.
``rounding_modes(deterministic_only=False)``
    every name of ``fp4lab.formats.ROUNDING_MODES``, or only ``DETERMINISTIC_MODES`` (round to nearest and
    truncation).
"""

from __future__ import annotations

import typing
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fp4lab.formats.grids import DETERMINISTIC_MODES, ROUNDING_MODES, FloatGrid, IntGrid, TableGrid
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.formats.rules import AMAX_METHODS, OCP_METHODS, BlockLayout, ScaleRule
from fp4lab.formats.scales import ScaleFormat, ScaleKind
from fp4lab.testing.inputs import ELEMENT_KINDS as _KINDS
from fp4lab.testing.inputs import F32_MAX, SPECIAL_F32
from fp4lab.testing.inputs import compose_elements as _compose

__all__ = [
    "block_inputs", "element_grids", "float32_arrays", "quant_formats", "range_edge_inputs", "rounding_modes",
    "scale_formats",
]


def _choices(model: Any, field: str) -> tuple:
    """The values a ``Literal`` field of a pydantic model allows, in declaration order."""
    return typing.get_args(model.model_fields[field].annotation)


SCALE_KINDS: tuple[str, ...] = typing.get_args(ScaleKind)
# every scale rule method, element-only ("none") last; quant_formats draws "amax" twice as often
METHODS: tuple[str, ...] = tuple(m for m in _choices(ScaleRule, "method") if m != "none") + ("none",)


def _valid(factory: Any, **kwargs: Any) -> Any:
    """The model, or None if validation rejects these fields (filtered out by the callers)."""
    try:
        return factory(**kwargs)
    except ValueError:
        return None


# ---- element grids -------------------------------------------------------------------------------------------
@st.composite
def _float_grids(draw: st.DrawFn, max_bits: int) -> FloatGrid | None:
    signed = draw(st.booleans()) if max_bits > 2 else False
    e = draw(st.integers(1, min(5, max_bits - int(signed))))
    m = draw(st.integers(0, min(3, max_bits - int(signed) - e)))
    default_bias = (1 << (e - 1)) - 1
    bias = draw(st.one_of(st.none(), st.integers(default_bias - 4, default_bias + 8)))
    return _valid(
        FloatGrid, exponent_bits=e, mantissa_bits=m, bias=bias, signed=signed,
        subnormals=draw(st.booleans()), specials=draw(st.sampled_from(["none", "none", "fn", "ieee"])),
    )


_steps = st.builds(lambda odd, k: float(np.ldexp(2 * odd + 1, k)), st.integers(0, 7), st.integers(-12, 4))


@st.composite
def _int_grids(draw: st.DrawFn, max_bits: int) -> IntGrid | None:
    return _valid(IntGrid, bits=draw(st.integers(2, max_bits)),
                  range=draw(st.sampled_from(_choices(IntGrid, "range"))), step=draw(_steps))


def _positive_f32(lo_exp: int = -20, hi_exp: int = 20) -> st.SearchStrategy[float]:
    """Positive float32 values with at most 8 significant bits, 2^lo_exp .. 2^hi_exp (keeps tables readable)."""
    return st.builds(lambda mant, k: float(np.ldexp(mant, k)), st.integers(128, 255),
                     st.integers(lo_exp - 7, hi_exp - 7))


@st.composite
def _table_grids(draw: st.DrawFn, max_bits: int) -> TableGrid | None:
    bits = draw(st.integers(2, min(max_bits, 5)))
    n = 1 << bits
    if draw(st.booleans()):
        mags = draw(st.lists(_positive_f32(), min_size=n // 2 - 1, max_size=n // 2 - 1, unique=True))
        return _valid(TableGrid, bits=bits, magnitudes=[0.0] + sorted(mags))
    vals = draw(st.lists(st.builds(lambda s, v: s * v, st.sampled_from([-1.0, 1.0]), _positive_f32()),
                         min_size=n - 1, max_size=n - 1, unique=True))
    zero_at = draw(st.integers(0, n - 1))
    table = vals[:zero_at] + [draw(st.sampled_from([0.0, -0.0]))] + vals[zero_at:]
    return _valid(TableGrid, bits=bits, values=table)


def element_grids(max_bits: int = 8, kinds: tuple[str, ...] = ("float", "int", "table")) -> st.SearchStrategy:
    """Valid random element grids (FloatGrid / IntGrid / TableGrid) of at most ``max_bits`` bits."""
    makers = {"float": _float_grids, "int": _int_grids, "table": _table_grids}
    return st.one_of(*[makers[k](max_bits) for k in kinds]).filter(lambda g: g is not None)


# ---- scale formats -------------------------------------------------------------------------------------------
NAMED_SCALE_FIELDS: dict[str, dict[str, Any]] = {
    "e8m0": dict(kind="pow2", exponent_bits=8, bias=127),
    "ue4m3": dict(kind="float", exponent_bits=4, mantissa_bits=3, bias=7, specials="fn"),
    "e4m3": dict(kind="float", exponent_bits=4, mantissa_bits=3, bias=7, signed=True, specials="fn"),
    "ue5m3": dict(kind="float", exponent_bits=5, mantissa_bits=3, bias=15, specials="fn"),
    "fp32": dict(kind="fp32"),
    "bf16": dict(kind="bf16"),
}


@st.composite
def _random_scale(draw: st.DrawFn, kind: str) -> ScaleFormat | None:
    if kind == "pow2":
        e = draw(st.integers(5, 8))
        # keep every finite scale 2^(c - bias), c = 0 .. 2^e - 2, inside float32's normal range
        lo, hi = max((1 << e) - 2 - 127, 0), min(127, (1 << e) - 2)
        default = (1 << (e - 1)) - 1
        bias = draw(st.integers(max(lo, default - 4), min(hi, default + 4)))
        return _valid(ScaleFormat, kind="pow2", exponent_bits=e, bias=bias)
    if kind == "float":
        e = draw(st.integers(3, 6))
        m = draw(st.integers(1, 3))
        return _valid(ScaleFormat, kind="float", exponent_bits=e, mantissa_bits=m,
                      subnormals=draw(st.booleans()), specials=draw(st.sampled_from(["fn", "none"])))
    return ScaleFormat(kind=kind)


def scale_formats(kinds: tuple[str, ...] = SCALE_KINDS) -> st.SearchStrategy:
    """Scale formats of the given kinds, each kind equally likely: E8M0 or a random pow2 format; UE4M3, E4M3,
    UE5M3 or a random unsigned ExMy float; FP32; BF16."""
    named = {k: [ScaleFormat(name=n, **f) for n, f in NAMED_SCALE_FIELDS.items() if f["kind"] == k] for k in kinds}

    def of_kind(kind: str) -> st.SearchStrategy:
        if kind in ("pow2", "float"):
            return st.one_of(st.sampled_from(named[kind]), _random_scale(kind).filter(lambda s: s is not None))
        return st.just(named[kind][0])

    return st.sampled_from(kinds).flatmap(of_kind)


# ---- complete formats ----------------------------------------------------------------------------------------
_BLOCKS_1D = [4, 8, 16, 32, 64]
_BLOCKS_2D = [[2, 2], [4, 4], [2, 8], [8, 2], [16, 16]]


def _f32_clamp_values() -> st.SearchStrategy[float]:
    return st.builds(lambda mant, k: float(np.ldexp(mant, k)), st.integers(1, 15), st.integers(-20, 10))


@st.composite
def _quant_format(draw: st.DrawFn, element: Any, two_d: bool, scale_kinds: tuple[str, ...],
                  methods: tuple[str, ...]) -> QuantFormat | None:
    grid = draw(element) if isinstance(element, st.SearchStrategy) else element
    if grid is None:
        grid = draw(element_grids(max_bits=4))
    method = draw(st.sampled_from(methods))
    block = scale = None
    kwargs: dict[str, Any] = {}
    rule: dict[str, Any] = {"method": method}
    if method != "none":
        shape = draw(st.sampled_from(_BLOCKS_2D)) if two_d and draw(st.integers(0, 3)) == 0 \
            else [draw(st.sampled_from(_BLOCKS_1D))]
        block = BlockLayout(shape=shape)
        if method in OCP_METHODS:
            scale = draw(scale_formats(("pow2",)))
        else:
            scale = draw(scale_formats(scale_kinds))
        if method in AMAX_METHODS:
            if method == "amax":  # the default rounding drawn twice as often
                roundings = _choices(ScaleRule, "scale_rounding")
                rule["scale_rounding"] = draw(st.sampled_from(roundings[:1] + roundings))
            rule["scale_division"] = draw(st.sampled_from(_choices(ScaleRule, "scale_division")))
            if draw(st.integers(0, 3)) == 0:
                lv = grid.levels
                mags = sorted({abs(float(v)) for v in lv if v != 0})
                rule["targets"] = draw(st.lists(st.sampled_from(mags), min_size=1, max_size=2, unique=True))
            if draw(st.integers(0, 3)) == 0:
                lo = draw(_f32_clamp_values())
                rule["min_scale"] = lo
                if draw(st.booleans()):
                    rule["max_scale"] = lo * draw(st.sampled_from([1, 2, 4, 64, 2**20]))
        rule["element_scaling"] = draw(st.sampled_from(_choices(ScaleRule, "element_scaling")))
        zero_choices = [z for z in _choices(ScaleRule, "zero_block") if z != "zero" or scale.has_zero]
        rule["zero_block"] = draw(st.sampled_from(zero_choices))
        rule["nan_policy"] = draw(st.sampled_from(_choices(ScaleRule, "nan_policy")))
        rule["inf_policy"] = draw(st.sampled_from(_choices(ScaleRule, "inf_policy")))
        if scale.kind != "fp32" and method in AMAX_METHODS and draw(st.integers(0, 3)) == 0:
            kwargs["tensor_scale"] = "amax"
    has = {"saturate": True, "nan": grid.nan_code is not None, "inf": grid.inf_codes is not None}
    overflow = [o for o in _choices(QuantFormat, "overflow") if has[o]]
    rule_model = _valid(ScaleRule, **rule)
    if rule_model is None:
        return None
    return _valid(
        QuantFormat, name=f"hyp-{draw(st.integers(0, 10**6))}", element=grid, block=block, scale=scale,
        scale_rule=rule_model, rounding=draw(rounding_modes()),
        nan_element=draw(st.sampled_from(_choices(QuantFormat, "nan_element"))),
        overflow=draw(st.sampled_from(overflow)), **kwargs,
    )


def quant_formats(
    element: Any = None,
    two_d: bool = True,
    scale_kinds: tuple[str, ...] = SCALE_KINDS,
    methods: tuple[str, ...] = ("amax",) + METHODS,
) -> st.SearchStrategy[QuantFormat]:
    """Valid random ``QuantFormat`` s. ``element``: a fixed grid, a strategy of grids, or None (random 2-4 bit
    grid). ``methods`` restricts the scale rules ("none" = element-only); ``scale_kinds`` the scale formats."""
    return _quant_format(element, two_d, scale_kinds, methods).filter(lambda f: f is not None)


def rounding_modes(deterministic_only: bool = False) -> st.SearchStrategy[str]:
    """Rounding-mode names accepted by ``fp4lab.quantize``."""
    return st.sampled_from(DETERMINISTIC_MODES if deterministic_only else ROUNDING_MODES)


# ---- inputs --------------------------------------------------------------------------------------------------
# The element kinds of block_inputs (ELEMENT_KINDS, index 0 is what hypothesis shrinks towards) and their values
# (compose_elements) come from fp4lab.testing.inputs; here hypothesis draws the parameters.


@st.composite
def block_inputs(
    draw: st.DrawFn,
    fmt: QuantFormat,
    max_blocks: int = 4,
    allow_nan: bool = True,
    allow_inf: bool = True,
    allow_huge: bool = True,
    exp_range: tuple[int, int] = (-40, 40),
) -> np.ndarray:
    """float32 array blocked for ``fmt`` along the last axis (2-D tiles: the last two axes), see module doc."""
    if fmt.block is not None and fmt.block.is_2d:
        r, c = fmt.block.shape
        shape = (r * draw(st.integers(1, 2)), c * draw(st.integers(1, max(1, max_blocks // 2))))
        n_blocks = (shape[0] // r) * (shape[1] // c)
        bs = r * c
    else:
        bs = fmt.block_size if fmt.block is not None else draw(st.sampled_from([1, 2, 4, 8]))
        rows = draw(st.integers(1, 2))
        per_row = draw(st.integers(1, max_blocks))
        shape = (rows, per_row * bs)
        n_blocks = rows * per_row
    n_kinds = len(_KINDS) - (0 if allow_inf else 1)
    if not allow_nan:
        n_kinds = min(n_kinds, _KINDS.index("nan"))
    if not allow_huge:
        n_kinds = min(n_kinds, _KINDS.index("huge"))
    # a quarter of the blocks are "quiet" (no specials at all); whole zero blocks are common
    block_mode = draw(hnp.arrays(np.int8, n_blocks, elements=st.integers(0, 7)))
    block_exp = draw(hnp.arrays(np.int16, n_blocks, elements=st.integers(*exp_range)))
    kinds = draw(hnp.arrays(np.int8, (n_blocks, bs), elements=st.integers(0, n_kinds - 1)))
    pick = draw(hnp.arrays(np.int32, (n_blocks, bs), elements=st.integers(0, 2**20)))
    unif = draw(hnp.arrays(np.float32, (n_blocks, bs), elements=st.floats(-1, 1, width=32)))
    dirs = draw(hnp.arrays(np.int8, (n_blocks, bs), elements=st.sampled_from([-1, 1])))
    quiet = (block_mode[:, None] < 2) & (kinds >= _KINDS.index("subnormal"))
    kinds = np.where(quiet, _KINDS.index("uniform"), kinds)
    P = np.broadcast_to(np.ldexp(np.float32(1), block_exp.astype(np.int32))[:, None], (n_blocks, bs)).astype(np.float64)
    blocks = _compose(fmt.element.levels, kinds, pick, unif, dirs, P)
    # block amax element grid_max * P in most blocks (so that every scale rule picks S = P)
    with np.errstate(over="ignore"):
        amax_val = np.float32(fmt.element.amax * P[:, 0])
    put_amax = block_mode >= 2
    blocks[put_amax, 0] = np.where(dirs[put_amax, 0] > 0, amax_val[put_amax], -amax_val[put_amax])
    blocks[block_mode == 7] = np.where(dirs[block_mode == 7] > 0, np.float32(0), np.float32(-0.0))
    # scatter the amax element to a drawn position inside each block
    perm = draw(st.permutations(range(bs)))
    blocks = blocks[:, perm]
    if not allow_inf:  # block scales near float32's top overflow grid values times P: keep them finite
        blocks = np.where(np.isinf(blocks), np.copysign(np.float32(F32_MAX), blocks), blocks).astype(np.float32)
    return _from_blocks(blocks, fmt, shape)


def range_edge_inputs(fmt: QuantFormat, max_blocks: int = 4, allow_nan: bool = True) -> st.SearchStrategy:
    """``block_inputs`` of a tensor whose every block scale lies at the low (2^-149 .. 2^-100) or the high
    (2^100 .. 2^127) end of float32's range (see module doc)."""
    return st.one_of(
        block_inputs(fmt, max_blocks, allow_nan=allow_nan, allow_huge=False, exp_range=(-149, -100)),
        block_inputs(fmt, max_blocks, allow_nan=allow_nan, allow_inf=False, exp_range=(100, 127)),
    )


def _from_blocks(blocks: np.ndarray, fmt: QuantFormat, shape: tuple[int, int]) -> np.ndarray:
    if fmt.block is not None and fmt.block.is_2d:
        r, c = fmt.block.shape
        R, C = shape
        t = blocks.reshape(R // r, C // c, r, c).swapaxes(1, 2)
        return np.ascontiguousarray(t.reshape(R, C))
    return np.ascontiguousarray(blocks.reshape(shape))


_SPECIAL_F32 = SPECIAL_F32


def _adversarial_scalars(allow_nan: bool, allow_inf: bool) -> st.SearchStrategy[float]:
    pow2_ulp = st.builds(
        lambda k, d, s: s * float(np.nextafter(np.float32(np.ldexp(1.0, k)), np.float32(d * np.inf))),
        st.integers(-149, 127), st.sampled_from([-1, 0, 1]), st.sampled_from([-1.0, 1.0]))
    specials = _SPECIAL_F32 + ([np.nan] if allow_nan else []) + ([np.inf, -np.inf] if allow_inf else [])
    return st.one_of(
        st.floats(width=32, allow_nan=allow_nan, allow_infinity=allow_inf),
        st.floats(-8, 8, width=32),
        pow2_ulp,
        st.sampled_from(specials),
    )


def float32_arrays(
    shape: Any = None, allow_nan: bool = True, allow_inf: bool = True
) -> st.SearchStrategy[np.ndarray]:
    """float32 arrays (default: 1-3 axes of 1-8) of adversarial values: any float32, small values, powers of two
    and their +-1 ulp neighbours, +-0, subnormals, float32 max, and optionally NaN / +-Inf."""
    shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=8) if shape is None else shape
    return hnp.arrays(np.float32, shapes, elements=_adversarial_scalars(allow_nan, allow_inf))
