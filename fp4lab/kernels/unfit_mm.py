"""Triton kernel: the bf16 path of an FP8 GEMM's unfit operand rows, decided on the device.

``y = A @ B^T`` (A [M, K], B [N, K]) was computed from E4M3 operands (``fp4lab.recipes.fp8_gemm``). Rows ``i``
of A and rows ``j`` of B flagged unfit (not E4M3 times their row's power of two) take the bf16 path instead:
``y[i, :] = A[i] B^T`` and ``y[:, j] = A B[j]^T`` from the bf16 operands, fp32 accumulation, plus the bias, one
rounding to y's dtype. One program per [BM, BN] tile of ``y`` reads its BM + BN flags and does nothing more when
none is set (the common case); otherwise it computes its tile with ``tl.dot`` and stores the elements of the
flagged rows and columns (programs covering 2 x 2 or 4 x 4 tiles were slower on the H200, empty or not:
``benchmarks/device/unfit_mm_sweep.py``, BENCHMARKS.md). The counts go to device memory (``counts[0] += M + N`` operand
rows, ``counts[1] +=`` the flagged ones), so nothing waits for the host and the GEMM can be captured in a CUDA
graph.

In the interpreter ``tl.dot`` on bf16 is wrong (it multiplies the raw bit patterns), so the operands arrive as
int16 bit patterns and are widened to fp32 exactly, and bf16 outputs are rounded by the integer twin of RTNE.
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.dequantize import bf16_bits_rtne
from fp4lab.kernels.tile import f32_of


@triton.jit
def _operand_tile(ptr, i, j, si, sj, mask, INTERP: tl.constexpr):
    """The [len(i), len(j)] tile ``ptr[i * si + j * sj]`` of a bf16 matrix (zeros outside ``mask``): bf16 on the
    GPU, fp32 widened from the int16 bit patterns in the interpreter."""
    t = tl.load(ptr + i[:, None] * si + j[None, :] * sj, mask=mask, other=0)
    if INTERP:
        t = f32_of((t.to(tl.int32) & 0xFFFF) << 16)
    return t


@triton.jit
def _unfit_mm_kernel(a_ptr, b_ptr, y_ptr, bias_ptr, unfit_a_ptr, unfit_b_ptr, counts_ptr,
                     M, N, K, s_am, s_ak, s_bn, s_bk, s_ym, s_yn,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, HAS_BIAS: tl.constexpr,
                     OUT_BF16: tl.constexpr, INTERP: tl.constexpr):
    """One [BM, BN] tile of ``y`` per program; the first column of programs counts the flags of A, the first row
    those of B, program (0, 0) the operand rows."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    rmask = rows < M
    cmask = cols < N
    ua = tl.load(unfit_a_ptr + rows, mask=rmask, other=0)
    ub = tl.load(unfit_b_ptr + cols, mask=cmask, other=0)
    if pid_n == 0:
        tl.atomic_add(counts_ptr + 1, tl.sum(ua, axis=0).to(tl.int64))
    if pid_m == 0:
        tl.atomic_add(counts_ptr + 1, tl.sum(ub, axis=0).to(tl.int64))
        if pid_n == 0:
            tl.atomic_add(counts_ptr, (M + N).to(tl.int64))
    if tl.max(ua, axis=0) + tl.max(ub, axis=0) > 0:
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            kmask = ks < K
            a = _operand_tile(a_ptr, rows, ks, s_am, s_ak, rmask[:, None] & kmask[None, :], INTERP)
            bt = _operand_tile(b_ptr, ks, cols, s_bk, s_bn, kmask[:, None] & cmask[None, :], INTERP)
            acc = tl.dot(a, bt, acc)
        if HAS_BIAS:
            acc = acc + tl.load(bias_ptr + cols, mask=cmask, other=0.0)[None, :]
        dst = y_ptr + rows[:, None] * s_ym + cols[None, :] * s_yn
        keep = ((ua[:, None] != 0) | (ub[None, :] != 0)) & rmask[:, None] & cmask[None, :]
        if not OUT_BF16:
            tl.store(dst, acc, mask=keep)
        elif INTERP:
            tl.store(dst, bf16_bits_rtne(acc).to(tl.int16), mask=keep)
        else:
            tl.store(dst, acc.to(tl.bfloat16), mask=keep)
