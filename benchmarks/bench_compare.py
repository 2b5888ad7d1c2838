"""Wall time of ``fp4lab compare`` with no arguments (the default formats x distributions x RHT sizes).

Runs the command in fresh subprocesses (so import and JIT-cache loading are counted), ``--repeat`` times, and prints
the median and every run in seconds. Target: under 20 s on 2 CPU cores.

    python benchmarks/bench_compare.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "fp4lab.cli", "compare", "--json"]
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    print(f"fp4lab compare (defaults), {os.cpu_count()} CPUs: median {statistics.median(times):.2f} s; "
          f"runs {', '.join(f'{t:.2f}' for t in times)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
