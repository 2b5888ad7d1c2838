"""Triton randomized Hadamard transform along one axis, bit-identical to ``fp4lab.numerics.rht``.

Forward ``c * FWHT(s * v)``, inverse ``s * (c * FWHT(v))`` on consecutive ``size``-element chunks, with the fp32
butterfly stages h = 1, 2, ..., size/2 done in registers (``hadamard.fwht``) and c = fp32(1/sqrt(size)).
"""

from __future__ import annotations

import triton
import triton.language as tl

from fp4lab.kernels.hadamard import rht_tile
from fp4lab.kernels.tile import load_tile


@triton.jit
def _rht_kernel(x_ptr, out_ptr, signs_ptr, rscale, M, K, INNER, BM: tl.constexpr, BK: tl.constexpr,
                IN_KIND: tl.constexpr, INNER1: tl.constexpr, N: tl.constexpr, INVERSE: tl.constexpr):
    v, cols, addr, mask = load_tile(x_ptr, M, K, INNER, BM, BK, IN_KIND, INNER1)
    tl.store(out_ptr + addr, rht_tile(v, signs_ptr, cols, rscale, BM, BK, N, INVERSE), mask=mask)
