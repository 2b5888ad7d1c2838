"""Hostile inputs to the study tool (fp4lab.study, examples/pretrain.py): run folders stay inside the plan's out,
writers never follow planted links, nonsense plans and options stop with one line, checkpoints resume only their
own run, one process per run folder, NaN losses stop a run, and the command line prints one line (exit 2; an
interrupt: 130) instead of a traceback."""

import json
import os
import runpy
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fp4lab.errors import Fp4labError, InputError  # noqa: E402
from fp4lab.study import captures, data, driver, summary  # noqa: E402
from fp4lab.study import train as train_mod  # noqa: E402
from fp4lab.study.model import GPTConfig  # noqa: E402
from fp4lab.study.runfolder import RunLock, check_label  # noqa: E402
from fp4lab.study.train import DivergedError, TrainConfig, run_status, train  # noqa: E402

TINY = GPTConfig(d_model=64, layers=2, heads=2, ffn=128, seq_len=64)
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pretrain.py"


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    for i in range(24):
        (root / f"m{i}.py").write_text(" ".join(rng.choice(["def", "x", "=", "(", ")", "\n"], 500)))
    return root


@pytest.fixture(scope="module")
def corpus(corpus_dir):
    return data.load_corpus(corpus_dir, "*.py")


def _cfg(tmp_path, corpus_dir, name="run", **kw):
    base = dict(out=str(tmp_path / name), size="tiny", model=TINY, recipe="bf16", steps=4, batch=2, lr=3e-3,
                warmup=1, eval_every=2, eval_tokens=128, ckpt_every=2, corpus=str(corpus_dir), corpus_glob="*.py",
                progress=False, diag_every=0)
    base.update(kw)
    return TrainConfig(**base)


PLAN_HEAD = """
out = "runs"
corpus = "{corpus}"
[train]
steps = 2
batch = 2
eval_every = 2
eval_tokens = 128
corpus_glob = "*.py"
[sizes.tiny]
model = {{ d_model = 64, layers = 2, heads = 2, ffn = 128, seq_len = 64 }}
"""


def _plan(tmp_path, corpus_dir, body, head=PLAN_HEAD, name="plan.toml"):
    path = tmp_path / name
    path.write_text(head.format(corpus=corpus_dir) + body)
    return path


# ---- run folders stay inside out --------------------------------------------------------------------------------


@pytest.mark.parametrize("label", ["s2m", "bf16-order1", "e2m1-ref", "ufp4_v2.1+x", "A" * 64])
def test_safe_labels(label):
    assert check_label(label, "x") == label


@pytest.mark.parametrize("label", ["", "..", ".", ".hidden", "../../X", "/abs", "a/b", "a\\b", "\x1b[31mred",
                                   "a\u202eb", "-x", "A" * 65, 3, None])
def test_unsafe_labels(label):
    with pytest.raises(InputError, match="labels are 1-64 characters"):
        check_label(label, "x")


@pytest.mark.parametrize("name", ["../../../X", "/tmp/abs-run", "a/b", "x\x1b[2J"])
def test_recipe_names_cannot_move_run_folders(tmp_path, corpus_dir, name):
    recipe = tmp_path / "evil.toml"
    recipe.write_text(f'name = {json.dumps(name)}\nrht = []\nsr = []\n')
    plan = _plan(tmp_path, corpus_dir, '[[runs]]\nsizes = ["tiny"]\nrecipes = ["evil.toml"]\nseeds = [0]\n')
    with pytest.raises(InputError, match="recipe name"):
        driver.load_plan(plan)


def test_size_labels_cannot_move_run_folders(tmp_path, corpus_dir):
    head = PLAN_HEAD.replace("[sizes.tiny]", '[sizes."../../X"]')
    plan = _plan(tmp_path, corpus_dir, '[[runs]]\nsizes = ["../../X"]\nrecipes = ["bf16"]\nseeds = [0]\n', head)
    with pytest.raises(InputError, match="size"):
        driver.load_plan(plan)
    assert not (tmp_path.parent / "X").exists()


# ---- link-safe, atomic writers ----------------------------------------------------------------------------------


def test_run_writers_replace_planted_links(tmp_path, corpus_dir, corpus):
    cfg = _cfg(tmp_path, corpus_dir)
    run = Path(cfg.out)
    run.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in ("metrics.csv", "metrics.json.tmp", "metrics.csv.tmp", "checkpoint.pt.tmp", "config.json.tmp",
                 "done.json.tmp", "alpha.csv.tmp"):
        (run / name).symlink_to(victim)
    assert train(replace(cfg, keep_checkpoint=True), corpus=corpus).status == "done"
    assert victim.read_text() == "precious"
    for name in ("metrics.csv", "metrics.json", "checkpoint.pt", "config.json", "done.json"):
        assert (run / name).is_file() and not (run / name).is_symlink(), name


def test_summary_and_capture_writers_replace_planted_links(tmp_path, corpus_dir, corpus):
    cfg = _cfg(tmp_path, corpus_dir, capture_steps=(1,), capture_rows=16)
    train(cfg, corpus=corpus)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    dest = tmp_path / "sum"
    dest.mkdir()
    for name in ("runs.csv", "runs.csv.tmp", "summary.md", "summary.json.tmp"):
        (dest / name).symlink_to(victim)
    summary.summarize(cfg.out, dest, plots=False)
    assert victim.read_text() == "precious" and not (dest / "runs.csv").is_symlink()
    cap = Path(cfg.out, "captures", "step_0000001")
    out = tmp_path / "cap"
    out.mkdir()
    for name in ("rht_effects.csv", "rht_effects.md"):
        (out / name).symlink_to(victim)
    captures.write(captures.rht_effects(cap, formats=("ufp4",)), out, plot=False)
    assert victim.read_text() == "precious" and (out / "rht_effects.csv").read_text().startswith("layer,")


def test_captures_use_the_checked_loader(tmp_path):
    folder = tmp_path / "cap"
    folder.mkdir()
    for op, shape in (("x", (16, 32)), ("w", (16, 32))):
        np.save(folder / f"l.{op}.npy", np.ones(shape, np.float32))
    np.save(folder / "l.dy.npy", np.array([{"a": 1}] * 4, dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="l.dy.npy"):
        captures.load_layers(folder)
    (folder / "l.dy.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(InputError, match="l.dy.npy"):
        captures.load_layers(folder)


# ---- checkpoints belong to their run ----------------------------------------------------------------------------


def test_checkpoints_resume_only_their_own_run(tmp_path, corpus_dir, corpus, monkeypatch):
    a, b = _cfg(tmp_path, corpus_dir, "a", seed=0), _cfg(tmp_path, corpus_dir, "b", seed=1)
    for cfg in (a, b):
        assert train(cfg, stop_at=2, corpus=corpus).status == "paused"
    Path(a.out, "checkpoint.pt").write_bytes(Path(b.out, "checkpoint.pt").read_bytes())  # seed 1's, in seed 0's
    with pytest.raises(InputError, match="belongs to another run"):
        train(a, corpus=corpus)
    state = torch.load(Path(b.out, "checkpoint.pt"), weights_only=True)
    state["step"] = 10**9
    torch.save(state, Path(b.out, "checkpoint.pt"))
    with pytest.raises(InputError, match="outside 0..4"):
        train(b, corpus=corpus)
    assert run_status(b.out) == "partial"  # not marked done
    data_ = Path(b.out, "checkpoint.pt").read_bytes()
    Path(b.out, "checkpoint.pt").write_bytes(data_[: len(data_) // 2])
    with pytest.raises(InputError, match="not a readable checkpoint") as info:
        train(b, corpus=corpus)
    assert "weights_only" not in str(info.value)
    c = _cfg(tmp_path, corpus_dir, "c")
    train(c, stop_at=2, corpus=corpus)
    monkeypatch.setattr(train_mod, "code_version", lambda: "0.1.0+ffffffffffff")
    with pytest.raises(InputError, match="code_version"):
        train(c, corpus=corpus)


def test_one_process_per_run_folder(tmp_path, corpus_dir, corpus):
    cfg = _cfg(tmp_path, corpus_dir)
    Path(cfg.out).mkdir()
    with RunLock(cfg.out):
        with pytest.raises(InputError, match="another process is training"):
            train(cfg, corpus=corpus)
    assert not Path(cfg.out, "metrics.csv").exists()
    assert train(cfg, corpus=corpus).status == "done"  # the lock is released with its holder


def test_a_crash_cut_metrics_row_does_not_stop_the_resume(tmp_path, corpus_dir, corpus):
    cfg = _cfg(tmp_path, corpus_dir, steps=6)
    train(cfg, stop_at=4, corpus=corpus)
    log = Path(cfg.out, "metrics.csv")
    log.write_text(log.read_text() + "6,768,5.5")  # a row cut by a crash
    assert [r["step"] for r in train(cfg, corpus=corpus).rows] == [2, 4, 6]


# ---- plans and options ------------------------------------------------------------------------------------------


GOOD = '[[runs]]\nsizes = ["tiny"]\nrecipes = ["bf16"]\nseeds = [0]\n'


@pytest.mark.parametrize("body, match", [
    ('[[runs]]\nsizes = "tiny"\nrecipes = ["bf16"]\nseeds = [0]\n', "sizes must be a non-empty list"),
    ('[[runs]]\nsizes = ["tiny"]\nrecipes = ["bf16"]\nseeds = "012"\n', "seeds must be a non-empty list"),
    ('[[runs]]\nsizes = ["tiny"]\nrecipes = ["bf16"]\nseeds = [1.7]\n', "seeds must be a non-empty list"),
    ('[[runs]]\nsizes = ["tiny"]\nrecipes = ["bf16"]\nseeds = [true]\n', "seeds must be a non-empty list"),
    ('[[runs]]\nsizes = ["tiny"]\nrecipes = ["bf16"]\nseeds = [-1]\n', "outside 0.."),
    ('[[runs]]\nsizes = ["tiny"]\nrecipes = ["bf16"]\nseeds = []\n', "non-empty"),
    ('[[runs]]\nsizes = ["tiny"]\nrecipes = "bf16"\nseeds = [0]\n', "recipes must be"),
    ('runs = [1]\n', "runs\\[0\\] must be a table"),
    ('runs = "x"\n', "runs must be a list"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = \"x\""), "train must be a table"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { model = { layers = -3 } }"), "layers = -3"),
    (GOOD + "[sizes.tiny.stepz]\n", "unknown field"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { model = { heads = 0 } }"), "heads = 0"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { lr = inf }"), "lr = inf"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { weight_decay = nan }"), "weight_decay = nan"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { grad_clip = nan }"), "grad_clip = nan"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { weight_decay = -1e30 }"), "non-negative"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { eval_tokens = 1000000000000 }"), "eval_tokens"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { device = \"bogus\" }"), "device"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { betas = [0.9, 2.0] }"), "betas"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { capture_steps = [\"a\"] }"), "capture_steps"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\ntrain = { corpus_glob = 3 }"), "corpus_glob"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\nlabel = \"../x\""), "label"),
    (GOOD.replace("seeds = [0]", "seeds = [0]\nrepeat = 1"), "repeat must be"),
])
def test_nonsense_plans_stop_with_one_line(tmp_path, corpus_dir, body, match):
    head = PLAN_HEAD
    if body.startswith("runs ="):  # a top-level key: before the first table
        head, body = body + PLAN_HEAD, ""
    with pytest.raises(InputError, match=match) as info:
        driver.load_plan(_plan(tmp_path, corpus_dir, body, head))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text, match", [
    (b"[1, 2]", "holds a list"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    (b'{"out": "r", "runs": [}', "plan.json"),
    (b'{"out": "\xff"}', "not UTF-8"),
])
def test_malformed_plan_files(tmp_path, text, match):
    path = tmp_path / "plan.json"
    path.write_bytes(text)
    with pytest.raises(InputError, match=match):
        driver.load_plan(path)


def test_option_ranges():
    for bad, match in [({"seed": 2**70}, "seed"), ({"eval_tokens": 10**12}, "eval_tokens"),
                       ({"model": {"heads": 0}}, "heads = 0"), ({"device": "bogus"}, "device"),
                       ({"lr": float("nan")}, "lr = nan"), ({"steps": True}, "steps = True"),
                       ({"model": [1]}, "model = \\[1\\]"), ({"model": {"layers": "3"}}, "layers")]:
        with pytest.raises(InputError, match=match):
            TrainConfig.from_dict({"size": "small", **bad}).check()
    with pytest.raises(InputError, match="expected a table"):
        TrainConfig.from_dict([1])
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="0 CUDA device"):
            train_mod.resolve_device("cuda")


# ---- NaN losses -------------------------------------------------------------------------------------------------


def test_a_nan_loss_stops_the_run(tmp_path, corpus_dir, corpus, monkeypatch, capsys):
    real = train_mod._train_step

    def poisoned(model, opt, cfg, corpus, step, *rest):
        loss, rows = real(model, opt, cfg, corpus, step, *rest)
        return (loss * float("nan") if step >= 2 else loss), rows

    monkeypatch.setattr(train_mod, "_train_step", poisoned)
    cfg = _cfg(tmp_path, corpus_dir, steps=6)
    with pytest.raises(DivergedError, match="diverged: the training loss is nan by step 4"):
        train(cfg, corpus=corpus)
    assert run_status(cfg.out) == "diverged" and not Path(cfg.out, "done.json").exists()
    assert torch.load(Path(cfg.out, "checkpoint.pt"), weights_only=True)["step"] == 2  # the last finite one
    with pytest.raises(DivergedError, match="diverged at step 4"):
        train(cfg, corpus=corpus)
    plan = _plan(tmp_path, corpus_dir, '[[runs]]\nsizes = ["tiny"]\nrecipes = ["bf16", "ufp4"]\nseeds = [0]\n'
                 'train = { steps = 4 }\n')
    runs = driver.load_plan(plan)
    said: list[str] = []
    out = driver.run_plan(runs, progress=False, say=said.append)  # a diverged run does not stop the study
    assert [s for _, s in out] == ["diverged", "diverged"] and "diverged" in said[1]
    assert [s for _, s in driver.run_plan(runs, progress=False, say=said.append)] == ["diverged", "diverged"]


# ---- the command line -------------------------------------------------------------------------------------------


def _cli(monkeypatch, capsys, *argv):
    monkeypatch.setattr(sys, "argv", ["pretrain.py", *map(str, argv)])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


TRAIN = ["--steps", "2", "--batch", "2", "--eval-every", "2", "--eval-tokens", "128", "--d-model", "64", "--layers",
         "1", "--heads", "2", "--ffn", "128", "--seq-len", "64", "--no-progress", "--device", "cpu"]


@pytest.mark.parametrize("extra, match", [
    (["--heads", "0"], "heads = 0"),
    (["--device", "bogus"], "device"),
    (["--seed", str(2**70)], "seed"),
    (["--eval-tokens", str(10**12)], "eval_tokens"),
    (["--lr", "inf"], "lr = inf"),
    (["--weight-decay=-1e30"], "weight_decay"),
])
def test_cli_option_errors_are_one_line(monkeypatch, capsys, tmp_path, corpus_dir, extra, match):
    code, _, err = _cli(monkeypatch, capsys, "train", "--out", tmp_path / "r", "--corpus", corpus_dir,
                        *TRAIN, *extra)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and match in err, err


def test_cli_file_errors_are_one_line(monkeypatch, capsys, tmp_path, corpus_dir):
    bad = tmp_path / "cfg.toml"
    bad.write_bytes(b"steps = \xff\n")
    code, _, err = _cli(monkeypatch, capsys, "train", "--out", tmp_path / "r", "--config", bad, *TRAIN)
    assert code == 2 and "not UTF-8" in err and err.count("\n") == 1
    bad.write_text("model = 3\n")
    code, _, err = _cli(monkeypatch, capsys, "train", "--out", tmp_path / "r", "--config", bad, *TRAIN)
    assert code == 2 and "model = 3" in err
    bad.write_text('steps = "three"\n')
    code, _, err = _cli(monkeypatch, capsys, "train", "--out", tmp_path / "r", "--config", bad, *TRAIN[2:])
    assert code == 2 and "steps = 'three'" in err
    run = tmp_path / "r"
    code, _, _ = _cli(monkeypatch, capsys, "train", "--out", run, "--corpus", corpus_dir, *TRAIN,
                      "--max-minutes", "0")
    assert code == 0 and run_status(run) == "partial"
    ckpt = run / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    code, _, err = _cli(monkeypatch, capsys, "train", "--out", run)
    assert code == 2 and "not a readable checkpoint" in err and "weights_only" not in err and "Traceback" not in err
    (run / "config.json").write_text("[1]")
    code, _, err = _cli(monkeypatch, capsys, "train", "--out", run)
    assert code == 2 and "holds a list" in err
    for folder in ("summarize", "captures"):
        code, _, err = _cli(monkeypatch, capsys, folder, tmp_path / "nope")
        assert code == 2 and err.count("\n") == 1


def test_cli_resume_reads_its_settings_from_the_run(monkeypatch, capsys, tmp_path, corpus_dir):
    run = tmp_path / "r"
    code, _, _ = _cli(monkeypatch, capsys, "train", "--out", run, "--corpus", corpus_dir, "--recipe", "ufp4",
                      *TRAIN[:-2], "--steps", "4", "--max-minutes", "0")
    assert code == 0
    meta = json.loads((run / "config.json").read_text())
    assert meta["config"]["size"] == "custom" and meta["config"]["model"]["d_model"] == 64
    assert meta["config"]["corpus"] == str(corpus_dir.resolve())
    code, out, _ = _cli(monkeypatch, capsys, "train", "--out", run, "--no-progress")  # every flag from the run
    assert code == 0 and "done at step 4" in out


def test_cli_interrupt_is_one_line_and_130(monkeypatch, capsys, tmp_path, corpus_dir):
    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_mod, "train", interrupted)
    code, _, err = _cli(monkeypatch, capsys, "train", "--out", tmp_path / "r", "--corpus", corpus_dir, *TRAIN)
    assert code == 130 and err == "interrupted\n"


def test_cli_corpus_with_odd_file_names(monkeypatch, capsys, tmp_path):
    for i in range(3):
        (tmp_path / f"f{i}.txt").write_text("text " * 50)
    (tmp_path / os.fsdecode(b"caf\xe9.txt")).write_text("text " * 50)
    code, out, err = _cli(monkeypatch, capsys, "corpus", "--corpus", tmp_path, "--list", "--heldout-every", "2")
    assert code == 0 and "train_files" in out, err


def test_study_procs_children(tmp_path, corpus_dir):
    ns = runpy.run_path(str(EXAMPLE))
    args = ns["parser"]().parse_args(["study", "p.toml", "--procs", "3", "--max-minutes", "8", "--deterministic",
                                      "--done-from", "packs", "--seeds", "0,1"])
    commands = ns["_children"](args)
    assert [c[c.index("--shard") + 1] for c in commands] == ["0/3", "1/3", "2/3"]
    assert all(c[1] == str(EXAMPLE) and "--deterministic" in c and c[c.index("--done-from") + 1] == "packs"
               and c[c.index("--seeds") + 1] == "0,1" and "--procs" not in c for c in commands)


def test_errors_are_fp4lab_errors():
    assert issubclass(DivergedError, Fp4labError)


def test_summarize_on_corrupt_run_folders(tmp_path, corpus_dir, corpus):
    cfg = _cfg(tmp_path, corpus_dir, diag_every=2)
    train(cfg, corpus=corpus)
    run = Path(cfg.out)
    (run / "alpha.csv").write_text("step,layer,operand,gemm,alpha,sqnr_db\nx,l,x,fprop,zz,1\n2,l,x,fprop,0.9,1\n")
    s = summary.summarize(tmp_path, tmp_path / "s1", plots=False)  # bad rows left out, the good one kept
    assert len(s["runs"]) == 1
    (run / "metrics.csv").write_text("step,tokens,train_loss,heldout_loss,lr,tokens_per_s,elapsed_s\n2,4,abc,1,1,1,1\n")
    with pytest.raises(InputError, match="not a run's record"):
        summary.summarize(tmp_path, tmp_path / "s2", plots=False)
    (run / "metrics.csv").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(InputError, match="not a readable CSV log"):
        summary.summarize(tmp_path, tmp_path / "s3", plots=False)
    (run / "config.json").write_text("{")
    with pytest.raises(InputError, match="unreadable config.json"):
        summary.summarize(tmp_path, tmp_path / "s4", plots=False)


def test_recipe_names_with_escape_sequences_are_refused_for_single_runs(tmp_path, corpus_dir):
    recipe = tmp_path / "r.toml"
    recipe.write_text('name = "x\\u001b[2Jy"\nrht = []\nsr = []\n')
    with pytest.raises(InputError, match="recipe name"):
        _cfg(tmp_path, corpus_dir, recipe=str(recipe)).check()


def test_a_pickled_checkpoint_never_runs(tmp_path, corpus_dir, corpus, recwarn):
    import pickle

    cfg = _cfg(tmp_path, corpus_dir)
    train(cfg, stop_at=2, corpus=corpus)
    marker = tmp_path / "ran.txt"

    class Planted:
        def __reduce__(self):
            return (Path(marker).write_text, ("ran",))

    Path(cfg.out, "checkpoint.pt").write_bytes(pickle.dumps(Planted()))
    with pytest.raises(InputError, match="not a readable checkpoint"):
        train(cfg, corpus=corpus)
    assert not marker.exists() and not [w for w in recwarn if "pickle" in str(w.message)]
