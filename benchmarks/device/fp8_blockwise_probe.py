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
output (``err_rel``); and, with one scale per row (every block of a row alike), whether the block-scaled result
equals the row-wise one bit for bit.
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


def _blockwise(a: torch.Tensor, sa: torch.Tensor, b: torch.Tensor, sb: torch.Tensor, m_major: bool) -> torch.Tensor:
    """``(a * sa) @ (b * sb)^T`` by ``_scaled_mm`` with (1 x 128, 1 x 128) scales: a [M, K], b [N, K] row-major,
    sa [M, K/128], sb [N, K/128]; the scales passed as [M, K/128] and [K/128, N], row-major or M-major."""
    scale_a = sa.t().contiguous().t() if m_major else sa.contiguous()
    scale_b = sb.t().contiguous() if not m_major else sb.contiguous().t()
    return torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.float32)


def _attempt(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except (RuntimeError, ValueError, TypeError) as exc:
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"


def probe_shape(m: int, n: int, k: int, gen: torch.Generator) -> dict[str, Any]:
    dev = torch.device("cuda")
    row: dict[str, Any] = {"m": m, "n": n, "k": k}
    a, sa = (t.to(dev) for t in _operand(m, k, gen, False))
    b, sb = (t.to(dev) for t in _operand(n, k, gen, False))
    x, w = torch.randn(m, k, device=dev, dtype=torch.bfloat16), torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    row["bf16_ms"] = _median_ms(lambda: torch.mm(x, w.t()))
    ra, rb = torch.ones(m, 1, device=dev), torch.ones(1, n, device=dev)
    for fast in (False, True):
        t, err = _attempt(lambda: _median_ms(lambda: torch._scaled_mm(a, b.t(), scale_a=ra, scale_b=rb,
                                                                      out_dtype=torch.bfloat16,
                                                                      use_fast_accum=fast)))
        row[f"rowwise{'_fast' if fast else ''}_ms"], row[f"rowwise{'_fast' if fast else ''}_error"] = t, err
    av = a.double() * sa.double().repeat_interleave(128, 1)  # exact values of the operands
    bv = b.double() * sb.double().repeat_interleave(128, 1)
    ref, mag = av @ bv.t(), av.abs() @ bv.abs().t()
    del av, bv
    for m_major in (False, True):
        name = "blockwise_m_major" if m_major else "blockwise"
        y, err = _attempt(lambda: _blockwise(a, sa, b, sb, m_major))
        row[f"{name}_error"] = err
        if y is None:
            continue
        row[f"{name}_err_rel"] = float(((y.double() - ref).abs().max() / mag.max()).item())
        row[f"{name}_ms"] = _median_ms(lambda: _blockwise(a, sa, b, sb, m_major))
        a1, s1 = (t.to(dev) for t in _operand(m, k, gen, True))
        b1, t1 = (t.to(dev) for t in _operand(n, k, gen, True))
        yb, err = _attempt(lambda: _blockwise(a1, s1, b1, t1, m_major))
        yr = torch._scaled_mm(a1, b1.t(), scale_a=s1[:, :1].contiguous(), scale_b=t1[:, :1].t().contiguous(),
                              out_dtype=torch.float32)
        row[f"{name}_equals_rowwise"] = None if yb is None else bool(torch.equal(yb.view(torch.int32),
                                                                                 yr.view(torch.int32)))
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
