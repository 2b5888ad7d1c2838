"""What every conversion shares: whether a foreign dtype holds a format's codes bit for bit, and assembling a
validated ``QuantizedTensor`` from foreign codes.

A dtype *coincides* with a format's element grid when both have the same code width and the dtype decodes every
code to the grid's value, bit for bit (-0 included, NaN where the grid has NaN). A scale dtype coincides with a
scale format when it decodes every code of the format (all ``2**bits`` of them; UE4M3's 128 are the positive
half of ``float8_e4m3fn``) to the same float32 bits; fp32 / bf16 scale codes are IEEE bit patterns by definition.
Nothing is matched by name.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.quantized import QuantizedTensor

QUIET_LOGGERS = ("torchao", "torch.utils._pytree")


@contextlib.contextmanager
def quiet_import_logs() -> Iterator[None]:
    """Imports of torchao inside this block log nothing below ERROR: on a CPU-only machine torchao logs a
    "Failed to load" line per CUDA extension and torch a deprecation note per torchao enum, none of which concerns
    the conversion. Python warnings and errors still pass."""
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def e2m1_values() -> np.ndarray:
    """float64 value of each E2M1 code 0..15 (OCP MX v1.0, section 5.3.3): sign bit 3, exponent bits 2-1 with
    bias 1, mantissa bit 0; exponent 0 is subnormal (0 or 0.5). No Inf, no NaN."""
    c = np.arange(16)
    e, m = (c >> 1) & 3, c & 1
    mag = np.where(e == 0, m * 0.5, np.ldexp(1.0 + m / 2.0, e - 1))
    return np.where(c >> 3, -mag, mag).astype(np.float64)


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def match_element(fmt: QuantFormat, tables: dict[str, np.ndarray], library: str, what: str) -> str:
    """Name of the first dtype in ``tables`` (name -> value of every code) that holds ``fmt``'s element codes."""
    ours = np.asarray(fmt.element.values, np.float64)
    same_width = {n: t for n, t in tables.items() if t.size == 1 << fmt.element.bits}
    for name, theirs in same_width.items():
        if theirs.size == ours.size and _same_bits(ours, theirs).all():
            return name
    grid = fmt.element.label
    if not same_width:
        widths = sorted({int(np.log2(t.size)) for t in tables.values()})
        raise InputError(f"{what}: format '{fmt.name}' has {fmt.element.bits}-bit element codes ({grid}); {library} "
                         f"element dtypes here have {', '.join(map(str, widths))} bits")
    name, theirs = next(iter(same_width.items()))
    c = int(np.argmin(_same_bits(ours, theirs[:ours.size]))) if ours.size == theirs.size else ours.size
    detail = (f"code {c} is {ours[c]:g} here, {theirs[c]:g} there" if c < ours.size
              else f"{ours.size} codes here, {theirs.size} there")
    raise InputError(f"{what}: format '{fmt.name}' element grid '{grid}' is not {library}.{name} ({detail}); no "
                     f"{library} type holds it")


def match_scale(fmt: QuantFormat, tables: dict[str, np.ndarray], ieee: dict[str, str], library: str,
                what: str) -> str | None:
    """Name of the dtype holding ``fmt``'s block-scale codes (None for formats without block scales).

    ``tables``: 8-bit dtype name -> float32 value of codes 0..255; ``ieee``: scale kind ("fp32", "bf16") -> dtype."""
    if fmt.scale_rule.method == "none":
        return None
    s = fmt.scale
    if s.kind in ieee:
        return ieee[s.kind]
    codes = np.arange(1 << s.bits)
    ours = s.decode(codes).astype(np.float64)
    for name, theirs in tables.items():
        if s.bits <= 8 and _same_bits(ours, theirs[codes]).all():
            return name
    sname = s.label
    if s.bits > 8:
        raise InputError(f"{what}: format '{fmt.name}' stores {s.bits}-bit {sname} block scales; no {library} type "
                         "holds them")
    first = next(iter(tables))
    c = int(np.argmin(_same_bits(ours, tables[first][codes])))
    raise InputError(f"{what}: format '{fmt.name}' block scale '{sname}' is none of "
                     f"{', '.join(library + '.' + n for n in tables)} (code {c} is {ours[c]:g} here, "
                     f"{tables[first][c]:g} in {library}.{first})")


def require_1d_last_axis(fmt: QuantFormat, ndim: int, axis: int, what: str, target: str) -> None:
    """InputError unless ``fmt`` has no blocks or 1-D blocks along the last of ``ndim`` axes (``axis``)."""
    if fmt.block is not None and fmt.block.is_2d:
        raise InputError(f"{what}: format '{fmt.name}' has {'x'.join(map(str, fmt.block.shape))} tiles; {target} "
                         "stores one scale per 1-D block along the last axis")
    if fmt.block is not None and axis % max(ndim, 1) != ndim - 1:
        raise InputError(f"{what}: the tensor is blocked along axis {axis}; {target} needs blocks along the last "
                         f"axis ({ndim - 1}): quantize with axis=-1")


def assemble(codes: Any, scale_codes: Any, fmt: QuantFormat, tensor_scale: Any, axis: int, source: str,
             what: str) -> QuantizedTensor:
    """A checked QuantizedTensor from element codes (uint8) and scale codes in ``fmt.scale.code_dtype`` bits.

    numpy codes give numpy fields; torch codes give torch fields on their device (scales decoded on the host,
    uint32 scale codes as int32, the tensor scale a 0-d float32 tensor). ``rounding`` is the format's default:
    foreign bits do not record how they were rounded."""
    from fp4lab.numerics.checks import check_quantized

    is_torch = type(codes).__module__.startswith("torch")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise InputError(f"{what}: axis must be an int, got {type(axis).__name__}")
    ndim = len(codes.shape)
    if ndim == 0:
        raise InputError(f"{what}: codes must have at least one axis, got a 0-d {'tensor' if is_torch else 'array'}")
    if not -ndim <= int(axis) < ndim:
        raise InputError(f"{what}: axis {int(axis)} is out of range for a {ndim}-D tensor")
    if tensor_scale is not None and int(np.prod(np.shape(tensor_scale))) != 1:
        raise InputError(f"{what}: the tensor scale must hold one value, got shape {tuple(np.shape(tensor_scale))} "
                         "(per-expert or per-row tensor scales have no fp4lab format)")
    scaled = fmt.scale_rule.method != "none"
    sdt = np.dtype(fmt.scale.code_dtype) if scaled else np.dtype(np.uint8)
    host_sc = np.ascontiguousarray(host(scale_codes)).view(sdt) if scaled else np.zeros((0,), np.uint8)
    if scaled and fmt.scale.bits < 8 * sdt.itemsize and host_sc.size and int(host_sc.max()) >> fmt.scale.bits:
        raise InputError(f"{what}: scale code {int(host_sc.max())} is not a code of the {fmt.scale.bits}-bit scale "
                         f"format of '{fmt.name}'")
    scales = fmt.scale.decode(host_sc).astype(np.float32) if scaled else np.zeros((0,), np.float32)
    if is_torch:
        import torch

        dev = codes.device
        sc = torch.from_numpy(host_sc.view(np.int32) if sdt == np.uint32 else host_sc).to(dev)
        ts = None if tensor_scale is None else torch.as_tensor(tensor_scale).detach().to(dev).reshape(())
        qt = QuantizedTensor(codes=codes, scale_codes=sc, scales=torch.from_numpy(scales).to(dev), tensor_scale=ts,
                             fmt=fmt, axis=int(axis) % ndim, rounding=fmt.rounding,
                             meta={"torch": True, "source": source})
    else:
        ts = tensor_scale
        if ts is not None and np.asarray(ts).dtype == np.float32:
            ts = np.float32(np.asarray(ts).reshape(-1)[0])
        qt = QuantizedTensor(codes=codes, scale_codes=host_sc, scales=scales, tensor_scale=ts, fmt=fmt,
                             axis=int(axis) % ndim, rounding=fmt.rounding, meta={"source": source})
    check_quantized(qt, what)
    return qt


def host(a: Any) -> np.ndarray:
    """numpy array of a numpy array or a torch tensor on any device (torch's signed views of uint bits kept)."""
    return a.detach().cpu().numpy() if type(a).__module__.startswith("torch") else np.asarray(a)
