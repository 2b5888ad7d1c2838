"""Emulator entry points for quantize / dequantize on numpy arrays: the parallel numba twin of ``ref_quantize``.

Same pipeline and bits as ``quantize_reference`` (see its docstring); tables come from ``nb_tables``, kernels from
``nb_quantize``. Fallback: element grids wider than 8 bits (uint16 codes) run the numpy reference.
"""

from __future__ import annotations

import numpy as np

from fp4lab.emulator.blocks import BlockView
from fp4lab.emulator.nb_quantize import (
    Geometry, decode_flat, dequantize_blocks, encode_flat, finite_amax, quantize_blocks,
)
from fp4lab.emulator.nb_tables import tables_for
from fp4lab.emulator.philox import SR_BITS, check_sr_bits, split_seed
from fp4lab.emulator.ref_quantize import check_rounding, dequantize_reference, quantize_reference, tensor_scales
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.quantized import QuantizedTensor

F32 = np.float32


def _geometry(view: BlockView) -> Geometry:
    if len(view.block) == 2:
        return Geometry.tiles_2d(view.shape, *view.block)
    return Geometry.blocks_1d(view.shape, view.axis, view.block[0])


def _tensor_scales(x: np.ndarray, fmt: QuantFormat) -> tuple[np.float32 | None, np.float32 | None]:
    """``ref_quantize.tensor_scales`` (ts, g): the reference formula applied to the finite amax, which a parallel
    kernel finds (the finite amax of ``[amax]`` is ``amax``)."""
    if fmt.tensor_scale == "none":
        return None, None
    amax = finite_amax(x.reshape(-1)) if x.size else F32(0)
    return tensor_scales(np.array([amax], F32), fmt)


def _encode_multipliers(fmt: QuantFormat, g: np.float32 | None) -> np.ndarray:
    """"encode" arithmetic: float32(g * float32(1/target)) per target (g = 1 for single-level formats)."""
    g32 = F32(1.0 if g is None else g)
    return np.array([g32 * (F32(1.0) / F32(t)) for t in fmt.targets], F32)


def _uses_reference(fmt: QuantFormat) -> bool:
    return fmt.element.bits > 8


def quantize_emulated(x: np.ndarray, fmt: QuantFormat, rounding: str | None = None, seed: int = 0, axis: int = -1,
                      rht: int | None = None, rht_seed: int = 0, sr_bits: int = SR_BITS) -> QuantizedTensor:
    """Quantize a float32 numpy array with ``fmt``: bit-identical to ``quantize_reference``."""
    sr_bits = check_sr_bits(sr_bits)
    if _uses_reference(fmt):
        return quantize_reference(x, fmt, rounding=rounding, seed=seed, axis=axis, rht=rht, rht_seed=rht_seed,
                                  sr_bits=sr_bits)
    from fp4lab.emulator.rht import rht as rht_numba

    mode = check_rounding(rounding, fmt)
    x = np.ascontiguousarray(x, dtype=F32)
    view = BlockView.for_format(x.shape, fmt, axis)
    seed_lo, seed_hi = (np.uint64(v) for v in split_seed(seed))
    if rht is not None:
        x = rht_numba(x, size=rht, seed=rht_seed, axis=view.axis)
    tab = tables_for(fmt, mode)
    codes = np.empty(x.shape, np.uint8)
    if fmt.scale_rule.method == "none":
        encode_flat(x.reshape(-1), codes.reshape(-1), seed_lo, seed_hi, sr_bits, tab.ip, tab.fp, tab.ethr, tab.ecodes)
        return QuantizedTensor(codes, np.zeros((0,), np.uint8), np.zeros((0,), F32), None, fmt, view.axis, mode,
                               seed, rht, rht_seed)
    ts, g = _tensor_scales(x, fmt)
    geo = _geometry(view)
    nblocks = geo.nA * geo.nB * geo.nC
    scode = np.empty(nblocks, np.uint32)
    scales = np.empty(nblocks, F32)
    two_level = ts is not None
    ts32 = F32(ts) if two_level else F32(1.0)
    quantize_blocks(x.reshape(-1), codes.reshape(-1), scode, scales, geo.ints(), ts32, F32(1.0) / ts32, two_level,
                    _encode_multipliers(fmt, g), seed_lo, seed_hi, sr_bits, *tab.args())
    sdtype = fmt.scale.code_dtype
    scale_codes = scode if sdtype == np.uint32 else scode.astype(sdtype)
    return QuantizedTensor(
        codes=codes,
        scale_codes=scale_codes.reshape(view.scale_shape),
        scales=scales.reshape(view.scale_shape),
        tensor_scale=ts,
        fmt=fmt,
        axis=view.axis,
        rounding=mode,
        seed=seed,
        rht=rht,
        rht_seed=rht_seed,
    )


def dequantize_emulated(qt: QuantizedTensor, rotated: bool = False) -> np.ndarray:
    """float32 ``value[code] * S`` (``* ts``), RHT undone unless ``rotated``: bit-identical to the reference."""
    fmt = qt.fmt
    if _uses_reference(fmt):
        return dequantize_reference(qt, rotated=rotated)
    from fp4lab.emulator.rht import rht as rht_numba

    codes = np.ascontiguousarray(qt.codes, dtype=np.uint8)
    evals = tables_for(fmt, "rtne").evals
    if codes.size and int(codes.max()) >= evals.size:
        raise ValueError(f"dequantize: codes must be below {evals.size} for format '{fmt.name}', got {codes.max()}")
    out = np.empty(codes.shape, F32)
    if fmt.scale_rule.method == "none":
        decode_flat(codes.reshape(-1), evals, out.reshape(-1))
    else:
        view = BlockView.for_format(codes.shape, fmt, qt.axis)
        scales = np.ascontiguousarray(qt.scales, dtype=F32)
        if scales.shape != view.scale_shape:
            raise ValueError(f"dequantize: scales have shape {scales.shape}, codes of shape {codes.shape} need "
                             f"{view.scale_shape}")
        two_level = qt.tensor_scale is not None
        ts = F32(qt.tensor_scale) if two_level else F32(1.0)
        dequantize_blocks(codes.reshape(-1), scales.reshape(-1), _geometry(view).ints(), fmt.block_size, ts,
                          two_level, evals, out.reshape(-1))
    if qt.rht is not None and not rotated:
        out = rht_numba(out, size=qt.rht, seed=qt.rht_seed, axis=qt.axis, inverse=True)
    return out
