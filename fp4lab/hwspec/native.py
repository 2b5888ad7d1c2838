"""Whether a registry format runs natively on a spec's block-scaled (or plain) MMA kinds, decided from values:
the element grid must hold exactly the values of the hardware operand format a native combination names, the
scale format exactly the values of its scale operand format (E8M0 and UE8M0 are the same 255 powers of two),
and the block length must match. Names play no part: an exact E1M2 grid spelled out field by field is E1M2, and
a table called "e1m2" with other values is not."""

from __future__ import annotations

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
