"""Lowering of a block-scaled MMA kind to the integer plan that fp4lab's Triton kernels
(fp4lab/kernels/mma_emulate.py) execute: the model's parameters (``ModelParams``) and, per operand format, a
table of every code's exact decomposition. Plain data (ints, bools, numpy arrays): the kernel package reads it
without importing this one.

Element codes (256-entry tables; codes the format does not have decode as +0):

* ``mant``/``qexp``: value = mant * 2**qexp exactly, mant an odd integer (0 for zeros, +-1 for Inf);
* ``aexp``: the alignment exponent the CPU model gives the value (``align_exponents``: floor(log2|v|), not below
  the format's emin; 0 for zeros and specials);
* ``cls``: 0 finite, 1 NaN, 2 Inf;
* ``grid``/``grid_exp`` (GST kinds): value = grid * 2**grid_exp with grid an int8, one exponent for the format, so
  that a group sum of products is an exact int8 dot product.

Block scales are decoded on the device from their values (codes go through ``scale_values``): a scale s is
``sig * 2**(es - scale_bits)`` with es = max(floor(log2 s), scale emin) and sig an integer (s = 0: sig 0, es = emin;
NaN: sig -1), the split ``hwspec/mma.py``'s ``_sig_exp`` makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.hwspec.mma import kind_params, resolve_kind
from fp4lab.hwspec.mma_operands import _table_emin, align_exponents, values_table
from fp4lab.hwspec.mma_reference import ModelParams
from fp4lab.hwspec.operands import decode_codes, operand_format
from fp4lab.hwspec.schema import MMAKind

GPU_ALGORITHMS = ("gst_fdpa", "st_fdpa", "t_fdpa", "tr_fdpa")
NCODES = 256


@dataclass(frozen=True)
class ElementTables:
    """Exact decomposition of every code of one element format (module docstring)."""

    name: str
    ncodes: int  # codes of the format (at most 256); the tables are padded to 256 with +0
    mant: np.ndarray  # int32
    qexp: np.ndarray  # int32
    aexp: np.ndarray  # int32
    cls: np.ndarray  # int32: 0 finite, 1 NaN, 2 Inf
    grid: np.ndarray | None  # int8 (None: the values are not on a common int8 grid)
    grid_exp: int

    @property
    def max_mant(self) -> int:
        return int(np.abs(self.mant[self.cls == 0]).max(initial=0))


@dataclass(frozen=True)
class ScaleTables:
    """A block-scale format: value of every code (float32, 256 entries, NaN where the code is NaN), the integer
    significand width ``bits`` (sig < 2**(bits + 1)) and the exponent ``emin`` a zero or subnormal scale takes."""

    name: str
    values: np.ndarray
    bits: int
    emin: int
    blocks: tuple[int, ...]  # the K-blocks this kind takes the format with


@dataclass(frozen=True)
class MMAPlan:
    """What the kernels need to run one kind on one (A format, B format, scale format) combination."""

    kind: str
    params: ModelParams
    k_multiple: int  # K must be a multiple of the kind's smallest instruction K
    nan_bits32: int  # every NaN result, as float32 bits (f16 outputs: the widened f16 NaN)
    a: ElementTables
    b: ElementTables
    scale: ScaleTables


def _decompose(v: np.ndarray, emin: int, name: str) -> ElementTables:
    n = v.size
    vals = np.zeros(NCODES)
    vals[:n] = v
    fin = np.isfinite(vals)
    cls = np.where(np.isnan(vals), 1, np.where(fin, 0, 2)).astype(np.int32)
    m, e = np.frexp(np.where(fin, vals, 1.0))
    ints = (m * 2.0**53).astype(np.int64)
    tz = np.zeros(NCODES, np.int64)
    nz = fin & (vals != 0)
    low = ints & -ints
    tz[nz] = np.log2(low[nz].astype(np.float64)).astype(np.int64)
    mant = np.where(nz, ints >> tz, 0)
    qexp = np.where(nz, e.astype(np.int64) - 53 + tz, 0)
    mant = np.where(cls == 2, np.sign(vals), mant).astype(np.int32)
    grid, grid_exp = None, 0
    if fin[:n].all():
        grid_exp = int(qexp[nz].min()) if nz.any() else 0
        g = np.where(nz, mant.astype(np.int64) << np.maximum(qexp - grid_exp, 0), 0)
        if np.abs(g).max(initial=0) <= 127:
            grid = g.astype(np.int8)
    return ElementTables(name, n, mant, qexp.astype(np.int32), align_exponents(vals, emin).astype(np.int32), cls,
                         grid, grid_exp)


def element_tables(fmt: Any, kind: MMAKind, which: str) -> ElementTables:
    """Tables of an element format given as an operand format name, a values table or a format object (the
    forms ``emulate_mma``'s ``a_format`` takes; names must be the kind's, except on GST datapaths)."""
    if isinstance(fmt, str):
        allowed = list(kind.a_formats if which == "a" else kind.b_formats)
        of = operand_format(fmt)
        if fmt not in allowed and kind.accumulation.algorithm != "gst_fdpa":
            raise InputError(f"emulated_matmul: kind {kind.name!r} takes {which} in {allowed}, not {fmt!r}")
        nbits = of.man_bits + 1 if of.integer else of.exp_bits + of.man_bits + (1 if of.signed else 0)
        return _decompose(decode_codes(np.arange(1 << nbits), of), of.emin, fmt)
    table = values_table(fmt)
    if table is None or table.ndim != 1 or not 0 < table.size <= NCODES:
        raise InputError(f"emulated_matmul: {which}_format must be an operand format name, a values table of at "
                         f"most {NCODES} entries or a format object")
    return _decompose(table, _table_emin(table, fmt), getattr(fmt, "name", "table"))


def _scale_tables(kind: MMAKind, scale_format: str | None) -> ScaleTables:
    fmts = list(dict.fromkeys(o.format for o in kind.scales))
    if scale_format is None:
        if len(fmts) != 1:
            raise InputError(f"emulated_matmul: kind {kind.name!r} takes scales in {fmts}; name one: scale_format=")
        scale_format = fmts[0]
    if scale_format not in fmts:
        raise InputError(f"emulated_matmul: kind {kind.name!r} takes scales in {fmts}, not {scale_format!r}")
    of = operand_format(scale_format)
    if of.signed or of.has_inf or of.integer:
        raise InputError(f"emulated_matmul: scale format {scale_format!r} is signed, integer or has Inf; the GPU "
                         "kernels take unsigned float scales without Inf")
    nbits = of.exp_bits + of.man_bits
    vals = np.full(NCODES, np.nan, np.float32)
    codes = np.arange(min(NCODES, 1 << max(nbits, of.container_bits)))
    vals[codes] = decode_codes(codes, of).astype(np.float32)
    blocks = tuple(sorted({int(o.block) for o in kind.scales if o.format == scale_format}))
    return ScaleTables(scale_format, vals, of.man_bits, of.emin, blocks)


def _nan_bits32(kind: MMAKind) -> int:
    nb = int(kind.output.nan_bits)
    if kind.output.format == "f16":
        return int(np.array([nb], np.uint16).view(np.float16).astype(np.float32).view(np.uint32)[0])
    return nb


def lower_kind(hw: Any, kind: str, a_format: Any, b_format: Any = None, scale_format: str | None = None) -> MMAPlan:
    """The plan of ``hw``'s block-scaled ``kind`` for A in ``a_format`` and B in ``b_format`` (default: A's), block
    scales in ``scale_format`` (default: the kind's only scale format). Raises InputError for kinds or formats the
    kernels do not run: algorithms other than GST/ST/T/TR-FDPA, GST element grids beyond int8 steps, integer
    ranges the int64 datapath cannot hold."""
    k = resolve_kind(hw, kind)
    if not k.block_scaled:
        raise InputError(f"emulated_matmul: kind {k.name!r} has no block scales; the GPU kernels run block-scaled "
                         "kinds (pass CPU operands for the CPU model)")
    p = kind_params(k)
    if p.algorithm not in GPU_ALGORITHMS:
        raise InputError(f"emulated_matmul: kind {k.name!r} uses {p.algorithm}; the GPU kernels run "
                         f"{', '.join(GPU_ALGORITHMS)}")
    ta = element_tables(a_format, k, "a")
    tb = element_tables(b_format if b_format is not None else a_format, k, "b")
    st = _scale_tables(k, scale_format)
    top_scale = float(np.nanmax(st.values))
    smax = int(top_scale * 2.0 ** (st.bits - max(int(np.floor(np.log2(top_scale))), st.emin)))  # largest sig
    if p.algorithm == "gst_fdpa":
        for t, w in ((ta, "a"), (tb, "b")):
            if t.grid is None:
                raise InputError(f"emulated_matmul: {w} format {t.name!r} is not an int8 grid (at most 127 steps "
                                 "of one power of two, no NaN/Inf); the GST kernel sums groups as int8 dot products")
        gmax = p.group * int(np.abs(ta.grid).max()) * int(np.abs(tb.grid).max()) * smax * smax
        qoff = ta.grid_exp + tb.grid_exp - 2 * st.bits
        top = gmax * 2.0 ** max(p.frac_bits + qoff, 0) * (p.fused_len // p.group + 1) + 2.0 ** (p.frac_bits + 1)
        if gmax >= 2**31 or top >= 2**53:
            raise InputError(f"emulated_matmul: kind {k.name!r} with these formats needs group terms of "
                             f"{int(np.log2(top)) + 1} bits; the kernel holds 53")
    elif (ta.max_mant * tb.max_mant * smax * smax) >= 2**31:
        raise InputError(f"emulated_matmul: products of {ta.name} x {tb.name} with {st.name} scales exceed 31 bits")
    return MMAPlan(k.name, p, min([int(k.k)] + list(k.k_alt)), _nan_bits32(k), ta, tb, st)
