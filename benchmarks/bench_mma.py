"""Speed of the Hopper tensor-core model: a 512 x 512 x 4096 bf16 GEMM (wgmma.bf16: T-FDPA, 16 products per fused
step, F = 25, RZ, 256 chained steps per output) through the numba kernels, against two slower implementations
of the same model in the same run, each checked bit for bit against the numba result on what it computed:

* pure Python: the scalar reference fp4lab.hwspec.mma_reference (loops over outputs and products, Python
  floats), timed on a few outputs and extrapolated linearly to the full GEMM (stated as such in the output);
* numpy-vectorised in the style of MMA-Sim (whole [rows, N, 16] chunks as float64 tensor ops per fused step),
  timed on a block of rows and extrapolated.

    NUMBA_NUM_THREADS=2 PYTHONPATH=. python benchmarks/bench_mma.py [--json out.json]

With ``--gpu`` (a CUDA GPU; results to $OUT/bench_mma_gpu.json as they arrive) it times instead the Triton kernels
of the block-scaled models (fp4lab/kernels/mma_emulate.py), all ratios in one process:

* tcgen05.mxf4nvf4 (NVFP4: e2m1, ue4m3 per 16) at 4096^3 over a few tiles (target: <= 50 ms), the kernel alone
  (prepared operands) and the whole ``emulated_matmul``; products per second against the CPU model (numba, all
  cores) timed on the first rows of the same shape (checked bit for bit against the GPU's rows) and extrapolated;
* the same kind at 8192^3 against cuBLAS bf16 (torch.mm) at 8192^3;
* tcgen05.mxf8f6f4 (ST-FDPA) and CDNA4 mfma_scale (TR-FDPA), the per-product kernel, at 2048^3.

    OUT=/some/dir PYTHONPATH=. python benchmarks/bench_mma.py --gpu
    TRITON_INTERPRET=1 OUT=/tmp/x PYTHONPATH=. python benchmarks/bench_mma.py --gpu --smoke   # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import types
from pathlib import Path

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


GST_TILES = [(32, 32, 4, 2), (64, 32, 8, 2), (32, 64, 8, 2), (64, 64, 8, 2), (64, 32, 4, 2), (64, 64, 16, 2),
             (32, 32, 4, 3)]
FDPA_TILES = [(32, 32, 8, 4), (16, 16, 4, 16), (32, 32, 8, 8), (64, 32, 8, 4)]


DEV = "cuda"  # "cpu" with --smoke under TRITON_INTERPRET=1: the same code paths on tiny shapes, no timing value


def _sync() -> None:
    import torch

    if DEV == "cuda":
        torch.cuda.synchronize()


def _gpu_operands(plan, M: int, N: int, K: int, seed: int = 0):
    """Random element codes and scale codes near 1 on the GPU (NaN-free scales: finite timing data)."""
    import torch

    g = torch.Generator(device=DEV).manual_seed(seed)
    nb = K // plan.scale.blocks[0]
    one = int(np.flatnonzero(plan.scale.values == 1.0)[0])
    def codes(rows, n):
        return torch.randint(0, n, (rows, K), generator=g, device=DEV, dtype=torch.int32).to(torch.uint8)
    def scales(rows):
        return (one + torch.randint(-3, 4, (rows, nb), generator=g, device=DEV, dtype=torch.int32)).to(torch.uint8)
    return codes(M, plan.a.ncodes), scales(M), codes(N, plan.b.ncodes), scales(N)


def _time_ms(fn) -> float:
    if DEV != "cuda":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=3, rep=20))


def gpu_kind(res: dict, name: str, hw: str, kind: str, fmt: tuple, shape: int, tiles: list, cpu_rows: int,
             save) -> None:
    """Time one kind's kernel over ``tiles`` at shape^3; CPU model on the first ``cpu_rows`` rows, bit for bit."""

    from fp4lab.hwspec.mma import emulate_gemm
    from fp4lab.hwspec.mma_plan import lower_kind
    from fp4lab.hwspec.operands import decode_codes, operand_format
    from fp4lab.kernels.mma_emulate_launch import (
        emulated_matmul,
        launch,
        prepare_operands,
    )

    a_f, b_f, s_f = fmt
    plan = lower_kind(hw, kind, a_f, b_f, s_f)
    M = N = K = shape
    ca, sa, cb, sb = _gpu_operands(plan, M, N, K)
    ops = prepare_operands(ca, sa, cb, sb, plan, check=False)
    out: dict = {"kind": f"{hw} {kind} {a_f}x{b_f} {s_f}", "shape": [M, N, K], "tiles": []}
    res[name] = out
    best = None
    for tile in tiles:
        try:
            launch(ops, tile=tile)
            _sync()
            ms = _time_ms(lambda t=tile: launch(ops, tile=t))
            out["tiles"].append({"tile": tile, "ms": round(ms, 3), "products_per_s": M * N * K / ms * 1e3})
            if best is None or ms < best[1]:
                best = (tile, ms)
        except Exception as exc:  # noqa: BLE001 (report and go on)
            out["tiles"].append({"tile": tile, "error": f"{type(exc).__name__}: {exc}"[:1500]})
        print(name, out["tiles"][-1], flush=True)
        save()
    if best is None:
        return
    tile, ms = best
    out["best_tile"], out["kernel_ms"] = tile, round(ms, 3)
    out["emulated_matmul_ms"] = round(_time_ms(lambda: emulated_matmul(ca, sa, cb, sb, plan, check=False,
                                                                       tile=tile)), 3)
    d = launch(ops, tile=tile)
    r = cpu_rows
    tables = [decode_codes(np.arange(t.ncodes), operand_format(f)) for t, f in ((plan.a, a_f), (plan.b, b_f))]
    qa = types.SimpleNamespace(codes=ca[:r].cpu().numpy(), fmt=tables[0], tensor_scale=None,
                               scales=plan.scale.values[sa[:r].cpu().numpy().astype(np.int64)])
    qb = types.SimpleNamespace(codes=cb.cpu().numpy(), fmt=tables[1], tensor_scale=None,
                               scales=plan.scale.values[sb.cpu().numpy().astype(np.int64)])
    emulate_gemm(qa, qb, hw=hw, kind=kind, scale_format=s_f)  # numba compile / cache load
    t0 = time.perf_counter()
    want = emulate_gemm(qa, qb, hw=hw, kind=kind, scale_format=s_f)
    t_cpu = time.perf_counter() - t0
    cpu_rate = r * N * K / t_cpu
    gpu_rate = M * N * K / ms * 1e3
    out.update({"cpu_rows": r, "cpu_seconds": round(t_cpu, 2), "cpu_products_per_s": cpu_rate,
                "gpu_products_per_s": gpu_rate, "speedup_vs_cpu_model": round(gpu_rate / cpu_rate, 1),
                "cpu_rows_mismatches": int((d[:r].cpu().numpy().view(np.uint32) != want.view(np.uint32)).sum())})
    print(name, {k: v for k, v in out.items() if k != "tiles"}, flush=True)
    save()


def gpu_main(args) -> None:
    import numba
    import torch

    out_dir = Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "bench_mma_gpu.json"
    global DEV
    if args.smoke:
        DEV = "cpu"
    n4, n8, n2 = (64, 64, 64) if args.smoke else (4096, 8192, 2048)
    res: dict = {"device": torch.cuda.get_device_name() if DEV == "cuda" else "interpreter",
                 "date": time.strftime("%Y-%m-%d"),
                 "numba_threads": numba.get_num_threads(), "cpu_count": os.cpu_count()}

    def save() -> None:
        path.write_text(json.dumps(res, indent=1, default=str))

    nvfp4 = ("blackwell-sm100", "tcgen05.mxf4nvf4", ("e2m1", "e2m1", "ue4m3"))
    gpu_kind(res, "mxf4nvf4_4096", *nvfp4, n4, GST_TILES[:2] if args.smoke else GST_TILES, 32, save)
    best = res["mxf4nvf4_4096"].get("best_tile")
    if best is not None:
        gpu_kind(res, "mxf4nvf4_8192", *nvfp4, n8, [tuple(best)], 8, save)
    a = torch.randn(n8, n8, device=DEV).to(torch.bfloat16)
    b = torch.randn(n8, n8, device=DEV).to(torch.bfloat16)
    res["cublas_bf16_8192_ms"] = round(_time_ms(lambda: torch.mm(a, b)), 3)
    if "kernel_ms" in res.get("mxf4nvf4_8192", {}):
        res["mxf4nvf4_8192_over_cublas_bf16"] = round(res["mxf4nvf4_8192"]["kernel_ms"] / res["cublas_bf16_8192_ms"], 2)
    print("cuBLAS bf16 8192^3", res["cublas_bf16_8192_ms"], "ms", flush=True)
    save()
    gpu_kind(res, "mxf8f6f4_2048", "blackwell-sm100", "tcgen05.mxf8f6f4", ("e4m3", "e2m1", "ue8m0"), n2,
             FDPA_TILES, 64, save)
    gpu_kind(res, "cdna4_2048", "cdna4-mi350", "mfma_scale.f8f6f4", ("e4m3", "e5m2", "e8m0"), n2, FDPA_TILES[:2],
             32, save)
    save()
    print(json.dumps({k: v for k, v in res.items()}, default=str)[:4000])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--py-outputs", type=int, default=64, help="outputs computed by the pure-Python reference")
    ap.add_argument("--np-rows", type=int, default=32, help="rows computed by the numpy-vectorised model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--gpu", action="store_true", help="time the Triton MMA kernels instead (module docstring)")
    ap.add_argument("--smoke", action="store_true", help="--gpu's code paths on 64^3 in the CPU interpreter")
    args = ap.parse_args()
    if args.gpu:
        gpu_main(args)
        return

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
