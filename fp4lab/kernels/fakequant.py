"""Triton fake-quantize kernel: ``dequantize(quantize(x), rotated=True)`` in one pass, written as bf16 (rounded to
nearest-even) or fp32 GEMM operands, for blocks along K (the last axis) and/or along M (axis 0) of a 2-D [M, K]
tensor, with fused RHT and stochastic rounding.

One program reads a [BM, BK] tile once and produces

* along K: the tile's 1-D blocks (or 2-D tiles) along its rows, rotated along K (``RHT_K``); the tile is held as
  its even and odd columns (two [BM, BK/2] halves, as in quantize.py);
* along M: its 1-D blocks along columns, rotated along M (``RHT_M``). The tile is then loaded as four quarters,
  (even, odd rows) x (even, odd columns), each [BM/2, BK/2] and loaded straight from memory: the K blocking runs
  on the even-row and on the odd-row halves, and the M blocking runs the same ``quantize_halves`` pipeline as a
  "2-D tile" of ``block/2`` rows x 1 column per half, the halves being the even and odd rows. No data moves
  between threads except inside the reductions and the butterflies.

Both outputs keep the input's [M, K] layout. SR comparands follow the quantize contract on the element's flat
index in the [M, K] input (independent seeds per output), so every output equals the quantize kernel's codes
decoded, bit for bit. Values: ``value[code] * S`` (``* ts`` where ``APPLY_TS``: two-level formats may leave the
tensor scale to the GEMM's output), rounded to bf16 by the hardware ``cvt.rn.bf16x2.f32`` on the GPU and by its
integer twin in the interpreter.
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.codes import CHOICE_NONE, ETAB_VALUES
from fp4lab.kernels.dequantize import bf16_bits_rtne
from fp4lab.kernels.encoding import decode_elements
from fp4lab.kernels.hadamard import rht_pairs, rht_row_pairs
from fp4lab.kernels.quantize import multiplier_floor, quantize_halves, tensor_scale
from fp4lab.kernels.sr_draws import philox_pairs
from fp4lab.kernels.tile import bits_of, blocks_of, expand_blocks, f32_of, is_finite, load_f32, pair_tile


@triton.jit
def _values(code_e, code_o, S, ts, vals_ptr, R: tl.constexpr, C2: tl.constexpr, TR: tl.constexpr,
            TC: tl.constexpr, TWO_D: tl.constexpr, APPLY_TS: tl.constexpr, DEC: tl.constexpr, SCALE: tl.constexpr):
    """fp32 ``value[code] * S`` (``* ts``; ``SCALE.TS_FIRST``: ``value * (S * ts)``) of both halves [R, C2], in
    the reference's order of operations."""
    ve = decode_elements(code_e, vals_ptr, DEC)
    vo = decode_elements(code_o, vals_ptr, DEC)
    if SCALE.CHOICE != CHOICE_NONE:
        if APPLY_TS and SCALE.TS_FIRST:
            S = S * ts
        Sx = expand_blocks(S, TWO_D)
        ve = tl.reshape(blocks_of(ve, R, C2, TR, TC // 2, TWO_D) * Sx, [R, C2])
        vo = tl.reshape(blocks_of(vo, R, C2, TR, TC // 2, TWO_D) * Sx, [R, C2])
        if APPLY_TS and not SCALE.TS_FIRST:
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
def _load_halves(x_ptr, rows, kw, addr_e, addr_o, me, mo, mw, K2, IN_KIND: tl.constexpr, WORDS: tl.constexpr):
    """fp32 even/odd column halves of rows ``rows``: bf16 pairs as int32 words (WORDS), else element loads."""
    if WORDS:
        w = tl.load(x_ptr + rows[:, None] * K2 + kw[None, :], mask=mw, other=0)
        return f32_of(w << 16), f32_of(w & -65536)
    else:
        return load_f32(x_ptr, addr_e, me, IN_KIND), load_f32(x_ptr, addr_o, mo, IN_KIND)


@triton.jit
def _load_quarters(x_ptr, M, K, K2, BM: tl.constexpr, C2: tl.constexpr, IN_KIND: tl.constexpr,
                   WORDS: tl.constexpr):
    """This program's [BM, 2 * C2] tile of a row-major [M, K] input as four [BM/2, C2] quarters x[even rows, even
    cols], x[even rows, odd cols], x[odd rows, even cols], x[odd rows, odd cols], with their row indices, pair
    indices, even columns, even-element offsets and masks."""
    H: tl.constexpr = BM // 2
    kw = tl.program_id(1) * C2 + tl.arange(0, C2)
    ce = 2 * kw
    rows_e = tl.program_id(0) * BM + 2 * tl.arange(0, H)
    rows_o = rows_e + 1
    cm = (ce < K)[None, :]
    cmo = (ce + 1 < K)[None, :]
    wm = (kw < K2)[None, :]
    me_e = (rows_e < M)[:, None]
    me_o = (rows_o < M)[:, None]
    ae_e = rows_e[:, None] * K + ce[None, :]
    ae_o = rows_o[:, None] * K + ce[None, :]
    xee, xeo = _load_halves(x_ptr, rows_e, kw, ae_e, ae_e + 1, me_e & cm, me_e & cmo, me_e & wm, K2, IN_KIND, WORDS)
    xoe, xoo = _load_halves(x_ptr, rows_o, kw, ae_o, ae_o + 1, me_o & cm, me_o & cmo, me_o & wm, K2, IN_KIND, WORDS)
    return rows_e, rows_o, kw, ce, ae_e, ae_o, me_e, me_o, wm, xee, xeo, xoe, xoo


@triton.jit
def _along_k(xe, xo, out_ptr, rows, kw, ce, addr_e, addr_o, rmask, mw, K, K2, seed, signs_ptr, rscale, ts, g, floor,
             etab, stab, R: tl.constexpr, BK: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr, TWO_D: tl.constexpr,
             RHT_N: tl.constexpr, OUT_F32: tl.constexpr, APPLY_TS: tl.constexpr, INTERP: tl.constexpr,
             FAST_RAND: tl.constexpr, SRW: tl.constexpr, QDIV: tl.constexpr, LEAN_OK: tl.constexpr,
             ELEM: tl.constexpr, SCALE: tl.constexpr, DEC: tl.constexpr):
    """Fake-quantize rows ``rows`` (even/odd column halves xe, xo [R, BK/2]) along K and store them (``floor``: the
    multiplier floor of two-level formats for ``ts``)."""
    C2: tl.constexpr = BK // 2
    if RHT_N > 0:
        xe, xo = rht_pairs(xe, xo, signs_ptr, ce, rscale, R, C2, RHT_N, False)
    if ELEM.SR:
        re, ro = philox_pairs(seed, addr_e, addr_o, rows, tl.program_id(1) * BK, K, R, C2, FAST_RAND, SRW, ELEM.FBITS)
    else:
        re = addr_e
        ro = addr_o
    code_e, code_o, sc, S = quantize_halves(xe, xo, re, ro, ts, g, etab, stab, R, C2, TR, TC, TWO_D, ELEM, SCALE,
                                            QDIV, LEAN_OK, floor, SCALE.TWO_LEVEL, False)
    ve, vo = _values(code_e, code_o, S, ts, etab[ETAB_VALUES], R, C2, TR, TC, TWO_D, APPLY_TS, DEC, SCALE)
    _store(out_ptr, ve, vo, rows, kw, ce, rmask, mw, K, K2, R, C2, OUT_F32, INTERP)


@triton.jit(do_not_specialize=["seed_k", "seed_m"])
def _fake_quant_kernel(
    x_ptr, outk_ptr, outm_ptr, tsv_ptr,
    thr_ptr, ctab_ptr, half, lvl_ptr, sctab_ptr, igap_ptr, vals_ptr,
    nan_code, ovf_thr, ovf_nan, inf_pos, inf_neg,
    tg_ptr, itg_ptr, stab_ptr, scpos_ptr, svals_ptr,
    min_s, max_s, zero_code, inf_code, snan_code,
    signs_k_ptr, signs_m_ptr, rscale_k, rscale_m, M, K, K2, seed_k, seed_m,
    BM: tl.constexpr, BK: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr, TWO_D: tl.constexpr,
    IN_KIND: tl.constexpr, WORDS: tl.constexpr, ALONG_K: tl.constexpr, ALONG_M: tl.constexpr,
    RHT_K: tl.constexpr, RHT_M: tl.constexpr, OUT_F32: tl.constexpr, APPLY_TS: tl.constexpr,
    INTERP: tl.constexpr, SEED_PTR: tl.constexpr, FAST_RAND: tl.constexpr, SRW: tl.constexpr,
    QDIV_K: tl.constexpr, QDIV_M: tl.constexpr, LEAN_OK: tl.constexpr, FAST_DIV_M: tl.constexpr,
    ELEM: tl.constexpr, SCALE: tl.constexpr, DEC: tl.constexpr,
):
    """One [BM, BK] tile of a row-major [M, K] input (M % BM == 0 for ALONG_M), fake-quantized along K into
    ``outk`` and/or along M into ``outm``. Two-level formats: ``tsv_ptr`` holds, for the K and the M output, the
    tensor scale, encode scale and multiplier floor that ``_tensor_scales_kernel`` derived from the tensor amax of
    the K- and M-rotated tensors. SEED_PTR: ``seed_k``/``seed_m`` point at int64 seeds in device memory (CUDA-graph
    replays read the current step's seeds there). FAST_DIV_M: lean tiles of the M blocking divide by the block's
    reciprocal (``quantize._encode_blocks``). The table arguments are those of ``quantize._quantize_kernel``."""
    if SEED_PTR:
        seed_k = tl.load(seed_k)
        seed_m = tl.load(seed_m)
    etab = (thr_ptr, ctab_ptr, half, lvl_ptr, sctab_ptr, igap_ptr, vals_ptr, nan_code, ovf_thr, ovf_nan, inf_pos,
            inf_neg)
    stab = (tg_ptr, itg_ptr, stab_ptr, scpos_ptr, svals_ptr, min_s, max_s, zero_code, inf_code, snan_code)
    C2: tl.constexpr = BK // 2
    pid_k = tl.program_id(1)
    ts_k = 1.0
    g_k = 1.0
    fl_k = (0, 0.0)
    ts_m = 1.0
    g_m = 1.0
    fl_m = (0, 0.0)
    if SCALE.TWO_LEVEL:
        if ALONG_K:
            ts_k, g_k, fl_k = _given_scales(tsv_ptr)
        if ALONG_M:
            ts_m, g_m, fl_m = _given_scales(tsv_ptr + 4)
    if not ALONG_M:
        rows, kw, ce, addr_e, addr_o, rmask, me, mo, mw = pair_tile(M, K, K2, 1, BM, C2, True)
        xe, xo = _load_halves(x_ptr, rows, kw, addr_e, addr_o, me, mo, mw, K2, IN_KIND, WORDS)
        _along_k(xe, xo, outk_ptr, rows, kw, ce, addr_e, addr_o, rmask, mw, K, K2, seed_k, signs_k_ptr, rscale_k,
                 ts_k, g_k, fl_k, etab, stab, BM, BK, TR, TC, TWO_D, RHT_K, OUT_F32, APPLY_TS, INTERP, FAST_RAND, SRW,
                 QDIV_K, LEAN_OK, ELEM, SCALE, DEC)
    else:
        H: tl.constexpr = BM // 2
        rows_e, rows_o, kw, ce, ae_e, ae_o, me_e, me_o, wm, xee, xeo, xoe, xoo = _load_quarters(
            x_ptr, M, K, K2, BM, C2, IN_KIND, WORDS)
        if ALONG_K:
            for r in tl.static_range(2):
                if r == 0:
                    rr, a_e, ye, yo, rm_ = rows_e, ae_e, xee, xeo, me_e
                else:
                    rr, a_e, ye, yo, rm_ = rows_o, ae_o, xoe, xoo, me_o
                _along_k(ye, yo, outk_ptr, rr, kw, ce, a_e, a_e + 1, rm_, rm_ & wm, K, K2, seed_k, signs_k_ptr,
                         rscale_k, ts_k, g_k, fl_k, etab, stab, H, BK, TR, TC, TWO_D, RHT_K, OUT_F32, APPLY_TS, INTERP,
                         FAST_RAND, SRW, QDIV_K, LEAN_OK, ELEM, SCALE, DEC)
        # along M: per column parity, the even-row and odd-row halves form blocks of TC // 2 rows each
        if RHT_M > 0:
            xee, xoe = rht_row_pairs(xee, xoe, signs_m_ptr, rows_e, rscale_m, H, C2, RHT_M)
            xeo, xoo = rht_row_pairs(xeo, xoo, signs_m_ptr, rows_e, rscale_m, H, C2, RHT_M)
        if ELEM.SR:
            ree, reo = philox_pairs(seed_m, ae_e, ae_e + 1, rows_e, pid_k * BK, K, H, C2, FAST_RAND, SRW, ELEM.FBITS)
            roe, roo = philox_pairs(seed_m, ae_o, ae_o + 1, rows_o, pid_k * BK, K, H, C2, FAST_RAND, SRW, ELEM.FBITS)
        else:
            ree = ae_e
            reo = ae_e
            roe = ae_e
            roo = ae_e
        c_ee, c_oe, sc_e, S_e = quantize_halves(xee, xoe, ree, roe, ts_m, g_m, etab, stab, H, C2, TC // 2, 2, True,
                                                ELEM, SCALE, QDIV_M, LEAN_OK, fl_m, SCALE.TWO_LEVEL,
                                                FAST_DIV_M)
        v_ee, v_oe = _values(c_ee, c_oe, S_e, ts_m, vals_ptr, H, C2, TC // 2, 2, True, APPLY_TS, DEC, SCALE)
        c_eo, c_oo, sc_o, S_o = quantize_halves(xeo, xoo, reo, roo, ts_m, g_m, etab, stab, H, C2, TC // 2, 2, True,
                                                ELEM, SCALE, QDIV_M, LEAN_OK, fl_m, SCALE.TWO_LEVEL,
                                                FAST_DIV_M)
        v_eo, v_oo = _values(c_eo, c_oo, S_o, ts_m, vals_ptr, H, C2, TC // 2, 2, True, APPLY_TS, DEC, SCALE)
        _store(outm_ptr, v_ee, v_eo, rows_e, kw, ce, me_e, me_e & wm, K, K2, H, C2, OUT_F32, INTERP)
        _store(outm_ptr, v_oe, v_oo, rows_o, kw, ce, me_o, me_o & wm, K, K2, H, C2, OUT_F32, INTERP)


@triton.jit
def _given_scales(p):
    """(ts, g, (floor code, floor value)) stored at p[0:4] by ``_tensor_scales_kernel``."""
    return tl.load(p), tl.load(p + 1), (bits_of(tl.load(p + 2)), tl.load(p + 3))


@triton.jit
def _tensor_scales_kernel(part_ptr, tsv_ptr, n_part, ts_den, svals_ptr, BLOCK: tl.constexpr, SCALE: tl.constexpr):
    """One program, for the K (j = 0) and the M (j = 1) output of a two-level format: the tensor amax (the maximum
    of the amax pass's finite partial maxima ``part[j, :n_part]``), its tensor scale ts and encode scale g
    (``quantize.tensor_scale``) and the multiplier floor of the block scales under that ts
    (``quantize.multiplier_floor``; code 0, value 0 without one): ``tsv[4j : 4j + 4]`` = ts, g, the floor code's
    int32 bits, the floor value. Once per tensor, where every program of the fake-quant kernel would compute
    them."""
    for j in tl.static_range(2):
        m = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_part, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            m = tl.maximum(m, tl.load(part_ptr + j * n_part + offs, mask=offs < n_part, other=0.0))
        ts, g = tensor_scale(tl.max(m, axis=0), ts_den, SCALE)
        fcode = tl.full((), 0, tl.int32)
        fval = tl.full((), 0.0, tl.float32)
        if SCALE.BUMP_HI > 0:
            fcode, fval = multiplier_floor(ts, svals_ptr, SCALE)
        tl.store(tsv_ptr + 4 * j, ts)
        tl.store(tsv_ptr + 4 * j + 1, g)
        tl.store(tsv_ptr + 4 * j + 2, f32_of(fcode))
        tl.store(tsv_ptr + 4 * j + 3, fval)


@triton.jit
def _finite_amax(a, b):
    """Scalar: max of the finite |v| over two tiles (0 if none)."""
    fa = tl.where(is_finite(a), tl.abs(a), 0.0)
    fb = tl.where(is_finite(b), tl.abs(b), 0.0)
    return tl.max(tl.max(tl.maximum(fa, fb), axis=1), axis=0)


@triton.jit
def _amax2_kernel(x_ptr, part_ptr, signs_k_ptr, signs_m_ptr, rscale_k, rscale_m, M, K, K2,
                  BM: tl.constexpr, BK: tl.constexpr, IN_KIND: tl.constexpr, WORDS: tl.constexpr,
                  ALONG_K: tl.constexpr, ALONG_M: tl.constexpr, RHT_K: tl.constexpr, RHT_M: tl.constexpr):
    """One read of a [BM, BK] tile: ``part[pid]`` = the finite amax of the tile rotated along K (RHT_K), and
    ``part[n_programs + pid]`` = rotated along M (RHT_M); 0 for a blocking not asked for."""
    C2: tl.constexpr = BK // 2
    H: tl.constexpr = BM // 2
    pid = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    nprog = tl.num_programs(0) * tl.num_programs(1)
    rows_e, rows_o, kw, ce, ae_e, ae_o, me_e, me_o, wm, xee, xeo, xoe, xoo = _load_quarters(
        x_ptr, M, K, K2, BM, C2, IN_KIND, WORDS)
    amax_k = 0.0
    amax_m = 0.0
    if ALONG_K:
        if RHT_K > 0:
            ye, yo = rht_pairs(xee, xeo, signs_k_ptr, ce, rscale_k, H, C2, RHT_K, False)
            ze, zo = rht_pairs(xoe, xoo, signs_k_ptr, ce, rscale_k, H, C2, RHT_K, False)
            amax_k = tl.maximum(_finite_amax(ye, yo), _finite_amax(ze, zo))
        else:
            amax_k = tl.maximum(_finite_amax(xee, xeo), _finite_amax(xoe, xoo))
    if ALONG_M:
        if RHT_M > 0:
            ye, ze = rht_row_pairs(xee, xoe, signs_m_ptr, rows_e, rscale_m, H, C2, RHT_M)
            yo, zo = rht_row_pairs(xeo, xoo, signs_m_ptr, rows_e, rscale_m, H, C2, RHT_M)
            amax_m = tl.maximum(_finite_amax(ye, yo), _finite_amax(ze, zo))
        else:
            amax_m = tl.maximum(_finite_amax(xee, xeo), _finite_amax(xoe, xoo))
    tl.store(part_ptr + pid, amax_k)
    tl.store(part_ptr + nprog + pid, amax_m)
