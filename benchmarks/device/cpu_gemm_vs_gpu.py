"""Does ``fp4lab.gemm`` on CPU operands (the emulated kernel, fp4lab/cpu_gemm.py) give the GPU GEMM kernel's bits?

On a Hopper GPU, from the repository root (numba, torch, triton, pydantic needed there):

    PYTHONPATH=. python benchmarks/device/cpu_gemm_vs_gpu.py --out OUTDIR

For each case, both operands are quantized on the GPU, ``fp4lab.gemm(qa, qb, "exact")`` runs the Triton kernel,
and the same QuantizedTensors moved to the host run the CPU path; the outputs are compared as uint32 bit patterns
(NaN included: the CPU path writes 0x7FFFFFFF, the GPU's canonical NaN). Writes OUTDIR/cpu_gemm_vs_gpu.json
(``$OUT`` when --out is not given). ``--interpret`` is a CPU smoke test of the script under TRITON_INTERPRET=1
(the interpreter's fp32 dot is not the tensor core's and its NaNs are numpy's 0x7FC00000: mismatches are
expected there).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

if "--interpret" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402

# (format, M, N, K, input kind): K not a multiple of the kernel's 64-wide K tile, large and tiny blocks, NaN inputs
CASES = [
    ("mxfp4", 256, 192, 512, "normal"), ("mxfp4", 128, 128, 96, "wide"), ("mxfp4-rceil", 128, 64, 256, "wide"),
    ("nvfp4", 256, 256, 512, "normal"), ("nvfp4", 96, 80, 48, "wide"), ("nvfp4-torchao", 128, 128, 256, "nan"),
    ("nvfp4-2d", 128, 64, 256, "normal"), ("ufp4-e4m3", 128, 128, 256, "normal"),
    ("int4-b32-e8m0", 64, 64, 256, "wide"),
    ("e2m1", 64, 64, 128, "normal"), ("ufp4", 256, 128, 512, "normal"), ("e2m1-b16-fp32", 128, 128, 256, "wide"),
    ("int4-b16-fp32", 128, 64, 256, "normal"),
]


def make(kind: str, shape: tuple[int, int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    if kind in ("wide", "nan"):  # per-row magnitudes 2^-30 .. 2^30: scales far apart, partial sums that truncate
        x *= np.float32(2.0) ** rng.integers(-30, 30, (shape[0], 1)).astype(np.float32)
    if kind == "nan":
        x[rng.integers(0, shape[0], 3), rng.integers(0, shape[1], 3)] = np.nan
    return x


def host(qt):
    def cpu(a):
        return a.cpu() if hasattr(a, "cpu") else a

    return dataclasses.replace(qt, codes=cpu(qt.codes), scale_codes=cpu(qt.scale_codes), scales=cpu(qt.scales),
                               tensor_scale=cpu(qt.tensor_scale))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "cpu_gemm_vs_gpu_out"))
    ap.add_argument("--interpret", action="store_true")
    args = ap.parse_args()
    import torch

    import fp4lab

    dev = "cpu" if args.interpret else "cuda"
    rows = []
    for i, (name, m, n, k, kind) in enumerate(CASES):
        if args.interpret:  # the interpreter is slow: a smaller output, the same K
            m, n = min(m, 32), min(n, 32)
        a = torch.from_numpy(make(kind, (m, k), 2 * i)).to(dev)
        b = torch.from_numpy(make(kind, (n, k), 2 * i + 1)).to(dev)
        t0 = time.perf_counter()
        if args.interpret:  # the kernels on CPU tensors: fp4lab.quantize/gemm would route them to the emulator
            from fp4lab.kernels.api import gemm as gemm_triton
            from fp4lab.kernels.api import quantize_cuda

            qa, qb = quantize_cuda(a, name), quantize_cuda(b, name)
            gpu = gemm_triton(qa, qb, "exact").numpy()
        else:
            qa, qb = fp4lab.quantize(a, name), fp4lab.quantize(b, name)
            gpu = fp4lab.gemm(qa, qb, "exact").cpu().numpy()
        t1 = time.perf_counter()
        cpu = fp4lab.gemm(host(qa), host(qb), "exact").numpy()
        t2 = time.perf_counter()
        same = gpu.view(np.uint32) == cpu.view(np.uint32)
        bad = np.argwhere(~same)[:5].tolist()
        rows.append({"format": name, "M": m, "N": n, "K": k, "inputs": kind, "outputs": int(same.size),
                     "bit_exact": int(same.sum()), "nan_outputs": int(np.isnan(gpu).sum()),
                     "mismatches_both_nan": int((~same & np.isnan(gpu) & np.isnan(cpu)).sum()),
                     "first_mismatches": [{"at": p, "gpu": f"{gpu.view(np.uint32)[tuple(p)]:#010x}",
                                           "cpu": f"{cpu.view(np.uint32)[tuple(p)]:#010x}"} for p in bad],
                     "gpu_s": round(t1 - t0, 4), "cpu_s": round(t2 - t1, 4)})
        print(f"{name:16s} {m}x{n}x{k} {kind:6s} {rows[-1]['bit_exact']}/{same.size}", flush=True)
    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else "interpreter",
            "numpy": np.__version__}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "cpu_gemm_vs_gpu.json"), "w") as f:
        json.dump({"info": info, "cases": rows}, f, indent=1)
    total = sum(r["outputs"] for r in rows)
    print(f"bit-exact {sum(r['bit_exact'] for r in rows)}/{total}")


if __name__ == "__main__":
    main()
