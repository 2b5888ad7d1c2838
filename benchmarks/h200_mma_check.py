"""GPU check of fp4lab's Triton MMA kernels (fp4lab/kernels/mma_emulate.py) against the CPU model, bit for bit:
at least 1e8 outputs over every block-scaled kind of the shipped specs, in one call of a few minutes.

    OUT=/some/dir python benchmarks/h200_mma_check.py                  # >= 1e8 outputs, stops adding at --budget s
    OUT=/some/dir python benchmarks/h200_mma_check.py --outputs 2e6    # a quick look
    TRITON_INTERPRET=1 python benchmarks/h200_mma_check.py --outputs 2e4 --breadth 2e3 --side 64  # CPU smoke test

Results go to $OUT/h200_mma_check.json after every case (so a run cut short still reports what it compared) and
one line per case to stdout. Exit code 1 on any mismatch.

1. breadth: ``fp4lab hw verify --device cuda``'s cases through the public ``fp4lab.emulate_gemm`` on CUDA
   quantized operands: every (spec, kind, A format, B format, scale option) x the four input styles of
   fp4lab.hwspec.validation.mma_verify (random with NaN/Inf and cancelling C, maximum exponent spread, every scale code,
   precision probes), 64 x 64 outputs each, 4 chained instructions.
2. volume: ``emulated_matmul`` on 2048 x 2048 GEMMs of the main kinds (NVFP4 and MXFP4 on tcgen05, mxf8f6f4
   E4M3 x E2M1, CDNA4 E4M3 x E5M2, the proposal's E1M2 and INT4), random / spread / scales styles in turn, 2 to 8
   chained instructions, until ``--outputs`` outputs are compared or ``--budget`` seconds have passed.

The CPU model (numba, all cores: set NUMBA_NUM_THREADS to the machine's) is the slow side: about 1e9 GST products
per second on 16 cores, 5e9 for ST-FDPA, 5e8 for TR-FDPA (measured 1.1e8 / 6.7e8 / 6.4e7 on 2 shared cores).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fp4lab.cli.hw import verify_kernels
from fp4lab.hwspec.mma_plan import lower_kind
from fp4lab.hwspec.validation.mma_verify import VerifyCase, make_inputs, reference
from fp4lab.kernels.mma_emulate_launch import emulated_matmul

VOLUME = [  # (spec, kind, A, B, scale, block)
    ("blackwell-sm100", "tcgen05.mxf4nvf4", "e2m1", "e2m1", "ue4m3", 16),
    ("blackwell-sm100", "tcgen05.mxf4", "e2m1", "e2m1", "ue8m0", 32),
    ("blackwell-sm100", "tcgen05.mxf8f6f4", "e4m3", "e2m1", "ue8m0", 32),
    ("cdna4-mi350", "mfma_scale.f8f6f4", "e4m3", "e5m2", "e8m0", 32),
    ("proposal-ufp4", "bsmma.e1m2", "e1m2", "e1m2", "ue4m3", 16),
    ("proposal-ufp4", "bsmma.int4", "int4", "int4", "ue8m0", 32),
    ("blackwell-sm100", "tcgen05.mxf4nvf4", "e2m1", "e2m1", "ue8m0", 16),
]


def _u8(x: np.ndarray, dev: str) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x).astype(np.uint8)).to(dev)


DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: the interpreter (TRITON_INTERPRET=1), a smoke test


def _sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def volume_case(combo: tuple, style: str, side: int, instructions: int, seed: int) -> dict[str, Any]:
    hw, kind, a, b, s, blk = combo
    plan = lower_kind(hw, kind, a, b, s)
    case = VerifyCase(hw, kind, a, b, s, blk, style, side, side, instructions * plan.k_multiple, seed)
    t0 = time.perf_counter()
    inp = make_inputs(case)
    t1 = time.perf_counter()
    want = reference(case, inp)
    t2 = time.perf_counter()
    got = emulated_matmul(_u8(inp["a"], DEV), _u8(inp["sa"], DEV), _u8(inp["b"], DEV), _u8(inp["sb"], DEV), plan,
                          torch.from_numpy(inp["c"]).to(DEV))
    _sync()
    t3 = time.perf_counter()
    bad = got.cpu().numpy().view(np.uint32) != want
    res = {"case": case.label(), "K": case.K, "outputs": int(want.size), "mismatches": int(bad.sum()),
           "finite": int(np.isfinite(want.view(np.float32)).sum()), "inputs_s": round(t1 - t0, 2),
           "cpu_model_s": round(t2 - t1, 2), "gpu_s": round(t3 - t2, 3)}
    if bad.any():
        i, j = np.argwhere(bad)[0]
        res["first"] = {"row": int(i), "col": int(j), "got": f"{got.cpu().numpy().view(np.uint32)[i, j]:#010x}",
                        "want": f"{want[i, j]:#010x}"}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outputs", type=float, default=1.05e8, help="outputs to compare in all")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds after which no new case starts")
    ap.add_argument("--breadth", type=float, default=2e6, help="outputs of the breadth phase")
    ap.add_argument("--side", type=int, default=2048, help="volume phase: M = N")
    args = ap.parse_args()
    out_dir = Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "h200_mma_check.json"
    import numba

    report: dict[str, Any] = {"device": torch.cuda.get_device_name() if DEV == "cuda" else "interpreter",
                               "numba_threads": numba.get_num_threads(),
                              "cpu_count": os.cpu_count(), "breadth": None, "volume": [], "errors": []}
    t_start = time.perf_counter()

    def save() -> None:
        v = report["volume"]
        b = report["breadth"] or []
        report["outputs"] = sum(r["outputs"] for r in v) + sum(r["outputs"] for r in b)
        report["mismatches"] = sum(r["mismatches"] for r in v) + sum(r["mismatches"] for r in b)
        report["seconds"] = round(time.perf_counter() - t_start, 1)
        path.write_text(json.dumps(report, indent=1))

    try:
        report["breadth"] = verify_kernels("cuda" if DEV == "cuda" else "interpreter", None, args.breadth, seed=1)
        for r in report["breadth"]:
            print(f"breadth {r['hw']:<16} {r['kind']:<20} {r['outputs'] - r['mismatches']}/{r['outputs']} "
                  f"bit-exact ({r['cases']} cases)", flush=True)
    except Exception:  # noqa: BLE001 (keep going: the volume phase is independent)
        report["errors"].append({"phase": "breadth", "error": traceback.format_exc()[-3000:]})
        print(report["errors"][-1]["error"], flush=True)
    save()
    styles = ("random", "spread", "scales")
    i = 0
    while report.get("outputs", 0) < args.outputs and time.perf_counter() - t_start < args.budget:
        combo = VOLUME[i % len(VOLUME)]
        style = styles[(i // len(VOLUME)) % len(styles)]
        try:
            r = volume_case(combo, style, args.side, (2, 4, 8)[i % 3], seed=1000 + i)
            report["volume"].append(r)
            print(f"volume {r['case']:<60} K={r['K']:<4} {r['outputs'] - r['mismatches']}/{r['outputs']} bit-exact "
                  f"(cpu {r['cpu_model_s']} s, gpu {r['gpu_s']} s)", flush=True)
        except Exception:  # noqa: BLE001 (report the case and go on)
            report["errors"].append({"phase": f"volume {combo} {style}", "error": traceback.format_exc()[-3000:]})
            print(report["errors"][-1]["error"], flush=True)
            if len(report["errors"]) > 5:
                break
        i += 1
        save()
    save()
    print(f"total {report['outputs']} outputs, {report['mismatches']} mismatches, {report['seconds']} s; "
          f"{len(report['errors'])} errors -> {path}", flush=True)
    return 1 if report["mismatches"] or report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
