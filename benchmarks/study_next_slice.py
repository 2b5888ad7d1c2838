"""The next slice of a study plan: the seeds whose missing runs fill one slice, and one process per run.

    PYTHONPATH=<study code> python benchmarks/study_next_slice.py PLAN [--done-from DIR ...] [--max-runs 13]
        [--sizes s2m] [--recipes a,b]

prints ``SEEDS PROCS`` (for example ``0,5 19``), or nothing when every run of the plan is done.

Why: a slice that starts 13 runs in plan order as 13 processes starts each process's next run when its first one
ends, and the slice's time limit cuts those second runs off: their work is lost (the run folders do not outlive
the slice). Instead, a slice takes whole seeds: the seeds in the order of their first missing run in the plan, each
added while the slice's missing runs stay at most ``max_runs``, so every seed's runs (its paired cells) land in one
slice. ``pretrain.py study --seeds SEEDS --procs PROCS`` then gives every selected run its own process
(``PROCS`` counts the selected runs, the finished ones too: their processes find them packed and end at once), and
the slice ends when its last run does.

Reads the plan and the packs with the study's own code (``PYTHONPATH``), so the code version that ``done_runs``
checks is the study's. The corpus fingerprint is not checked here; the slice itself checks it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from fp4lab.errors import Fp4labError
from fp4lab.study import driver, pack


def next_slice(plan: str, done_from: list[str], max_runs: int, sizes: list[str] | None = None,
               recipes: list[str] | None = None) -> tuple[list[int], int] | None:
    """(seeds, processes) of the next slice, or None when nothing is missing (module docstring)."""
    with tempfile.TemporaryDirectory() as out:  # run folders are never made: only the plan's labels are read
        runs = driver.select(driver.load_plan(plan, out=out), sizes=sizes, recipes=recipes)
    records = [r for folder in done_from for r in pack.load_packs(folder)]
    done = pack.done_runs(records, runs)
    missing: dict[int, int] = {}
    for r in runs:
        if r.label not in done:
            missing[r.seed] = missing.get(r.seed, 0) + 1
    if not missing:
        return None
    seeds: list[int] = []
    total = 0
    for seed, n in missing.items():  # dicts keep insertion order: the order of each seed's first missing run
        if not seeds and n > max_runs:
            raise Fp4labError(f"study_next_slice: seed {seed} has {n} missing runs, more than --max-runs "
                              f"{max_runs}; raise --max-runs or split the plan")
        if total + n <= max_runs:
            seeds.append(seed)
            total += n
    procs = len(driver.select(runs, seeds=seeds))
    return seeds, procs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("plan")
    p.add_argument("--done-from", action="append", default=[], metavar="DIR")
    p.add_argument("--max-runs", type=int, default=13, help="most missing runs in one slice (default 13)")
    p.add_argument("--sizes", type=lambda s: s.split(","), help="only these sizes (comma-separated)")
    p.add_argument("--recipes", type=lambda s: s.split(","), help="only these recipes (comma-separated)")
    args, _ = p.parse_known_args(argv)  # the rest of the slice's STUDY_ARGS is for `study` alone
    if args.max_runs < 1:
        p.error("--max-runs must be at least 1")
    try:
        found = next_slice(args.plan, args.done_from, args.max_runs, args.sizes, args.recipes)
    except Fp4labError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if found is not None:
        seeds, procs = found
        print(",".join(map(str, seeds)), procs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
