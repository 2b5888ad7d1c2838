"""After a study slice: keep its pack and regenerate the study's published summaries, from the repository root.

    python benchmarks/study_publish.py [SLICE ...] [--packs docs/results/study/packs]

Each SLICE (a slice's ``$OUT/slice`` folder as fetched from the GPU: ``runs.jsonl`` and ``slice.json``) is copied
to the next free ``PACKS/slice-NN`` and both files are gzip-compressed there (the packs are the study's data: a
pack is never overwritten, and slices holding a finished run that a pack or another of them holds finished are
refused before anything is copied). Then the two ``summarize`` calls of docs/study.md ("Tests, fixed in advance") run on
all packs: ``CONFIRMATORY`` into docs/results/study (the four tests, Holm's correction, plots) and ``SECONDARY``
into docs/results/study-secondary (controls, exploratory contrasts, the loss-drop timing), which keeps only the
files ``SECONDARY_KEEP`` names. Last it prints the tables of docs/results/study/README.md (each recipe's
gap to bf16 with its 95% CI, the paired contrasts with theirs, their medians and signed-rank p-values, and the
contrasts over each GPU's seeds), for the README's text, which stays hand-written.
The calls are defined here once; ``tests/test_study.py`` checks that the published summaries are theirs.
"""

from __future__ import annotations

import argparse
import gzip
import math
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from fp4lab.errors import Fp4labError, InputError
from fp4lab.study.pack import finished, load_packs
from fp4lab.study.stats import t_quantile
from fp4lab.study.summary import summarize

CONFIRMATORY: dict[str, Any] = dict(
    dest="docs/results/study", alpha=0.0125, planned_seeds=32,
    pairs=(("e1m2-rht-all", "e2m1-rht-wgrad"), ("e1m2-rht-all", "e1m2-rht-wgrad"),
           ("e2m1-rht-all", "e2m1-rht-wgrad"), ("e1m2-rht-all", "e1m2-rht-wgrad", "e2m1-rht-all", "e2m1-rht-wgrad")))
SECONDARY: dict[str, Any] = dict(
    dest="docs/results/study-secondary",
    pairs=(("mxfp4", "e2m1-rht-wgrad"), ("nvfp4", "e2m1-rht-wgrad"), ("ufp4-e4m3", "e1m2-rht-all"),
           ("e1m2-rht-wgrad", "e2m1-rht-wgrad"), ("ufp4-e4m3", "e2m1-rht-wgrad"), ("ufp4-e4m3", "nvfp4")),
    crossing_levels=(1.2, 1.1))
SECONDARY_KEEP = ("gaps.csv", "paired.csv", "paired_by_device.csv", "crossings.csv", "timing.csv", "summary.md",
                  "paired.png", "timing.png", "README.md")
PACK_FILES = ("runs.jsonl", "slice.json")


def add_slices(slices: list[str], packs: Path) -> list[Path]:
    """Copy each slice folder to the next ``packs/slice-NN`` and gzip its files (``gzip -n``: no name, no time).
    Every slice is checked before any is copied: both files present, its runs packed records, and none of its
    finished runs finished in a pack already or in another of the slices (a slice fetched twice, or one that ran
    again because its pack was not yet among the packs it was given)."""
    numbers = [int(m.group(1)) for p in packs.iterdir() if (m := re.fullmatch(r"slice-(\d+)", p.name))]
    records = load_packs(packs)
    for src in map(Path, slices):
        missing = [f for f in PACK_FILES if not (src / f).is_file()]
        if missing:
            raise InputError(f"study_publish: {src} is not a slice's pack (no {', '.join(missing)})")
        records += load_packs(src / PACK_FILES[0])
    finished(records)
    added = []
    for n, src in enumerate(map(Path, slices), start=max(numbers, default=0) + 1):
        dest = packs / f"slice-{n:02d}"
        dest.mkdir()
        for f in PACK_FILES:
            with open(src / f, "rb") as fin, open(dest / f"{f}.gz", "xb") as raw, \
                    gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as out:
                shutil.copyfileobj(fin, out)
        added.append(dest)
    return added


def summarize_study(packs: str | Path, dests: tuple[str | Path, str | Path] | None = None,
                    plots: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both summarize calls on ``packs`` (into their published folders, or into ``dests``)."""
    conf_dest, sec_dest = dests or (CONFIRMATORY["dest"], SECONDARY["dest"])
    conf = summarize(packs, conf_dest, plots=plots, **{k: v for k, v in CONFIRMATORY.items() if k != "dest"})
    sec = summarize(packs, sec_dest, plots=plots, **{k: v for k, v in SECONDARY.items() if k != "dest"})
    for p in Path(sec_dest).iterdir():
        if p.name not in SECONDARY_KEEP:
            p.unlink()
    return conf, sec


def fmt_p(p: float) -> str:
    """A p-value to two significant digits in plain decimals (0.23, 0.0056, 0.000060); "-" for NaN."""
    if math.isnan(p):
        return "-"
    p = float(f"{p:.2g}")
    return "0" if p <= 0 else f"{p:.{max(1 - math.floor(math.log10(p)), 1)}f}"


def result_tables(conf: dict[str, Any], sec: dict[str, Any]) -> str:
    """The gaps (training loss) with 95% CIs and every training-loss contrast, as markdown rows."""
    lines = ["| recipe | seeds | gap | 95% CI |", "|---|---|---|---|"]
    for g in sorted((g for g in conf["gaps"] if g["metric"] == "train"), key=lambda g: g["mean"]):
        half = t_quantile(0.975, g["n"] - 1) * g["se"] if g["n"] > 1 else float("nan")
        lines.append(f"| `{g['recipe']}` | {g['n']} | {g['mean']:+.2f} ± {g['se']:.2f} % | "
                     f"[{g['mean'] - half:+.2f}, {g['mean'] + half:+.2f}] |")
    lines += ["", "| contrast | n | difference | 95% CI | Holm p | detectable | median | signed-rank p |",
              "|---|---|---|---|---|---|---|---|"]
    for p, tested in [*((p, True) for p in conf["paired"]), *((p, False) for p in sec["paired"])]:
        if p["metric"] == "train":
            holm = fmt_p(p["p_holm"]) if tested else "-"
            det = "-" if p.get("detectable") is None else f"{p['detectable']:.2f}"
            lines.append(f"| {p['a']} − {p['b']} | {p['n']} | {p['mean']:+.2f} | [{p['ci_low']:+.2f}, "
                         f"{p['ci_high']:+.2f}] | {holm} | {det} | {p['median']:+.2f} | {fmt_p(p['p_signed_rank'])} |")
    lines += ["", "| contrast | GPU | seeds | difference | 95% CI |", "|---|---|---|---|---|"]
    for p in [*conf["paired_by_device"], *sec["paired_by_device"]]:
        if p["metric"] == "train":
            ci = f"[{p['ci_low']:+.2f}, {p['ci_high']:+.2f}]" if math.isfinite(p["ci_low"]) else "-"
            lines.append(f"| {p['a']} − {p['b']} | {p['device']} | {_ranges(p['seeds'])} | {p['mean']:+.2f} | {ci} |")
    return "\n".join(lines)


def _ranges(seeds: str) -> str:
    """Seed numbers as runs: "0 1 2 5" -> "0-2, 5"."""
    out: list[list[int]] = []
    for v in map(int, seeds.split()):
        if out and v == out[-1][1] + 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("slices", nargs="*", help="slice folders to add to the packs ($OUT/slice as fetched)")
    ap.add_argument("--packs", default="docs/results/study/packs", help="the study's packs")
    ap.add_argument("--no-plots", action="store_true", help="no PNG plots")
    args = ap.parse_args(argv)
    try:
        for p in add_slices(args.slices, Path(args.packs)):
            print(f"added {p}")
        conf, sec = summarize_study(args.packs, plots=not args.no_plots)
    except Fp4labError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result_tables(conf, sec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
