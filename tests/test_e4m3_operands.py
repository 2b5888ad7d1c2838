"""FP8 GEMM operands written by the fake-quant pass (``fp4lab.kernels.e4m3_operands``, ``fake_quantize_e4m3_triton``)
in the interpreter, against their CPU twins: the row exponents from the block-scale rule, the E4M3 codes and unfit
flags, and the bf16 values of unfit rows after the repair pass."""

from __future__ import annotations

import pytest
import torch

from fp4lab.formats.registry import get_format
from fp4lab.kernels.fakequant_launch import Blocking
from fp4lab.recipes import fp8_gemm
from fp4lab.recipes.fp8_gemm import R_MIN, e4m3_exponents, e4m3_exponents_reference, e4m3_rows_reference, fp8_operands


def spoiled(rows: int = 64, cols: int = 128, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Rows over 16 binades of magnitude; a row and a column with blocks 2^40 / 2^30 apart (unfit), a column
    that is tiny throughout (fits), a NaN, an Inf, a zero row."""
    g = torch.Generator().manual_seed(rows + cols)
    x = torch.randn(rows, cols, generator=g) * torch.logspace(-8, 8, rows, base=2.0)[:, None]
    x[3, : cols // 2] *= 2.0 ** -40
    x[:, 5] *= 2.0 ** -30
    x[: rows // 2, 7] *= 2.0 ** -30
    x[9, 11], x[13, 17] = float("nan"), float("inf")
    x[20] = 0.0
    return x.to(dtype)


def device_and_cpu(monkeypatch, x: torch.Tensor, fmt: str, rounding: str | None, bk: Blocking | None,
                   bm: Blocking | None, sr_bits: int = 16) -> tuple:
    f = get_format(fmt)
    monkeypatch.setattr(fp8_gemm, "TRITON_ON_CPU", True)
    dev = fp8_operands(x, f, rounding, bk, bm, sr_bits, e4m3_exponents(x, f, bk, bm))
    monkeypatch.setattr(fp8_gemm, "TRITON_ON_CPU", False)
    cpu = fp8_operands(x, f, rounding, bk, bm, sr_bits, e4m3_exponents(x, f, bk, bm))
    return dev, cpu


def bf16_bits(t: torch.Tensor) -> torch.Tensor:
    """bf16 bit patterns, every NaN as 0x7FC0 (the emulator and the kernels write different NaN payloads)."""
    return torch.where(torch.isnan(t), torch.tensor(0x7FC0, dtype=torch.int16), t.view(torch.int16))


def assert_same_operand(a: fp8_gemm.E4M3Rows, b: fp8_gemm.E4M3Rows) -> None:
    assert torch.equal(a.scale.view(torch.int32), b.scale.view(torch.int32))
    assert torch.equal(a.unfit, b.unfit)
    assert torch.equal(a.codes.view(torch.uint8), b.codes.view(torch.uint8))
    u = b.unfit.bool()
    assert torch.equal(bf16_bits(a.values[u]), bf16_bits(b.values[u]))  # repaired rows
    fit = ~u
    assert torch.equal((a.codes.float() * a.scale[:, None])[fit].to(torch.bfloat16).view(torch.int16),
                       b.values[fit].view(torch.int16))


@pytest.mark.parametrize("fmt,rounding,rht", [
    ("mxfp4", "sr", (None, 32)), ("mxfp4", None, (32, None)), ("mxfp4", None, (32, 32)),
    ("ufp4-e8m0", "sr", (None, 32)), ("int4-b32-e8m0", None, (None, 32)),
])
def test_fused_operands_match_the_cpu_twins(monkeypatch, fmt, rounding, rht):
    x = spoiled()
    (kd, md), (kc, mc) = device_and_cpu(monkeypatch, x, fmt, rounding, Blocking(rht[0], 0, 11),
                                        Blocking(rht[1], 1, 12))
    for a, b in ((kd, kc), (md, mc)):
        assert_same_operand(a, b)
    assert kc.codes.shape == (64, 128) and mc.codes.shape == (128, 64)
    assert 0 < int(kc.unfit.sum()) < 64 and 0 < int(mc.unfit.sum()) < 128
    assert kc.unfit[[3, 9, 13]].tolist() == [1, 1, 1] and kc.unfit[20] == 0  # spoiled, NaN, Inf; zeros fit


def test_one_blocking_and_fp32_input(monkeypatch):
    x = spoiled(32, 64, torch.float32)
    (kd, md), (kc, mc) = device_and_cpu(monkeypatch, x, "mxfp4", None, None, Blocking(32, 0, 0))
    assert kd is None and kc is None
    assert_same_operand(md, mc)
    (kd, md), (kc, mc) = device_and_cpu(monkeypatch, x, "mxfp4", "sr", Blocking(None, 0, 3), None, 8)
    assert md is None and mc is None
    assert_same_operand(kd, kc)


def test_mxfp4_rule_exponent_is_the_optimal_one():
    """For MXFP4 the rule's r equals the smallest r that holds each row's largest value (fp8_convert's choice),
    so the rows that fit are exactly those that fit under any power of two."""
    f = get_format("mxfp4")
    x = spoiled()
    for bk, bm in ((Blocking(None, 0, 1), None), (None, Blocking(32, 0, 1))):
        ops = fp8_operands(x, f, "sr", bk, bm, 16, e4m3_exponents_reference(x, f, bk, bm))
        op = ops[0] if bk is not None else ops[1]
        best = e4m3_rows_reference(op.values)
        finite_nonzero = torch.isfinite(op.values.float()).all(dim=1) & (op.values.float() != 0).any(dim=1)
        assert torch.equal(op.scale[finite_nonzero], best.scale[finite_nonzero])
        assert torch.equal(op.unfit, best.unfit)


def test_exponents_of_edge_rows(monkeypatch):
    """Kernel against numpy twin on rows of zeros, NaN, Inf, the largest bf16, subnormals; r stays in
    [R_MIN, 127] and is 0 with the row unfit where the maximum is not finite."""
    f = get_format("mxfp4")
    x = torch.zeros(8, 64)
    x[1, 3] = float("nan")
    x[2, 0] = -float("inf")
    x[3] = 3.3895e38
    x[4] = 2.0 ** -133
    x[5] = 2.0 ** -120
    x[6] = torch.linspace(-1, 1, 64)
    x = x.to(torch.bfloat16)
    spec = Blocking(None, 0, 0)
    monkeypatch.setattr(fp8_gemm, "TRITON_ON_CPU", True)
    dev = e4m3_exponents(x, f, spec, spec)
    ref = e4m3_exponents_reference(x, f, spec, spec)
    for a, b in zip(dev, ref):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    r = (ref[0].view(torch.int32) >> 23) - 127
    assert ref[1].tolist() == [0, 1, 1, 0, 0, 0, 0, 0]
    assert r[[0, 1, 2, 7]].tolist() == [0, 0, 0, 0] and int(r[4]) == R_MIN
    assert int(r[3]) == 119  # the largest bf16, 1.99 * 2^127: floor scale 2^125, r = 125 + 2 - 8
    assert int(r[6]) == -8  # amax 1 = 2^0: E8M0 floor scale 2^-2, E2M1's top 6 = 1.5 * 2^2
