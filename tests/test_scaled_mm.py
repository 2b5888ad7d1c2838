"""The cuBLAS argument mapping of ``fp4lab.recipes.scaled_mm`` (the GPU GEMM itself is checked by
benchmarks/h200_training_check.py): its column-major arguments, read back from the raw storage as cuBLAS reads
them, must give ``a @ b`` in every layout."""

from __future__ import annotations

import pytest
import torch

from fp4lab.recipes.scaled_mm import _OP_N, gemm_args, scaled_mm


def _colmajor(t: torch.Tensor, rows: int, cols: int, ld: int) -> torch.Tensor:
    """The [rows, cols] column-major matrix with leading dimension ld at t's first element."""
    return torch.as_strided(t, (rows, cols), (1, ld), t.storage_offset())


def _cublas_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-major C [M, N] from what cublasGemmEx computes with gemm_args(a, b): C^T = op(first) op(second)."""
    g = gemm_args(a, b)
    first = _colmajor(b, g.m, g.k, g.lda) if g.transa == _OP_N else _colmajor(b, g.k, g.m, g.lda).t()
    second = _colmajor(a, g.k, g.n, g.ldb) if g.transb == _OP_N else _colmajor(a, g.n, g.k, g.ldb).t()
    assert g.ldc == b.shape[1]
    return (first @ second).t()


def _layout(t: torch.Tensor, row_major: bool, pad: int) -> torch.Tensor:
    """t [r, c] stored row-major (leading dimension c + pad) or column-major (r + pad)."""
    r, c = t.shape
    if row_major:
        return torch.cat([t, torch.zeros(r, pad, dtype=t.dtype)], 1)[:, :c]
    return torch.cat([t.t(), torch.zeros(c, pad, dtype=t.dtype)], 1)[:, :r].t()


@pytest.mark.parametrize("a_rows", [True, False])
@pytest.mark.parametrize("b_rows", [True, False])
@pytest.mark.parametrize("pad", [0, 3])
def test_gemm_args_give_the_product_in_every_layout(a_rows: bool, b_rows: bool, pad: int) -> None:
    g = torch.Generator().manual_seed(0)
    a0 = torch.randint(-8, 9, (5, 7), generator=g).double()  # small integers: every product and sum is exact
    b0 = torch.randint(-8, 9, (7, 4), generator=g).double()
    a, b = _layout(a0, a_rows, pad), _layout(b0, b_rows, pad)
    assert a.is_contiguous() == (a_rows and pad == 0) and torch.equal(a, a0) and torch.equal(b, b0)
    assert torch.equal(_cublas_product(a, b), a0 @ b0)


def test_gemm_args_refuse_other_layouts() -> None:
    a = torch.zeros(6, 8)[:, ::2]  # neither row- nor column-major
    assert gemm_args(a, torch.zeros(4, 3)) is None
    assert gemm_args(torch.zeros(3, 4), torch.zeros(4, 6).t().contiguous().t()) is not None


def test_scaled_mm_declines_cpu_tensors() -> None:
    a = torch.ones(16, 16, dtype=torch.bfloat16)
    assert scaled_mm(a, a, torch.ones(1), torch.bfloat16) is None
