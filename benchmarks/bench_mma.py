"""Speed of the Hopper tensor-core model: a 512 x 512 x 4096 bf16 GEMM (wgmma.bf16: T-FDPA, 16 products per fused
step, F = 25, RZ, 256 chained steps per output) through the numba kernels, against two slower implementations
of the same model in the same run, each checked bit for bit against the numba result on what it computed:

* pure Python: the scalar reference fp4lab.hwspec.mma_reference (loops over outputs and products, Python
  floats), timed on a few outputs and extrapolated linearly to the full GEMM (stated as such in the output);
* numpy-vectorised in the style of MMA-Sim (whole [rows, N, 16] chunks as float64 tensor ops per fused step),
  timed on a block of rows and extrapolated.

    NUMBA_NUM_THREADS=2 PYTHONPATH=. python benchmarks/bench_mma.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np


def bf16(x: np.ndarray) -> np.ndarray:
    """Round-toward-zero to bf16 (any exact bf16 values will do for timing)."""
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def numpy_chunked_model(a: np.ndarray, b: np.ndarray, c: np.ndarray, F: int = 25, L: int = 16,
                        e_zero: int = -133) -> np.ndarray:
    """T-FDPA (bf16 in, fp32 RZ out) as whole-tensor numpy operations per fused step (MMA-Sim's style).
    Finite inputs only (the timing data has no NaN/Inf)."""
    acc = c.astype(np.float64)
    _, ea = np.frexp(a.astype(np.float64))
    _, eb = np.frexp(b.astype(np.float64))
    ea = np.maximum(ea - 1, -126)
    eb = np.maximum(eb - 1, -126)
    for k0 in range(0, a.shape[1], L):
        p = a[:, None, k0:k0 + L].astype(np.float64) * b.T[None, :, k0:k0 + L]  # [M, N, L]
        e = np.where(p == 0, e_zero, ea[:, None, k0:k0 + L] + eb.T[None, :, k0:k0 + L])
        _, ec = np.frexp(acc)
        ec = np.where(acc == 0, e_zero, np.maximum(ec - 1, -126))
        emax = np.maximum(e.max(axis=2), ec)
        scale = np.ldexp(1.0, F - emax)
        s = np.trunc(p * scale[:, :, None]).sum(axis=2) + np.trunc(acc * scale)
        x = np.ldexp(s, emax - F)
        _, ex = np.frexp(x)
        q = np.maximum(ex - 1, -126) - 23
        y = np.ldexp(np.trunc(np.ldexp(x, -q)), q)
        acc = np.where(np.abs(y) >= 2.0**128, np.copysign(np.inf, y), y) + 0.0
    return acc.astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--py-outputs", type=int, default=64, help="outputs computed by the pure-Python reference")
    ap.add_argument("--np-rows", type=int, default=32, help="rows computed by the numpy-vectorised model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import numba

    from fp4lab.hwspec.mma import Prepared, emulate_mma, finish, resolve_kind

    rng = np.random.default_rng(0)
    M, N, K = args.m, args.n, args.k
    a = bf16(rng.standard_normal((M, K)) * np.exp2(rng.integers(-8, 9, (M, K))))
    b = bf16(rng.standard_normal((K, N)) * np.exp2(rng.integers(-8, 9, (K, N))))
    c = np.zeros((M, N), np.float32)
    kind = resolve_kind("hopper-sm90", "wgmma.bf16")

    t0 = time.perf_counter()
    emulate_mma(a[:2, :32], b[:32, :2], c[:2, :2], kind="wgmma.bf16")  # numba compile or cache load
    first_call = time.perf_counter() - t0
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        d = emulate_mma(a, b, c, kind="wgmma.bf16")
        times.append(time.perf_counter() - t0)
    t_numba = min(times)

    n_py = args.py_outputs
    cols = np.arange(n_py) % N  # outputs (0, 0..n_py-1)
    sub = Prepared(kind, a[:1], np.ascontiguousarray(b[:, cols]))
    t0 = time.perf_counter()
    d_py = finish(sub.run(np.zeros((1, n_py)), impl="reference"), kind)
    t_py = time.perf_counter() - t0
    py_ok = bool(np.array_equal(d_py[0].view(np.uint32), d[0, cols].view(np.uint32)))
    t_py_full = t_py * (M * N) / n_py

    r = args.np_rows
    t0 = time.perf_counter()
    d_np = numpy_chunked_model(a[:r], b, c[:r])
    t_np = time.perf_counter() - t0
    np_ok = bool(np.array_equal(d_np.view(np.uint32), d[:r].view(np.uint32)))
    t_np_full = t_np * M / r

    res = {
        "problem": f"{M}x{N}x{K} bf16 GEMM, hopper-sm90 wgmma.bf16 model (F=25, 16 products per step, RZ)",
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, numba threads "
                   f"{numba.get_num_threads()}",
        "numba_seconds": round(t_numba, 3), "numba_first_call_seconds": round(first_call, 3),
        "pure_python_outputs_timed": n_py, "pure_python_seconds_measured": round(t_py, 3),
        "pure_python_seconds_extrapolated": round(t_py_full, 1), "pure_python_bit_exact_vs_numba": py_ok,
        "numpy_rows_timed": r, "numpy_seconds_measured": round(t_np, 3),
        "numpy_seconds_extrapolated": round(t_np_full, 1), "numpy_bit_exact_vs_numba": np_ok,
        "speedup_vs_pure_python": round(t_py_full / t_numba, 1),
        "speedup_vs_numpy_vectorised": round(t_np_full / t_numba, 1),
    }
    for key, v in res.items():
        print(f"{key:36s} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
