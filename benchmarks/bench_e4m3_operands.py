"""Kernel times of the FP8 operand pipeline on one CUDA GPU, 16384 x 4096 bf16 tensor, mxfp4 (CUDA-graph timing,
``triton.testing.do_bench_cudagraph``): the maxima pass, the exponent kernels, the fused fake-quant pass writing
E4M3 codes (along K, along M with RHT-32, both; SR-16 where dY would take it) against the same pass writing bf16
values, the repair pass, and a same-run copy of the tensor.

    python3 benchmarks/bench_e4m3_operands.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from triton.testing import do_bench_cudagraph

from fp4lab.formats.registry import get_format
from fp4lab.kernels.e4m3_operands_launch import e4m3_exponents_triton, repair_unfit_rows_triton
from fp4lab.kernels.fakequant_launch import Blocking, fake_quantize_e4m3_triton, fake_quantize_triton


SWEEP = {  # (BM, BK, warps) per case of --sweep
    "x_k": [(16, 256, 4), (32, 256, 4), (16, 512, 4), (8, 256, 2), (32, 128, 4), (16, 256, 8)],
    "x_m": [(32, 64, 2), (32, 64, 4), (32, 128, 4), (64, 64, 4), (64, 128, 8), (32, 256, 8)],
    "dy_k_m": [(32, 64, 4), (32, 64, 2), (32, 128, 4), (64, 64, 4), (64, 128, 8), (32, 256, 8)],
}


def us(fn: Any) -> float:
    return do_bench_cudagraph(fn, rep=200) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--sweep", action="store_true", help="also time the E4M3 pass over a list of tiles")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    fmt = get_format("mxfp4")
    x = torch.randn(args.rows, args.cols, device="cuda", dtype=torch.bfloat16)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "shape": [args.rows, args.cols],
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    y = torch.empty_like(x)
    out["copy_us"] = us(lambda: y.copy_(x))
    for name, rounding, bk, bm in (("x_k", None, Blocking(None, 0, 0), None),
                                   ("x_m", None, None, Blocking(32, 0, 0)),
                                   ("dy_k_m", "sr", Blocking(None, 0, 5), Blocking(32, 0, 6))):
        sc = e4m3_exponents_triton(x, fmt, bk, bm)
        row = {"maxima_and_exponents_us": us(lambda: e4m3_exponents_triton(x, fmt, bk, bm)),
               "fakequant_bf16_us": us(lambda: fake_quantize_triton(x, fmt, rounding, along_k=bk, along_m=bm,
                                                                    sr_bits=16)),
               "fakequant_e4m3_us": us(lambda: fake_quantize_e4m3_triton(x, fmt, rounding, along_k=bk, along_m=bm,
                                                                         sr_bits=16, scales=sc))}
        pairs = fake_quantize_e4m3_triton(x, fmt, rounding, along_k=bk, along_m=bm, sr_bits=16, scales=sc)
        p, s, u = (pairs[0], sc[0], sc[1]) if bk is not None else (pairs[1], sc[2], sc[3])
        row["repair_us"] = us(lambda: repair_unfit_rows_triton(p[0], p[1], s, u))
        if args.sweep:
            for tile in SWEEP[name]:
                row[f"fakequant_e4m3_us_{'x'.join(map(str, tile))}"] = us(lambda: fake_quantize_e4m3_triton(
                    x, fmt, rounding, along_k=bk, along_m=bm, sr_bits=16, scales=sc, tile=tile))
        out[name] = row
        print(name, {k: round(v, 1) for k, v in row.items()}, flush=True)
    print(f"copy {out['copy_us']:.1f} us", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
