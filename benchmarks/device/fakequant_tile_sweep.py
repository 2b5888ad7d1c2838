"""Tile sweep of the fused fake-quant passes the built-in recipes launch (GPU): kernel time per (format, rounding,
blockings, tile) on a 16384 x 4096 bf16 tensor, RHT-16 along M as the recipes rotate WGRAD, SR at 16 bits;
``triton.testing.do_bench_cudagraph`` medians in ms, and whether each tile's outputs equal the default tile's bit
for bit (the bits must not depend on the tile).

    python3 benchmarks/device/fakequant_tile_sweep.py --json sweep.json

The kernels of each case compile in their own process first (``--jobs``; Triton's disk cache keeps them), so the
sweep of some 70 variants takes about 80 s on the H200 instead of several minutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

TILES = [None, (32, 64, 2), (16, 128, 1), (16, 128, 2), (16, 256, 2), (16, 256, 4), (16, 512, 4), (32, 128, 2),
         (32, 256, 4)]
CASES = [("nvfp4", None, "km"), ("nvfp4", "sr", "km"), ("mxfp4", None, "km"), ("mxfp4", "sr", "km"),
         ("e2m1-b16-fp32", None, "km"), ("e2m1-b16-fp32", "sr", "km"), ("ufp4", None, "m"), ("ufp4", "sr", "m")]


def sweep(cases: list[tuple], time_it: bool) -> dict[str, Any]:
    import torch
    import triton

    import fp4lab
    from fp4lab.errors import InputError
    from fp4lab.kernels.fakequant_launch import fake_quantize_triton
    from fp4lab.numerics.options import Blocking

    torch.manual_seed(0)
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    out: dict[str, Any] = {"copy_ms": triton.testing.do_bench_cudagraph(lambda: y.copy_(x))} if time_it else {}
    for name, rounding, along in cases:
        fmt = fp4lab.get_format(name)
        ref = None
        for tile in TILES:
            kw = dict(along_k=Blocking(None, 0, 1) if "k" in along else None, along_m=Blocking(16, 0, 2),
                      sr_bits=16, apply_tensor_scale=False, tile=tile)
            try:
                got = [t.view(torch.int16).clone() for t in fake_quantize_triton(x, fmt, rounding, **kw)[:2]
                       if t is not None]
            except InputError as exc:  # a tile the format's blocks do not divide
                print(f"{name} {rounding} {tile}: {exc}", flush=True)
                continue
            if not time_it:
                continue
            ref = got if ref is None else ref
            same = all(torch.equal(a, b) for a, b in zip(got, ref))
            ms = triton.testing.do_bench_cudagraph(lambda: fake_quantize_triton(x, fmt, rounding, **kw))
            key = f"{name}/{rounding or 'rtne'}/{along}/{tile}"
            out[key] = {"ms": ms, "same_bits": same}
            print(f"{key:45s} {ms:.4f} ms  same bits as the default tile: {same}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--jobs", type=int, default=8, help="processes compiling the kernels first (0: none)")
    ap.add_argument("--compile-case", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compile_case is not None:
        sweep([CASES[args.compile_case]], time_it=False)
        return
    if args.jobs:
        def compile_one(i: int) -> None:
            subprocess.run([sys.executable, __file__, "--compile-case", str(i)], check=False,
                           stdout=subprocess.DEVNULL)
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(compile_one, range(len(CASES))))
    out = sweep(CASES, time_it=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
