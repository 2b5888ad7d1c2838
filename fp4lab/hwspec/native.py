"""Whether a registry format runs natively on a spec's block-scaled (or plain) MMA kinds, decided from values:
the element grid must hold exactly the values of the hardware operand format a native combination names, the
scale format exactly the values of its scale operand format (E8M0 and UE8M0 are the same 255 powers of two),
and the block length must match. Names play no part: an exact E1M2 grid spelled out field by field is E1M2, and
a table called "e1m2" with other values is not.

``route(spec, fmt)`` is the one answer to "how does this hardware run this format" (``fp4lab hw show --format``,
``emulate_gemm`` and the recipes' reports alike), in order of preference:

* ``native``: a native combination takes the format as it is;
* ``exact``: every element value is a value of a wider operand format of a native block-scaled combination (and
  the scales and block match it), so the codes run there re-encoded, bit for bit (INT4 and E1M2 grids are exact
  E2M3 values: ``int4-b32-e8m0`` and ``ufp4-e8m0`` run on Blackwell's ``mxf8f6f4`` kind); ``holding_format``
  picks the operand format;
* ``fallback``: dequantize to the fastest 16-bit kind; ``scale_mode`` "fold" (element x scale is exact there:
  scales of at most 8 bits) or "per_block" (FP32 / BF16 scales: each block's dot product from C = 0, scaled in
  fp32), the two ways ``emulate_gemm`` runs a kind without block scales.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from fp4lab.hwspec.operands import OPERAND_FORMATS, decode_codes
from fp4lab.hwspec.schema import HWSpec, NativeCombo


@lru_cache(maxsize=None)
def _operand_values(name: str) -> tuple[float, ...]:
    """Sorted distinct finite values of an 8-bit-or-narrower operand format (+0 and -0 as one), () if wider."""
    of = OPERAND_FORMATS[name]
    nbits = of.exp_bits + of.man_bits + (1 if of.signed else 0)
    if of.integer:
        nbits = of.man_bits + 1
    if nbits > 8:
        return ()
    v = decode_codes(np.arange(1 << nbits), of)
    return tuple(np.unique(v[np.isfinite(v)] + 0.0).tolist())


def _finite_set(v: np.ndarray) -> tuple[float, ...]:
    v = np.asarray(v, dtype=np.float64)
    return tuple(np.unique(v[np.isfinite(v)] + 0.0).tolist())


def element_values(fmt: Any) -> tuple[float, ...] | None:
    """Distinct finite values of a format's element grid (None if it has no value table)."""
    el = getattr(fmt, "element", fmt)
    vals = getattr(el, "values", None)
    return None if vals is None or callable(vals) else _finite_set(vals)


def scale_values(fmt: Any) -> tuple[float, ...] | None:
    """Distinct finite values of a format's scale (None without a scale or for fp32/bf16 scales)."""
    sc = getattr(fmt, "scale", None)
    if sc is None or sc.kind in ("fp32", "bf16"):
        return None
    return _finite_set(sc.decode(np.arange(1 << min(sc.bits, 8))))


def operand_match(values: tuple[float, ...] | None, name: str | None) -> bool:
    """Whether ``values`` are exactly the finite values of operand format ``name`` (None matches None)."""
    if name is None or values is None:
        return name is None and values is None
    return name in OPERAND_FORMATS and _operand_values(name) == values


def same_valued_formats(values: tuple[float, ...] | None) -> list[str]:
    """Operand formats with exactly these finite values (e.g. ['e2m1'], or ['ue8m0', 'e8m0'])."""
    return [] if values is None else [n for n in OPERAND_FORMATS if _operand_values(n) == values]


def find_native(spec: HWSpec, fmt: Any) -> tuple[NativeCombo | None, str]:
    """(the native combination that runs ``fmt`` on ``spec``, or None; a note on what the hardware takes)."""
    ev, sv = element_values(fmt), scale_values(fmt)
    has_scale = getattr(fmt, "scale", None) is not None
    blk = getattr(fmt, "block", None)
    block = blk.shape[-1] if blk is not None else None
    for c in spec.native:
        if not operand_match(ev, c.element):
            continue
        if c.scale is None and not has_scale:
            return c, ""
        if c.scale is not None and operand_match(sv, c.scale) and c.block == block:
            return c, ""
    el_names = same_valued_formats(ev)
    sc_names = same_valued_formats(sv)
    same_el = [c for c in spec.native if c.scale and c.element in el_names]
    parts = []
    if not el_names:
        parts.append("the element grid's values are no hardware operand format")
    if has_scale and sv is not None and not sc_names:
        parts.append("the scale's values are no hardware scale format")
    parts += [f"element {c.element} is native with {c.scale}/{c.block} scales on {c.kind}" for c in same_el]
    return None, "; ".join(parts)


def holding_format(values: tuple[float, ...] | None, names: list[str] | tuple[str, ...]) -> str | None:
    """The operand format among ``names`` whose finite values include every one of ``values``: the one with the
    fewest values (an exact match first), ties in ``names`` order; None if none holds them all."""
    if values is None:
        return None
    fits = [n for n in names if n in OPERAND_FORMATS and (ov := _operand_values(n)) and set(values) <= set(ov)]
    return min(fits, key=lambda n: len(_operand_values(n)), default=None)


@dataclass(frozen=True)
class Route:
    """How ``spec`` runs a format: ``how`` is "native", "exact", "fallback" or "none"; ``kind`` the MMA kind;
    ``element`` / ``scale`` the operand formats the codes and scales are fed as (native, exact); ``scale_mode``
    the ``emulate_gemm`` scale mode of a fallback; ``note`` one line saying so."""

    how: str
    kind: str | None
    element: str | None = None
    scale: str | None = None
    scale_mode: str | None = None
    note: str = ""


def _peak(spec: HWSpec, kind: str) -> float:
    p = spec.kinds[kind].peak_tflops
    return -1.0 if p is None else float(p.value)


def fallback_scale_mode(fmt: Any) -> str:
    """``emulate_gemm``'s scale mode on a kind without block scales: "fold" where element x block scale is exact
    in a 16-bit operand (scales of at most 8 bits: a product has at most 2 + 4 significant bits within the range),
    "per_block" for FP32 / BF16 scales."""
    sc = getattr(fmt, "scale", None)
    return "per_block" if sc is not None and sc.kind in ("fp32", "bf16") else "fold"


def route(spec: HWSpec, fmt: Any) -> Route:
    """The one decision (module docstring): native, exact in a wider native operand format, or a 16-bit
    fallback and how."""
    c, why = find_native(spec, fmt)
    if c is not None:
        return Route("native", c.kind, c.element, c.scale, None, c.note)
    ev, sv = element_values(fmt), scale_values(fmt)
    blk = getattr(fmt, "block", None)
    block = blk.shape[-1] if blk is not None else None
    exact = []
    for c in spec.native:
        el = holding_format(ev, [c.element])
        if el is None or (c.scale is None) != (getattr(fmt, "scale", None) is None):
            continue
        if c.scale is None or (operand_match(sv, c.scale) and c.block == block):
            exact.append(c)
    if exact:
        c = max(reversed(exact), key=lambda c: _peak(spec, c.kind))
        return Route("exact", c.kind, c.element, c.scale, None,
                     f"every element value is an {c.element} value: the codes run re-encoded as {c.element}"
                     + (f" with {c.scale}/{c.block} scales" if c.scale else "") + f" on {c.kind}")
    hint = f"; {why}" if why else ""
    fallback = [k for k in spec.kinds.values() if not k.block_scaled and {"bf16", "f16"} & set(k.a_formats)
                and k.c_format == "f32" and k.peak_tflops is not None]
    if not fallback:
        return Route("none", None, note="no native combination and no 16-bit kind to dequantize to" + hint)
    k = max(reversed(fallback), key=lambda k: (k.peak_tflops.value, "bf16" in k.a_formats))
    mode = fallback_scale_mode(fmt) if getattr(fmt, "scale", None) is not None else None
    how = "" if mode is None else f" with emulate_gemm(scale_mode={mode!r})"
    return Route("fallback", k.name, None, None, mode,
                 f"dequantize to {k.a_formats[0]} and run {k.name}{how}" + hint)
