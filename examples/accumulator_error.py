"""How much does a tensor core's accumulation add to the error of a 4-bit GEMM? For one operand format and one
reduction length K: quantize A [M, K] and B [N, K] along K (``fp4lab.quantize``), then compare, against Z, the
float64 product of the unquantized operands, and against Zq, the float64 product of the dequantized ones:

* ``fp32``: the dequantized operands multiplied in float32 (torch.matmul on the CPU), as the recipes' bf16 GEMMs
  of dequantized operands accumulate (exact products, fp32 sums; the order is the library's);
* ``F=35`` / ``F=24`` / ``F=16``: the block-scaled MMA kind of the proposal-ufp4 accelerator (Blackwell's
  tcgen05 GST-FDPA datapath; F = 35 is Blackwell's) and of the example hwspecs with fewer fraction bits in its
  fused sum, bit for bit (``fp4lab.emulate_gemm``, the CPU model).

Printed per (format, K): the quantization error ``||Zq - Z|| / ||Z||`` and, per accumulation, its own error
``||D - Zq|| / ||Zq||`` and the total ``||D - Z|| / ||Z||``. Operands are Gaussian, or Student-t with 3 degrees of
freedom (heavy tails: wider exponent spread within a block).

    python examples/accumulator_error.py                          # K = 256, 4096, 16384; about a minute
    python examples/accumulator_error.py --k 1024 --rows 64 --dist t3
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

import fp4lab

HWSPEC = Path(__file__).resolve().parent / "hwspec"
KINDS = {"nvfp4": "bsmma.e2m1", "ufp4-e4m3": "bsmma.e1m2"}  # operand format -> kind of the proposal datapath
SPECS = {"F=35": "proposal-ufp4", "F=24": str(HWSPEC / "proposal-ufp4-f24.toml"),
         "F=16": str(HWSPEC / "proposal-ufp4-f16.toml")}


def operands(rows: int, k: int, dist: str, rng: np.random.Generator) -> np.ndarray:
    if dist == "t3":
        return rng.standard_t(3, (rows, k)).astype(np.float32)
    return rng.standard_normal((rows, k)).astype(np.float32)


def rel(x: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--formats", nargs="+", default=list(KINDS), choices=list(KINDS))
    ap.add_argument("--k", type=int, nargs="+", default=[256, 4096, 16384], help="reduction lengths (x 64)")
    ap.add_argument("--rows", type=int, default=128, help="M = N")
    ap.add_argument("--dist", nargs="+", default=["normal", "t3"], choices=["normal", "t3"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print("format     dist    K      quant  " + "  ".join(f"{n:>14}" for n in ["fp32", *SPECS]))
    print(f"{'':33}" + "  ".join(f"{'own / total':>14}" for _ in range(len(SPECS) + 1)))
    for fmt in args.formats:
        for dist in args.dist:
            for k in args.k:
                rng = np.random.default_rng(args.seed)
                a, b = operands(args.rows, k, dist, rng), operands(args.rows, k, dist, rng)
                z = a.astype(np.float64) @ b.astype(np.float64).T
                qa, qb = fp4lab.quantize(a, fmt), fp4lab.quantize(b, fmt)
                da, db = fp4lab.dequantize(qa), fp4lab.dequantize(qb)
                zq = da.astype(np.float64) @ db.astype(np.float64).T
                outs = {"fp32": torch.from_numpy(da) @ torch.from_numpy(db).T}
                for name, spec in SPECS.items():
                    outs[name] = fp4lab.emulate_gemm(qa, qb, spec, KINDS[fmt])
                cells = [f"{rel(np.asarray(d, np.float64), zq):.1e} / {rel(np.asarray(d, np.float64), z):.4f}"
                         for d in outs.values()]
                print(f"{fmt:10} {dist:6} {k:6} {rel(zq, z):.4f}  " + "  ".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    main()
