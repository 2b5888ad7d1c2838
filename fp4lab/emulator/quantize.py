"""Emulator entry points for quantize / dequantize on numpy arrays: the parallel numba twin of ``ref_quantize``.

Same pipeline and bits as ``quantize_reference`` (see its docstring); tables come from ``nb_tables``, kernels from
``nb_quantize``. Fallback: element grids wider than 8 bits (uint16 codes) run the numpy reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fp4lab.emulator.blocks import BlockView
from fp4lab.emulator.nb_quantize import (
    Geometry, decode_flat, dequantize_blocks, encode_flat, finite_amax, quantize_blocks,
)
from fp4lab.emulator.nb_tables import tables_for, with_multiplier_floor
from fp4lab.emulator.options import DEFAULT_OPTIONS, RHT_SIZES, QuantizeOptions, as_options, split_seed_checked
from fp4lab.emulator.philox import split_seed
from fp4lab.emulator.ref_quantize import check_rounding, dequantize_reference, quantize_reference, tensor_scales
from fp4lab.errors import InputError
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
    with np.errstate(over="ignore"):  # float32 products beyond the range are +-Inf, as in the reference
        return np.array([g32 * (F32(1.0) / F32(t)) for t in fmt.targets], F32)


def _uses_reference(fmt: QuantFormat) -> bool:
    return fmt.element.bits > 8


def quantize_emulated(x: np.ndarray, fmt: QuantFormat, options: QuantizeOptions = DEFAULT_OPTIONS) -> QuantizedTensor:
    """Quantize a float32 numpy array with ``fmt`` and ``options``: bit-identical to ``quantize_reference``."""
    options = as_options(options)
    if _uses_reference(fmt):
        return quantize_reference(x, fmt, options)
    from fp4lab.emulator.rht import rht as rht_numba

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


# ---- input checks of a QuantizedTensor, shared by every backend (fp4lab.dequantize calls them first) -----------
def _dtype_name(a: Any) -> str:
    return str(a.dtype).removeprefix("torch.")


def _is_array(a: Any) -> bool:
    return isinstance(a, np.ndarray) or type(a).__module__.startswith("torch") and hasattr(a, "dtype") \
        and hasattr(a, "shape")


def _host(a: Any) -> np.ndarray:
    """numpy view/copy of a numpy array or torch tensor (scale-sized arrays only: a device copy)."""
    if isinstance(a, np.ndarray):
        return a
    return a.detach().cpu().numpy()


# stored scale-code dtypes: numpy as quantize returns them; torch tensors also as the signed view of the same bits
_SCALE_CODE_DTYPES = {np.dtype(np.uint8): ("uint8",), np.dtype(np.uint16): ("uint16", "int16"),
                      np.dtype(np.uint32): ("uint32", "int32")}


def tensor_scale_value(ts: Any, what: str = "dequantize") -> np.float32:
    """The float32 value of a stored tensor scale (Python/numpy number, or a one-element array or tensor); an
    ``InputError`` unless it is a positive finite float32, as every quantize returns."""
    if _is_array(ts):
        if int(np.prod(ts.shape)) != 1:
            raise InputError(f"{what}: tensor_scale must hold one value, got shape {tuple(ts.shape)}")
        if _dtype_name(ts) != "float32":
            raise InputError(f"{what}: tensor_scale has dtype {_dtype_name(ts)}; expected float32")
        v = np.float32(_host(ts).reshape(-1)[0])
    elif isinstance(ts, (float, np.floating, int, np.integer)) and not isinstance(ts, (bool, np.bool_)):
        v = np.float32(ts)
        if float(v) != float(ts) and not np.isnan(v):
            raise InputError(f"{what}: tensor_scale {ts!r} is not a float32 value")
    else:
        raise InputError(f"{what}: tensor_scale must be a float32 number or one-element array, got "
                         f"{type(ts).__name__}")
    if not (np.isfinite(v) and v > 0):
        raise InputError(f"{what}: tensor_scale is {float(v)!r}; a stored tensor scale is positive and finite")
    return v


def check_quantized(qt: Any, what: str = "dequantize", *, require_tensor_scale: bool = True) -> BlockView:
    """Refuse (``InputError``, one line) a QuantizedTensor that no quantize call returns: wrong types, dtypes or
    shapes, codes beyond the grid, scales that disagree with the stored scale codes, a tensor scale that is
    missing, unexpected, non-finite or not positive, an unknown RHT size. Returns the block view of the codes.

    numpy and torch (CPU or CUDA) fields are checked alike; value checks of scale-sized arrays run on the host.
    ``require_tensor_scale=False`` lets a two-level tensor come without its tensor scale, which is then left out
    (the emulator's twin of the kernels' ``apply_tensor_scale=False``; the public ``dequantize`` requires it)."""
    if not isinstance(qt, QuantizedTensor):
        raise InputError(f"{what}: expected a QuantizedTensor (as fp4lab.quantize returns), got {type(qt).__name__}")
    fmt = qt.fmt
    if not isinstance(fmt, QuantFormat):
        raise InputError(f"{what}: qt.fmt must be a QuantFormat, got {type(fmt).__name__}")
    codes = qt.codes
    if codes is None and qt.packed_codes is not None:
        raise InputError(f"{what}: the codes are stored packed only (packed_codes); unpack them first "
                         "(fp4lab.unpack)")
    if not _is_array(codes):
        raise InputError(f"{what}: codes must be a numpy array or torch tensor, got {type(codes).__name__}")
    want = "uint8" if fmt.element.bits <= 8 else "uint16"
    if _dtype_name(codes) != want:
        raise InputError(f"{what}: codes have dtype {_dtype_name(codes)}; format '{fmt.name}' stores {want} codes "
                         "(as quantize returns them)")
    axis = qt.axis
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise InputError(f"{what}: axis must be an int, got {type(axis).__name__}")
    try:
        view = BlockView.for_format(tuple(codes.shape), fmt, int(axis))
    except InputError as exc:
        raise InputError(str(exc).replace("quantize:", f"{what}:", 1)) from None
    if int(np.prod(codes.shape)) and int(codes.max()) >= fmt.element.n_codes:
        raise InputError(f"{what}: codes must be below {fmt.element.n_codes} for format '{fmt.name}', got "
                         f"{int(codes.max())}")
    if qt.rht is not None:
        if isinstance(qt.rht, (bool, np.bool_)) or not isinstance(qt.rht, (int, np.integer)) \
                or int(qt.rht) not in RHT_SIZES:
            raise InputError(f"{what}: rht must be None or one of {', '.join(map(str, RHT_SIZES))}, got {qt.rht!r}")
        split_seed_checked(qt.rht_seed, f"{what}: rht_seed")
        if codes.shape[view.axis] % int(qt.rht):
            raise InputError(f"{what}: axis {view.axis} has length {codes.shape[view.axis]}, not a multiple of "
                             f"rht={qt.rht}")
    if not isinstance(qt.meta, dict):
        raise InputError(f"{what}: meta must be a dict, got {type(qt.meta).__name__}")
    devices = {str(a.device) for a in (codes, qt.scale_codes, qt.scales, qt.tensor_scale)
               if _is_array(a) and not isinstance(a, np.ndarray)}
    if len(devices) > 1:
        raise InputError(f"{what}: the fields of the QuantizedTensor lie on different devices ({sorted(devices)})")
    if fmt.scale_rule.method == "none":
        if qt.tensor_scale is not None:
            raise InputError(f"{what}: format '{fmt.name}' has no tensor scale, but tensor_scale is set")
        return view
    sc, scales = qt.scale_codes, qt.scales
    for name, a in (("scale_codes", sc), ("scales", scales)):
        if not _is_array(a):
            raise InputError(f"{what}: {name} must be a numpy array or torch tensor, got {type(a).__name__}")
        if tuple(a.shape) != tuple(view.scale_shape):
            raise InputError(f"{what}: {name} have shape {tuple(a.shape)}; format '{fmt.name}' on a "
                             f"{tuple(codes.shape)} tensor blocked along axis {view.axis} needs "
                             f"{tuple(view.scale_shape)}")
    sdt = np.dtype(fmt.scale.code_dtype)
    allowed = _SCALE_CODE_DTYPES[sdt] if not isinstance(sc, np.ndarray) else (sdt.name,)
    if _dtype_name(sc) not in allowed:
        raise InputError(f"{what}: scale_codes have dtype {_dtype_name(sc)}; format '{fmt.name}' stores "
                         f"{sdt.name} scale codes")
    if _dtype_name(scales) != "float32":
        raise InputError(f"{what}: scales have dtype {_dtype_name(scales)}; expected float32")
    sc_h = _host(sc).view(sdt)
    if fmt.scale.kind == "float" and sc_h.size and int(sc_h.max()) >= 1 << fmt.scale.bits:
        raise InputError(f"{what}: scale code {int(sc_h.max())} is not a code of the {fmt.scale.bits}-bit scale "
                         f"format of '{fmt.name}'")
    decoded = fmt.scale.decode(sc_h)
    given = np.ascontiguousarray(_host(scales), dtype=F32)
    same = (decoded.view(np.uint32) == given.view(np.uint32)) | (np.isnan(decoded) & np.isnan(given))
    if not same.all():
        i = np.unravel_index(int(np.argmin(same)), same.shape)
        raise InputError(f"{what}: scales disagree with scale_codes at block {tuple(int(j) for j in i)} "
                         f"({float(given[i])!r} stored, code {int(sc_h[i])} decodes to {float(decoded[i])!r})")
    if fmt.tensor_scale != "none":
        if qt.tensor_scale is None:
            if require_tensor_scale:
                raise InputError(f"{what}: format '{fmt.name}' has a tensor scale, but tensor_scale is None")
        else:
            tensor_scale_value(qt.tensor_scale, what)
    elif qt.tensor_scale is not None:
        raise InputError(f"{what}: format '{fmt.name}' has no tensor scale, but tensor_scale is set")
    return view


def dequantize_emulated(qt: QuantizedTensor, rotated: bool = False, *, check: bool = True) -> np.ndarray:
    """float32 ``value[code] * S`` (``* ts``), RHT undone unless ``rotated``: bit-identical to the reference.
    A two-level tensor without its tensor scale decodes without it (fake quantization's GEMM operands);
    ``check=False``: the caller ran ``check_quantized`` already."""
    if check:
        check_quantized(qt, require_tensor_scale=False)
    fmt = qt.fmt
    if _uses_reference(fmt):
        return dequantize_reference(qt, rotated=rotated)
    from fp4lab.emulator.rht import rht as rht_numba

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
