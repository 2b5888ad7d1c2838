"""H200 probe: Triton ``tl.dot`` K-loops on random bit patterns vs the hopper-sm90 model
(fp4lab.hwspec.validation.gpu_probe).

On a Hopper GPU, from the repository root (numba, torch, triton, pydantic needed there):

    PYTHONPATH=. python benchmarks/device/h200_mma_probe.py --out OUTDIR      # 1024 x 1024 outputs per config

Writes OUTDIR/h200_mma_probe.json (counts, first mismatching positions, PTX MMA instructions),
OUTDIR/h200_mma_probe_samples.npz (input corners, to check that inputs regenerate from the seed) and
OUTDIR/h200_mma_probe_d*.npz (every GPU output). ``--recheck DIR`` re-runs the comparison on a machine without a
GPU from a previous run's files (inputs regenerated from the seed). ``--interpret`` is a CPU smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if "--interpret" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402

from fp4lab.hwspec.validation import probe_inputs  # noqa: E402


def recheck(run_dir: str) -> list[dict]:
    """Compare a stored GPU run with the current emulator, off the GPU."""
    with open(os.path.join(run_dir, "h200_mma_probe.json")) as f:
        info = json.load(f)["info"]
    sp = os.path.join(run_dir, "h200_mma_probe_samples.npz")
    samples = np.load(sp) if os.path.exists(sp) else None
    gpu = {}
    for name in sorted(os.listdir(run_dir)):
        if name.startswith("h200_mma_probe_d") and name.endswith(".npz"):
            with np.load(os.path.join(run_dir, name)) as z:
                gpu.update({k: z[k] for k in z.files})
    rows = []
    for i, cfg in enumerate(probe_inputs.CONFIGS):
        label = cfg[0]
        if label not in gpu:
            continue
        ab, bb, cb = probe_inputs.make_inputs(cfg, info["n"], info["k"] * cfg[9], info["seed"] + i)
        same = None if samples is None or f"{label}_a" not in samples else bool(
            np.array_equal(samples[f"{label}_a"], ab[:64]) and np.array_equal(samples[f"{label}_b"], bb[:, :64])
            and np.array_equal(samples[f"{label}_c"], np.asarray(cb)[:64, :64]))
        want = probe_inputs.emulate_config(cfg, ab, bb, cb)
        finite = np.isfinite(gpu[label].view(np.float32))
        rows.append({"label": label, "inputs_regenerated": same, "outputs": int(want.size),
                     "matches": int((gpu[label] == want).sum()), "finite_outputs": int(finite.sum()),
                     "finite_matches": int(((gpu[label] == want) & finite).sum())})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--n", type=int, default=1024, help="M = N (multiple of 64); outputs per config = n*n")
    ap.add_argument("--k", type=int, default=128, help="K (configs named *_k8x use 8 K)")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--only", default=None, help="comma-separated config labels")
    ap.add_argument("--recheck", default=None, help="directory of a previous run to re-compare off the GPU")
    ap.add_argument("--interpret", action="store_true", help="smoke test under TRITON_INTERPRET=1 (CPU)")
    args = ap.parse_args()
    if args.recheck:
        recheck(args.recheck)
        return
    from fp4lab.hwspec.validation import gpu_probe

    gpu_probe.run_probe(n=args.n, k=args.k, seed=args.seed, only=args.only, out=args.out)


if __name__ == "__main__":
    main()
