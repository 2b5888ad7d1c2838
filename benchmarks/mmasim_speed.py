"""fp4lab vs MMA-Sim 2.1.1 on the CPU: the same random operand bit patterns through both models (one thread each:
NUMBA_NUM_THREADS=1, torch.set_num_threads(1)), best of ``--repeats`` timings per kind, after a warm-up run (numba
compile / cache load). Also asserts the two agree bit for bit on what was timed. Writes JSON to $OUT (default
benchmarks/out)/mmasim_speed.json.

    NUMBA_NUM_THREADS=1 python benchmarks/mmasim_speed.py [--n 64] [--instr 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

KINDS = [  # (spec, kind, A format, B format, scale, block): one per model family
    ("hopper-sm90", "wgmma.bf16", "bf16", "bf16", None, None),
    ("hopper-sm90", "wgmma.f16.f16acc", "f16", "f16", None, None),
    ("hopper-sm90", "wgmma.e4m3", "e4m3", "e5m2", None, None),
    ("ampere-sm80", "mma.sync.tf32", "tf32", "tf32", None, None),
    ("blackwell-sm100", "tcgen05.f8f6f4", "e2m1", "e3m2", None, None),
    ("blackwell-sm100", "tcgen05.mxf8f6f4", "e4m3", "e2m1", "ue8m0", 32),
    ("blackwell-sm100", "tcgen05.mxf4nvf4", "e2m1", "e2m1", "ue4m3", 16),
    ("cdna3-mi300", "mfma.bf16", "bf16", "bf16", None, None),
    ("cdna3-mi300", "mfma.fp8", "e4m3fnuz", "e4m3fnuz", None, None),
]


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64, help="M = N")
    ap.add_argument("--instr", type=int, default=4, help="chained instructions (K = instr * kind K)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from fp4lab.hwspec import get_hw
    from fp4lab.hwspec.mma import Prepared, finish
    from fp4lab.hwspec.validation.mmasim_oracle import _mmasim_chain, c_array, mmasim_op, oracle_cases
    from fp4lab.hwspec.validation.oracle_inputs import gemm_inputs

    rows = []
    for hw, kind, fa, fb, sf, blk in KINDS:
        case = next(c for c in oracle_cases(hw) if (c.kind, c.a, c.b, c.scale, c.block) == (kind, fa, fb, sf, blk))
        k = get_hw(hw).kind(kind)
        K = args.instr * int(k.k)
        inp = gemm_inputs(np.random.default_rng(0), k, fa, fb, sf, blk, args.n, args.n, K)
        op = mmasim_op(case)
        a = inp["a"].astype(np.uint32).view(np.float32) if fa == "tf32" else inp["a"]
        b = inp["b"].astype(np.uint32).view(np.float32) if fb == "tf32" else inp["b"]
        fmt = (None if fa == "tf32" else fa, None if fb == "tf32" else fb)

        def ours():
            with np.errstate(all="ignore"):
                p = Prepared(k, a, b, inp["sa"], inp["sb"], fmt[0], fmt[1], sf)
                return finish(p.run(c_array(inp["c"], k.c_format).astype(np.float64)), k).view(np.uint32)

        def theirs():
            return _mmasim_chain(case, k, op, inp["a"], inp["b"], inp["c"], inp["sa"], inp["sb"], dots=False)

        mine, ref = ours(), theirs()  # warm-up and the bit-exact check
        assert np.array_equal(mine, ref), f"{case.label}: fp4lab and MMA-Sim disagree"
        t_ours, t_theirs = _best(ours, args.repeats), _best(theirs, args.repeats)
        rows.append({"kind": case.label, "M": args.n, "N": args.n, "K": K, "outputs": int(mine.size),
                     "fp4lab_s": t_ours, "mmasim_s": t_theirs, "speedup": t_theirs / t_ours})
        print(f"{case.label:50s} K={K:4d} fp4lab {t_ours * 1e3:8.2f} ms  mmasim {t_theirs * 1e3:8.2f} ms  "
              f"x{t_theirs / t_ours:6.1f}", flush=True)
    ratios = np.array([r["speedup"] for r in rows])
    out = {"threads": 1, "n": args.n, "instr": args.instr, "rows": rows,
           "speedup_min": float(ratios.min()), "speedup_max": float(ratios.max()),
           "speedup_geomean": float(np.exp(np.log(ratios).mean()))}
    d = Path(os.environ.get("OUT", Path(__file__).parent / "out"))
    d.mkdir(parents=True, exist_ok=True)
    (d / "mmasim_speed.json").write_text(json.dumps(out, indent=1))
    print(f"speedup fp4lab over MMA-Sim: {out['speedup_min']:.1f}x .. {out['speedup_max']:.1f}x "
          f"(geomean {out['speedup_geomean']:.1f}x)")


if __name__ == "__main__":
    main()
