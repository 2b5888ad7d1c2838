"""Tile sweep of the E4M3 conversion kernels (``fp4lab.kernels.fp8_convert``) on a 16384 x 4096 bf16 operand, on
CUDA: kernel times in CUDA graphs (``triton.testing.do_bench_cudagraph``) against a copy of the tensor, for the
column-amax pass, the column (transposed) encode pass and the row pass, plus the launch plans of
``to_e4m3_rows_triton`` as they stand. Every column tile's codes are compared with the plan's.

    python3 benchmarks/device/fp8_convert_tile_sweep.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from triton.testing import do_bench_cudagraph

from fp4lab.kernels import fp8_convert as fk
from fp4lab.kernels.fp8_convert_launch import to_e4m3_rows_triton

AMAX_TILES = [(64, 256, 4), (128, 256, 4), (256, 128, 4), (128, 128, 4), (256, 256, 8), (512, 64, 4), (1024, 32, 4)]
COLS_TILES = [(32, 128, 4), (64, 64, 4), (128, 32, 4), (64, 128, 4), (128, 64, 4), (128, 128, 8), (256, 64, 8),
              (64, 256, 8), (256, 32, 4)]
ROWS_TILES = [(4, 512, 4), (8, 512, 4), (2, 1024, 4), (4, 1024, 8), (8, 256, 4), (16, 256, 4), (1, 4096, 8)]


def us(fn) -> float:
    return do_bench_cudagraph(fn, rep=50) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    R, C = 16384, 4096
    x = (torch.randn(R, C, device="cuda") * 0.1).bfloat16()
    xi = x.view(torch.int16)
    res: dict = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "shape": [R, C], "copy_us": us(lambda: x.clone()),
                 "rows_plan_us": us(lambda: to_e4m3_rows_triton(x, False)),
                 "cols_plan_us": us(lambda: to_e4m3_rows_triton(x, True))}
    print({k: res[k] for k in ("copy_us", "rows_plan_us", "cols_plan_us")}, flush=True)
    ref = to_e4m3_rows_triton(x, True)[0].view(torch.uint8)
    q = torch.empty((C, R), dtype=torch.uint8, device="cuda")
    sc = torch.empty(C, device="cuda")
    amax = torch.zeros(C, dtype=torch.int32, device="cuda")
    unfit = torch.zeros(C, dtype=torch.int32, device="cuda")
    for am, ak, w in AMAX_TILES:
        res[f"amax_{am}x{ak}x{w}"] = t = us(lambda: fk._col_amax_kernel[(R // am, C // ak)](
            xi, amax, R, C, BM=am, BK=ak, EVEN=True, num_warps=w))
        print("column amax", am, ak, w, round(t, 1), flush=True)
    for bm, bk, w in COLS_TILES:
        t = us(lambda: fk._cols_kernel[(R // bm, C // bk)](xi, amax, q, sc, unfit, R, C, BM=bm, BK=bk,
                                                             R_LO=fk.R_MIN, EVEN=True, num_warps=w))
        res[f"cols_{bm}x{bk}x{w}"] = {"us": t, "same_codes": bool(torch.equal(q, ref))}
        print("column encode", bm, bk, w, round(t, 1), res[f"cols_{bm}x{bk}x{w}"]["same_codes"], flush=True)
    qr = torch.empty((R, C), dtype=torch.uint8, device="cuda")
    sr = torch.empty(R, device="cuda")
    ur = torch.empty(R, dtype=torch.int32, device="cuda")
    for br, bc, w in ROWS_TILES:
        res[f"rows_{br}x{bc}x{w}"] = t = us(lambda: fk._rows_kernel[(R // br,)](
            xi, qr, sr, ur, R, C, BR=br, BC=bc, R_LO=fk.R_MIN, EVEN=True, num_warps=w))
        print("rows", br, bc, w, round(t, 1), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
