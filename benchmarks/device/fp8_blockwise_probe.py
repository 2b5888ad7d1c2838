"""Does ``torch._scaled_mm`` take 1 x 128 block scales on this GPU, how fast, and how does it add? One CUDA GPU:

    python benchmarks/device/fp8_blockwise_probe.py [--json out.json]

Why: the FP8 path of power-of-two-scaled recipes (``gemm_dtype = "fp8"``, ``fp4lab.recipes.fp8_gemm``) gives each
operand row one power of two, so every conversion needs the row's maximum first: a row pass, and for the WGRAD
operands a column-maximum pass with atomics. With one scale per 1 x 128 block along K, a fake-quant program whose
tile covers whole 128-blocks knows each block's exponent itself, and a block of a power-of-two-scaled format fits
E4M3 by a test on its block exponents instead of one per value; the conversion could then fold into the
fake-quant pass. That is worth designing only if cuBLAS runs block-scaled FP8 GEMMs on Hopper at about the
speed of row-wise ones. This probe measures that; it changes nothing in fp4lab.

Per shape (M, N, K): the median time of a CUDA-graph replay (``triton.testing.do_bench_cudagraph``) of bf16
``torch.mm`` and of ``torch._scaled_mm`` on E4M3 operands with row-wise scales (``use_fast_accum`` False and True)
and with (1 x 128, 1 x 128) block scales in both scale layouts (row-major, and M-major as cuBLAS documents), each
with the error line when a call is refused. Accuracy, on operands that are exactly E4M3 codes times a power of two
per block: the largest |error| against the float64 product, in units of the largest float64 sum of |a| |b| of an
output (``err_rel``, fp32 output where the library writes it, else bf16: ``blockwise_out``); and, with one scale
per row (every block of a row alike), whether the block-scaled result equals the row-wise one bit for bit. Times
are of bf16 outputs throughout.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable

import torch

SHAPES = ((8192, 2048, 2048), (8192, 6144, 2048), (8192, 2048, 5632), (16384, 4096, 4096))
E4M3 = torch.float8_e4m3fn


def _median_ms(fn: Callable[[], Any]) -> float:
    from triton.testing import do_bench_cudagraph

    fn()
    torch.cuda.synchronize()
    return float(do_bench_cudagraph(fn, rep=100))


def _operand(rows: int, k: int, gen: torch.Generator, same_scale: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 codes [rows, k], fp32 power-of-two scales [rows, k / 128]): finite random codes, scales 2^-4..2^4
    (one per row when ``same_scale``)."""
    bits = torch.randint(0, 256, (rows, k), generator=gen, dtype=torch.int32)
    bits = torch.where((bits & 0x7F) == 0x7F, bits ^ 1, bits)  # no NaN code (0x7F / 0xFF)
    codes = bits.to(torch.uint8).view(E4M3)
    exps = torch.randint(-4, 5, (rows, 1 if same_scale else k // 128), generator=gen).float()
    return codes, torch.exp2(exps).expand(rows, k // 128).contiguous()


def _block_scales(sa: torch.Tensor, sb: torch.Tensor, m_major: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The scales of a (1 x 128, 1 x 128) ``_scaled_mm`` of a [M, K] by b [N, K] (passed as b.t()): sa [M, K/128]
    and sb [N, K/128] as [M, K/128] and [K/128, N], row-major or M-major (outer dimension contiguous)."""
    if m_major:
        return sa.t().contiguous().t(), sb.contiguous().t()
    return sa.contiguous(), sb.t().contiguous()


def _attempt(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except (RuntimeError, ValueError, TypeError) as exc:
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"


def _mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, out: torch.dtype,
        fast: bool = False) -> torch.Tensor:
    return torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=out, use_fast_accum=fast)


def probe_shape(m: int, n: int, k: int, gen: torch.Generator) -> dict[str, Any]:
    dev = torch.device("cuda")
    row: dict[str, Any] = {"m": m, "n": n, "k": k}
    a, sa = (t.to(dev) for t in _operand(m, k, gen, False))
    b, sb = (t.to(dev) for t in _operand(n, k, gen, False))
    x, w = torch.randn(m, k, device=dev, dtype=torch.bfloat16), torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    row["bf16_ms"] = _median_ms(lambda: torch.mm(x, w.t()))
    ra, rb = torch.ones(m, 1, device=dev), torch.ones(1, n, device=dev)
    for fast in (False, True):
        key = "rowwise_fast" if fast else "rowwise"
        row[f"{key}_ms"], row[f"{key}_error"] = _attempt(
            lambda: _median_ms(lambda: _mm(a, b, ra, rb, torch.bfloat16, fast)))
    av = a.double() * sa.double().repeat_interleave(128, 1)  # exact values of the operands
    bv = b.double() * sb.double().repeat_interleave(128, 1)
    ref, mag = av @ bv.t(), av.abs() @ bv.abs().t()
    del av, bv
    a1, s1 = (t.to(dev) for t in _operand(m, k, gen, True))  # one scale per row: the row-wise GEMM's operands too
    b1, t1 = (t.to(dev) for t in _operand(n, k, gen, True))
    for m_major in (False, True):
        name = "blockwise_m_major" if m_major else "blockwise"
        scale_a, scale_b = _block_scales(sa, sb, m_major)
        for out in (torch.float32, torch.bfloat16):  # fp32 output where the library writes it, else bf16
            y, err = _attempt(lambda: _mm(a, b, scale_a, scale_b, out))
            row[f"{name}_{str(out)[6:]}_error"] = err
            if y is not None:
                break
        if y is None:
            continue
        row[f"{name}_out"] = str(out)[6:]
        row[f"{name}_err_rel"] = float(((y.double() - ref).abs().max() / mag.max()).item())
        row[f"{name}_ms"], row[f"{name}_ms_error"] = _attempt(  # bf16 output, as the row-wise times
            lambda: _median_ms(lambda: _mm(a, b, scale_a, scale_b, torch.bfloat16)))
        c_a, c_b = _block_scales(s1, t1, m_major)
        yb, err = _attempt(lambda: _mm(a1, b1, c_a, c_b, out))
        yr, err_r = _attempt(lambda: _mm(a1, b1, s1[:, :1].contiguous(), t1[:, :1].t().contiguous(), out))
        row[f"{name}_equals_rowwise"] = None if yb is None or yr is None else bool(torch.equal(
            yb.view(torch.int16 if out == torch.bfloat16 else torch.int32),
            yr.view(torch.int16 if out == torch.bfloat16 else torch.int32)))
        row[f"{name}_equals_rowwise_error"] = err or err_r
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
    print(json.dumps(info))
    rows = []
    for m, n, k in SHAPES:
        rows.append(probe_shape(m, n, k, gen))
        print(json.dumps(rows[-1]), flush=True)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({**info, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
