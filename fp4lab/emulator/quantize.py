"""Emulator entry points for quantize / dequantize / fake-quantize on numpy arrays: the parallel numba twin of
``fp4lab.numerics.ref_quantize`` and ``fp4lab.numerics.fakequant``.

Same pipeline and bits as ``quantize_reference`` (see its docstring); tables come from ``nb_tables``, kernels from
``nb_quantize``. Fallback: element grids wider than 8 bits (uint16 codes) run the numpy reference.
"""

from __future__ import annotations

import numpy as np

from fp4lab.emulator.nb_quantize import (
    Geometry,
    decode_flat,
    dequantize_blocks,
    encode_flat,
    finite_amax,
    quantize_blocks,
)
from fp4lab.emulator.nb_rht import rht as rht_numba
from fp4lab.emulator.nb_tables import tables_for, with_multiplier_floor
from fp4lab.errors import InputError
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.blocks import BlockView
from fp4lab.numerics.checks import check_quantized, tensor_scale_value
from fp4lab.numerics.fakequant import GemmDtype, check_gemm_dtype, fake_quant_values
from fp4lab.numerics.options import DEFAULT_OPTIONS, QuantizeOptions, as_options
from fp4lab.numerics.philox import split_seed
from fp4lab.numerics.ref_quantize import check_rounding, dequantize_reference, quantize_reference, tensor_scales
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
    """"encode" arithmetic: float32(g * float32(1/target)) per target (g = 1 for single-level formats); +Inf where
    the product overflows, as in ``scale_rule.block_scale_codes``."""
    g32 = F32(1.0 if g is None else g)
    with np.errstate(over="ignore"):  # float32 products beyond the range are +-Inf, as in the reference
        return np.array([g32 * (F32(1.0) / F32(t)) for t in fmt.targets], F32)


def _uses_reference(fmt: QuantFormat) -> bool:
    return fmt.element.bits > 8


def quantize_emulated(x: np.ndarray, fmt: QuantFormat, options: QuantizeOptions = DEFAULT_OPTIONS) -> QuantizedTensor:
    """Quantize a float32 numpy array with ``fmt`` and ``options``: bit-identical to ``quantize_reference``."""
    options = as_options(options)
    if _uses_reference(fmt):
        return quantize_reference(x, fmt, options)
    seed, axis, rht, rht_seed, sr_bits = options.seed, options.axis, options.rht, options.rht_seed, options.sr_bits
    mode = check_rounding(options.rounding, fmt)
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
    tab = with_multiplier_floor(tab, fmt, ts)
    with np.errstate(over="ignore"):  # "encode" arithmetic: 1/ts may overflow; its kernels never read it
        inv_ts = F32(1.0) / ts32
    quantize_blocks(x.reshape(-1), codes.reshape(-1), scode, scales, geo.ints(), ts32, inv_ts, two_level,
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


def dequantize_emulated(qt: QuantizedTensor, rotated: bool = False, *, check: bool = True) -> np.ndarray:
    """float32 ``value[code] * S`` (``* ts``), RHT undone unless ``rotated``: bit-identical to the reference.
    A two-level tensor without its tensor scale decodes without it (fake quantization's GEMM operands);
    ``check=False``: the caller ran ``check_quantized`` already."""
    if check:
        check_quantized(qt, require_tensor_scale=False)
    fmt = qt.fmt
    if _uses_reference(fmt):
        return dequantize_reference(qt, rotated=rotated)
    codes = np.ascontiguousarray(qt.codes, dtype=np.uint8)
    evals = tables_for(fmt, "rtne").evals
    if codes.size and int(codes.max()) >= evals.size:
        raise InputError(f"dequantize: codes must be below {evals.size} for format '{fmt.name}', got {codes.max()}")
    out = np.empty(codes.shape, F32)
    if fmt.scale_rule.method == "none":
        decode_flat(codes.reshape(-1), evals, out.reshape(-1))
    else:
        view = BlockView.for_format(codes.shape, fmt, qt.axis)
        scales = np.ascontiguousarray(qt.scales, dtype=F32)
        if scales.shape != view.scale_shape:
            raise InputError(f"dequantize: scales have shape {scales.shape}, codes of shape {codes.shape} need "
                             f"{view.scale_shape}")
        two_level = qt.tensor_scale is not None  # check_quantized: set only for two-level formats
        ts = tensor_scale_value(qt.tensor_scale) if two_level else F32(1.0)
        if two_level and fmt.scale_rule.dequantize_order == "scale_product_first":  # value * float32(S * ts)
            scales, ts, two_level = (scales * ts).astype(F32), F32(1.0), False
        dequantize_blocks(codes.reshape(-1), scales.reshape(-1), _geometry(view).ints(), fmt.block_size, ts,
                          two_level, evals, out.reshape(-1))
    if qt.rht is not None and not rotated:
        out = rht_numba(out, size=qt.rht, seed=qt.rht_seed, axis=qt.axis, inverse=True)
    return out


def fake_quantize_emulated(x: np.ndarray, fmt: QuantFormat, rounding: str | None = None, seed: int = 0,
                           axis: int = -1, rht: int | None = None, rht_seed: int = 0, sr_bits: int = 24,
                           dtype: GemmDtype = "bf16", apply_tensor_scale: bool = True
                           ) -> tuple[np.ndarray, np.float32 | None]:
    """Numba twin of ``fp4lab.numerics.fakequant.fake_quantize_reference`` (same arguments, same bits)."""
    check_gemm_dtype(dtype)
    qt = quantize_emulated(x, fmt, QuantizeOptions(rounding, seed, axis, rht, rht_seed, sr_bits))
    return fake_quant_values(qt, dequantize_emulated, dtype, apply_tensor_scale), qt.tensor_scale
