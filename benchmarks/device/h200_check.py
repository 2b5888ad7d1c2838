"""GPU correctness checks beyond ``fp4lab verify`` (needs CUDA): RHT, bf16 dequantize, GEMM exact/fast.

    PYTHONPATH=. python benchmarks/device/h200_check.py --json out.json

* ``rht_cuda`` against ``rht_reference`` bit for bit (sizes 16..256, forward/inverse, both axes);
* bf16 dequantize against the reference rounded to bf16 by torch (bit for bit, NaN excluded);
* GEMM exact, per-block path (ufp4, int4-b16-fp32) against ``gemm_reference`` bit for bit;
* GEMM exact, fold path (mxfp4, nvfp4): bit for bit against float64 on exact-sum inputs (scales 2^-1..2^1,
  K = 256), and the relative error against float64 on random data; ``fast`` likewise.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

import fp4lab
from fp4lab import QuantizeOptions
from fp4lab.kernels.api import dequantize_cuda, gemm, quantize_cuda, rht_cuda
from fp4lab.numerics.gemm_reference import gemm_reference
from fp4lab.numerics.ref_quantize import dequantize_reference, quantize_reference
from fp4lab.numerics.rht import rht_reference


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(np.ascontiguousarray(a).view(np.uint32),
                                                  np.ascontiguousarray(b).view(np.uint32))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    res: dict = {"rht": {}, "dequantize_bf16": {}, "gemm": {}}
    x = (rng.standard_normal((512, 1024)) * np.exp2(rng.uniform(-10, 10, (512, 1)))).astype(np.float32)
    for n in (16, 32, 64, 128, 256):
        for inv in (False, True):
            for ax in (-1, 0):
                got = rht_cuda(torch.from_numpy(x).cuda(), n, 3, ax, inv).cpu().numpy()
                res["rht"][f"{n}/{'inv' if inv else 'fwd'}/axis{ax}"] = same_bits(got, rht_reference(x, n, 3, ax, inv))
    for name in fp4lab.list_formats():
        fmt = fp4lab.get_format(name)
        for rht in (None, 16):
            q = quantize_cuda(torch.from_numpy(x).cuda(), fmt, QuantizeOptions(rht=rht, rht_seed=1))
            ref = quantize_reference(x, fmt, QuantizeOptions(rht=rht, rht_seed=1))
            got = dequantize_cuda(q, rotated=True, out_dtype=torch.bfloat16).view(torch.int16).cpu().numpy()
            want = torch.from_numpy(dequantize_reference(ref, rotated=True)).to(torch.bfloat16)
            wn = want.float().isnan().numpy()
            res["dequantize_bf16"][f"{name}/rht{rht or 0}"] = bool(
                np.array_equal(got[~wn], want.view(torch.int16).numpy()[~wn]))
    for name in ("ufp4", "int4-b16-fp32", "e2m1-b16-fp32", "mxfp4", "nvfp4", "int4-b32-e8m0"):
        fmt = fp4lab.get_format(name)
        a = rng.standard_normal((384, 512)).astype(np.float32)
        b = rng.standard_normal((640, 512)).astype(np.float32)
        qa, qb = quantize_cuda(torch.from_numpy(a).cuda(), fmt), quantize_cuda(torch.from_numpy(b).cuda(), fmt)
        ra, rb = quantize_reference(a, fmt), quantize_reference(b, fmt)
        exact = gemm(qa, qb, "exact").cpu().numpy()
        fast = gemm(qa, qb, "fast").cpu().numpy()
        f64 = dequantize_reference(ra).astype(np.float64) @ dequantize_reference(rb).astype(np.float64).T
        entry = {"exact_vs_gemm_reference_bits": same_bits(exact, gemm_reference(ra, rb)),
                 "exact_rel_err_vs_f64": float(np.abs(exact - f64).max() / np.abs(f64).max()),
                 "fast_rel_err_vs_f64": float(np.abs(fast - f64).max() / np.abs(f64).max())}
        res["gemm"][name] = entry
        if fmt.scale.kind != "pow2":
            continue
        # exact-sum inputs (pow2-scale formats reproduce them): codes with scales 2^-1..2^1 over K = 256 keep
        # every partial sum exact in fp32, whatever the summation order
        ea = (rng.integers(-6, 7, (256, 256)) * 0.5 * np.exp2(rng.integers(-1, 2, (256, 1)))).astype(np.float32)
        eb = (rng.integers(-6, 7, (256, 256)) * 0.5 * np.exp2(rng.integers(-1, 2, (256, 1)))).astype(np.float32)
        qa, qb = quantize_cuda(torch.from_numpy(ea).cuda(), fmt), quantize_cuda(torch.from_numpy(eb).cuda(), fmt)
        ra, rb = quantize_reference(ea, fmt), quantize_reference(eb, fmt)
        f64 = dequantize_reference(ra).astype(np.float64) @ dequantize_reference(rb).astype(np.float64).T
        entry["exact_sum_inputs_bits_equal_f64"] = same_bits(gemm(qa, qb, "exact").cpu().numpy(),
                                                             f64.astype(np.float32))
        entry["exact_sum_inputs_fast_bits_equal_f64"] = same_bits(gemm(qa, qb, "fast").cpu().numpy(),
                                                                  f64.astype(np.float32))
        res["gemm"][name] = entry
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
