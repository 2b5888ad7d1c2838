"""The block scale rule: the scale code a finite block amax gets under a format's ``ScaleRule``, before the
zero, Inf and NaN block policies and the range edges (``range_policy``) apply. Step 3 of the pipeline in
``ref_quantize``; docs/numerics.md, "Scale rules".
"""

from __future__ import annotations

import numpy as np

from fp4lab.formats.quant_format import QuantFormat
from fp4lab.numerics.ref_encode import encode_scale, f32_bits

F32 = np.float32
FLT_MAX = np.finfo(F32).max


def block_scale_codes(amax: np.ndarray, fmt: QuantFormat, target: float, ts: np.float32 | None,
                      g: np.float32 | None = None) -> np.ndarray:
    """Scale codes for finite float32 block amaxes under ``fmt.scale_rule`` (policies not yet applied)."""
    rule, sfmt = fmt.scale_rule, fmt.scale
    if rule.ocp_exponent:
        bits = f32_bits(amax).astype(np.int64)
        if rule.method == "even":  # round amax to the element mantissa width first (torchao EVEN)
            bits = (bits + (1 << (22 - fmt.element.mantissa_bits))) & 0x7F800000
        e_amax = ((bits >> 23) & 0xFF) - 127
        if rule.method == "ceil":
            e_amax = e_amax + ((bits & 0x7FFFFF) != 0)
        e = e_amax - fmt.emax_elem
        return np.clip(e + sfmt.exponent_bias, 0, sfmt.pow2_nan_code - 1).astype(sfmt.code_dtype)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if rule.scale_arithmetic == "encode":
            ideal = np.minimum(amax * (F32(1.0 if g is None else g) * (F32(1.0) / F32(target))), FLT_MAX)
            ts = None
        elif rule.scale_division == "divide":
            ideal = amax / F32(target)
        else:
            ideal = amax * (F32(1.0) / F32(target))
        if ts is not None:
            ideal = ideal / ts
    if rule.min_scale is not None:
        ideal = np.maximum(ideal, F32(rule.min_scale))
    if rule.max_scale is not None:
        ideal = np.minimum(ideal, F32(rule.max_scale))
    return encode_scale(ideal.astype(F32), sfmt, rule.effective_rounding, rule.scale_overflow)
