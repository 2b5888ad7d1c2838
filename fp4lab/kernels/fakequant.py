"""Triton fake-quantize kernel: ``dequantize(quantize(x), rotated=True)`` in one pass, written as bf16 (rounded to
nearest-even) or fp32 GEMM operands, for blocks along K (the last axis) and/or along M (axis 0) of a 2-D [M, K]
tensor, with fused RHT and stochastic rounding.

One program reads a [BM, BK] tile once (held as even/odd column halves, as in quantize.py) and produces

* along K: the tile's 1-D blocks (or 2-D tiles) along its rows, rotated along K (``RHT_K``);
* along M: its 1-D blocks along columns, rotated along M (``RHT_M``): each column half is transposed and split
  into even/odd rows, so the same ``quantize_halves`` pipeline (with ``BM`` and ``C2`` exchanged) runs on it, and
  the values are transposed back before the store.

Both outputs keep the input's [M, K] layout. SR comparands follow the quantize contract on the element's flat
index in the [M, K] input (independent seeds per output), so every output equals the quantize kernel's codes
decoded, bit for bit. Values: ``value[code] * S`` (``* ts`` unless ``FOLD_TS``: two-level formats may leave the
tensor scale to the GEMM's output), rounded to bf16 by the hardware ``cvt.rn.bf16x2.f32`` on the GPU and by its
integer twin in the interpreter.
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.dequantize import bf16_bits_rtne
from fp4lab.kernels.quantize import _blocks, _expand, quantize_halves, tensor_scale
from fp4lab.kernels.tile import decode_elements, f32_of, load_f32, pair_tile, philox_pairs, rht_pairs


@triton.jit
def _values(code_e, code_o, S, ts, vals_ptr, R: tl.constexpr, C2: tl.constexpr, TR: tl.constexpr,
            TC: tl.constexpr, TWO_D: tl.constexpr, METHOD: tl.constexpr, APPLY_TS: tl.constexpr,
            GKIND: tl.constexpr, EB: tl.constexpr, MB: tl.constexpr, EBIAS: tl.constexpr, STEP: tl.constexpr):
    """fp32 ``value[code] * S`` (``* ts``) of both halves [R, C2], in the reference's order of operations."""
    ve = decode_elements(code_e, vals_ptr, GKIND, EB, MB, EBIAS, STEP)
    vo = decode_elements(code_o, vals_ptr, GKIND, EB, MB, EBIAS, STEP)
    if METHOD != 0:
        Sx = _expand(S, TWO_D)
        ve = tl.reshape(_blocks(ve, R, C2, TR, TC // 2, TWO_D) * Sx, [R, C2])
        vo = tl.reshape(_blocks(vo, R, C2, TR, TC // 2, TWO_D) * Sx, [R, C2])
        if APPLY_TS:
            ve = ve * ts
            vo = vo * ts
    return ve, vo


@triton.jit
def _store(out_ptr, ve, vo, rows, kw, ce, rmask, mw, K, K2, BM: tl.constexpr, C2: tl.constexpr,
           OUT_F32: tl.constexpr, INTERP: tl.constexpr):
    """Store the even/odd halves [BM, C2] of a row-major [M, K] output: fp32 (``out_ptr`` fp32), or bf16 rounded to
    nearest-even: the hardware conversion on the GPU (``out_ptr`` int16), its NaN-safe integer twin as int32 words
    in the interpreter (``out_ptr`` int32)."""
    if OUT_F32:
        base = rows[:, None] * K + ce[None, :]
        tl.store(out_ptr + base, ve, mask=mw)
        tl.store(out_ptr + base + 1, vo, mask=mw)
    elif INTERP:
        tl.store(out_ptr + rows[:, None] * K2 + kw[None, :], bf16_bits_rtne(ve) | (bf16_bits_rtne(vo) << 16),
                 mask=mw)
    else:
        word = tl.reshape(tl.join(ve, vo).to(tl.bfloat16), [BM, 2 * C2]).to(tl.int16, bitcast=True)
        cols = tl.program_id(1) * (2 * C2) + tl.arange(0, 2 * C2)
        tl.store(out_ptr + rows[:, None] * K + cols[None, :], word, mask=rmask & (cols < K)[None, :])


@triton.jit
def _transpose_halves(e, o, R: tl.constexpr, C2: tl.constexpr):
    """Even/odd column halves e, o [R, C2] of a tile -> for each half, its transpose split into even and odd
    rows: (e_even_rows, e_odd_rows, o_even_rows, o_odd_rows), each [C2, R // 2]."""
    a, b = tl.split(tl.reshape(tl.trans(e), [C2, R // 2, 2]))
    c, d = tl.split(tl.reshape(tl.trans(o), [C2, R // 2, 2]))
    return a, b, c, d


@triton.jit
def _untranspose(a, b, R: tl.constexpr, C2: tl.constexpr):
    """Inverse of one half of ``_transpose_halves``: even/odd rows a, b [C2, R // 2] -> the half [R, C2]."""
    return tl.trans(tl.reshape(tl.join(a, b), [C2, R]))


@triton.jit(do_not_specialize=["seed_k", "seed_m"])
def _fake_quant_kernel(
    x_ptr, outk_ptr, outm_ptr, amax_ptr, ts_ptr,
    thr_ptr, ctab_ptr, half, lvl_ptr, sctab_ptr, igap_ptr, vals_ptr,
    nan_code, ovf_thr, ovf_nan, inf_pos, inf_neg,
    tg_ptr, itg_ptr, stab_ptr, scpos_ptr, svals_ptr,
    ts_den, min_s, max_s, zero_code, inf_code, snan_code,
    signs_k_ptr, signs_m_ptr, rscale_k, rscale_m, M, K, K2, seed_k, seed_m,
    BM: tl.constexpr, BK: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr, TWO_D: tl.constexpr,
    IN_KIND: tl.constexpr, WORDS: tl.constexpr, ALONG_K: tl.constexpr, ALONG_M: tl.constexpr,
    RHT_K: tl.constexpr, RHT_M: tl.constexpr, OUT_F32: tl.constexpr, APPLY_TS: tl.constexpr,
    INTERP: tl.constexpr,
    GKIND: tl.constexpr, EB: tl.constexpr, MB: tl.constexpr, EBIAS: tl.constexpr, STEP: tl.constexpr,
    N_THR: tl.constexpr, L_THR: tl.constexpr, N_LVL: tl.constexpr, L_LVL: tl.constexpr, N_TG: tl.constexpr,
    N_STAB: tl.constexpr, L_STAB: tl.constexpr, N_SCPOS: tl.constexpr,
    PATH: tl.constexpr, SIGN_OR: tl.constexpr, OVF: tl.constexpr, SR: tl.constexpr, FAST_RAND: tl.constexpr,
    SRW: tl.constexpr, METHOD: tl.constexpr, EXP_MODE: tl.constexpr, EVEN_ADD: tl.constexpr,
    EMAX: tl.constexpr, SKIND: tl.constexpr, SROUND: tl.constexpr, SBIAS: tl.constexpr, SNAN: tl.constexpr,
    SDIV: tl.constexpr, TWO_LEVEL: tl.constexpr, HAS_MIN: tl.constexpr, HAS_MAX: tl.constexpr,
    STRICT: tl.constexpr, SMAXV: tl.constexpr, HAS_ZB: tl.constexpr, NAN_PROP: tl.constexpr,
    EDIV: tl.constexpr, DIV_POW2: tl.constexpr, ENCODE: tl.constexpr, SZ_POS: tl.constexpr,
    POW2_GAPS: tl.constexpr, FB: tl.constexpr, QDIV_K: tl.constexpr, QDIV_M: tl.constexpr, LEAN_OK: tl.constexpr,
):
    """One [BM, BK] tile of a row-major [M, K] input (M % BM == 0 for ALONG_M), fake-quantized along K into
    ``outk`` and/or along M into ``outm``. Two-level formats: ``amax_ptr`` holds the tensor amax of the K- and
    M-rotated tensors, program (0, 0) stores their tensor scales at ``ts_ptr``."""
    C2: tl.constexpr = BK // 2
    pid_k = tl.program_id(1)
    first = (tl.program_id(0) == 0) & (pid_k == 0)
    rows, kw, ce, addr_e, addr_o, rmask, me, mo, mw = pair_tile(M, K, K2, 1, BM, C2, True)
    if WORDS:
        w = tl.load(x_ptr + rows[:, None] * K2 + kw[None, :], mask=mw, other=0)
        xe = f32_of(w << 16)
        xo = f32_of(w & -65536)
    else:
        xe = load_f32(x_ptr, addr_e, me, IN_KIND)
        xo = load_f32(x_ptr, addr_o, mo, IN_KIND)
    if ALONG_K:
        ye, yo = xe, xo
        if RHT_K > 0:
            ye, yo = rht_pairs(ye, yo, signs_k_ptr, ce, rscale_k, BM, C2, RHT_K, False)
        if SR:
            re, ro = philox_pairs(seed_k, addr_e, addr_o, rows, pid_k * BK, K, BM, C2, FAST_RAND, SRW)
        else:
            re = addr_e
            ro = addr_o
        ts = 1.0
        g = 1.0
        if TWO_LEVEL:
            ts, g = tensor_scale(tl.load(amax_ptr), ts_den, ENCODE)
            if first:
                tl.store(ts_ptr, ts)
        code_e, code_o, sc, S = quantize_halves(
            ye, yo, re, ro, ts, g, thr_ptr, ctab_ptr, half, lvl_ptr, sctab_ptr, igap_ptr, vals_ptr,
            nan_code, ovf_thr, ovf_nan, inf_pos, inf_neg, tg_ptr, itg_ptr, stab_ptr, scpos_ptr, svals_ptr,
            min_s, max_s, zero_code, inf_code, snan_code, BM, C2, TR, TC, TWO_D, N_THR, L_THR, N_LVL, L_LVL, N_TG,
            N_STAB, L_STAB, N_SCPOS, PATH, SIGN_OR, OVF, SR, METHOD, EXP_MODE, EVEN_ADD, EMAX, SKIND, SROUND, SBIAS,
            SNAN, SDIV, TWO_LEVEL, HAS_MIN, HAS_MAX, STRICT, SMAXV, HAS_ZB, NAN_PROP, EDIV, DIV_POW2, ENCODE,
            SZ_POS, POW2_GAPS, FB, QDIV_K, LEAN_OK)
        ve, vo = _values(code_e, code_o, S, ts, vals_ptr, BM, C2, TR, TC, TWO_D, METHOD, APPLY_TS, GKIND, EB, MB,
                         EBIAS, STEP)
        _store(outk_ptr, ve, vo, rows, kw, ce, rmask, mw, K, K2, BM, C2, OUT_F32, INTERP)
    if ALONG_M:
        H: tl.constexpr = BM // 2
        # even columns' (even rows, odd rows), odd columns' (even rows, odd rows): [C2, H] each
        a_e, a_o, b_e, b_o = _transpose_halves(xe, xo, BM, C2)
        if RHT_M > 0:
            rr = tl.program_id(0) * BM + 2 * tl.arange(0, H)
            a_e, a_o = rht_pairs(a_e, a_o, signs_m_ptr, rr, rscale_m, C2, H, RHT_M, False)
            b_e, b_o = rht_pairs(b_e, b_o, signs_m_ptr, rr, rscale_m, C2, H, RHT_M, False)
        if SR:
            se, so = philox_pairs(seed_m, addr_e, addr_o, rows, pid_k * BK, K, BM, C2, FAST_RAND, SRW)
            ra_e, ra_o, rb_e, rb_o = _transpose_halves(se, so, BM, C2)
        else:
            ra_e = a_e.to(tl.int32, bitcast=True)
            ra_o = ra_e
            rb_e = ra_e
            rb_o = ra_e
        ts = 1.0
        g = 1.0
        if TWO_LEVEL:
            ts, g = tensor_scale(tl.load(amax_ptr + 1), ts_den, ENCODE)
            if first:
                tl.store(ts_ptr + 1, ts)
        ca_e, ca_o, sca, Sa = quantize_halves(
            a_e, a_o, ra_e, ra_o, ts, g, thr_ptr, ctab_ptr, half, lvl_ptr, sctab_ptr, igap_ptr, vals_ptr,
            nan_code, ovf_thr, ovf_nan, inf_pos, inf_neg, tg_ptr, itg_ptr, stab_ptr, scpos_ptr, svals_ptr,
            min_s, max_s, zero_code, inf_code, snan_code, C2, H, 1, TC, False, N_THR, L_THR, N_LVL, L_LVL, N_TG,
            N_STAB, L_STAB, N_SCPOS, PATH, SIGN_OR, OVF, SR, METHOD, EXP_MODE, EVEN_ADD, EMAX, SKIND, SROUND, SBIAS,
            SNAN, SDIV, TWO_LEVEL, HAS_MIN, HAS_MAX, STRICT, SMAXV, HAS_ZB, NAN_PROP, EDIV, DIV_POW2, ENCODE,
            SZ_POS, POW2_GAPS, FB, QDIV_M, LEAN_OK)
        cb_e, cb_o, scb, Sb = quantize_halves(
            b_e, b_o, rb_e, rb_o, ts, g, thr_ptr, ctab_ptr, half, lvl_ptr, sctab_ptr, igap_ptr, vals_ptr,
            nan_code, ovf_thr, ovf_nan, inf_pos, inf_neg, tg_ptr, itg_ptr, stab_ptr, scpos_ptr, svals_ptr,
            min_s, max_s, zero_code, inf_code, snan_code, C2, H, 1, TC, False, N_THR, L_THR, N_LVL, L_LVL, N_TG,
            N_STAB, L_STAB, N_SCPOS, PATH, SIGN_OR, OVF, SR, METHOD, EXP_MODE, EVEN_ADD, EMAX, SKIND, SROUND, SBIAS,
            SNAN, SDIV, TWO_LEVEL, HAS_MIN, HAS_MAX, STRICT, SMAXV, HAS_ZB, NAN_PROP, EDIV, DIV_POW2, ENCODE,
            SZ_POS, POW2_GAPS, FB, QDIV_M, LEAN_OK)
        va_e, va_o = _values(ca_e, ca_o, Sa, ts, vals_ptr, C2, H, 1, TC, False, METHOD, APPLY_TS, GKIND, EB, MB,
                             EBIAS, STEP)
        vb_e, vb_o = _values(cb_e, cb_o, Sb, ts, vals_ptr, C2, H, 1, TC, False, METHOD, APPLY_TS, GKIND, EB, MB,
                             EBIAS, STEP)
        _store(outm_ptr, _untranspose(va_e, va_o, BM, C2), _untranspose(vb_e, vb_o, BM, C2), rows, kw, ce, rmask,
               mw, K, K2, BM, C2, OUT_F32, INTERP)
