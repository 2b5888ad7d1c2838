"""Reference block-scaled quantize / dequantize in plain numpy: the readable definition of fp4lab's bits.

Pipeline for one tensor ``x`` (float32 after an RTNE cast from wider types), documented in docs/numerics.md:

1. optional RHT along the blocked axis (``fp4lab.numerics.rht``);
2. two-level formats: ``ts = amax_finite(x) / float32(target0 * smax)`` (``smax`` = ``max_scale`` or the scale
   format's maximum); ``ts = 1`` if that is zero or not finite. With ``scale_arithmetic = "encode"``
   (TransformerEngine): ``g = min(float32(target0 * smax) / amax, FLT_MAX)`` (``g = 1`` if zero) and
   ``ts = 1 / g``; a positive finite ts is then clamped to ``range_policy.tensor_scale_bounds`` (no code decodes to
   Inf; reciprocal element scaling: ``float32(1/ts)`` finite);
3. per block: ``amax`` = max of the finite ``|x|``; block scale by the rule (``scale_rule.block_scale_codes``);
   reciprocal element scaling: a block with ``amax > 0`` whose non-zero scale has an infinite element multiplier
   takes ``range_policy.multiplier_floor``; policies for all-zero, NaN and Inf blocks;
4. scaled element ``t`` (``x / S``; ``x * float32(1/S)``; two-level ``x / float32(S*ts)`` or
   ``x * float32(float32(1/ts)/S)``), a zero scale giving a signed zero; "encode" arithmetic:
   ``t = x * min(float32(1 / float32(S*ts)), FLT_MAX)`` with no zero-scale special case; rtp / rtm: a quotient
   that underflowed to +-0 takes +-2^-149 (``nonzero_quotients``); then, with tensor scale 1 (single-level
   formats), ``t`` is clamped to ``range_policy.decoded_caps`` (no code decodes to Inf); ``t`` rounded onto the
   element grid;
5. several targets (4-over-6): the candidate with the smaller float32 sum of squared (``select_by = "sse"``) or
   absolute (``"sae"``) errors, summed in element order, wins; ties keep the earlier target.
"""

from __future__ import annotations

import numpy as np

from fp4lab.errors import InputError, SpecError
from fp4lab.formats.grids import ROUNDING_MODES
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.formats.spec_io import one_line
from fp4lab.numerics.blocks import BlockView
from fp4lab.numerics.options import DEFAULT_OPTIONS, QuantizeOptions, as_options
from fp4lab.numerics.philox import sr_random_bits_reference
from fp4lab.numerics.range_policy import clamp_tensor_scale, decoded_caps, multiplier_floor
from fp4lab.numerics.ref_encode import decode_elements, encode_elements, special_scale_code
from fp4lab.numerics.rht import rht_reference
from fp4lab.numerics.scale_rule import FLT_MAX, block_scale_codes
from fp4lab.quantized import QuantizedTensor

F32 = np.float32


def check_rounding(rounding: str | None, fmt: QuantFormat) -> str:
    """The rounding mode a call uses (``fmt.rounding`` for None), or a one-line ``InputError`` if it is unknown."""
    mode = fmt.rounding if rounding is None else rounding
    if mode not in ROUNDING_MODES:
        raise InputError(f"quantize: rounding '{mode}' is unknown; use one of {', '.join(ROUNDING_MODES)}")
    return mode


def tensor_scales(x: np.ndarray, fmt: QuantFormat) -> tuple[np.float32 | None, np.float32 | None]:
    """(ts, g): the stored second-level float32 (decode) scale and, for "encode" arithmetic, the float32 encode
    scale ``g`` it was derived from. (None, None) for single-level formats."""
    if fmt.tensor_scale == "none":
        return None, None
    finite = np.abs(x[np.isfinite(x)])
    amax = F32(finite.max() if finite.size else 0)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        denom = F32(fmt.targets[0] * (fmt.scale_rule.max_scale or fmt.scale.max))  # may round to +Inf
        if fmt.scale_rule.scale_arithmetic == "encode":
            g = np.minimum(denom / amax, FLT_MAX) if amax > 0 else F32(1.0)
            g = g if g > 0 else F32(1.0)
            return clamp_tensor_scale(F32(1.0) / g, fmt), F32(g)
        ts = amax / denom
    return (clamp_tensor_scale(ts, fmt) if (ts > 0 and np.isfinite(ts)) else F32(1.0)), None


def scale_elements(xb: np.ndarray, S: np.ndarray, ts: np.float32 | None, fmt: QuantFormat) -> np.ndarray:
    """float32 scaled elements ``t`` for blocks ``xb [..., bs]`` with decoded block scales ``S [...]``."""
    Sb = S[..., None]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if fmt.scale_rule.scale_arithmetic == "encode":
            recip = np.minimum(F32(1.0) / (Sb if ts is None else Sb * ts), FLT_MAX)
            return (xb * recip).astype(F32)
        if fmt.scale_rule.element_scaling == "divide":
            t = xb / (Sb if ts is None else Sb * ts)
        else:
            recip = (F32(1.0) / Sb) if ts is None else (F32(1.0) / ts) / Sb
            t = np.where((xb == 0) & np.isinf(recip), xb, xb * recip)  # 0 * inf (1/S overflowed) stays 0
    zero_scale = (Sb == 0) & ~np.isnan(xb)
    return np.where(zero_scale, np.copysign(F32(0), xb), t).astype(F32)


DIRECTED = ("rtp", "rtm")
TINY = np.uint32(1).view(F32)  # 2^-149, the smallest float32 magnitude


def nonzero_quotients(t: np.ndarray, xb: np.ndarray, S: np.ndarray) -> np.ndarray:
    """``t`` where a non-zero ``x`` of a block with a non-zero scale scaled to +-0 (the quotient underflowed
    float32) is +-2^-149 with ``x``'s sign. rtp and rtm round the exact quotient: no level lies strictly between 0
    and 2^-149, so 2^-149 rounds in either direction where the exact (non-zero) quotient does."""
    under = (t == 0) & (xb != 0) & (S[..., None] != 0)
    return np.where(under, np.copysign(TINY, xb), t).astype(F32)


def _quantize_blocks(xb, rb, fmt: QuantFormat, mode: str, ts, g):
    """Codes [..., bs], scale codes [...] and decoded scales [...] for blocks ``xb``."""
    rule, sfmt = fmt.scale_rule, fmt.scale
    finite = np.isfinite(xb)
    with np.errstate(invalid="ignore"):
        amax = np.max(np.where(finite, np.abs(xb), F32(0)), axis=-1).astype(F32)
    has_nan = np.isnan(xb).any(axis=-1) if rule.nan_policy == "propagate" else np.zeros(amax.shape, bool)
    has_inf = np.isinf(xb).any(axis=-1)
    zero = (amax == 0) & ~has_nan & ~has_inf
    floor = multiplier_floor(fmt, ts)
    candidates = []
    for target in fmt.targets:
        scodes = block_scale_codes(amax, fmt, target, ts, g)
        if floor is not None:  # a non-zero scale whose element multiplier overflows takes the smallest finite one
            S0 = sfmt.decode(scodes)
            scodes[(amax > 0) & (S0 > 0) & (S0 < floor[1])] = floor[0]
        if rule.zero_block != "as_computed":
            scodes[zero] = special_scale_code(sfmt, rule.zero_block)
        if has_inf.any():
            scodes[has_inf] = special_scale_code(sfmt, "nan" if rule.inf_policy == "propagate" else "max")
        if has_nan.any():
            scodes[has_nan] = special_scale_code(sfmt, "nan")
        S = sfmt.decode(scodes)
        t = scale_elements(xb, S, ts, fmt)
        if mode in DIRECTED:
            t = nonzero_quotients(t, xb, S)
        if ts is None or ts == 1:  # elements that would decode to +-Inf take the largest finite level
            lo, hi = (c[..., None] for c in decoded_caps(fmt, S))
            t = np.where(t < lo, lo, np.where(t > hi, hi, t)).astype(F32)  # only t beyond a cap moves; NaN stays
        codes = encode_elements(t, fmt.element, mode, rb, fmt.nan_element, fmt.overflow, fmt.signed_zero)
        candidates.append((codes, scodes, S))
    if len(candidates) == 1:
        return candidates[0]
    best_err = None
    best = candidates[0]
    for codes, scodes, S in candidates:
        deq = _dequantize_blocks(codes, S, ts, fmt)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = deq - xb
            sq = np.abs(diff) if fmt.scale_rule.select_by == "sae" else diff * diff
        err = np.zeros(amax.shape, F32)
        for j in range(xb.shape[-1]):  # float32, in element order
            err = (err + sq[..., j]).astype(F32)
        if best_err is None:
            best_err = err
            continue
        take = err < best_err
        best = tuple(np.where(take[..., None] if a.ndim == xb.ndim else take, a, b) for a, b in
                     zip((codes, scodes, S), best))
        best_err = np.where(take, err, best_err)
    return best


def _dequantize_blocks(codes, S, ts, fmt: QuantFormat) -> np.ndarray:
    """float32 ``value * S``; two-level ``(value * S) * ts``, or ``value * (S * ts)`` (``scale_product_first``)."""
    with np.errstate(invalid="ignore", over="ignore"):
        if ts is not None and fmt.scale_rule.dequantize_order == "scale_product_first":
            return (decode_elements(codes, fmt.element) * (S * ts).astype(F32)[..., None]).astype(F32)
        out = decode_elements(codes, fmt.element) * S[..., None]
        return out if ts is None else (out * ts).astype(F32)


def quantize_reference(x: np.ndarray, fmt: QuantFormat, options: QuantizeOptions = DEFAULT_OPTIONS) -> QuantizedTensor:
    """Quantize a float32 numpy array with ``fmt`` and ``options`` (see the module docstring for the exact
    arithmetic; ``options.sr_bits``: random bits per element of stochastic rounding,
    ``philox.sr_random_bits_reference``)."""
    options = as_options(options)
    seed, axis, rht, rht_seed, sr_bits = options.seed, options.axis, options.rht, options.rht_seed, options.sr_bits
    mode = check_rounding(options.rounding, fmt)
    with np.errstate(over="ignore"):  # RTNE cast: float64 beyond the float32 range becomes +-Inf (step 1)
        x = np.ascontiguousarray(x, dtype=F32)
    view = BlockView.for_format(x.shape, fmt, axis)
    if rht is not None:
        x = rht_reference(x, size=rht, seed=rht_seed, axis=view.axis)
    rand = sr_random_bits_reference(seed, x.size, sr_bits).reshape(x.shape) if mode == "sr" else None
    xb = view.to_blocks(x)
    rb = view.to_blocks(rand) if rand is not None else None
    if fmt.scale_rule.method == "none":
        codes = encode_elements(xb, fmt.element, mode, rb, fmt.nan_element, fmt.overflow, fmt.signed_zero)
        empty = np.zeros((0,), np.uint8)
        return QuantizedTensor(view.from_blocks(codes), empty, np.zeros((0,), F32), None, fmt, view.axis,
                               mode, seed, rht, rht_seed)
    ts, g = tensor_scales(x, fmt)
    codes, scodes, S = _quantize_blocks(xb, rb, fmt, mode, ts, g)
    return QuantizedTensor(
        codes=view.from_blocks(codes),
        scale_codes=view.scales_from_blocks(scodes),
        scales=view.scales_from_blocks(S.astype(F32)),
        tensor_scale=ts,
        fmt=fmt,
        axis=view.axis,
        rounding=mode,
        seed=seed,
        rht=rht,
        rht_seed=rht_seed,
    )


def dequantize_reference(qt: QuantizedTensor, rotated: bool = False) -> np.ndarray:
    """float32 values ``value[code] * S`` (``* ts``); the RHT is undone unless ``rotated``."""
    fmt = qt.fmt
    codes = np.asarray(qt.codes)
    if fmt.scale_rule.method == "none":
        out = decode_elements(codes, fmt.element)
    else:
        view = BlockView.for_format(codes.shape, fmt, qt.axis)
        S = view.scales_to_blocks(np.asarray(qt.scales, dtype=F32))
        out = view.from_blocks(_dequantize_blocks(view.to_blocks(codes), S, qt.tensor_scale, fmt))
    if qt.rht is not None and not rotated:
        out = rht_reference(out, size=qt.rht, seed=qt.rht_seed, axis=qt.axis, inverse=True)
    return out


def smoke_check(fmt: QuantFormat, where: str) -> None:
    """Quantize a small test tensor with ``fmt`` through the reference pipeline and refuse the format (one-line
    ``SpecError``) if that raises, gives a non-finite value for finite inputs, or flushes every block to zero
    although the blocks span magnitudes 2^-20 .. 2^20. A backstop behind the model checks, for
    ``fp4lab spec validate``."""
    if fmt.block is None:
        shape = (8, 8)
    elif fmt.block.is_2d:
        shape = (4 * fmt.block.shape[0], 2 * fmt.block.shape[1])
    else:
        shape = (8, 4 * fmt.block.shape[0])
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    x *= np.exp2(np.linspace(-20, 20, shape[0]))[:, None]
    x = x.astype(np.float32)
    try:
        with np.errstate(all="ignore"):
            y = dequantize_reference(quantize_reference(x, fmt))
    except Exception as exc:  # noqa: BLE001 - whatever breaks, the format cannot be used
        raise SpecError(f"{where}: quantizing a test tensor fails ({type(exc).__name__}: {one_line(str(exc))})") \
            from None
    if not np.all(np.isfinite(y)):
        raise SpecError(f"{where}: quantizing finite test values gives NaN or Inf; check the scale rule and targets")
    if not np.any(y != 0) and fmt.scale_rule.min_scale is None:  # a min_scale clamp may flush small data
        raise SpecError(f"{where}: every block of a test tensor spanning 2^-20 .. 2^20 quantizes to zero; check "
                        "the scale format, min_scale and targets")
