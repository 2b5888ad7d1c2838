"""First-run cost of ``fp4lab compare``: the run right after install (empty numba cache) and the next one.

Each run is a fresh subprocess (``python -m fp4lab.cli compare``, README's first command without the install) with
``FP4LAB_CACHE_DIR`` set to a new empty directory that the runs share, so the first run compiles every kernel it
needs and the second loads them from that cache. Per run: wall time and the subprocess's user+sys CPU time (a
shared machine slows wall time, CPU time much less), plus the numba cache files the first run wrote (index files
= compiled functions, data files = compiled specializations). Target: first run under 10 s on 2
cores. The machine's load average before each run is recorded.

    python benchmarks/first_run.py [--repeat 1] [--threads N] [--out DIR]   # writes DIR/first_run.json

``--out`` defaults to ``$OUT``, else ``benchmarks/results``. ``--threads`` sets ``NUMBA_NUM_THREADS`` (default:
numba's own choice, all cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CMD = [sys.executable, "-m", "fp4lab.cli", "compare"]


def _run(env: dict[str, str]) -> dict[str, Any]:
    """Wall and CPU seconds of one ``fp4lab compare`` subprocess (its output is discarded)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    start = time.perf_counter()
    proc = subprocess.Popen(CMD, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"first_run: {' '.join(CMD)} failed (exit {proc.returncode}): {err.strip()[-500:]}")
    return {"wall_s": round(wall, 3), "user_s": round(usage.ru_utime, 3), "sys_s": round(usage.ru_stime, 3),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "load_avg_1min_before": load}


def _cache_files(root: Path) -> dict[str, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return {"index_files": sum(p.suffix == ".nbi" for p in files),
            "data_files": sum(p.suffix == ".nbc" for p in files)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="first/second pairs, each with its own empty cache")
    ap.add_argument("--threads", type=int, default=None, help="NUMBA_NUM_THREADS for the runs")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    import numba
    import numpy

    pairs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="fp4lab-first-run-") as tmp:  # mode 0700: passes jit.py's check
            env = {k: v for k, v in os.environ.items()
                   if k not in ("NUMBA_CACHE_DIR", "FP4LAB_NUMBA_CACHE", "NUMBA_DISABLE_JIT")}
            env["FP4LAB_CACHE_DIR"] = tmp
            if args.threads is not None:
                env["NUMBA_NUM_THREADS"] = str(args.threads)
            first = _run(env)
            cache = _cache_files(Path(tmp))
            second = _run(env)
        pairs.append({"first": first, "second": second, "cache": cache})
        print(f"first {first['wall_s']:.1f} s wall / {first['cpu_s']:.1f} s cpu; second {second['wall_s']:.1f} s "
              f"wall / {second['cpu_s']:.1f} s cpu; {cache['index_files']} functions, {cache['data_files']} "
              "specializations compiled", flush=True)
    doc = {
        "command": " ".join(CMD[1:]), "cpus": os.cpu_count(), "numba_num_threads": args.threads,
        "python": platform.python_version(), "numpy": numpy.__version__, "numba": numba.__version__,
        "machine": platform.machine(), "runs": pairs,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "first_run.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out / 'first_run.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
