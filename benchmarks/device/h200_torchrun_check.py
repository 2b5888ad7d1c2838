"""One-GPU torchrun runs of the study against the plain run; writes JSON to ``--out``/$OUT.

    PYTHONPATH=. python3 benchmarks/device/h200_torchrun_check.py [--size small] [--recipe ufp4] [--steps 60] \
        [--deterministic]

Runs, each in its own process on the one GPU, with one configuration (``--size``, ``--recipe``, ``--steps``,
``--batch``; evaluation every ``--eval-every`` steps; no diagnostics; the default corpus):

* ``plain``, ``plain2``: ``examples/pretrain.py train`` twice (is a plain run repeatable bit for bit?);
* ``ddp``: ``torchrun --standalone --nproc_per_node 1 examples/pretrain.py train ... --ddp``;
* ``fsdp-fp32``: ``... --fsdp --fsdp-params fp32`` (FSDP2 with fp32 parameters: the plain run's numerics);
* ``fsdp-bf16``: ``... --fsdp`` (bf16 parameters, fp32 reduction: expected to differ, by the weights' bf16 rounding);
* ``ddp-resume``, ``fsdp-resume``: under torchrun, ``train`` stopped at step ``steps // 2`` (checkpoint) and
  resumed in a new process.

Each run is compared with ``plain``: logged rows (step, tokens, train and held-out loss, lr) exactly, the final
checkpoint's weights and Adam moments bit for bit, and the largest differences. The JSON also holds each run's
rows, tokens/s and wall time, the torch version and the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("step", "tokens", "train_loss", "heldout_loss", "lr")
TINY = {"d_model": 64, "layers": 2, "heads": 2, "ffn": 128, "seq_len": 64}  # --tiny: a CPU smoke test


def _fields(a: argparse.Namespace) -> dict[str, Any]:
    f = {"size": a.size, "recipe": a.recipe, "steps": a.steps, "batch": a.batch, "eval_every": a.eval_every,
         "eval_tokens": a.eval_tokens, "ckpt_every": 0, "diag_every": 0, "seed": 0}
    return {**f, **TINY} if a.tiny else f


def _cli(a: argparse.Namespace, out: Path, extra: list[str]) -> list[str]:
    args = [str(ROOT / "examples" / "pretrain.py"), "train", "--out", str(out), "--no-progress"]
    for k, v in _fields(a).items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return args + (["--deterministic"] if a.deterministic else []) + extra


def _torchrun(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", *args]


def _run(name: str, cmd: list[str], log: dict[str, Any]) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    log[name] = {"cmd": " ".join(cmd[1:]), "rc": p.returncode, "wall_s": round(time.monotonic() - t0, 2),
                 "tail": (p.stdout + p.stderr)[-1500:]}
    print(f"{name}: rc {p.returncode} in {log[name]['wall_s']} s", flush=True)


def _compare(run: Path, ref: Path) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    rows = json.loads((run / "metrics.json").read_text())["rows"]
    base = json.loads((ref / "metrics.json").read_text())["rows"]
    out["rows_equal"] = [{k: r[k] for k in KEYS} for r in rows] == [{k: r[k] for k in KEYS} for r in base]
    out["max_loss_diff"] = max((abs(r[k] - b[k]) for r, b in zip(rows, base) for k in ("train_loss", "heldout_loss")),
                               default=None)
    out["tokens_per_s"] = [r["tokens_per_s"] for r in rows]
    a = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
    b = torch.load(ref / "checkpoint.pt", map_location="cpu", weights_only=True)
    out["same_keys"] = set(a["model"]) == set(b["model"])
    out["weights_equal"] = out["same_keys"] and all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])
    out["max_weight_diff"] = max(float((a["model"][k].float() - b["model"][k].float()).abs().max())
                                 for k in b["model"]) if out["same_keys"] else None
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    out["adam_equal"] = set(sa) == set(sb) and all(
        torch.equal(sa[i][k].cpu(), sb[i][k].cpu()) for i in sb for k in sb[i])
    out["layer_steps_equal"] = a["layer_steps"] == b["layer_steps"]
    return out


def worker_resume(a: argparse.Namespace) -> None:
    """Under torchrun: the run stopped at steps // 2, then resumed (a second ``train`` call in this process)."""
    from fp4lab.study.distributed import shutdown
    from fp4lab.study.train import TrainConfig, train

    fields = _fields(a)
    model = {k: fields.pop(k) for k in TINY if k in fields}
    if model:
        fields["model"] = model
    cfg = TrainConfig.from_dict({"out": a.worker_out, "parallel": a.worker, "fsdp_params": "fp32", "progress": False,
                                 "deterministic": a.deterministic, **fields})
    first = train(cfg, stop_at=a.steps // 2)
    second = train(cfg)
    shutdown()
    print(f"{first.status} at {first.step}, then {second.status} at {second.step}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "h200_torchrun_out"))
    ap.add_argument("--size", default="small")
    ap.add_argument("--recipe", default="ufp4")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--eval-tokens", type=int, default=65536)
    ap.add_argument("--tiny", action="store_true", help="a tiny model (a CPU smoke test of this script)")
    ap.add_argument("--deterministic", action="store_true", help="every run with torch's deterministic algorithms")
    ap.add_argument("--runs", default="/tmp/h200_torchrun_runs", help="run folders (not under --out: checkpoints); "
                    "emptied first")
    ap.add_argument("--worker", choices=("ddp", "fsdp"), help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker_resume(a)
        return
    import torch

    runs = Path(a.runs)
    shutil.rmtree(runs, ignore_errors=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"config": {**_fields(a), "deterministic": a.deterministic}, "torch": torch.__version__,
                              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                              "runs": {}, "against_plain": {}, "resumed_against_uninterrupted": {}}
    log = result["runs"]
    me = [str(Path(__file__).resolve()), "--size", a.size, "--recipe", a.recipe, "--steps", str(a.steps), "--batch",
          str(a.batch), "--eval-every", str(a.eval_every), "--eval-tokens", str(a.eval_tokens)] + \
        (["--tiny"] if a.tiny else []) + (["--deterministic"] if a.deterministic else [])
    plan = [("plain", [sys.executable, *_cli(a, runs / "plain", [])], None),
            ("plain2", [sys.executable, *_cli(a, runs / "plain2", [])], None),
            ("ddp", _torchrun(_cli(a, runs / "ddp", ["--ddp"])), None),
            ("fsdp-fp32", _torchrun(_cli(a, runs / "fsdp-fp32", ["--fsdp", "--fsdp-params", "fp32"])), None),
            ("fsdp-bf16", _torchrun(_cli(a, runs / "fsdp-bf16", ["--fsdp"])), None)]
    plan += [(f"{m}-resume", _torchrun([*me, "--worker", m, "--worker-out", str(runs / f"{m}-resume")]), ref)
             for m, ref in (("ddp", "ddp"), ("fsdp", "fsdp-fp32"))]
    for name, cmd, ref in plan:  # the JSON is rewritten after every run: a bounded slot keeps what finished
        _run(name, cmd, log)
        if name != "plain" and log[name]["rc"] == 0 and log["plain"]["rc"] == 0:
            c = result["against_plain"][name] = _compare(runs / name, runs / "plain")
            print(f"{name:11s} rows equal {c['rows_equal']}, weights equal {c['weights_equal']}, Adam equal "
                  f"{c['adam_equal']}, max loss diff {c['max_loss_diff']}, max weight diff {c['max_weight_diff']}",
                  flush=True)
        if ref is not None and log[name]["rc"] == 0 and log[ref]["rc"] == 0:
            result["resumed_against_uninterrupted"][name] = _compare(runs / name, runs / ref)
        (out / "h200_torchrun_check.json").write_text(json.dumps(result, indent=1))

if __name__ == "__main__":
    main()
