"""The one bit-pattern comparison of fp4lab's checks (``fp4lab verify``, conformance vectors, the test-suite).

Bit-exact means equal integer bit patterns: float arrays are compared as their unsigned-integer patterns of the
same width (float16 -> uint16, float32 -> uint32, float64 -> uint64), signed integers as the unsigned view of the
same width, unsigned integers and booleans as they are. So -0 differs from +0 and two NaNs differ unless their
payloads and signs agree.

``nan="any"`` is the one documented exception, for callers whose contract leaves NaN *results* unspecified
(IEEE 754 does; NVIDIA GPUs produce 0x7FFFFFFF, x86 numpy 0xFFC00000 or the propagated payload): every NaN
pattern of a float width (exponent all ones, mantissa non-zero) then becomes that width's canonical quiet NaN
(0x7E00, 0x7FC00000, 0x7FF8000000000000) before the comparison. It applies to both operands whenever either of
them is a float array, so a float32 result compares with stored uint32 bits the same way. Non-NaN patterns,
-0 and +-Inf stay exact.

    mismatches(a, b)            -> int   number of differing elements
    same_bits(a, b)             -> bool  mismatches(a, b) == 0
    mismatch_mask(a, b)         -> bool array, True where the patterns differ
    bit_patterns(a, nan=...)    -> the integer patterns compared

Narrow float types that numpy does not know (ml_dtypes' bfloat16 / float8 / float4 arrays, torch's bfloat16 and
float8 tensors) compare as their raw unsigned patterns of the same width (``nan="any"`` leaves their NaNs exact).
Torch tensors are accepted without importing torch here: they are detached and copied to the host.

Operands must have the same shape (``InputError`` otherwise: no broadcasting) and, where one is a float array,
the other must be a float or integer array of the same width.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from fp4lab.errors import InputError

NAN_POLICIES = ("exact", "any")
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
# per width: (mask without the sign bit, +Inf pattern, canonical quiet NaN)
_FLOAT_BITS = {2: (0x7FFF, 0x7C00, 0x7E00), 4: (0x7FFFFFFF, 0x7F800000, 0x7FC00000),
               8: (0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000, 0x7FF8000000000000)}


def _check_policy(nan: str) -> None:
    if nan not in NAN_POLICIES:
        raise InputError(f"bit comparison: nan must be 'exact' or 'any', got {nan!r}")


def _host(a: Any) -> Any:
    """A torch tensor as a host numpy array (a dtype numpy lacks as its integer patterns); anything else as is."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(a, torch.Tensor):
        return a
    t = a.detach().cpu().contiguous()
    if t.dtype.is_floating_point and t.dtype not in (torch.float16, torch.float32, torch.float64):
        t = t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t.numpy()


def _raw(a: Any) -> tuple[np.ndarray, bool]:
    """(unsigned bit patterns, whether ``a`` was a float array)."""
    a = np.ascontiguousarray(_host(a))
    kind, size = a.dtype.kind, a.dtype.itemsize
    if kind == "f" and size in _FLOAT_BITS:
        return a.view(_UINT[size]), True
    if kind == "i" and size in _UINT:
        return a.view(_UINT[size]), False
    if kind == "b":
        return a.view(np.uint8), False
    if kind == "V" and size in _UINT and a.dtype.fields is None:  # ml_dtypes' narrow floats
        return a.view(_UINT[size]), False
    if kind == "u":
        return a, False
    raise InputError(f"bit comparison: cannot take bit patterns of dtype {a.dtype} (float16/32/64 or integers)")


def _canonical_nans(p: np.ndarray) -> np.ndarray:
    mask, inf, qnan = (np.array(v, p.dtype) for v in _FLOAT_BITS[p.dtype.itemsize])
    return np.where((p & mask) > inf, qnan, p)


def bit_patterns(a: Any, nan: str = "exact") -> np.ndarray:
    """Integer bit patterns of ``a`` (see module doc); ``nan="any"``: every NaN of a float array becomes the
    canonical quiet NaN of its width (sign dropped)."""
    _check_policy(nan)
    p, is_float = _raw(a)
    return _canonical_nans(p) if nan == "any" and is_float else p


def mismatch_mask(a: Any, b: Any, nan: str = "exact") -> np.ndarray:
    """Boolean array, True where the bit patterns of ``a`` and ``b`` differ (same shape required)."""
    _check_policy(nan)
    pa, fa = _raw(a)
    pb, fb = _raw(b)
    if pa.shape != pb.shape:
        raise InputError(f"bit comparison: shapes {pa.shape} and {pb.shape} differ")
    if (fa or fb) and pa.dtype.itemsize != pb.dtype.itemsize:
        raise InputError(f"bit comparison: a {np.asarray(_host(a)).dtype} array against a "
                         f"{np.asarray(_host(b)).dtype} array: "
                         "float bit patterns compare only with patterns of the same width")
    if nan == "any" and (fa or fb):
        pa, pb = _canonical_nans(pa), _canonical_nans(pb)
    return pa != pb


def mismatches(a: Any, b: Any, nan: str = "exact") -> int:
    """Number of elements whose bit patterns differ (0: bit-exact)."""
    return int(np.count_nonzero(mismatch_mask(a, b, nan)))


def same_bits(a: Any, b: Any, nan: str = "exact") -> bool:
    """True when ``a`` and ``b`` have the same shape and equal bit patterns everywhere."""
    return mismatches(a, b, nan) == 0


__all__ = ["NAN_POLICIES", "bit_patterns", "mismatch_mask", "mismatches", "same_bits"]
