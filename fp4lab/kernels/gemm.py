"""Block-scaled GEMM on quantized operands: C = A @ B.T in fp32, A [M, K] and B [N, K] blocked along K.

``exact`` (one Triton kernel; codes are decoded in registers, never written out):

* fold path (element value x block scale exact in bf16 for every code/scale pair, e.g. MXFP4, NVFP4): each
  K-tile of BK (a multiple of the block) is decoded to bf16 ``value * S`` and accumulated with
  ``acc = tl.dot(a, b.T, acc)`` (fp32 accumulator), K-tiles in ascending order. Inside one ``tl.dot`` the
  summation is the tensor core's (Hopper wgmma bf16, K=16 steps; hwspec ``hopper-sm90``, ``wgmma.bf16``).
* per-block path (fp32/bf16 block scales, e.g. UFP4): for each block b in ascending K,
  ``P_b = tl.dot(values_a, values_b.T)`` over the block's K elements is exact (4-bit grid products on a common
  quantum, checked on the host), then ``acc = acc + (P_b * Sa_b) * Sb_b`` in fp32, one rounding per operation.
  This path is fully defined by its fp32 operations, so ``fp4lab.numerics.gemm_reference`` reproduces it bit for bit.

Two-level formats: ``C = (acc * ts_a) * ts_b``. ``fast``: both operands dequantized to bf16 by the Triton
kernel (without the tensor scales; exact for fold-path formats, RTNE-rounded otherwise), one cuBLAS bf16 GEMM
with fp32 output, then ``C * fp32(ts_a * ts_b)`` in place.
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.codes import CHOICE_NONE, DECODE_TABLE, KIND_BF16
from fp4lab.kernels.encoding import decode_elements, decode_scale
from fp4lab.kernels.tile import grouped_tile


@triton.jit
def _gemm_kernel(a_ptr, b_ptr, sa_ptr, sb_ptr, tsa_ptr, tsb_ptr, c_ptr, vals_ptr, svals_ptr, M, N, K,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BS: tl.constexpr, TR: tl.constexpr,
                 GROUP_M: tl.constexpr, FOLD: tl.constexpr, INTERP: tl.constexpr, SCALE: tl.constexpr,
                 DEC: tl.constexpr):
    """C = A @ B.T of codes a [M, K], b [N, K] with block scale codes sa, sb and tensor scales tsa, tsb
    (``SCALE`` / ``DEC``: params.ScaleCx / DecodeCx); the module docstring gives the two plans (FOLD or per block)."""
    SCALED: tl.constexpr = SCALE.CHOICE != CHOICE_NONE
    pid_m, pid_n = grouped_tile(M, N, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mm = rm < M
    mn = rn < N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    KB = K // BS
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        mk = rk < K
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=mm[:, None] & mk[None, :], other=0).to(tl.int32)
        b = tl.load(b_ptr + rn[:, None] * K + rk[None, :], mask=mn[:, None] & mk[None, :], other=0).to(tl.int32)
        va = decode_elements(a, vals_ptr, DEC)
        vb = decode_elements(b, vals_ptr, DEC)
        if DEC.KIND == DECODE_TABLE:  # code 0 (masked loads) is value 0 for float and int grids, not for a table
            va = tl.where(mm[:, None] & mk[None, :], va, 0.0)
            vb = tl.where(mn[:, None] & mk[None, :], vb, 0.0)
        if FOLD:
            if SCALED:
                kb = k0 // BS + tl.arange(0, BK // BS)
                mkb = kb < KB
                ca = tl.load(sa_ptr + (rm // TR)[:, None] * KB + kb[None, :], mask=mm[:, None] & mkb[None, :],
                             other=0)
                cb = tl.load(sb_ptr + (rn // TR)[:, None] * KB + kb[None, :], mask=mn[:, None] & mkb[None, :],
                             other=0)
                sa = decode_scale(ca.to(tl.int32), svals_ptr, SCALE)
                sb = decode_scale(cb.to(tl.int32), svals_ptr, SCALE)
                va = tl.reshape(tl.reshape(va, [BM, BK // BS, BS]) * sa[:, :, None], [BM, BK])
                vb = tl.reshape(tl.reshape(vb, [BN, BK // BS, BS]) * sb[:, :, None], [BN, BK])
            if INTERP:
                acc = tl.dot(va, tl.trans(vb), acc, input_precision="ieee")
            else:
                acc = tl.dot(va.to(tl.bfloat16), tl.trans(vb.to(tl.bfloat16)), acc)
        else:
            kb = k0 // BS
            ca = tl.load(sa_ptr + rm * KB + kb, mask=mm, other=0).to(tl.int32)
            cb = tl.load(sb_ptr + rn * KB + kb, mask=mn, other=0).to(tl.int32)
            if SCALE.KIND == KIND_BF16:
                ca = ca & 0xFFFF
                cb = cb & 0xFFFF
            sa = decode_scale(ca, svals_ptr, SCALE)
            sb = decode_scale(cb, svals_ptr, SCALE)
            if INTERP:
                p = tl.dot(va, tl.trans(vb), input_precision="ieee")
            else:
                p = tl.dot(va.to(tl.bfloat16), tl.trans(vb.to(tl.bfloat16)))
            acc = acc + (p * sa[:, None]) * sb[None, :]
    if SCALE.TWO_LEVEL:
        acc = (acc * tl.load(tsa_ptr)) * tl.load(tsb_ptr)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=mm[:, None] & mn[None, :])
