"""Triton quantize kernel: any registry/spec format, 1-D blocks along any axis or 2-D tiles, every rounding mode
(deterministic threshold tables and stochastic rounding), optional fused RHT, plain or packed codes.

The kernel sees a tensor as a logical [M, K] matrix whose K axis is the blocked (and rotated) axis: element
(r, k) lives at flat index ``(r // INNER) * K * INNER + k * INNER + r % INNER`` of the C-contiguous input
(``INNER`` = product of the axes after the blocked one; 1 for the last axis and for 2-D tiles). The flat index
also feeds the SR contract: element i uses word i % 4 of ``tl.randint4x(seed, i // 4)`` >> 8. Arithmetic follows
``fp4lab.numerics.ref_quantize`` step by step (``tile``'s docstring states the bit-exactness rules).
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.codes import (
    CHOICE_NONE,
    ETAB_LEVELS,
    ETAB_VALUES,
    KIND_FLOAT_BITS,
    KIND_FLOAT_TABLE,
    KIND_FP32,
    KIND_POW2,
    ROUND_CEIL,
)
from fp4lab.kernels.encoding import (
    block_scale_codes,
    decode_scale,
    element_policies,
    encode_det,
    encode_fbits_det,
    encode_fbits_sr,
    encode_float_scale,
    encode_sr,
    pow2_exponent,
)
from fp4lab.kernels.hadamard import rht_pairs, rht_tile
from fp4lab.kernels.sr_draws import philox_pairs
from fp4lab.kernels.tile import (
    FLT_MAX,
    bits_of,
    blocks_of,
    div_by_reciprocal,
    expand_blocks,
    f32_of,
    is_finite,
    load_f32,
    load_tile,
    pair_tile,
    scale_tile,
)


@triton.jit
def _bmax(vb, TWO_D: tl.constexpr):
    if TWO_D:
        return tl.max(tl.max(vb, axis=3), axis=1)
    else:
        return tl.max(vb, axis=2)


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _bmax_nan(vb, TWO_D: tl.constexpr):
    """Per-block float maximum that propagates NaN (tl.max would drop it on the GPU and keep it in numpy)."""
    if TWO_D:
        return tl.reduce(tl.reduce(vb, 3, _max_nan), 1, _max_nan)
    else:
        return tl.reduce(vb, 2, _max_nan)


@triton.jit
def _pick(sq, ia, ib, a, b, TWO_D: tl.constexpr):
    """Per-block value of element (a, b) of each block (a: tile row, b: column within the half): a masked
    tl.sum over zeros, which is exact."""
    if TWO_D:
        return tl.sum(tl.sum(tl.where((ia == a) & (ib == b), sq, 0.0), axis=3), axis=1)
    else:
        return tl.sum(tl.where(ib == b, sq, 0.0), axis=2)


@triton.jit
def _bsum_ordered(sqe, sqo, TR: tl.constexpr, TH: tl.constexpr, TWO_D: tl.constexpr):
    """fp32 sum of each block's values in element order (row-major within a tile; element 2j in the even half
    ``sqe``, 2j+1 in the odd half ``sqo``), one rounding per addition."""
    if TWO_D:
        ia = tl.arange(0, TR)[None, :, None, None]
        ib = tl.arange(0, TH)[None, None, None, :]
    else:
        ia = 0
        ib = tl.arange(0, TH)[None, None, :]
    err = _pick(sqe, ia, ib, 0, 0, TWO_D) + _pick(sqo, ia, ib, 0, 0, TWO_D)
    for j in range(1, TR * TH):
        err = err + _pick(sqe, ia, ib, j // TH, j % TH, TWO_D)
        err = err + _pick(sqo, ia, ib, j // TH, j % TH, TWO_D)
    return err


@triton.jit
def _encode(t, rnd, etab, ELEM: tl.constexpr, NAN_T: tl.constexpr):
    """Element codes of fp32 ``t`` (SR draws ``rnd`` from ``sr_draws.philox_pairs``: int32 comparands, or fp32 v for
    the bit-arithmetic encoder) with the element tables ``etab`` (see ``_quantize_kernel``) and the element
    policies; NAN_T: t may be NaN."""
    thr_ptr, ctab_ptr, half, lvl_ptr, sctab_ptr, igap_ptr, _vals, nan_code, ovf_thr, ovf_nan, inf_pos, inf_neg = etab
    if ELEM.FBITS:
        if ELEM.SR:
            code = encode_fbits_sr(t, rnd, ELEM)
        else:
            code = encode_fbits_det(t, ELEM)
    elif ELEM.SR:
        code = encode_sr(t, rnd, lvl_ptr, sctab_ptr, igap_ptr, ELEM)
    else:
        code = encode_det(t, thr_ptr, ctab_ptr, half, ELEM)
    return element_policies(code, t, nan_code, ovf_thr, ovf_nan, inf_pos, inf_neg, ELEM.OVERFLOW, NAN_T)


@triton.jit
def _scale_elements(xb, S, ts, TWO_D: tl.constexpr, SCALE: tl.constexpr, LEAN: tl.constexpr):
    """fp32 scaled elements t of blocks xb with decoded block scales S (see ref_quantize.scale_elements).
    LEAN: the tile is known to hold finite x only and normal finite S with finite reciprocals (see
    _tile_is_plain), so the zero-scale and 0 * Inf corrections are no-ops and are left out."""
    one = tl.full(S.shape, 1.0, tl.float32)
    if SCALE.ENCODE_ARITH:
        if SCALE.TWO_LEVEL:
            r = tl.minimum(tl.div_rn(one, S * ts), FLT_MAX, propagate_nan=tl.PropagateNan.ALL)
        else:
            r = tl.minimum(tl.div_rn(one, S), FLT_MAX, propagate_nan=tl.PropagateNan.ALL)
        t = xb * expand_blocks(r, TWO_D)
    elif SCALE.DIV_POW2:
        t = xb * expand_blocks(tl.div_rn(one, S), TWO_D)
    elif SCALE.DIVIDE_ELEMENTS:
        t = tl.div_rn(xb, tl.broadcast_to(expand_blocks(_divisor(S, ts, SCALE), TWO_D), xb.shape))
    else:
        re = expand_blocks(_reciprocal(S, ts, SCALE.TWO_LEVEL), TWO_D)
        if LEAN:
            t = xb * re
        else:
            t = tl.where((xb == 0.0) & (tl.abs(re) == float("inf")), xb, xb * re)  # 0 * inf (1/S overflowed) stays 0
    if not (SCALE.ENCODE_ARITH or LEAN):
        t = tl.where(expand_blocks(S == 0.0, TWO_D) & (xb == xb), f32_of(bits_of(xb) & -2147483648), t)
    return t


@triton.jit
def _nonzero_quotients(t, xb, S, TWO_D: tl.constexpr):
    """rtp / rtm: t, where a non-zero x of a block with a non-zero scale scaled to +-0 (underflow), +-2^-149 with
    x's sign (see ref_quantize.nonzero_quotients)."""
    tiny = f32_of((bits_of(xb) & -2147483648) | 1)
    return tl.where((t == 0.0) & (xb != 0.0) & expand_blocks(S != 0.0, TWO_D), tiny, t)


@triton.jit
def _near_boundary(te, to, ELEM: tl.constexpr):
    """Scalar: True when some |t| of the tile lies within 2^(emin - 20) (>= 4 ulps of any |t| below
    2^(emin + 1)) of a rounding boundary (odd multiple of half the spacing) of a one-spacing ExMy grid (the
    ``ELEM.FB_*`` fields), or above the largest level. The rounded value is the encoder's own sum, computed once."""
    FB_M: tl.constexpr = ELEM.FB_M
    FB_EMIN: tl.constexpr = ELEM.FB_EMIN
    NB: tl.constexpr = (ELEM.FB_CMAX + 1) >> FB_M
    BIG: tl.constexpr = 2.0 ** (FB_EMIN - FB_M + 23)
    VMAX: tl.constexpr = 2.0 ** (FB_EMIN + NB - 2) * (2.0 - 2.0 ** -FB_M)
    HALF_TOL: tl.constexpr = 2.0 ** (FB_EMIN - FB_M - 1) - 2.0 ** (FB_EMIN - 20)
    ae = tl.abs(te)
    ao = tl.abs(to)
    re = ae - ((tl.minimum(ae, VMAX) + BIG) - BIG)
    ro = ao - ((tl.minimum(ao, VMAX) + BIG) - BIG)
    return tl.max(tl.maximum(tl.abs(re), tl.abs(ro))) >= HALF_TOL


@triton.jit
def _reciprocal(S, ts, TWO_LEVEL: tl.constexpr):
    """Per-block multiplier of the reciprocal element scaling: 1/S, or (1/ts)/S for two-level formats."""
    one = tl.full(S.shape, 1.0, tl.float32)
    if TWO_LEVEL:
        inv_ts = tl.div_rn(ts * 0.0 + 1.0, ts)  # a scalar: once per program (ts is finite and positive)
        return tl.div_rn(one * inv_ts, S)
    else:
        return tl.div_rn(one, S)


@triton.jit
def _divisor(S, ts, SCALE: tl.constexpr):
    """Per-block divisor of the elements of a dividing format: S, or S * ts for two-level formats."""
    if SCALE.TWO_LEVEL:
        return S * ts
    else:
        return S


@triton.jit
def _tile_is_plain(has_inf, has_nan, S, ts, amax, SCALE: tl.constexpr, FAST_DIV: tl.constexpr):
    """Scalar: True when every block of the tile has finite inputs and a normal finite scale whose element
    multiplier is finite (and, S_CRIT > 0, below S_CRIT: no decoded-range caps), so the lean encoding (no
    NaN/zero-scale/0 * Inf corrections, no multiplier floor, no caps) gives the same bits. FAST_DIV: also every
    divisor d is in [2^-60, 2^100] with amax / d <= 2^100, where ``tile.div_by_reciprocal`` divides exactly."""
    S_CRIT: tl.constexpr = SCALE.S_CRIT
    eb = bits_of(S) & 0x7F800000
    bad = has_inf | has_nan | (eb == 0) | (eb == 0x7F800000)
    if FAST_DIV:
        d = _divisor(S, ts, SCALE)
        bad = bad | (d < 2.0 ** -60) | (d > 2.0 ** 100) | (amax > d * 2.0 ** 100)
    if not (SCALE.ENCODE_ARITH or SCALE.DIVIDE_ELEMENTS or SCALE.DIV_POW2):
        bad = bad | ((bits_of(_reciprocal(S, ts, SCALE.TWO_LEVEL)) & 0x7F800000) == 0x7F800000)
    if S_CRIT > 0.0:
        if SCALE.TWO_LEVEL:
            bad = bad | tl.where(ts == 1.0, S >= S_CRIT, False)  # (the interpreter cannot & a 0-d bool into a tile)
        else:
            bad = bad | (S >= S_CRIT)
    return tl.max(tl.max(bad.to(tl.int32), axis=1), axis=0) == 0


@triton.jit
def _multiplier_ok(code, m, svals_ptr, SCALE: tl.constexpr):
    """(decoded scale S of ``code``, whether S > 0 with a finite multiplier div_rn(m, S))."""
    s = decode_scale(code, svals_ptr, SCALE)
    return s, (s > 0.0) & is_finite(tl.div_rn(m, s))


@triton.jit
def multiplier_floor(ts, svals_ptr, SCALE: tl.constexpr):
    """Scalars (code, value) of range_policy.multiplier_floor: the smallest scale code in [BUMP_LO, BUMP_HI] (the
    positive scale codes, ascending in value) whose scale S is positive with a finite multiplier m / S,
    m = div_rn(1, ts) (1 single-level); value 0 (no floor) if none. m / S is finite iff S > m / (2^128 - 2^103),
    and that bound lies within 2^-24 (relative) above v = m * 2^-128: so the answer is the smallest scale >= v
    (its ceil encoding), or the next code if that one's multiplier overflows (scale spacings exceed 2^-24).
    Float tables: by bisection. Once per program."""
    KIND: tl.constexpr = SCALE.KIND
    LO: tl.constexpr = SCALE.BUMP_LO
    HI: tl.constexpr = SCALE.BUMP_HI
    if SCALE.TWO_LEVEL:
        m = tl.div_rn(ts * 0.0 + 1.0, ts)
    else:
        m = tl.full((), 1.0, tl.float32)
    if KIND == KIND_FLOAT_TABLE:
        lo = tl.full((), LO, tl.int32)
        hi = tl.full((), HI, tl.int32)
        for _ in tl.static_range((HI - LO).bit_length()):
            mid = lo + (hi - lo) // 2
            _, ok = _multiplier_ok(mid, m, svals_ptr, SCALE)
            hi = tl.where(ok, mid, hi)
            lo = tl.where(ok, lo, mid + 1)
        c = lo
    else:
        v = (m * 5.421010862427522e-20) * 5.421010862427522e-20  # m * 2^-128, one rounding (2^-64 twice)
        if KIND == KIND_POW2:
            c1 = tl.minimum(tl.maximum(pow2_exponent(v, ROUND_CEIL) + SCALE.BIAS, 0), SCALE.NAN - 1)
        elif KIND == KIND_FLOAT_BITS:
            c1 = encode_float_scale(tl.minimum(v, SCALE.MAXV), SCALE.MB, SCALE.BIAS, ROUND_CEIL)
        elif KIND == KIND_FP32:
            c1 = bits_of(v)
        else:
            b = bits_of(v)
            c1 = (b + tl.where((b & 0xFFFF) != 0, 0x10000, 0)) >> 16
        _, ok1 = _multiplier_ok(c1, m, svals_ptr, SCALE)
        c = tl.minimum(tl.where(ok1, c1, c1 + 1), HI)
    s, ok = _multiplier_ok(c, m, svals_ptr, SCALE)
    return c, tl.where(ok, s, 0.0)


@triton.jit
def _floor_scales(sc, S, amax, fcode, fval):
    """Blocks with amax > 0 whose non-zero scale is below the multiplier floor (fcode, fval) take it."""
    bump = (amax > 0.0) & (S > 0.0) & (S < fval)
    return tl.where(bump, fcode, sc), tl.where(bump, fval, S)


@triton.jit
def _decoded_caps(S, lvl_ptr, ELEM: tl.constexpr):
    """range_policy.decoded_caps per block: (lo, hi) from the ascending levels, -Inf / +Inf where the extreme level
    on that side decodes finite. Bisection: cp = number of levels whose product with S is below +Inf, cn = number
    whose product is -Inf (both prefixes of the ascending levels)."""
    N_LVL: tl.constexpr = ELEM.N_LVL
    L_LVL: tl.constexpr = ELEM.L_LVL
    cp = tl.full(S.shape, 0, tl.int32)
    cn = tl.full(S.shape, 0, tl.int32)
    for s in tl.static_range(L_LVL):
        up = cp + (1 << (L_LVL - 1 - s))
        vp = tl.load(lvl_ptr + tl.minimum(up, N_LVL) - 1) * S
        cp = tl.where((up <= N_LVL) & (vp < float("inf")), up, cp)
        un = cn + (1 << (L_LVL - 1 - s))
        vn = tl.load(lvl_ptr + tl.minimum(un, N_LVL) - 1) * S
        cn = tl.where((un <= N_LVL) & (vn == float("-inf")), un, cn)
    ok = is_finite(S)
    hi = tl.where(ok & (cp < N_LVL), tl.maximum(tl.load(lvl_ptr + tl.maximum(cp - 1, 0)), 0.0), float("inf"))
    lv_lo = tl.load(lvl_ptr + tl.minimum(cn, N_LVL - 1))
    neg_zero = f32_of(tl.full(S.shape, -2147483648, tl.int32))  # -0.0 from its bits (a literal loses its sign)
    lo = tl.where(ok & (cn > 0), tl.where(lv_lo < 0.0, lv_lo, neg_zero), float("-inf"))  # a capped t stays negative
    return lo, hi


@triton.jit
def _cap(t, lo, hi):
    """t clamped to [lo, hi]: only t < lo or t > hi moves (a zero keeps its sign), NaN stays NaN."""
    return tl.where(t < lo, lo, tl.where(t > hi, hi, t))


@triton.jit
def _block_scales(amax, zero, has_inf, has_nan, ts, g, target, inv_target, stab, SCALE: tl.constexpr):
    """(scale codes, decoded scales) of the blocks for one amax target, block policies applied (``stab``: the
    scale tables, see ``_quantize_kernel``)."""
    _tg, _itg, stab_ptr, scpos_ptr, svals_ptr, min_s, max_s, zero_code, inf_code, snan_code = stab
    sc = block_scale_codes(amax, target, inv_target, ts, g, min_s, max_s, stab_ptr, scpos_ptr, SCALE)
    if SCALE.HAS_ZB:
        sc = tl.where(zero, zero_code, sc)
    sc = tl.where(has_inf, inf_code, sc)
    sc = tl.where(has_nan, snan_code, sc)
    return sc, decode_scale(sc, svals_ptr, SCALE)


@triton.jit
def _encode_blocks(eb, ob, reb, rob, S, ts, etab, TWO_D: tl.constexpr, ELEM: tl.constexpr, SCALE: tl.constexpr,
                   LEAN: tl.constexpr, QDIV: tl.constexpr, FAST_DIV: tl.constexpr):
    """(even-half codes, odd-half codes) of the blocks with decoded scales S; LEAN as in _scale_elements (t is
    then never NaN, so the NaN element policy is left out too); SCALE.S_CRIT > 0: decoded-range caps (tensor
    scale 1). FAST_DIV (host: a dividing format whose grid allows it, ``ElementParams.fast_division``): lean
    tiles divide by the block's reciprocal with FMA corrections (``tile.div_by_reciprocal``; every divisor of a
    lean tile is in its exact range, see _tile_is_plain)."""
    NB: tl.constexpr = (ELEM.FB_CMAX + 1) >> ELEM.FB_M
    if LEAN and FAST_DIV:
        den = _divisor(S, ts, SCALE)
        r = expand_blocks(tl.div_rn(tl.full(S.shape, 1.0, tl.float32), den), TWO_D)
        te = div_by_reciprocal(eb, expand_blocks(den, TWO_D), r)
        to = div_by_reciprocal(ob, expand_blocks(den, TWO_D), r)
    elif LEAN and QDIV and SCALE.DIVIDE_ELEMENTS and ELEM.FBITS and NB == 2 and not ELEM.SR:
        # uniform grid, RTNE: x * fl(1/den) is within 3 ulps of fl(x / den), so both round to the same grid point
        # unless one lies within 4 ulps of a rounding boundary; only tiles with such an element divide exactly.
        # QDIV (host): fp32 inputs or RHT-rotated values; raw bf16 inputs hit exact ties x / den == boundary in
        # nearly every tile (measured on the H200: slower than dividing), so they divide
        den = _divisor(S, ts, SCALE)
        r = expand_blocks(tl.div_rn(tl.full(S.shape, 1.0, tl.float32), den), TWO_D)
        te = eb * r
        to = ob * r
        if _near_boundary(te, to, ELEM):
            te = tl.div_rn(eb, tl.broadcast_to(expand_blocks(den, TWO_D), eb.shape))
            to = tl.div_rn(ob, tl.broadcast_to(expand_blocks(den, TWO_D), ob.shape))
    else:
        te = _scale_elements(eb, S, ts, TWO_D, SCALE, LEAN)
        to = _scale_elements(ob, S, ts, TWO_D, SCALE, LEAN)
    if ELEM.DIRECTED:
        te = _nonzero_quotients(te, eb, S, TWO_D)
        to = _nonzero_quotients(to, ob, S, TWO_D)
    if SCALE.S_CRIT > 0.0 and not LEAN:  # after the above, as the reference; two-level: only with ts = 1 (the
        # fallback; any other ts is capped)
        lvl_ptr = etab[ETAB_LEVELS]
        lo, hi = _decoded_caps(tl.where(ts == 1.0, S, float("nan")) if SCALE.TWO_LEVEL else S, lvl_ptr, ELEM)
        te = _cap(te, expand_blocks(lo, TWO_D), expand_blocks(hi, TWO_D))
        to = _cap(to, expand_blocks(lo, TWO_D), expand_blocks(hi, TWO_D))
    ce = _encode(te, reb, etab, ELEM, not LEAN)
    co = _encode(to, rob, etab, ELEM, not LEAN)
    return ce, co


@triton.jit
def _sq_error(eb, ob, ce, co, S, ts, vals_ptr, TR: tl.constexpr, TH: tl.constexpr, TWO_D: tl.constexpr,
              SCALE: tl.constexpr):
    """Per-block fp32 sum (element order) of (value[code] * S (* ts) - x)^2; SCALE.ERR_ABS: |error| instead of
    its square (select_by "sae"); SCALE.TS_FIRST: value * (S * ts) (dequantize_order "scale_product_first")."""
    if SCALE.TS_FIRST:
        S = S * ts
    de = tl.load(vals_ptr + ce) * expand_blocks(S, TWO_D)
    do = tl.load(vals_ptr + co) * expand_blocks(S, TWO_D)
    if SCALE.TWO_LEVEL and not SCALE.TS_FIRST:
        de = de * ts
        do = do * ts
    de = de - eb
    do = do - ob
    if SCALE.ERR_ABS:
        return _bsum_ordered(tl.abs(de), tl.abs(do), TR, TH, TWO_D)
    return _bsum_ordered(de * de, do * do, TR, TH, TWO_D)


@triton.jit
def _amax_kernel(x_ptr, part_ptr, signs_ptr, rscale, M, K, INNER,
                 BM: tl.constexpr, BK: tl.constexpr, IN_KIND: tl.constexpr, INNER1: tl.constexpr,
                 RHT_N: tl.constexpr):
    """part[pid] = max of the finite |x| (after the optional RHT) over this program's tile (0 if none)."""
    x, cols, _, _ = load_tile(x_ptr, M, K, INNER, BM, BK, IN_KIND, INNER1)
    if RHT_N > 0:
        x = rht_tile(x, signs_ptr, cols, rscale, BM, BK, RHT_N, False)
    a = tl.where(is_finite(x), tl.abs(x), 0.0)
    tl.store(part_ptr + tl.program_id(0) * tl.num_programs(1) + tl.program_id(1), tl.max(tl.max(a, axis=1), axis=0))


@triton.jit
def tensor_scale(amax_t, ts_den, SCALE: tl.constexpr):
    """(ts, g) of a two-level format from the tensor amax (ref_quantize.tensor_scales): decode scale ts, clamped to
    [TS_LO, TS_HI] (fp32 bit patterns, range_policy.tensor_scale_bounds: TS_LO may be subnormal, which a float
    literal would make fp64), and, for "encode" arithmetic, the encode scale g (1 otherwise)."""
    ts_lo = f32_of(tl.full((), SCALE.TS_LO, tl.int32))
    ts_hi = f32_of(tl.full((), SCALE.TS_HI, tl.int32))
    if SCALE.ENCODE_ARITH:
        g = tl.where(amax_t > 0.0, tl.minimum(tl.div_rn(ts_den, amax_t), FLT_MAX, propagate_nan=tl.PropagateNan.ALL),
                     1.0)
        g = tl.where(g > 0.0, g, 1.0)
        ts = tl.minimum(tl.div_rn(1.0, g), ts_hi)
    else:
        g = 1.0
        ts = tl.div_rn(amax_t, ts_den)
        ts = tl.where((ts > 0.0) & is_finite(ts), tl.minimum(tl.maximum(ts, ts_lo), ts_hi), 1.0)
    return ts, g


@triton.jit
def quantize_halves(xe, xo, re, ro, ts, g, etab, stab, BM: tl.constexpr, C2: tl.constexpr, TR: tl.constexpr,
                    TC: tl.constexpr, TWO_D: tl.constexpr, ELEM: tl.constexpr, SCALE: tl.constexpr,
                    QDIV: tl.constexpr, LEAN_OK: tl.constexpr, floor, FLOOR_GIVEN: tl.constexpr,
                    FAST_DIV: tl.constexpr):
    """Codes of a [BM, 2 * C2] tile held as even/odd halves xe, xo (SR comparands re, ro), with block scales
    (unless SCALE.CHOICE is NONE; tensor scale ts and encode scale g of two-level formats): (code_e, code_o
    [BM, C2], scale codes, decoded scales [blocks of the tile]); element-only formats return zero-sized scale
    placeholders (0, 1).
    ``etab`` / ``stab``: the element and scale tables (see ``_quantize_kernel``). Range edges
    (range_policy.kernel_constants): BUMP_HI > 0: the multiplier floor over scale codes [BUMP_LO, BUMP_HI] (then a
    lean tile may hold raised blocks: their multipliers are finite); S_CRIT > 0: decoded-range caps for blocks
    with S >= S_CRIT, off the lean path. FLOOR_GIVEN: ``floor`` holds that floor's (code, value) for this ``ts``
    (``multiplier_floor``, computed once per tensor by the caller) instead of each call computing it."""
    BUMP: tl.constexpr = SCALE.BUMP_HI > 0
    N_TG: tl.constexpr = SCALE.N_TG
    TH: tl.constexpr = TC // 2
    if SCALE.CHOICE == CHOICE_NONE:
        code_e = _encode(xe, re, etab, ELEM, True)
        code_o = _encode(xo, ro, etab, ELEM, True)
        return code_e, code_o, 0, 1.0
    else:
        tg_ptr, itg_ptr, _stab, _scpos, svals_ptr, _min_s, _max_s, _zero_code, _inf_code, _snan_code = stab
        if BUMP:
            if FLOOR_GIVEN:
                fcode, fval = floor
            else:
                fcode, fval = multiplier_floor(ts, svals_ptr, SCALE)
        eb = blocks_of(xe, BM, C2, TR, TH, TWO_D)
        ob = blocks_of(xo, BM, C2, TR, TH, TWO_D)
        reb = blocks_of(re, BM, C2, TR, TH, TWO_D)
        rob = blocks_of(ro, BM, C2, TR, TH, TWO_D)
        # block amax (finite values), has_nan, has_inf; the even and odd halves merged elementwise first
        if SCALE.NAN_PROP:
            # a block with Inf/NaN gets the inf/nan scale code whatever its finite amax: one NaN-propagating float
            # maximum of |x| suffices (same value as the integer maximum of the |x| bit patterns)
            top = _bmax_nan(tl.maximum(tl.abs(eb), tl.abs(ob), propagate_nan=tl.PropagateNan.ALL), TWO_D)
            has_nan = top != top
            has_inf = top == float("inf")
            amax = tl.where(has_nan | has_inf, 0.0, top)
            nan_el = has_nan
        else:
            ae = bits_of(eb) & 0x7FFFFFFF
            ao = bits_of(ob) & 0x7FFFFFFF
            amax = f32_of(_bmax(tl.maximum(tl.where(ae < 0x7F800000, ae, 0), tl.where(ao < 0x7F800000, ao, 0)), TWO_D))
            has_nan = amax != amax  # all False: NaN elements leave the block scale alone (nan_policy "ignore")
            has_inf = _bmax(tl.maximum(tl.where(ae == 0x7F800000, 1, 0), tl.where(ao == 0x7F800000, 1, 0)), TWO_D) > 0
            # ... but they still take the NaN element policy, which the lean path leaves out
            nan_el = _bmax(tl.maximum(tl.where(ae > 0x7F800000, 1, 0), tl.where(ao > 0x7F800000, 1, 0)), TWO_D) > 0
        zero = (amax == 0.0) & (~has_nan) & (~has_inf)
        best_sc, best_S = _block_scales(amax, zero, has_inf, has_nan, ts, g, tl.load(tg_ptr), tl.load(itg_ptr), stab,
                                        SCALE)
        if BUMP:
            best_sc, best_S = _floor_scales(best_sc, best_S, amax, fcode, fval)
        if LEAN_OK and _tile_is_plain(has_inf, nan_el, best_S, ts, amax, SCALE, FAST_DIV):
            best_e, best_o = _encode_blocks(eb, ob, reb, rob, best_S, ts, etab, TWO_D, ELEM, SCALE, True, QDIV,
                                            FAST_DIV)
        else:
            best_e, best_o = _encode_blocks(eb, ob, reb, rob, best_S, ts, etab, TWO_D, ELEM, SCALE, False, QDIV,
                                            False)
        if N_TG > 1:
            vals_ptr = etab[ETAB_VALUES]
            best_err = _sq_error(eb, ob, best_e, best_o, best_S, ts, vals_ptr, TR, TH, TWO_D, SCALE)
            for ti in tl.static_range(1, N_TG):
                sc, S = _block_scales(amax, zero, has_inf, has_nan, ts, g, tl.load(tg_ptr + ti), tl.load(itg_ptr + ti),
                                      stab, SCALE)
                if BUMP:
                    sc, S = _floor_scales(sc, S, amax, fcode, fval)
                c_e, c_o = _encode_blocks(eb, ob, reb, rob, S, ts, etab, TWO_D, ELEM, SCALE, False, QDIV, False)
                err = _sq_error(eb, ob, c_e, c_o, S, ts, vals_ptr, TR, TH, TWO_D, SCALE)
                take = err < best_err
                best_e = tl.where(expand_blocks(take, TWO_D), c_e, best_e)
                best_o = tl.where(expand_blocks(take, TWO_D), c_o, best_o)
                best_sc = tl.where(take, sc, best_sc)
                best_S = tl.where(take, S, best_S)
                best_err = tl.where(take, err, best_err)
        return tl.reshape(best_e, [BM, C2]), tl.reshape(best_o, [BM, C2]), best_sc, best_S


@triton.jit
def _quantize_kernel(
    x_ptr, codes_ptr, sc_ptr, s_ptr, amax_ptr, ts_ptr,
    thr_ptr, ctab_ptr, half, lvl_ptr, sctab_ptr, igap_ptr, vals_ptr,
    nan_code, ovf_thr, ovf_nan, inf_pos, inf_neg,
    tg_ptr, itg_ptr, stab_ptr, scpos_ptr, svals_ptr,
    ts_den, min_s, max_s, zero_code, inf_code, snan_code,
    signs_ptr, rscale, M, K, K2, INNER, seed,
    BM: tl.constexpr, BK: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr, TWO_D: tl.constexpr,
    IN_KIND: tl.constexpr, INNER1: tl.constexpr, WORDS: tl.constexpr, PACK: tl.constexpr, STORE_S: tl.constexpr,
    FAST_RAND: tl.constexpr, SRW: tl.constexpr, RHT_N: tl.constexpr, QDIV: tl.constexpr, LEAN_OK: tl.constexpr,
    ELEM: tl.constexpr, SCALE: tl.constexpr,
):
    """One [BM, BK] tile, held as its even and odd columns (two [BM, BK/2] halves with one layout): bf16 pairs
    load as one int32 word (WORDS), codes pack as ``even | odd << 4`` without shuffles.

    Runtime arguments after the outputs: the element tables and constants (thresholds, codes, levels, SR codes,
    reciprocal gaps, values; NaN / overflow / Inf codes: ``params.ElementParams``), then the scale tables and
    constants (amax targets and reciprocals, float-scale thresholds, positive codes and decoded values; clamps,
    zero / Inf / NaN block codes: ``params.ScaleParams``); they travel as the tuples ``etab`` and ``stab``."""
    C2: tl.constexpr = BK // 2
    etab = (thr_ptr, ctab_ptr, half, lvl_ptr, sctab_ptr, igap_ptr, vals_ptr, nan_code, ovf_thr, ovf_nan, inf_pos,
            inf_neg)
    stab = (tg_ptr, itg_ptr, stab_ptr, scpos_ptr, svals_ptr, min_s, max_s, zero_code, inf_code, snan_code)
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows, kw, ce, addr_e, addr_o, rmask, me, mo, mw = pair_tile(M, K, K2, INNER, BM, C2, INNER1)
    if WORDS:
        w = tl.load(x_ptr + rows[:, None] * K2 + kw[None, :], mask=mw, other=0)
        xe = f32_of(w << 16)
        xo = f32_of(w & -65536)
    else:
        xe = load_f32(x_ptr, addr_e, me, IN_KIND)
        xo = load_f32(x_ptr, addr_o, mo, IN_KIND)
    if RHT_N > 0:
        xe, xo = rht_pairs(xe, xo, signs_ptr, ce, rscale, BM, C2, RHT_N, False)
    if ELEM.SR:
        re, ro = philox_pairs(seed, addr_e, addr_o, rows, pid_k * BK, K, BM, C2, FAST_RAND, SRW, ELEM.FBITS)
    else:
        re = addr_e
        ro = addr_o
    ts = 1.0
    g = 1.0
    if SCALE.TWO_LEVEL:
        ts, g = tensor_scale(tl.load(amax_ptr), ts_den, SCALE)
        if (pid_m == 0) & (pid_k == 0):
            tl.store(ts_ptr, ts)
    code_e, code_o, best_sc, best_S = quantize_halves(xe, xo, re, ro, ts, g, etab, stab, BM, C2, TR, TC, TWO_D,
                                                      ELEM, SCALE, QDIV, LEAN_OK, (0, 0.0), False,
                                                      False)
    if SCALE.CHOICE != CHOICE_NONE:
        saddr, smask = scale_tile(rows, rmask, M, K, INNER, BM, BK, TR, TC, TWO_D, INNER1)
        tl.store(sc_ptr + saddr, best_sc, mask=smask)
        if STORE_S:
            tl.store(s_ptr + saddr, best_S, mask=smask)
    if PACK:
        tl.store(codes_ptr + rows[:, None] * K2 + kw[None, :], code_e | (code_o << 4), mask=mw)
    else:
        tl.store(codes_ptr + addr_e, code_e, mask=me)
        tl.store(codes_ptr + addr_o, code_o, mask=mo)
