"""Decoding the operands of one MMA instruction kind: which operand format each of A, B and the block scales is
in, and their float64 values. A format is never guessed:

* named (``a_format=`` / ``b_format=`` / ``scale_format=``), or typed (a torch tensor or a numpy array of an
  ml_dtypes / float16 dtype names its own format; 8-bit typed operands are read as their exact codes);
* otherwise the kind's allowed formats that hold every value are the candidates. One candidate is taken; several
  are accepted only when they decode the values identically (the same values and the same alignment exponents,
  hence the same bits out of every model); else the call is refused and asks for the name. Integer codes need a
  single candidate (a name, or a kind with one allowed format).
* ``ab_same_format`` kinds (tcgen05 kind::f16: f16 x f16 or bf16 x bf16) take A and B in one common format.
* A and B's block scales share one scale format (an instruction has one ``.stype``).

Every refusal is a one-line :class:`fp4lab.errors.InputError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fp4lab.errors import InputError, check_plain_data
from fp4lab.hwspec.native import holding_format
from fp4lab.hwspec.operands import OPERAND_FORMATS, decode_codes, operand_format
from fp4lab.hwspec.schema import MMAKind

# numpy dtype names (ml_dtypes and float16) and torch dtype names that name an operand format
_NP_TYPED = {"float16": "f16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2",
             "float8_e4m3fnuz": "e4m3fnuz", "float8_e5m2fnuz": "e5m2fnuz", "float6_e3m2fn": "e3m2",
             "float6_e2m3fn": "e2m3", "float4_e2m1fn": "e2m1", "float8_e8m0fnu": "ue8m0"}
_TORCH_TYPED = {"float16": "f16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2",
                "float8_e4m3fnuz": "e4m3fnuz", "float8_e5m2fnuz": "e5m2fnuz", "float8_e8m0fnu": "ue8m0"}
# scales: torch and ml_dtypes have no ue4m3, so an e4m3fn-typed scale array holds ue4m3 codes (as MMA-Sim passes them)
_SCALE_TYPED = {"e4m3": "ue4m3", "ue8m0": "ue8m0"}


class Decoded:
    """Operand values (float64), their format name ('table' for a values table) and the alignment emin."""

    def __init__(self, values: np.ndarray, name: str, emin: int):
        self.values, self.name, self.emin = values, name, emin


def typed_operand(x: Any) -> tuple[np.ndarray, str | None]:
    """(numpy array, format name or None). A torch tensor or an ml_dtypes / float16 numpy array names its format;
    8-bit torch floats come back as their integer codes (NaN payloads and -0 kept); others as float values."""
    check_plain_data(x, "emulate_mma")
    if type(x).__module__.startswith("torch"):
        import torch

        t = x.detach().cpu()
        name = _TORCH_TYPED.get(str(t.dtype).removeprefix("torch."))
        if name is None:
            return t.numpy(), None
        if t.dtype.itemsize == 1:
            return t.contiguous().view(torch.uint8).numpy().astype(np.int64), name
        return (t.float().numpy() if name == "bf16" else t.numpy()), name
    if hasattr(x, "codes") and hasattr(x, "fmt") and hasattr(x, "scales"):
        raise InputError("emulate_mma: a QuantizedTensor goes to emulate_gemm (or pass its .codes with "
                         "a_format=its .fmt)")
    x = np.asarray(x)
    name = _NP_TYPED.get(x.dtype.name)
    if name is not None and x.dtype.name != "float16":
        return x.astype(np.float64), name
    return x, name


def align_exponents(v: np.ndarray, emin: int) -> np.ndarray:
    """int64 alignment exponents: floor(log2|v|) clamped below at ``emin``; 0 for zeros and non-finite values."""
    ok = np.isfinite(v) & (v != 0)
    _, e = np.frexp(np.where(ok, v, 1.0))
    return np.where(ok, np.maximum(e.astype(np.int64) - 1, emin), 0)


def _fits(v: np.ndarray, names: list[str]) -> list[str]:
    return [n for n in names if operand_format(n).representable(v).all()]


def _same_bits(vals: list[np.ndarray], names: list[str]) -> bool:
    """Whether every array decodes with the same alignment exponents under each of ``names`` (values below a
    format's smallest normal are subnormal there and align differently)."""
    for v in vals:
        e = [align_exponents(v, operand_format(n).emin) for n in names]
        if not all(np.array_equal(e[0], x) for x in e[1:]):
            return False
    return True


def _pick(vals: list[np.ndarray], fits: list[str], what: str, kind: MMAKind, hint: str) -> str:
    if len(fits) > 1 and not _same_bits(vals, fits):
        raise InputError(f"emulate_mma: {what} fit {fits}, which kind {kind.name!r} decodes differently "
                         f"(subnormal exponents); name the format: {hint} (or pass typed inputs)")
    return fits[0]


def values_table(fmt: Any) -> np.ndarray | None:
    """A values table from a 1-D array, a registry grid (``.values``) or a QuantFormat (``.element.values``)."""
    if isinstance(fmt, np.ndarray):
        return np.asarray(fmt, dtype=np.float64)
    for obj in (getattr(fmt, "element", None), fmt):
        vals = getattr(obj, "values", None)
        if vals is not None and not callable(vals):
            return np.asarray(vals, dtype=np.float64)
    return None


def _table_emin(table: np.ndarray, fmt: Any) -> int:
    """Subnormal exponent of a grid given as a table: from its ExMy fields if it has them, else the exponent of a
    known operand format with the same finite values, else floor(log2) of its smallest nonzero magnitude."""
    el = getattr(fmt, "element", fmt)
    bias = getattr(el, "exponent_bias", None)
    if isinstance(bias, int) and getattr(el, "exponent_bits", None):
        return 1 - bias
    fin = np.unique(np.abs(table[np.isfinite(table)]))
    for of in OPERAND_FORMATS.values():
        nbits = of.exp_bits + of.man_bits + (1 if of.signed else 0)
        if nbits <= 8 and of.signed:
            ref = decode_codes(np.arange(1 << nbits), of)
            if np.array_equal(np.unique(np.abs(ref[np.isfinite(ref)])), fin):
                return of.emin
    nz = fin[fin > 0]
    return int(np.frexp(nz.min())[1] - 1) if nz.size else 0


def _finite_values(table: np.ndarray) -> tuple[float, ...]:
    v = np.asarray(table, dtype=np.float64)
    return tuple(np.unique(v[np.isfinite(v)] + 0.0).tolist())


def _from_table(x: np.ndarray, table: np.ndarray, fmt: Any, kind: MMAKind, which: str) -> Decoded:
    if not (kind.block_scaled or kind.accumulation.algorithm == "gst_fdpa"):
        raise InputError(f"emulate_mma: kind {kind.name!r} takes {which} in "
                         f"{kind.a_formats if which == 'a' else kind.b_formats}; value tables need a block-scaled kind")
    emin = _table_emin(table, fmt)
    if kind.block_scaled and not kind.any_value_table:  # the instruction takes its operand formats only
        allowed = kind.a_formats if which == "a" else kind.b_formats
        held = holding_format(_finite_values(table), allowed)
        if held is None:
            name = getattr(fmt, "name", None) or "the values table"
            raise InputError(f"emulate_mma: {which}: {name}'s element values are not all values of any operand "
                             f"format of kind {kind.name!r} ({', '.join(allowed)}); fp4lab hw show --format says "
                             "which kind runs it")
        emin = operand_format(held).emin  # the codes run re-encoded as that format
    if np.issubdtype(x.dtype, np.integer):
        if x.size and (x.min() < 0 or x.max() >= table.size):
            raise InputError(f"emulate_mma: {which} codes must be in [0, {table.size})")
        return Decoded(table[x], "table", emin)
    v = x.astype(np.float64)
    bad = ~np.isin(v, table) & ~np.isnan(v)
    if bad.any():
        raise InputError(f"emulate_mma: {which} holds {v[bad][0]!r}, not in the given values table")
    return Decoded(v, "table", emin)


def _candidates(x: np.ndarray, typed: str | None, fmt: str | None, kind: MMAKind, which: str) -> list[str]:
    allowed = list(kind.a_formats if which == "a" else kind.b_formats)
    any_name = kind.accumulation.algorithm == "gst_fdpa"  # GST datapaths run any element grid
    if fmt is not None and typed is not None and fmt != typed:
        raise InputError(f"emulate_mma: {which} is typed {typed} but {which}_format is {fmt!r}")
    named = fmt if fmt is not None else typed
    if named is None:
        return allowed
    operand_format(named)
    if named not in allowed and not any_name:
        raise InputError(f"emulate_mma: kind {kind.name!r} takes {which} in {allowed}, not {named!r}")
    return [named]


def decode_pair(a: Any, b: Any, a_format: Any, b_format: Any, kind: MMAKind) -> tuple[Decoded, Decoded]:
    """Decode A and B for ``kind`` (module docstring: named, typed, or the one format the values allow)."""
    out: dict[str, Decoded] = {}
    cands: dict[str, list[str]] = {}
    arrays: dict[str, np.ndarray] = {}
    for which, x, fmt in (("a", a, a_format), ("b", b, b_format)):
        if fmt is not None and not isinstance(fmt, str) and values_table(fmt) is None:
            raise InputError(f"emulate_mma: {which}_format must be a format name, a values table or a format object")
        x, typed = typed_operand(x)
        if x.ndim != 2:
            raise InputError(f"emulate_mma: {which} must be 2-D, got shape {x.shape}")
        arrays[which] = x
        if fmt is not None and not isinstance(fmt, str):
            out[which] = _from_table(x, values_table(fmt), fmt, kind, which)
        elif kind.tf32_truncate:
            if x.dtype != np.float32:
                raise InputError(f"emulate_mma: kind {kind.name!r} takes float32 words for {which}, got {x.dtype}")
            v = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
            out[which] = Decoded(v, "tf32", operand_format("tf32").emin)
        else:
            cands[which] = _candidates(x, typed, fmt, kind, which)
    if kind.ab_same_format and len(cands) == 2:
        common = [n for n in cands["a"] if n in cands["b"]]
        if not common:
            raise InputError(f"emulate_mma: kind {kind.name!r} needs A and B in the same format (one of "
                             f"{list(kind.a_formats)}), got {cands['a']} x {cands['b']}")
        cands["a"] = cands["b"] = common
    values: dict[str, np.ndarray] = {}
    for which, names in cands.items():
        x = arrays[which]
        if np.issubdtype(x.dtype, np.integer):
            if len(names) > 1:
                raise InputError(f"emulate_mma: {which} holds integer codes and kind {kind.name!r} takes {names}; "
                                 f"name the format: {which}_format='...'")
            of = operand_format(names[0])
            try:
                out[which] = Decoded(decode_codes(x, of), of.name, of.emin)
            except ValueError as exc:
                raise InputError(f"emulate_mma: {which}: {exc}") from None
            continue
        values[which] = x.astype(np.float64)
        fits = _fits(values[which], names)
        if not fits:
            raise InputError(f"emulate_mma: {which} has values not representable in {names} (kind {kind.name!r})")
        cands[which] = fits
    if kind.ab_same_format and len(values) == 2:
        common = [n for n in cands["a"] if n in cands["b"]]
        if not common:
            raise InputError(f"emulate_mma: kind {kind.name!r} needs A and B in one format; A fits {cands['a']}, "
                             f"B fits {cands['b']}")
        n = _pick([values["a"], values["b"]], common, "A and B", kind, "a_format='...'")
        return Decoded(values["a"], n, operand_format(n).emin), Decoded(values["b"], n, operand_format(n).emin)
    for which, v in values.items():
        n = _pick([v], cands[which], f"{which}'s values", kind, f"{which}_format='...'")
        out[which] = Decoded(v, n, operand_format(n).emin)
    if kind.ab_same_format and out["a"].name != out["b"].name:
        raise InputError(f"emulate_mma: kind {kind.name!r} needs A and B in the same format, got "
                         f"{out['a'].name} x {out['b'].name}")
    return out["a"], out["b"]


def decode_scales(sa: Any, sb: Any, kind: MMAKind, K: int, M: int, N: int, scale_format: str | None
                  ) -> tuple[np.ndarray, np.ndarray, str, int]:
    """(scale_a values [M, K/block], scale_b values [K/block, N], their common format, block) for a block-scaled
    kind. Codes or values; the format is named, typed, or the one the kind allows for this block size (several
    only where they decode the values alike)."""
    arrs, names = {}, {}
    for which, s, rows in (("a", sa, M), ("b", sb, N)):
        if s is None:
            raise InputError(f"emulate_mma: block-scaled kind {kind.name!r} needs scale_{which}")
        s, typed = typed_operand(s)
        if typed is not None:
            typed = _SCALE_TYPED.get(typed, typed)
            if scale_format is not None and scale_format != typed:
                raise InputError(f"emulate_mma: scale_{which} is typed {typed} but scale_format is {scale_format!r}")
        ok = s.ndim == 2 and (s.shape[0] if which == "a" else s.shape[1]) == rows
        nblk = (s.shape[1] if which == "a" else s.shape[0]) if s.ndim == 2 else 0
        if not ok or nblk == 0 or K % nblk:
            raise InputError(f"emulate_mma: scale_{which} has shape {s.shape}; expected one scale per K-block "
                             f"({'[M, K/block]' if which == 'a' else '[K/block, N]'}) with K = {K}")
        arrs[which], names[which] = s, typed
    block = K // (arrs["a"].shape[1])
    if K // arrs["b"].shape[0] != block:
        raise InputError(f"emulate_mma: scale_a blocks of {block} but scale_b blocks of {K // arrs['b'].shape[0]}")
    want = scale_format or names["a"] or names["b"]
    if names["a"] and names["b"] and names["a"] != names["b"]:
        raise InputError(f"emulate_mma: scale_a is {names['a']} but scale_b is {names['b']}; one instruction has "
                         "one scale format")
    opts = list(dict.fromkeys(o.format for o in kind.scales if int(o.block) == block and want in (None, o.format)))
    if not opts:
        allowed = [(o.format, int(o.block)) for o in kind.scales]
        raise InputError(f"emulate_mma: kind {kind.name!r} has no scale {want + ' ' if want else ''}with block "
                         f"{block}; it takes (format, block): {allowed}")
    vals: dict[str, np.ndarray] = {}
    for which, s in arrs.items():
        if np.issubdtype(s.dtype, np.integer):
            if len(opts) > 1:
                raise InputError(f"emulate_mma: scale_{which} holds integer codes and kind {kind.name!r} takes "
                                 f"{opts} scales for block {block}; name the format: scale_format='...'")
            try:
                vals[which] = decode_codes(s, operand_format(opts[0]))
            except ValueError as exc:
                raise InputError(f"emulate_mma: scale_{which}: {exc}") from None
        else:
            vals[which] = s.astype(np.float64)
    fits = [n for n in opts if all(operand_format(n).representable(v).all() for v in vals.values())]
    if not fits:
        allowed = ", ".join(f"{o.format}/{int(o.block)}" for o in kind.scales)
        raise InputError(f"emulate_mma: kind {kind.name!r} takes block scales {allowed} (format/block); these "
                         f"block-{block} scales are not representable in {' or '.join(opts)}, so no hardware MMA "
                         "applies them: dequantize (emulate_gemm on a kind without block scales) or use a native "
                         "scale format")
    fmt = _pick(list(vals.values()), fits, "the scale values", kind, "scale_format='...'")
    return vals["a"], vals["b"], fmt, block
