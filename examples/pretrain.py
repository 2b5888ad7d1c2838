"""Byte-level GPT pretraining under 4-bit training recipes, and the study of the recipes built on it.

    python examples/pretrain.py corpus --corpus python-packages      # a corpus: files, bytes, fingerprint
    python examples/pretrain.py train --size small --recipe ufp4 --steps 2000 --out runs/small-ufp4
    python examples/pretrain.py train --out runs/small-ufp4          # resume: the settings come from the run
    python examples/pretrain.py init study/                          # write the study's plans and recipes
    python examples/pretrain.py study study/pilot.toml --procs 12 --max-minutes 8 --pack out/pilot
    python examples/pretrain.py study study/plan.toml --status --done-from results/  # done / partial / missing
    python examples/pretrain.py summarize results/ --dest docs/results      # CSV, JSON, markdown and PNG plots
    python examples/pretrain.py captures runs/m/captures/step_0001000      # RHT-induced SQNR change (Fig. 12)
    torchrun --nproc_per_node 2 examples/pretrain.py train --size middle --recipe ufp4 --out runs/m --ddp  # or --fsdp

Every command is resumable: a run folder with a checkpoint continues where it stopped. docs/study.md explains
the files, the metric, the study's design and how to run it in 30-minute parts. Errors are one line on stderr
(exit status 2; an interrupt: 130).
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fp4lab.errors import Fp4labError, InputError


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def _strs(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shard '{text}': expected I/N, e.g. 0/4") from None
    return i, n


def _pair(text: str) -> tuple[str, ...]:
    parts = tuple(text.split(":"))
    if len(parts) not in (2, 4) or not all(parts):
        raise argparse.ArgumentTypeError(f"pair '{text}': expected A:B (e.g. ufp4:e2m1-ref) or A:B:C:D (the "
                                         "interaction (A - B) - (C - D))")
    return parts


TRAIN_ARGS: tuple[tuple[str, Any, str], ...] = (
    ("size", str, "model size: small (10.8M parameters), middle (41.2M), large (113.7M) (default small)"),
    ("recipe", str, "built-in recipe name or recipe file (default bf16)"),
    ("seed", int, "seed of the initial weights, the batches and the SR streams (default 0)"),
    ("steps", int, "optimizer steps (default 2000)"),
    ("batch", int, "sequences per step (default 32)"),
    ("lr", float, "peak learning rate (default 2e-3)"),
    ("min_lr_ratio", float, "final learning rate as a fraction of the peak (default 0.1)"),
    ("warmup", int, "linear warmup steps (default 100)"),
    ("weight_decay", float, "AdamW weight decay of matrices and the embedding (default 0.1)"),
    ("grad_clip", float, "gradient-norm clip, 0 = none (default 1.0)"),
    ("eval_every", int, "steps between evaluations and log rows (default 100)"),
    ("eval_tokens", int, "held-out tokens per evaluation (default 131072)"),
    ("diag_every", int, "steps between alpha diagnostics, 0 = none (default: eval_every)"),
    ("capture_steps", _ints, "comma-separated 1-based steps whose operands are saved (default none)"),
    ("capture_layers", _strs, "comma-separated fnmatch patterns of layers to capture (default blocks.0.*)"),
    ("capture_rows", int, "token rows of X and dY saved per capture, 0 = all (default 1024)"),
    ("ckpt_every", int, "steps between checkpoints (default 500)"),
    ("corpus", str, ("python-packages (every *.py under this Python's site-packages) or a text folder (default: "
                     "the standard library of this Python)")),
    ("corpus_glob", str, "file-name pattern of the corpus (default *.py for the stdlib, else *)"),
    ("heldout_every", int, "hold out 1 file in this many (default 20)"),
    ("device", str, "auto, cpu or cuda[:i] (default auto)"),
    ("data_order", int, ("order of the training batches, 0 = the seed's own (default 0; another value: the "
                         "negative control)")),
    ("label", str, "the run's name in summaries (default: the recipe's name)"),
)
MODEL_ARGS: tuple[tuple[str, str], ...] = (
    ("d_model", "model width"), ("layers", "blocks"), ("heads", "attention heads"), ("ffn", "SwiGLU hidden width"),
    ("seq_len", "context length in bytes"))


def cmd_corpus(args: argparse.Namespace) -> int:
    from fp4lab.study.data import load_corpus

    c = load_corpus(args.corpus, args.glob, args.heldout_every)
    for k, v in c.describe().items():
        print(f"{k:14s} {v}")
    if args.list:
        print("\n".join(f"held out: {f.encode('utf-8', 'backslashreplace').decode()}" for f in c.heldout_files))
    return 0


def _parallel(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig fields given by --ddp / --fsdp, --fsdp-params and --deterministic."""
    given = {"parallel": args.parallel, "fsdp_params": args.fsdp_params, "deterministic": args.deterministic or None}
    return {k: v for k, v in given.items() if v is not None}


def _main_rank() -> bool:
    """Whether this process prints: not a rank other than 0 of torchrun."""
    return os.environ.get("RANK", "0") == "0"


SESSION_FIELDS = ("out", "progress", "device", "parallel", "fsdp_params", "keep_checkpoint")


def _resumed_fields(out: Path) -> dict[str, Any]:
    """The settings of the run in ``out`` (its config.json), less those of one session, or {} for a new run."""
    from fp4lab.study.driver import read_table

    path = out / "config.json"
    if not path.is_file():
        return {}
    config = read_table(path, "train").get("config")
    if not isinstance(config, dict):
        raise InputError(f"train: {path} has no config table; it is not a run's config.json")
    return {k: v for k, v in config.items() if k not in SESSION_FIELDS}


def _absolute(fields: dict[str, Any]) -> None:
    """Recipe files and corpus folders as absolute paths, so that the run's config.json holds where they are."""
    from fp4lab.recipes import BUILTIN_RECIPES
    from fp4lab.study.data import PYTHON_PACKAGES

    recipe = fields.get("recipe")
    if isinstance(recipe, str) and recipe not in BUILTIN_RECIPES and Path(recipe).is_file():
        fields["recipe"] = str(Path(recipe).resolve())
    corpus = fields.get("corpus")
    if isinstance(corpus, str) and corpus != PYTHON_PACKAGES and Path(corpus).is_dir():
        fields["corpus"] = str(Path(corpus).resolve())


def cmd_train(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from fp4lab.study.distributed import shutdown
    from fp4lab.study.driver import read_table
    from fp4lab.study.model import SIZES
    from fp4lab.study.train import TrainConfig, train

    fields: dict[str, Any] = _resumed_fields(Path(args.out))
    if args.config:
        fields.update(read_table(args.config, "train --config"))
    fields.update({name: getattr(args, name) for name, _, _ in TRAIN_ARGS if getattr(args, name) is not None})
    model = {name: getattr(args, name) for name, _ in MODEL_ARGS if getattr(args, name) is not None}
    if model:
        given = fields.get("model") or {}
        if not isinstance(given, dict):
            raise InputError(f"train: model = {ascii(given)[:60]}; expected a table of model fields")
        if "size" not in fields:  # a shape of its own: labelled "custom", other fields from the small size
            fields["size"] = "custom"
            given = {**asdict(SIZES["small"]), **given}
        fields["model"] = {**given, **model}
    _absolute(fields)
    fields["out"] = args.out
    fields["progress"] = not args.no_progress
    fields["keep_checkpoint"] = not args.drop_checkpoint
    cfg = TrainConfig.from_dict({**fields, **_parallel(args)})
    deadline = None if args.max_minutes is None else time.monotonic() + 60 * args.max_minutes
    try:
        result = train(cfg, deadline=deadline)
    finally:
        shutdown()
    if _main_rank():
        print(f"{result.status} at step {result.step}: {result.out}")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from fp4lab.study.defaults import write_study

    for p in write_study(args.folder, force=args.force):
        print(f"wrote {p}")
    return 0


def _table(rows: list[tuple]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table("run", "status", "last evaluated step")
    for run, status, step in rows:
        t.add_row(run.label, status, f"{step}/{run.cfg.steps}")
    Console().print(t)


def _packed(args: argparse.Namespace, runs: list) -> dict[str, Any]:
    """{label: record} of the runs finished in the packs under --done-from (checked: code version, settings)."""
    from fp4lab.study import pack
    from fp4lab.study.data import load_corpus

    records = [r for folder in args.done_from or () for r in pack.load_packs(folder)]
    corpora: dict[tuple, str] = {}

    def fingerprint(cfg: Any) -> str:  # the corpus here, loaded once per setting
        key = (cfg.corpus, cfg.corpus_glob, cfg.heldout_every)
        if key not in corpora:
            corpora[key] = load_corpus(*key).fingerprint
        return corpora[key]

    return pack.done_runs(records, runs, fingerprint if records else None)


def _children(args: argparse.Namespace) -> list[list[str]]:
    """The command lines of the --procs N shard processes."""
    shared: list[str] = []
    for flag, value in (("--out", args.out), ("--max-minutes", args.max_minutes),
                        ("--sizes", ",".join(args.sizes) if args.sizes else None),
                        ("--recipes", ",".join(args.recipes) if args.recipes else None),
                        ("--seeds", ",".join(map(str, args.seeds)) if args.seeds else None)):
        if value is not None:
            shared += [flag, str(value)]
    shared += ["--deterministic"] if args.deterministic else []
    for folder in args.done_from or ():
        shared += ["--done-from", folder]
    n = args.procs
    return [[sys.executable, str(Path(__file__).resolve()), "study", args.plan, "--shard", f"{i}/{n}",
             "--no-progress", *shared] for i in range(n)]


def _run_children(args: argparse.Namespace) -> tuple[dict[str, str], int]:
    """Run the shard processes of --procs side by side; returns each one's exit status and log tail (its log is a
    temporary file, not kept), and the largest exit status. An interrupt stops them all."""
    commands = _children(args)
    logs = Path(tempfile.mkdtemp(prefix="fp4lab-study-"))
    procs = []
    try:
        for i, cmd in enumerate(commands):
            with open(logs / f"shard{i}.log", "wb") as log:
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        for proc in procs:
            proc.wait()
    except KeyboardInterrupt:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()
        raise
    tails = {}
    for i, proc in enumerate(procs):
        text = (logs / f"shard{i}.log").read_text(encoding="utf-8", errors="replace")
        tails[f"shard{i}"] = f"exit {proc.returncode}: " + text[-2000:]
        (logs / f"shard{i}.log").unlink()
        if proc.returncode not in (0, 1):
            lines = [x for x in text.splitlines() if x.startswith("error: ")]
            print(f"shard {i}/{len(procs)} exited with status {proc.returncode}"
                  + (f": {lines[-1][7:]}" if lines else ""), file=sys.stderr)
    logs.rmdir()
    return tails, max((abs(p.returncode) for p in procs), default=0)


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def cmd_study(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from fp4lab.study import pack
    from fp4lab.study.distributed import setup, shutdown
    from fp4lab.study.driver import load_plan, run_plan, select, statuses
    from fp4lab.study.train import resolve_device

    if args.procs is not None and (args.procs < 1 or args.parallel or args.shard != (0, 1) or args.status):
        raise InputError("study: --procs N (N >= 1) runs N shard processes itself; it takes no --shard, --ddp, "
                         "--fsdp or --status")
    if args.pack and (os.path.lexists(Path(args.pack, pack.RUNS)) or os.path.lexists(Path(args.pack, pack.SLICE))):
        raise InputError(f"study: --pack {args.pack} already holds a pack; a pack is written once")
    started = datetime.datetime.now(datetime.timezone.utc)
    plan = load_plan(args.plan, args.out)
    runs = select(plan, args.sizes, args.recipes, args.seeds, args.shard)
    runs = [replace(r, cfg=replace(r.cfg, **_parallel(args))) for r in runs]
    packed = _packed(args, runs)
    logs: dict[str, str] = {}
    worst = 0
    if args.procs is not None:
        logs, worst = _run_children(args)
    elif not args.status:
        try:
            spread = [r.cfg for r in runs if r.cfg.parallel != "none"]
            if spread:  # the process group first, so that the ranks agree on the deadline before the first run
                setup(spread[0].parallel, resolve_device(spread[0].device), spread[0].fsdp_params)
            run_plan(runs, max_minutes=args.max_minutes, progress=not args.no_progress,
                     say=print if _main_rank() else (lambda text: None), skip=frozenset(packed))
        finally:
            shutdown()
    if not _main_rank():
        return 0
    rows = statuses(runs, packed)
    _table(rows)
    if args.pack:
        ended = datetime.datetime.now(datetime.timezone.utc)
        info = {"command": [Path(sys.argv[0]).name, *sys.argv[1:]], "started": started.isoformat(timespec="seconds"),
                "ended": ended.isoformat(timespec="seconds"), "wall_s": (ended - started).total_seconds(),
                "device": _device_name(), "python": sys.version.split()[0], "logs": logs}
        paths = pack.pack_slice([(r, s) for r, s, _ in rows if s != "done (packed)"], args.pack, info)
        print(f"packed: {', '.join(str(p) for p in paths)}")
    left = sum(1 for _, s, _ in rows if not s.startswith("done"))
    failed = sum(1 for _, s, _ in rows if s == "failed")
    print(f"{len(rows) - left} of {len(rows)} runs done" + (f"; {left} to go" if left else "")
          + (f"; {failed} failed (failed.json in their folders; the next study call retries them)" if failed else ""))
    return max(worst, 1 if failed else 0)


def cmd_summarize(args: argparse.Namespace) -> int:
    from fp4lab.study.summary import summarize

    dest = args.dest or str(Path(args.root) / "summary")
    s = summarize(args.root, dest, window=args.window, baseline=args.baseline,
                  pairs=tuple(args.pair or [("ufp4", "e2m1-ref")]), plots=not args.no_plots,
                  code_version=args.code_version, window_steps=args.window_steps or None, delta=args.delta,
                  alpha=args.alpha, planned_seeds=args.planned_seeds, crossing_levels=tuple(args.crossing or ()))
    print((Path(dest) / "summary.md").read_text(), end="")
    print(f"{len(s['runs'])} runs; files in {dest}")
    return 0


def cmd_captures(args: argparse.Namespace) -> int:
    from fp4lab.study import captures

    rows = captures.rht_effects(args.folder, formats=args.formats, rht=args.rht, rht_seed=args.rht_seed)
    paths = captures.write(rows, args.dest or args.folder, title=args.title or str(args.folder),
                           plot=not args.no_plots, rht=args.rht)
    print(paths[1].read_text(), end="")
    print(f"{len({r['layer'] for r in rows})} layers; files: {', '.join(str(p) for p in paths)}")
    return 0


def _parallel_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ddp", dest="parallel", action="store_const", const="ddp", default=None,
                   help="data-parallel over torchrun's processes with DDP (--batch is the global batch)")
    g.add_argument("--fsdp", dest="parallel", action="store_const", const="fsdp",
                   help="data-parallel over torchrun's processes with FSDP2 (fully_shard per block)")
    p.add_argument("--fsdp-params", choices=("bf16", "fp32"), default=None,
                   help="FSDP2 parameter dtype in forward and backward (default bf16; gradients reduced in fp32)")
    p.add_argument("--deterministic", action="store_true",
                   help="torch's deterministic algorithms: identical CUDA runs give identical bits (slower)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pretrain.py", description=__doc__.splitlines()[0],
                                 epilog="Run a command with --help for its options. Details: docs/study.md.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("corpus", help="show the corpus and its train / held-out split",
                       description="Files, bytes and fingerprint of the corpus parts (split: 1 file in 20 held out "
                       "by a hash of its relative path).")
    p.add_argument("--corpus", help="text folder (default: the standard library of this Python)")
    p.add_argument("--glob", help="file-name pattern (default *.py for the stdlib, else *)")
    p.add_argument("--heldout-every", type=int, default=20, help="hold out 1 file in this many (default 20)")
    p.add_argument("--list", action="store_true", help="list the held-out files")
    p.set_defaults(func=cmd_corpus)

    p = sub.add_parser("train", help="train (or resume) one run",
                       description="Train the study GPT under one recipe into a run folder; resumes from its "
                       "checkpoint, and does nothing if the run has finished.")
    p.add_argument("--out", required=True, help="run folder (logs, checkpoint, captures)")
    p.add_argument("--config", help="TOML file of TrainConfig fields; options given here override it")
    for name, kind, text in TRAIN_ARGS:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, default=None, help=text)
    for name, text in MODEL_ARGS:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, default=None,
                       help=f"{text} (default: that of --size; a shape without --size is labelled custom and starts "
                            "from the small size)")
    p.add_argument("--max-minutes", type=float, help="start no step after this many minutes; checkpoint and stop")
    p.add_argument("--drop-checkpoint", action="store_true", help="delete the checkpoint when the run is done")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _parallel_args(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("init", help="write the study's plans and recipe files",
                       description="Write the study's plans (FOLDER/pilot.toml, lr_sweep.toml, plan.toml) and its "
                       "recipe files (FOLDER/recipes/); nothing if any of them exists, unless --force.")
    p.add_argument("folder")
    p.add_argument("--force", action="store_true", help="overwrite existing plans and recipe files")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("study", help="run the plan's missing runs (resume partial ones) within a time budget",
                       description="Skip finished runs, resume partial ones, start missing ones, in plan order; "
                       "with --max-minutes stop cleanly (checkpoint written) when the time is up.")
    p.add_argument("plan", help="plan file (.toml or .json)")
    p.add_argument("--out", help="run folders here instead of the plan's out")
    p.add_argument("--max-minutes", type=float, help="start no step after this many minutes")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N", help="runs I, I+N, ... (one per GPU)")
    p.add_argument("--sizes", type=_strs, help="only these sizes (comma-separated)")
    p.add_argument("--recipes", type=_strs, help="only these recipe names (comma-separated)")
    p.add_argument("--seeds", type=_ints, help="only these seeds (comma-separated)")
    p.add_argument("--status", action="store_true", help="show what is done, partial or missing; run nothing")
    p.add_argument("--procs", type=int, metavar="N", help="run N shard processes side by side (one GPU can hold "
                   "several small runs); their logs go into the pack's slice.json")
    p.add_argument("--pack", metavar="DIR", help="afterwards, pack the selected runs' results into DIR/runs.jsonl "
                   "and DIR/slice.json (a new folder; never overwritten)")
    p.add_argument("--done-from", action="append", metavar="DIR", help="skip runs finished in the packs under DIR "
                   "(repeatable); packs of another code version or other settings are an error")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _parallel_args(p)
    p.set_defaults(func=cmd_study)

    p = sub.add_parser("summarize", help="tables, paired statistics and plots of a study's runs",
                       description="runs.csv, gaps.csv (relative loss gap to bf16 over the final window, mean ± SE "
                       "over seeds), paired.csv (A − B per seed), alpha.csv, summary.json/.md and PNG plots.")
    p.add_argument("root", help="folder holding the run folders (searched recursively)")
    p.add_argument("--dest", help="output folder (default ROOT/summary)")
    p.add_argument("--window", type=float, default=0.1, help="final window: this fraction of the evaluations "
                   "(default 0.1)")
    p.add_argument("--window-steps", type=int, default=1000, help="at most the evaluations of the final this many "
                   "steps, 0 = no cap (default 1000: the paper's final 1000 steps, or 10%% if shorter)")
    p.add_argument("--baseline", default="bf16", help="baseline recipe name (default bf16)")
    p.add_argument("--pair", type=_pair, action="append", metavar="A:B",
                   help="paired difference A − B per seed, or A:B:C:D for the interaction (A − B) − (C − D) "
                   "(repeatable; default ufp4:e2m1-ref); the training-loss rows form the Holm family")
    p.add_argument("--no-plots", action="store_true", help="no PNG plots")
    p.add_argument("--delta", type=float, default=0.3, help="difference in points that seeds_needed is sized for "
                   "(default 0.3)")
    p.add_argument("--alpha", type=float, default=0.05, help="test level of seeds_needed, e.g. 0.05/8 for the first "
                   "step of Holm's correction over 8 tests (default 0.05)")
    p.add_argument("--planned-seeds", type=int, metavar="N", help="paired seeds of the study's plan: the "
                   "detectable column is the difference N seeds detect at the measured sd (default: the seeds found)")
    p.add_argument("--code-version", help="only the runs of this code version (runs of several versions are "
                   "otherwise an error)")
    p.add_argument("--crossing", type=float, action="append", metavar="LEVEL",
                   help="exploratory (repeatable): the step at which each run's training loss first reaches LEVEL "
                   "nats, its delay against its bf16 run, and how much of the final gap the delay explains "
                   "(crossings.csv, timing.csv)")
    p.set_defaults(func=cmd_summarize)

    p = sub.add_parser("captures", help="RHT-induced SQNR change of captured operands and GEMM outputs (Fig. 12)",
                       description="For each layer of a capture folder and each format: SQNR of X, W, dY and of the "
                       "three GEMM outputs without and with a 16-point RHT along the reduction dimension (RTNE); "
                       "rht_effects.csv, rht_effects.md (family means) and rht_effects.png (heatmaps).")
    p.add_argument("folder", help="capture folder (<run>/captures/step_<step>)")
    p.add_argument("--dest", help="output folder (default: the capture folder)")
    p.add_argument("--formats", type=_strs, default=("e2m1-b16-fp32", "ufp4"),
                   help="format names or spec files (default e2m1-b16-fp32,ufp4: the paper's two grids)")
    p.add_argument("--rht", type=int, default=16, help="RHT size (default 16)")
    p.add_argument("--rht-seed", type=int, default=0, help="RHT sign seed (default 0)")
    p.add_argument("--title", help="title of the report and plot (default: the folder)")
    p.add_argument("--no-plots", action="store_true", help="no PNG heatmap")
    p.set_defaults(func=cmd_captures)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (Fp4labError, OSError, UnicodeError, RecursionError, MemoryError) as exc:
        text = str(exc).strip().splitlines()
        print(f"error: {text[0] if text else type(exc).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
