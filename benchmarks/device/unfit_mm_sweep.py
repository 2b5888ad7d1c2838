"""Launch plans of the FP8 GEMMs' bf16-path kernel (``fp4lab.kernels.unfit_mm``) on a GPU: its time where no
operand row is flagged (every FP8 GEMM pays it) and where a few are, per tile, in CUDA graphs.

    python benchmarks/device/unfit_mm_sweep.py --json out.json

Output [16384, 4096] (the 4096 -> 4096 layer's FPROP and DGRAD) and [4096, 4096] (WGRAD), K = 4096 / 16384.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch

from fp4lab.kernels.unfit_mm_launch import unfit_mm_triton

TILES = [  # (BM, BN, BK, warps, stages)
    (128, 128, 64, 8, 3), (128, 128, 32, 4, 2), (64, 128, 32, 4, 2), (64, 64, 32, 4, 2), (128, 128, 64, 4, 3),
    (128, 64, 64, 4, 3), (64, 128, 64, 4, 3),
]


def graph_us(fn: Any, reps: int = 50) -> float:
    """Microseconds per call of ``fn`` replayed in a CUDA graph of ``reps`` calls (median of 5 replays)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / reps)
    return sorted(times)[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                      time.gmtime()), "rows": []}
    for m, n, k in ((16384, 4096, 4096), (4096, 4096, 16384)):
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        y = torch.zeros(m, n, device="cuda", dtype=torch.bfloat16)
        counts = torch.zeros(2, dtype=torch.int64, device="cuda")
        none_a = torch.zeros(m, dtype=torch.int32, device="cuda")
        none_b = torch.zeros(n, dtype=torch.int32, device="cuda")
        few_a = none_a.clone()
        few_a[::m // 4] = 1  # four rows in four row blocks
        for tile in TILES:
            row = {"shape": [m, n, k], "tile": list(tile)}
            row["none_us"] = graph_us(lambda: unfit_mm_triton(y, a, b, none_a, none_b, counts, tile=tile))
            row["four_rows_us"] = graph_us(lambda: unfit_mm_triton(y, a, b, few_a, none_b, counts, tile=tile), 10)
            out["rows"].append(row)
            print(f"{m}x{n}x{k} tile {tile}: none {row['none_us']:.1f} us, four rows {row['four_rows_us']:.1f} us",
                  flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
