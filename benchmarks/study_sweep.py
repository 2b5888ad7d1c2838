"""Adversarial sweep of the study tool (examples/pretrain.py, fp4lab.study): hostile plans, options, files and
faults through the command line, run in-process, outcomes counted.

    PYTHONPATH=. python benchmarks/study_sweep.py [--json FILE] [--verbose]

Outcome of each case:

* ``clear``: refused with exactly one ``error:`` line (exit 2) or ``interrupted`` (exit 130) on stderr;
* ``accepted``: accepted, and the result checks out (the case's own check);
* ``traceback``: any other exception or exit;
* ``silent``: accepted although it should have been refused, or the result is wrong;
* ``data_lost``: a file outside what the command may write changed (a planted symlink's target, an edited file);
* ``code``: a planted pickle ran (its marker file appeared).

Not part of the test suite (about a minute on 2 cores); ``tests/test_study_hostile.py`` pins the cases.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import pickle
import runpy
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pretrain.py"
MAIN = runpy.run_path(str(EXAMPLE))["main"]
TINY = ["--d-model", "64", "--layers", "1", "--heads", "2", "--ffn", "128", "--seq-len", "64", "--batch", "2",
        "--eval-every", "2", "--eval-tokens", "128", "--no-progress", "--device", "cpu"]
HEAD = """
out = "runs"
corpus = "{corpus}"
[train]
steps = 2
batch = 2
eval_every = 2
eval_tokens = 128
corpus_glob = "*.py"
device = "cpu"
[sizes.tiny]
model = {{ d_model = 64, layers = 1, heads = 2, ffn = 128, seq_len = 64 }}
"""
GOOD = '[[runs]]\nsizes = ["tiny"]\nrecipes = ["bf16"]\nseeds = [0]\n'


class Planted:
    """A pickle payload: writes its marker file when unpickled."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path(self.marker).write_text, ("ran",))


def cli(*argv: Any) -> tuple[int | None, str, str, BaseException | None]:
    """(exit status, stdout, stderr, escaped exception) of one in-process command."""
    out, err = io.StringIO(), io.StringIO()
    exc = None
    code: int | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = MAIN([str(a) for a in argv])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
        except BaseException as e:  # noqa: BLE001 - anything escaping is what the sweep counts
            exc = e
    return code, out.getvalue(), err.getvalue(), exc


def one_line(code: int | None, err: str) -> bool:
    lines = [x for x in err.splitlines() if x.strip()]
    return (code == 2 and len(lines) == 1 and lines[0].startswith("error: ")) or \
        (code == 130 and lines == ["interrupted"])


class Sweep:
    def __init__(self, base: Path, verbose: bool) -> None:
        self.base, self.verbose = base, verbose
        self.results: list[dict[str, Any]] = []
        self.corpus = base / "corpus"
        self.corpus.mkdir()
        rng = np.random.default_rng(0)
        for i in range(24):
            (self.corpus / f"m{i}.py").write_text(" ".join(rng.choice(["def", "x", "=", "(", ")", "\n"], 500)))
        self.n = 0

    def folder(self) -> Path:
        self.n += 1
        d = self.base / f"case{self.n}"
        d.mkdir()
        return d

    def record(self, family: str, name: str, outcome: str, detail: str = "") -> None:
        self.results.append({"family": family, "case": name, "outcome": outcome, "detail": detail[:200]})
        if self.verbose or outcome not in ("clear", "accepted"):
            print(f"{outcome:10s} {family}: {name} {detail[:160]}")

    def refuse(self, family: str, name: str, *argv: Any, victims: tuple[Path, ...] = (),
               marker: Path | None = None) -> None:
        """A case that must be refused with one line."""
        before = {v: v.read_bytes() for v in victims}
        code, _, err, exc = cli(*argv)
        if marker is not None and marker.exists():
            self.record(family, name, "code")
        elif any(v.read_bytes() != b for v, b in before.items()):
            self.record(family, name, "data_lost")
        elif exc is not None:
            self.record(family, name, "traceback", f"{type(exc).__name__}: {exc}")
        elif one_line(code, err):
            self.record(family, name, "clear", err.strip())
        elif code == 0:
            self.record(family, name, "silent", "accepted")
        else:
            self.record(family, name, "traceback", f"exit {code}: {err[-200:]}")

    def accept(self, family: str, name: str, check: Callable[[], bool], *argv: Any,
               victims: tuple[Path, ...] = ()) -> None:
        """A case that must succeed and pass ``check``."""
        before = {v: v.read_bytes() for v in victims}
        code, _, err, exc = cli(*argv)
        if any(v.read_bytes() != b for v, b in before.items()):
            self.record(family, name, "data_lost")
        elif exc is not None:
            self.record(family, name, "traceback", f"{type(exc).__name__}: {exc}")
        elif code == 0 and check():
            self.record(family, name, "accepted")
        elif code == 0:
            self.record(family, name, "silent", "wrong result")
        else:
            self.record(family, name, "clear" if one_line(code, err) else "traceback", err.strip()[-200:])

    def plan(self, body: str, head: str = HEAD, name: str = "plan.toml") -> Path:
        d = self.folder()
        path = d / name
        path.write_text(head.format(corpus=self.corpus) + body)
        return path

    def train(self, d: Path, *extra: Any) -> tuple[int | None, str, str, BaseException | None]:
        return cli("train", "--out", d / "run", "--corpus", self.corpus, "--corpus-glob", "*.py", *TINY, *extra)


def plans(s: Sweep) -> None:
    bodies = {
        "sizes a string": GOOD.replace('sizes = ["tiny"]', 'sizes = "tiny"'),
        "seeds a string": GOOD.replace("seeds = [0]", 'seeds = "012"'),
        "seeds floats": GOOD.replace("seeds = [0]", "seeds = [1.7]"),
        "seeds booleans": GOOD.replace("seeds = [0]", "seeds = [true]"),
        "seed negative": GOOD.replace("seeds = [0]", "seeds = [-1]"),
        "seed 2^70": GOOD.replace("seeds = [0]", f"seeds = [{2**70}]"),
        "recipes a string": GOOD.replace('recipes = ["bf16"]', 'recipes = "bf16"'),
        "train a string": GOOD + 'train = "x"\n',
        "layers -3": GOOD + "train = { model = { layers = -3 } }\n",
        "heads 0": GOOD + "train = { model = { heads = 0 } }\n",
        "lr inf": GOOD + "train = { lr = inf }\n",
        "lr nan": GOOD + "train = { lr = nan }\n",
        "weight_decay nan": GOOD + "train = { weight_decay = nan }\n",
        "grad_clip nan": GOOD + "train = { grad_clip = nan }\n",
        "weight_decay -1e30": GOOD + "train = { weight_decay = -1e30 }\n",
        "eval_tokens 1e12": GOOD + "train = { eval_tokens = 1000000000000 }\n",
        "device bogus": GOOD + 'train = { device = "bogus" }\n',
        "betas out of range": GOOD + "train = { betas = [0.9, 2.0] }\n",
        "capture steps strings": GOOD + 'train = { capture_steps = ["a"] }\n',
        "unknown size field": GOOD + "[sizes.tiny.stepz]\n",
        "group label ../x": GOOD + 'label = "../x"\n',
        "repeat 1": GOOD + "repeat = 1\n",
        "no runs": "",
    }
    for name, body in bodies.items():
        s.refuse("plan", name, "study", s.plan(body), "--status")
    for name, top in (("runs = [1]", "runs = [1]\n"), ("runs a string", 'runs = "x"\n'), ("out a number", "out = 3\n")):
        s.refuse("plan", name, "study", s.plan("", top + HEAD), "--status")
    for name, text in (("top-level list", b"[1, 2]"), ("deep nesting", b"[" * 100000 + b"]" * 100000),
                       ("malformed JSON", b'{"runs": [}'), ("not UTF-8", b'{"out": "\xff"}')):
        d = s.folder()
        (d / "plan.json").write_bytes(text)
        s.refuse("plan", name, "study", d / "plan.json", "--status")
    for label in ("../../../X", "/tmp/abs-run", "a/b", "x\x1b[2J"):
        p = s.plan('[[runs]]\nsizes = ["tiny"]\nrecipes = ["evil.toml"]\nseeds = [0]\n')
        (p.parent / "evil.toml").write_text(f"name = {json.dumps(label)}\nrht = []\nsr = []\n")
        s.refuse("plan", f"recipe name {label!r}", "study", p, "--max-minutes", "1", "--no-progress")
    p = s.plan('[[runs]]\nsizes = ["../../X"]\nrecipes = ["bf16"]\nseeds = [0]\n',
               HEAD.replace("[sizes.tiny]", '[sizes."../../X"]'))
    s.refuse("plan", "size label ../../X", "study", p, "--no-progress")


def options(s: Sweep) -> None:
    for name, extra in (("--heads 0", ["--heads", "0"]), ("--layers -3", ["--layers", "-3"]),
                        ("--device bogus", ["--device", "bogus"]), ("--device cuda:99", ["--device", "cuda:99"]),
                        ("--seed 2**70", ["--seed", str(2**70)]), ("--eval-tokens 1e12", ["--eval-tokens", "10" * 6]),
                        ("--lr inf", ["--lr", "inf"]), ("--lr nan", ["--lr", "nan"]),
                        ("--weight-decay -1e30", ["--weight-decay=-1e30"]), ("--grad-clip nan", ["--grad-clip", "nan"]),
                        ("--steps 0", ["--steps", "0"]), ("--batch 0", ["--batch", "0"]),
                        ("--capture-steps 0", ["--capture-steps", "0"])):
        d = s.folder()
        s.refuse("options", name, "train", "--out", d / "run", "--corpus", s.corpus, *TINY, *extra)
    for name, text in (("--config not UTF-8", b"steps = \xff\n"), ("--config wrong type", b'steps = "3"\n'),
                       ("--config a list", b'{"a": 1}'), ("--config malformed", b"steps = = 3\n")):
        d = s.folder()
        (d / "c.toml").write_bytes(text)
        s.refuse("options", name, "train", "--out", d / "run", "--config", d / "c.toml", *TINY)


def resume(s: Sweep) -> None:
    import torch

    def paused(seed: int = 0) -> Path:
        d = s.folder()
        s.train(d, "--steps", "4", "--seed", str(seed), "--ckpt-every", "2", "--max-minutes", "0")
        return d

    d = paused()
    ckpt = d / "run" / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:200])
    s.refuse("resume", "truncated checkpoint", "train", "--out", d / "run")
    d, other = paused(0), paused(1)
    (d / "run" / "checkpoint.pt").write_bytes((other / "run" / "checkpoint.pt").read_bytes())
    s.refuse("resume", "another seed's checkpoint", "train", "--out", d / "run")
    d = paused()
    state = torch.load(d / "run" / "checkpoint.pt", weights_only=True)
    state["step"] = 10**9
    torch.save(state, d / "run" / "checkpoint.pt")
    s.refuse("resume", "checkpoint at step 1e9", "train", "--out", d / "run")
    d = paused()
    marker = d / "ran.txt"
    with open(d / "run" / "checkpoint.pt", "wb") as f:
        pickle.dump(Planted(str(marker)), f)
    s.refuse("resume", "pickled checkpoint", "train", "--out", d / "run", marker=marker)
    d = paused()
    (d / "run" / "config.json").write_text("{")
    s.refuse("resume", "config.json cut", "train", "--out", d / "run")
    d = paused()
    (d / "run" / "config.json").write_text("[1]")
    s.refuse("resume", "config.json a list", "train", "--out", d / "run")
    d2 = s.folder()
    s.train(d2, "--steps", "6", "--ckpt-every", "4", "--max-minutes", "0")
    cli("train", "--out", d2 / "run", "--steps", "6", "--no-progress")
    log = d2 / "run" / "metrics.csv"
    log.write_text(log.read_text() + "8,1024,5.5")
    s.accept("resume", "metrics.csv cut mid-row (done run)", lambda: True, "train", "--out", d2 / "run")
    d3 = s.folder()
    s.train(d3, "--steps", "6", "--ckpt-every", "2", "--max-minutes", "0")
    cli("train", "--out", d3 / "run", "--no-progress", "--max-minutes", "0")
    log = d3 / "run" / "metrics.csv"
    log.write_text(log.read_text() + "4,512,5.5")
    s.accept("resume", "metrics.csv cut mid-row (partial run)",
             lambda: [int(r.split(",")[0]) for r in (d3 / "run" / "metrics.csv").read_text().split()[1:]] == [2, 4, 6],
             "train", "--out", d3 / "run", "--no-progress")
    d4 = s.folder()
    s.train(d4, "--steps", "4")
    s.accept("resume", "resume from the run's config (no flags)", lambda: True, "train", "--out", d4 / "run",
             "--no-progress")
    d5 = s.folder()
    (d5 / "run").mkdir()
    from fp4lab.study.runfolder import RunLock

    with RunLock(d5 / "run"):
        s.refuse("resume", "a second process on the folder", "train", "--out", d5 / "run", "--corpus", s.corpus,
                 *TINY)


def corpora(s: Sweep) -> None:
    d = s.folder()
    for i in range(3):
        (d / f"f{i}.txt").write_text("text " * 50)
    (d / os.fsdecode(b"caf\xe9.txt")).write_text("text " * 50)
    s.accept("corpus", "file names that are not UTF-8", lambda: True, "corpus", "--corpus", d, "--list")
    s.refuse("corpus", "empty folder", "corpus", "--corpus", s.folder())
    d = s.folder()
    (d / "a.txt").write_text("x")
    s.refuse("corpus", "one file", "corpus", "--corpus", d)
    s.refuse("corpus", "missing folder", "corpus", "--corpus", s.base / "nope")
    s.refuse("corpus", "heldout-every 1", "corpus", "--corpus", s.corpus, "--heldout-every", "1")


def outputs(s: Sweep) -> None:
    victim = s.base / "victim.txt"
    victim.write_text("precious")
    d = s.folder()
    (d / "run").mkdir()
    for name in ("metrics.csv", "metrics.json.tmp", "metrics.csv.tmp", "checkpoint.pt.tmp", "config.json.tmp"):
        (d / "run" / name).symlink_to(victim)
    s.accept("writers", "planted links in a run folder", lambda: not (d / "run" / "metrics.csv").is_symlink(),
             "train", "--out", d / "run", "--corpus", s.corpus, "--corpus-glob", "*.py", *TINY, "--steps", "2",
             victims=(victim,))
    dest = s.folder()
    (dest / "runs.csv.tmp").symlink_to(victim)
    (dest / "summary.md").symlink_to(victim)
    s.accept("writers", "planted links in summarize --dest", lambda: not (dest / "summary.md").is_symlink(),
             "summarize", d / "run", "--dest", dest, "--no-plots", victims=(victim,))
    d = s.folder()
    cli("init", d)
    edited = d / "recipes" / "e1m2-rht-all.toml"
    edited.write_text("# mine\n")
    (d / "plan.toml").unlink()
    s.refuse("writers", "init over edited recipes without --force", "init", d, victims=(edited,))
    (d / "plan.toml").symlink_to(victim)
    s.accept("writers", "init --force through a symlinked plan.toml", lambda: not (d / "plan.toml").is_symlink(),
             "init", d, "--force", victims=(victim,))
    cap = s.folder()
    np.save(cap / "l.x.npy", np.ones((16, 32), np.float32))
    np.save(cap / "l.w.npy", np.ones((16, 32), np.float32))
    marker = cap / "ran.txt"
    np.save(cap / "l.dy.npy", np.array([Planted(str(marker))], dtype=object), allow_pickle=True)
    s.refuse("captures", "pickled capture", "captures", cap, "--no-plots", marker=marker)
    (cap / "l.dy.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    s.refuse("captures", "truncated capture", "captures", cap, "--no-plots")
    s.refuse("captures", "missing folder", "captures", s.base / "nope")


def summaries(s: Sweep) -> None:
    from fp4lab.study import pack

    d = s.folder()
    s.train(d, "--steps", "2")
    (d / "run" / "metrics.csv").write_text("step,tokens,train_loss\n2,4,abc\n")
    s.refuse("summarize", "metrics.csv with text losses", "summarize", d, "--no-plots")
    (d / "run" / "metrics.csv").write_bytes(b"\xff\xfe")
    s.refuse("summarize", "metrics.csv not UTF-8", "summarize", d, "--no-plots")
    (d / "run" / "config.json").write_text("{")
    s.refuse("summarize", "config.json cut", "summarize", d, "--no-plots")
    s.refuse("summarize", "missing root", "summarize", s.base / "nope")
    d = s.folder()
    p = s.plan(GOOD)
    runs = __import__("fp4lab.study.driver", fromlist=["x"]).load_plan(p, out=d / "runs")
    cli("study", p, "--out", d / "runs", "--no-progress")
    pack.pack_slice([(r, "done") for r in runs], d / "runs" / "pack", {})
    s.refuse("summarize", "a run in a folder and in a pack", "summarize", d / "runs", "--no-plots")
    s.refuse("study", "--pack into an existing pack", "study", p, "--out", d / "runs", "--pack", d / "runs" / "pack",
             "--no-progress")
    meta = json.loads((d / "runs" / "tiny" / "bf16" / "seed0" / "config.json").read_text())
    (d / "runs" / "pack" / "runs.jsonl").unlink()
    meta["identity"]["code_version"] = "0.0.0+000000000000"
    other = d / "runs" / "tiny" / "bf16" / "seed1"
    other.mkdir()
    for f in ("metrics.csv", "done.json"):
        (other / f).write_bytes((d / "runs" / "tiny" / "bf16" / "seed0" / f).read_bytes())
    meta["config"]["seed"] = 1
    (other / "config.json").write_text(json.dumps(meta))
    s.refuse("summarize", "runs of two code versions", "summarize", d / "runs", "--no-plots")
    packs = s.folder()
    (packs / "a").mkdir()
    (packs / "a" / "runs.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    s.refuse("summarize", "corrupt runs.jsonl.gz", "summarize", packs, "--no-plots")
    s.refuse("study", "--done-from a corrupt runs.jsonl.gz", "study", p, "--out", s.folder(), "--done-from", packs,
             "--no-progress")
    (packs / "a" / "runs.jsonl.gz").write_bytes(gzip.compress(b"[1, 2]\n"))
    s.refuse("summarize", "runs.jsonl.gz holding no run", "summarize", packs, "--no-plots")


def interrupts(s: Sweep) -> None:
    import fp4lab.study.train as train_mod

    real = train_mod.train

    def interrupted(*args: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt

    train_mod.train = interrupted
    try:
        d = s.folder()
        s.refuse("interrupt", "Ctrl-C in train", "train", "--out", d / "run", "--corpus", s.corpus, *TINY)
    finally:
        train_mod.train = real


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write every case's outcome here")
    ap.add_argument("--verbose", action="store_true", help="print every case, not only the bad ones")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        s = Sweep(Path(tmp), args.verbose)
        for family in (plans, options, resume, corpora, outputs, summaries, interrupts):
            family(s)
    counts = Counter(r["outcome"] for r in s.results)
    print(f"tried {len(s.results)}: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in
                                                   ("clear", "accepted", "traceback", "silent", "data_lost", "code")))
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "cases": s.results}, indent=1) + "\n")
    return 0 if not any(counts.get(k) for k in ("traceback", "silent", "data_lost", "code")) else 1


if __name__ == "__main__":
    sys.exit(main())
