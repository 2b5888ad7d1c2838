"""Input checks of a ``QuantizedTensor``, shared by every backend (``fp4lab.dequantize`` calls them first).

``check_quantized`` refuses, with one ``InputError`` line, a tensor that no quantize call returns;
``tensor_scale_value`` reads a stored tensor scale. numpy and torch (CPU or CUDA) fields are checked alike, without
importing torch: scale-sized arrays are copied to the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.blocks import BlockView
from fp4lab.numerics.options import RHT_SIZES, split_seed_checked
from fp4lab.quantized import QuantizedTensor

F32 = np.float32


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
