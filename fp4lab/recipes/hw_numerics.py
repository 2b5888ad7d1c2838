"""What a recipe's ``gemm_numerics`` asks of the hardware: the block-scaled MMA kind it names, and whether that kind
takes the recipe's operands as they are (torch-free; the recipe model checks it when a recipe loads, the layer
when it is built).

``gemm_numerics = "<hw>:<kind>"``: ``hw`` a built-in hwspec name (``fp4lab hw list``) or the path of a hwspec
file (TOML; ``inherits`` a built-in to change a few fields), ``kind`` one of its block-scaled kinds. Each GEMM of a
layer (FPROP ``Y = X W^T``, DGRAD ``dX = dY W``, WGRAD ``dW = dY^T X``) becomes one instruction sequence of the
kind, A [rows, R] times B [cols, R] along the reduction axis R, operands as the recipe quantizes them:

* every operand has a format; its element values are exactly those of an operand format the kind takes in that
  role (A: FPROP's X, DGRAD's and WGRAD's dY; B: W, and WGRAD's X), decided from values as
  ``fp4lab.hwspec.native`` decides native combinations;
* its block scale's values are exactly those of a scale format the kind takes with the block length along R
  (2-D tiles: their extent along R), and the two operands of a GEMM share that scale format and block;
* a second-level tensor scale is allowed: it is the GEMM epilogue's ``alpha`` (``fp4lab.recipes.hw_gemm``);
* ``gemm_dtype`` stays "bf16" (the kind replaces the GEMMs);
* every reduction length (in_features for FPROP, out_features for DGRAD, the tokens for WGRAD) is a multiple of
  ``multiple``: the least common multiple of the kind's instruction K and its fused length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fp4lab.errors import Fp4labError, SpecError
from fp4lab.formats.registry import get_format

GEMM_NAMES = ("fprop", "dgrad", "wgrad")
# (A operand, its blocked axis), (B operand, its blocked axis) of each GEMM: "k" = the operand's last axis, "m" =
# its axis 0 (the GEMM multiplies the operand transposed)
ROLES: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "fprop": (("x", "k"), ("w", "k")),
    "dgrad": (("dy", "k"), ("w", "m")),
    "wgrad": (("dy", "m"), ("x", "m")),
}
REDUCES_OVER = {"fprop": "in_features", "dgrad": "out_features", "wgrad": "tokens"}


@dataclass(frozen=True)
class GemmTarget:
    """One GEMM on the kind: the A and B formats (registry objects), the kind's scale format name and block."""

    a_format: Any
    b_format: Any
    scale_format: str
    block: int


@dataclass(frozen=True)
class Numerics:
    """A resolved ``gemm_numerics``: the spec object, the kind's name, the reduction multiple, each GEMM's target."""

    hw: Any
    kind: str
    multiple: int
    gemms: dict[str, GemmTarget]


def split_numerics(text: str) -> tuple[str, str]:
    """("<hw>", "<kind>") of ``"<hw>:<kind>"`` (split at the last colon: a path may hold colons)."""
    hw, sep, kind = text.rpartition(":")
    if not sep or not hw.strip() or not kind.strip():
        raise SpecError(f"gemm_numerics: expected '<hwspec name or .toml file>:<kind>' (for example "
                         f"'blackwell-sm100:tcgen05.mxf4nvf4'), got {text!r}")
    return hw, kind


def block_along(fmt: Any, axis: str) -> int | None:
    """Block length of ``fmt`` along a 2-D operand's last axis ("k") or axis 0 ("m"); None without blocks."""
    if fmt.block is None:
        return None
    shape = list(fmt.block.shape)
    return (shape[1] if axis == "k" else shape[0]) if len(shape) == 2 else shape[0]


def _element_names(fmt: Any) -> list[str]:
    from fp4lab.hwspec.native import element_values, same_valued_formats

    return same_valued_formats(element_values(fmt))


def _scale_options(fmt: Any, kind: Any, block: int) -> list[str]:
    """The kind's scale formats that hold exactly ``fmt``'s block-scale values with this block, in the kind's order."""
    from fp4lab.hwspec.native import operand_match, scale_values

    values = scale_values(fmt)
    return list(dict.fromkeys(o.format for o in kind.scales
                              if int(o.block) == block and operand_match(values, o.format)))


def _operand_error(op: str, fmt: Any, role: str, kind: Any, axis: str) -> str | None:
    allowed = list(kind.a_formats if role == "A" else kind.b_formats)
    names = _element_names(fmt)
    if not set(names) & set(allowed):
        grid = f"element grid {'/'.join(names)}" if names else "element values no hardware operand format has"
        return (f"operand {op} (format {fmt.name!r}, {grid}) is not an {role} operand of kind {kind.name!r}, which "
                f"takes {', '.join(allowed)}")
    takes = ", ".join(f"{o.format}/{int(o.block)}" for o in kind.scales)
    if fmt.scale is None:
        return f"operand {op} (format {fmt.name!r}) has no block scale; kind {kind.name!r} takes {takes} (format/block)"
    block = block_along(fmt, axis)
    if not _scale_options(fmt, kind, block):
        return (f"operand {op} (format {fmt.name!r}): its {fmt.scale.name} block scales per {block} elements are not "
                f"a scale of kind {kind.name!r}, which takes {takes} (format/block)")
    return None


def resolve_numerics(text: str, formats: dict[str, Any], gemm_dtype: str) -> Numerics:
    """The ``Numerics`` of ``text`` for operand formats ``formats`` ({"x", "w", "dy"}: format name or None);
    raises SpecError (a ValueError, so a recipe's validator reports it) with one line starting "gemm_numerics:"
    naming what the hardware does not take."""
    hw_name, kind_name = split_numerics(text)
    from fp4lab.hwspec.mma import kind_params
    from fp4lab.hwspec.mma_plan import GPU_ALGORITHMS
    from fp4lab.hwspec.registry import get_hw

    try:
        hw = get_hw(hw_name)
        kind = hw.kind(kind_name)
    except Fp4labError as exc:
        raise SpecError(f"gemm_numerics: {exc}") from None
    if not kind.block_scaled:
        scaled = [n for n, k in hw.kinds.items() if k.block_scaled]
        raise SpecError(f"gemm_numerics: kind {kind_name!r} of {hw.name!r} has no block scales; the GEMMs multiply "
                         f"codes and block scales (block-scaled kinds of {hw.name!r}: {', '.join(scaled) or 'none'})")
    params = kind_params(kind)
    if params.algorithm not in GPU_ALGORITHMS:
        raise SpecError(f"gemm_numerics: kind {kind_name!r} uses {params.algorithm}; the emulation kernels run "
                         f"{', '.join(GPU_ALGORITHMS)}")
    if gemm_dtype != "bf16":
        raise SpecError(f"gemm_numerics: the kind replaces the recipe's GEMMs, so gemm_dtype must stay 'bf16' "
                         f"(got {gemm_dtype!r})")
    fmts = {}
    for op in ("x", "w", "dy"):
        if formats[op] is None:
            raise SpecError(f"gemm_numerics: operand {op} has no format; kind {kind_name!r} multiplies block-scaled "
                             "codes, so every operand needs one")
        fmts[op] = get_format(formats[op])
    gemms: dict[str, GemmTarget] = {}
    for g in GEMM_NAMES:
        (a, a_axis), (b, b_axis) = ROLES[g]
        for op, role, axis in ((a, "A", a_axis), (b, "B", b_axis)):
            why = _operand_error(op, fmts[op], role, kind, axis)
            if why:
                raise SpecError(f"gemm_numerics: {g.upper()}: {why}")
        ba, bb = block_along(fmts[a], a_axis), block_along(fmts[b], b_axis)
        common = [s for s in _scale_options(fmts[a], kind, ba) if s in _scale_options(fmts[b], kind, bb)]
        if ba != bb or not common:
            raise SpecError(f"gemm_numerics: {g.upper()} multiplies {a}'s {fmts[a].scale.name}/{ba} block scales by "
                             f"{b}'s {fmts[b].scale.name}/{bb}; one instruction of kind {kind_name!r} takes one scale "
                             "format and block")
        gemms[g] = GemmTarget(fmts[a], fmts[b], common[0], ba)
        try:
            _plan(hw, kind_name, gemms[g])
        except Fp4labError as exc:
            raise SpecError(f"gemm_numerics: {g.upper()}: {exc}") from None
    k_multiple = min([int(kind.k)] + [int(k) for k in kind.k_alt])
    return Numerics(hw, kind_name, math.lcm(k_multiple, params.fused_len), gemms)


@lru_cache(maxsize=64)
def _numerics_cached(text: str, x: str | None, w: str | None, dy: str | None, gemm_dtype: str) -> Numerics:
    return resolve_numerics(text, {"x": x, "w": w, "dy": dy}, gemm_dtype)


def recipe_numerics(recipe: Any) -> Numerics:
    """The ``Numerics`` of a (validated) recipe with ``gemm_numerics`` (resolved once per process)."""
    return _numerics_cached(recipe.gemm_numerics, *(recipe.format_of(op) for op in ("x", "w", "dy")),
                            recipe.gemm_dtype)


def _plan(hw: Any, kind: str, target: GemmTarget) -> Any:
    from fp4lab.hwspec.mma_operands import values_table
    from fp4lab.hwspec.mma_plan import lower_kind

    return lower_kind(hw, kind, values_table(target.a_format), values_table(target.b_format), target.scale_format)


def plans(numerics: Numerics) -> dict[str, Any]:
    """The kernels' plan (``fp4lab.hwspec.mma_plan.lower_kind``) of each GEMM."""
    return {g: _plan(numerics.hw, numerics.kind, t) for g, t in numerics.gemms.items()}


def reduction_error(numerics: Numerics, gemm: str, length: int) -> str | None:
    """Why a reduction of ``length`` elements does not run on the kind (None when it does)."""
    if length % numerics.multiple:
        return (f"{gemm.upper()} reduces over {REDUCES_OVER[gemm]} = {length}, not a multiple of {numerics.multiple} "
                f"(the instruction K of gemm_numerics kind {numerics.kind!r})")
    return None
