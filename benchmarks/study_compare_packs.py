"""Compare the runs of two study packs that trained the same runs: are their logged losses equal bit for bit, and
how fast did each train?

    PYTHONPATH=. python benchmarks/study_compare_packs.py NEW OLD [--json FILE]

NEW and OLD are packs (a slice folder, or its ``runs.jsonl`` / ``runs.jsonl.gz``), for example a short probe slice
that the time limit cut off (its runs packed as ``partial``) and the finished slice that ran the same runs before.
Runs are matched by label, seed and repeat flag, and their rows by step. Per run it reports the rows compared, how
many differ in ``train_loss``, ``heldout_loss`` or ``tokens`` (as logged: the JSON floats, so equal means equal
bits), how large the differences are (``max_rel_diff``: the largest |new - old| / |old| of the two losses over the
common rows; ``last_rel_diff``: the training loss's at the last common row, which says whether they grow), and the
mean ``tokens_per_s`` of each over the common rows after the first (which holds compilation), with their ratio. The
exit status is 1 if any common row differs, so a changed setting (a scheduler, a daemon, more processes) that moves
a bit is caught, or if no row could be compared (runs that failed before logging); else 0. Which runs a study counts
is not decided here.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fp4lab.study import pack

COMPARED = ("train_loss", "heldout_loss", "tokens")
LOSSES = ("train_loss", "heldout_loss")


def _runs(root: str) -> dict[tuple[str, int, bool], dict[str, Any]]:
    return {(rec["label"], int(rec["seed"]), bool(rec["repeat"])): rec for _, rec in pack.load_packs(root)}


def _rel(new: dict[str, Any], old: dict[str, Any], column: str) -> float:
    """|new - old| / |old| of one column of two logged rows."""
    return abs(float(new[column]) - float(old[column])) / abs(float(old[column]))


def compare(new: str, old: str) -> list[dict[str, Any]]:
    """One row per run found in both packs (module docstring)."""
    a, b = _runs(new), _runs(old)
    out = []
    for key in sorted(set(a) & set(b)):
        ra = {int(r["step"]): r for r in a[key]["rows"]}
        rb = {int(r["step"]): r for r in b[key]["rows"]}
        steps = sorted(set(ra) & set(rb))
        differ = sum(any(ra[s][c] != rb[s][c] for c in COMPARED) for s in steps)
        rel = [_rel(ra[s], rb[s], c) for s in steps for c in LOSSES]
        speed = [(float(ra[s]["tokens_per_s"]), float(rb[s]["tokens_per_s"])) for s in steps[1:]]
        na = sum(x for x, _ in speed) / len(speed) if speed else None
        nb = sum(y for _, y in speed) / len(speed) if speed else None
        out.append({"label": key[0], "seed": key[1], "repeat": key[2], "rows": len(steps), "differ": differ,
                    "last_step": steps[-1] if steps else None, "max_rel_diff": max(rel) if rel else None,
                    "last_rel_diff": _rel(ra[steps[-1]], rb[steps[-1]], "train_loss") if steps else None,
                    "new_tokens_per_s": na, "old_tokens_per_s": nb, "ratio": na / nb if na and nb else None})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("new", help="pack of the new runs (folder or runs.jsonl[.gz])")
    ap.add_argument("old", help="pack of the same runs as trained before")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    rows = compare(args.new, args.old)
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        speed = "-" if r["ratio"] is None else f"{r['new_tokens_per_s']:.0f} vs {r['old_tokens_per_s']:.0f} tokens/s"
        size = "" if not r["differ"] else (f" (by up to {r['max_rel_diff']:.2e} relative, "
                                           f"{r['last_rel_diff']:.2e} at the last)")
        print(f"{r['label']} seed {r['seed']}{' (repeat)' if r['repeat'] else ''}: {r['rows']} rows to step "
              f"{r['last_step']}, {r['differ']} differ{size}; {speed} ({ratio})")
    new_total = sum(r["new_tokens_per_s"] or 0 for r in rows)
    old_total = sum(r["old_tokens_per_s"] or 0 for r in rows)
    differ = sum(r["differ"] for r in rows)
    compared = sum(r["rows"] for r in rows)
    print(f"{len(rows)} runs in both, {compared} rows compared; {differ} rows differ; together {new_total:.0f} vs "
          f"{old_total:.0f} tokens/s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"runs": rows, "differ": differ, "new_tokens_per_s": new_total,
                       "old_tokens_per_s": old_total}, f, indent=1)
    return 1 if differ or not compared else 0


if __name__ == "__main__":
    sys.exit(main())
