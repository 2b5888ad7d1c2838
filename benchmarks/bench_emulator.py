"""CPU quantize throughput: fp4lab's numba emulator vs torchao's CPU path and ml_dtypes' bare E2M1 cast.

One process, one float32 input (default 4096 x 4096, standard normal, seed 0). Every case is warmed up once
(numba compiles or loads its cache there), then timed ``--repeats`` times; the best wall time is reported as
millions of input elements per second. Cases:

  fp4lab nvfp4 / mxfp4 / ufp4   ``fp4lab.quantize(x, name)`` on a numpy array (codes, scales, tensor scale)
  torchao nvfp4                 ``nvfp4_quantize(x, 16, per_tensor_scale=per_tensor_amax_to_scale(amax))``
                                (the amax reduction is timed too)
  torchao mxfp4                 ``to_mx(x, float4_e2m1fn_x2, 32, ScaleCalculationMode.FLOOR)``
  ml_dtypes e2m1 cast           ``x.astype(ml_dtypes.float4_e2m1fn)`` (no scales at all)

Usage: ``python benchmarks/bench_emulator.py [--size 4096] [--repeats 5] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from typing import Callable

import numpy as np


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time in seconds of ``repeats`` calls after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def cases(x: np.ndarray) -> dict[str, Callable[[], object]]:
    import ml_dtypes
    import torch

    import fp4lab

    out: dict[str, Callable[[], object]] = {}
    for name in ("nvfp4", "mxfp4", "ufp4"):
        fmt = fp4lab.get_format(name)
        out[f"fp4lab {name}"] = lambda fmt=fmt: fp4lab.quantize(x, fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.mx_tensor import to_mx
        from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    xt = torch.from_numpy(x)

    def torchao_nvfp4():
        ts = per_tensor_amax_to_scale(torch.max(torch.abs(xt)))
        return nvfp4_quantize(xt, 16, per_tensor_scale=ts)

    out["torchao nvfp4"] = torchao_nvfp4
    out["torchao mxfp4"] = lambda: to_mx(xt, torch.float4_e2m1fn_x2, 32, ScaleCalculationMode.FLOOR)
    out["ml_dtypes e2m1 cast"] = lambda: x.astype(ml_dtypes.float4_e2m1fn)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096, help="input is size x size float32 (default 4096)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per case after one warm-up (default 5)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    x = np.random.default_rng(0).standard_normal((args.size, args.size)).astype(np.float32)
    rates = {name: x.size / best_time(fn, args.repeats) / 1e6 for name, fn in cases(x).items()}
    ratios = {
        "fp4lab nvfp4 / torchao nvfp4": rates["fp4lab nvfp4"] / rates["torchao nvfp4"],
        "fp4lab mxfp4 / torchao mxfp4": rates["fp4lab mxfp4"] / rates["torchao mxfp4"],
        "fp4lab ufp4 / torchao nvfp4": rates["fp4lab ufp4"] / rates["torchao nvfp4"],
        "fp4lab nvfp4 / ml_dtypes cast": rates["fp4lab nvfp4"] / rates["ml_dtypes e2m1 cast"],
        "fp4lab mxfp4 / ml_dtypes cast": rates["fp4lab mxfp4"] / rates["ml_dtypes e2m1 cast"],
        "fp4lab ufp4 / ml_dtypes cast": rates["fp4lab ufp4"] / rates["ml_dtypes e2m1 cast"],
    }
    machine = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
               "shape": [args.size, args.size], "repeats": args.repeats}
    if args.json:
        print(json.dumps({"machine": machine, "M_elements_per_s": rates, "ratios": ratios}, indent=2))
        return
    print(f"quantize {args.size}x{args.size} float32, best of {args.repeats}, {machine['cpus']} CPUs")
    print(f"{'case':<24}{'M elem/s':>10}")
    for name, r in rates.items():
        print(f"{name:<24}{r:>10.1f}")
    print()
    for name, r in ratios.items():
        print(f"{name:<32}{r:>8.2f}x")


if __name__ == "__main__":
    main()
