"""Pretraining study (fp4lab.study): corpus split and batches, the training loop on a tiny GPT (loss, logs,
diagnostics, captures, bit-identical resume), the study driver, the summary statistics and the CLI."""

import csv
import itertools
import json
import math
import os
import random
import re
import runpy
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp4lab  # noqa: E402
from fp4lab.analysis import metrics, tensors_io  # noqa: E402
from fp4lab.errors import InputError, OutputError  # noqa: E402
from fp4lab.numerics.fakequant import fake_quantize_reference  # noqa: E402
from fp4lab.recipes import QuantLinear, get_recipe, recipe_to_toml  # noqa: E402
from fp4lab.study import data, diagnostics, driver, stats, summary  # noqa: E402
from fp4lab.study import train as train_mod  # noqa: E402
from fp4lab.study.defaults import RECIPES, study_files, write_study  # noqa: E402
from fp4lab.study.logs import METRIC_COLUMNS, read_csv  # noqa: E402
from fp4lab.study.model import GPT, SIZES, GPTConfig  # noqa: E402
from fp4lab.study.runfolder import code_version  # noqa: E402
from fp4lab.study.train import TrainConfig, build_model, run_status, train  # noqa: E402

TINY = GPTConfig(d_model=64, layers=2, heads=2, ffn=128, seq_len=64)
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pretrain.py"


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: threads only contend on a shared CPU (20-40x slower with 2 threads under load)."""
    import numba

    before = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    yield
    torch.set_num_threads(before[0])
    numba.set_num_threads(before[1])


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """40 small text files in nested folders (deterministic contents)."""
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    words = ["def", "return", "self", "import", "for", "in", "if", "else", "x", "y", "(", ")", ":", "=", "+", "\n"]
    for i in range(40):
        folder = root / f"pkg{i % 4}"
        folder.mkdir(exist_ok=True)
        text = " ".join(words[j] for j in rng.integers(0, len(words), 600))
        (folder / f"mod{i}.py").write_text(text)
    (root / "pkg0" / "notes.txt").write_text("not python")
    return root


@pytest.fixture(scope="module")
def corpus(corpus_dir):
    return data.load_corpus(corpus_dir, "*.py")


def _cfg(tmp_path, corpus_dir, name="run", **kw):
    base = dict(out=str(tmp_path / name), size="tiny", model=TINY, recipe="ufp4", steps=8, batch=2, lr=3e-3,
                warmup=2, eval_every=2, eval_tokens=256, ckpt_every=0, corpus=str(corpus_dir), corpus_glob="*.py",
                progress=False)
    base.update(kw)
    return TrainConfig(**base)


# ---- corpus ---------------------------------------------------------------------------------------------------


def test_split_rule_is_deterministic_disjoint_and_by_path(corpus_dir, corpus, tmp_path):
    files = data.list_files(corpus_dir, "*.py")
    assert len(files) == 40 and files == sorted(files) and "pkg0/notes.txt" not in files
    train_f, held_f = set(corpus.train_files), set(corpus.heldout_files)
    assert train_f.isdisjoint(held_f) and train_f | held_f == set(files) and held_f
    rule = {f for f in files if data.is_heldout(f)}
    assert held_f == (rule or {min(files, key=data.path_digest)})
    again = data.load_corpus(corpus_dir, "*.py")
    assert again.heldout_files == corpus.heldout_files and again.fingerprint == corpus.fingerprint
    # the rule reads only the relative path: the same tree elsewhere with other contents splits the same way
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("other")
    assert data.load_corpus(tmp_path, "*.py").heldout_files == corpus.heldout_files
    # parts: each file followed by the separator byte
    whole = corpus.train.array()
    assert whole.dtype == np.uint8 and whole.size == corpus.train.size
    assert int((whole == data.SEP).sum()) == len(train_f)
    assert corpus.heldout.size == sum((corpus_dir / f).stat().st_size + 1 for f in corpus.heldout_files)


def test_split_rule_on_the_stdlib():
    files = data.list_files(data.stdlib_dir(), "*.py")
    train_f, held_f = data.split_files(files)
    assert len(files) > 500 and not any("site-packages" in f for f in files)
    assert 0.02 < len(held_f) / len(files) < 0.09 and set(train_f).isdisjoint(held_f)


def test_corpus_errors(tmp_path):
    with pytest.raises(InputError, match="not a directory"):
        data.load_corpus(tmp_path / "nope")
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(InputError, match="at least 2"):
        data.load_corpus(tmp_path)


def test_batches_depend_on_seed_and_step_only(corpus):
    b = data.train_batch(corpus.train, 3, 7, 4, 64)
    assert b.shape == (4, 65) and b.dtype == np.int64
    assert np.array_equal(b, data.train_batch(corpus.train, 3, 7, 4, 64))
    assert not np.array_equal(b, data.train_batch(corpus.train, 3, 8, 4, 64))
    assert not np.array_equal(b, data.train_batch(corpus.train, 4, 7, 4, 64))
    e = data.eval_windows(corpus.heldout, 640, 64)
    assert e.shape == (10, 65) and np.array_equal(e, data.eval_windows(corpus.heldout, 640, 64))


def test_recipes_share_batches_and_initial_weights(tmp_path, corpus_dir, corpus, monkeypatch):
    seen: dict[str, list] = {}
    current = []

    def spy(tokens, seed, step, batch, seq_len, order=0):
        out = data.train_batch(tokens, seed, step, batch, seq_len, order)
        seen.setdefault(current[0], []).append(out)
        return out

    monkeypatch.setattr(train_mod, "train_batch", spy)
    for recipe in ("bf16", "ufp4", "mxfp4"):
        current[:] = [recipe]
        train(_cfg(tmp_path, corpus_dir, recipe, recipe=recipe, steps=2, batch=2, eval_every=2, diag_every=0),
              corpus=corpus)
    for recipe in ("ufp4", "mxfp4"):
        assert all(np.array_equal(a, b) for a, b in zip(seen["bf16"], seen[recipe]))
    w0 = build_model(_cfg(tmp_path, corpus_dir, recipe="bf16")).state_dict()
    w1 = build_model(_cfg(tmp_path, corpus_dir, recipe="ufp4")).state_dict()
    assert all(torch.equal(w0[k], w1[k]) for k in w0)


# ---- model sizes ------------------------------------------------------------------------------------------------


def test_sizes():
    want = {"small": 10e6, "middle": 41e6, "large": 114e6}
    for name, cfg in SIZES.items():
        assert abs(cfg.params / want[name] - 1) < 0.1, (name, cfg.params)
        assert cfg.d_model % 32 == 0 and cfg.ffn % 32 == 0 and cfg.d_model % cfg.heads == 0
    assert TINY.params == sum(p.numel() for p in GPT(TINY).parameters())


def test_block_linears_are_quantlinear_head_is_not(tmp_path, corpus_dir):
    model = build_model(_cfg(tmp_path, corpus_dir))
    names = [n for n, _ in diagnostics.quant_layers(model)]
    assert len(names) == 4 * TINY.layers and all(n.startswith("blocks.") for n in names)
    assert type(model.head) is torch.nn.Linear
    assert isinstance(build_model(_cfg(tmp_path, corpus_dir, quantize_head=True)).head, QuantLinear)


# ---- training loop ----------------------------------------------------------------------------------------------


def test_ufp4_trains_and_writes_logs(tmp_path, corpus_dir, corpus):
    cfg = _cfg(tmp_path, corpus_dir, steps=12, eval_every=4, diag_every=4, capture_steps=(2,), capture_rows=64)
    res = train(cfg, corpus=corpus)
    assert res.status == "done" and run_status(cfg.out) == "done"
    run = Path(cfg.out)
    rows = read_csv(run / "metrics.csv")
    assert [r["step"] for r in rows] == [4, 8, 12] and list(rows[0]) == list(METRIC_COLUMNS)
    assert rows[-1]["train_loss"] < rows[0]["train_loss"] - 0.3
    assert rows[-1]["heldout_loss"] < rows[0]["heldout_loss"] - 0.3
    assert rows[-1]["tokens"] == 12 * 2 * 64 and all(r["tokens_per_s"] > 0 for r in rows)
    assert json.loads((run / "metrics.json").read_text())["rows"] == rows
    meta = json.loads((run / "config.json").read_text())
    assert meta["params"] == TINY.params and meta["corpus"]["fingerprint"] == corpus.fingerprint
    alpha = read_csv(run / "alpha.csv")
    assert list(alpha[0]) == list(diagnostics.ALPHA_COLUMNS)
    assert sorted({r["step"] for r in alpha}) == [4, 8, 12] and len(alpha) == 3 * 4 * TINY.layers * 6
    assert all(0.8 < r["alpha"] < 1.2 and r["sqnr_db"] > 10 for r in alpha)
    cap = run / "captures" / "step_0000002"
    assert len(list(cap.glob("*.npy"))) == 4 * 3  # blocks.0.*: 4 layers x (x, w, dy)
    assert tensors_io.load_tensor(cap / "blocks.0.mlp.down.x.npy").shape == (64, TINY.ffn)
    assert tensors_io.load_tensor(cap / "blocks.0.mlp.down.dy.npy").shape == (64, TINY.d_model)
    assert tensors_io.load_tensor(cap / "blocks.0.mlp.down.w.npy").shape == (TINY.d_model, TINY.ffn)
    again = train(cfg, corpus=corpus)  # finished: nothing runs
    assert again.status == "done" and read_csv(run / "metrics.csv") == rows


def test_fp8_runs_record_their_bf16_rows(tmp_path, corpus_dir, corpus):
    """done.json of an FP8 recipe's run counts, per GEMM, the operand rows converted and those on the bf16 path."""
    cfg = _cfg(tmp_path, corpus_dir, recipe="mxfp4-fp8", steps=2, eval_every=2, diag_every=0)
    assert train(cfg, corpus=corpus).status == "done"
    rows = json.loads((Path(cfg.out) / "done.json").read_text())["fp8_rows"]
    assert sorted(rows) == ["dgrad", "fprop", "wgrad"]
    assert all(c["rows"] > 0 and 0 <= c["bf16_rows"] <= c["rows"] for c in rows.values())
    plain = _cfg(tmp_path, corpus_dir, name="plain", recipe="mxfp4", steps=2, eval_every=2, diag_every=0)
    assert train(plain, corpus=corpus).status == "done"
    assert "fp8_rows" not in json.loads((Path(plain.out) / "done.json").read_text())


def test_operand_alpha_matches_the_reference():
    layer = QuantLinear(64, 32, bias=False, recipe="ufp4", name="probe")
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    a, snr = diagnostics.operand_alpha(layer, x, "x", "fprop", "k", 0)
    fmt = fp4lab.get_format("ufp4")
    q, _ = fake_quantize_reference(x.numpy(), fmt, None, 0, -1, 16, 0, 16, "bf16")
    ref = fp4lab.rht(x.numpy(), size=16, seed=0, axis=-1)
    assert a == pytest.approx(metrics.alpha(ref, q), abs=1e-12)
    assert snr == pytest.approx(metrics.sqnr_db(ref, q), abs=1e-9)
    a_m, _ = diagnostics.operand_alpha(layer, x, "x", "wgrad", "m", 0)
    q_m, _ = fake_quantize_reference(x.numpy(), fmt, None, 0, 0, 16, 0, 16, "bf16")
    assert a_m == pytest.approx(metrics.alpha(fp4lab.rht(x.numpy(), size=16, seed=0, axis=0), q_m), abs=1e-12)


def test_resume_after_pause_and_crash_gives_identical_losses(tmp_path, corpus_dir, corpus, monkeypatch):
    """Uninterrupted (no diagnostics) vs paused at 2, crashed in step 6 (checkpoint at 3, a row logged at 4 that
    the resume drops), resumed: same rows and weights bit for bit; diagnostics change nothing."""
    full = _cfg(tmp_path, corpus_dir, "full", diag_every=0)
    ref = train(full, corpus=corpus).rows
    cut = _cfg(tmp_path, corpus_dir, "cut", ckpt_every=3, diag_every=2, capture_steps=(5,))
    assert train(cut, stop_at=2, corpus=corpus).status == "paused" and run_status(cut.out) == "partial"

    def crash(tokens, seed, step, batch, seq_len, order=0):
        if step == 5:
            raise KeyboardInterrupt
        return data.train_batch(tokens, seed, step, batch, seq_len, order)

    monkeypatch.setattr(train_mod, "train_batch", crash)
    with pytest.raises(KeyboardInterrupt):
        train(cut, corpus=corpus)
    assert [r["step"] for r in read_csv(Path(cut.out) / "metrics.csv")] == [2, 4]
    assert torch.load(Path(cut.out) / "checkpoint.pt", weights_only=True)["step"] == 3
    monkeypatch.undo()
    got = train(cut, corpus=corpus).rows
    keys = ("step", "tokens", "train_loss", "heldout_loss", "lr")
    assert [{k: r[k] for k in keys} for r in got] == [{k: r[k] for k in keys} for r in ref]
    assert [{k: r[k] for k in keys} for r in read_csv(Path(cut.out) / "metrics.csv")] == \
        [{k: r[k] for k in keys} for r in ref]
    a = torch.load(Path(full.out) / "checkpoint.pt", weights_only=True)
    b = torch.load(Path(cut.out) / "checkpoint.pt", weights_only=True)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["layer_steps"] == b["layer_steps"] == {n: 8 for n in a["layer_steps"]}
    alpha = read_csv(Path(cut.out) / "alpha.csv")
    assert sorted({r["step"] for r in alpha}) == [2, 4, 6, 8] and len(alpha) == 4 * 4 * TINY.layers * 6


def test_deadline_pauses_with_a_checkpoint_and_config_is_checked(tmp_path, corpus_dir, corpus):
    cfg = _cfg(tmp_path, corpus_dir)
    res = train(cfg, deadline=0.0, corpus=corpus)
    assert res.status == "paused" and res.step == 0 and run_status(cfg.out) == "partial"
    with pytest.raises(InputError, match="holds a run with lr"):
        train(_cfg(tmp_path, corpus_dir, lr=1e-3), corpus=corpus)
    with pytest.raises(InputError, match="recipe_toml"):
        train(_cfg(tmp_path, corpus_dir, recipe="mxfp4"), corpus=corpus)


def test_deterministic_mode_is_scoped_and_a_runtime_field(tmp_path, corpus_dir, corpus, monkeypatch):
    """``deterministic = True`` turns torch's deterministic algorithms on for the run only, with the cuBLAS
    workspace setting they need; a run started without it resumes with it and gives the same rows."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    seen = []
    real_step = train_mod._train_step

    def step(*args, **kw):
        seen.append(torch.are_deterministic_algorithms_enabled())
        return real_step(*args, **kw)

    monkeypatch.setattr(train_mod, "_train_step", step)
    ref = train(_cfg(tmp_path, corpus_dir, "ref", diag_every=0), corpus=corpus).rows
    assert seen and not any(seen)
    cut = _cfg(tmp_path, corpus_dir, "cut", diag_every=0)
    assert train(cut, stop_at=3, corpus=corpus).status == "paused"
    seen.clear()
    got = train(replace(cut, deterministic=True), corpus=corpus).rows
    assert seen and all(seen) and not torch.are_deterministic_algorithms_enabled()
    assert train_mod.os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    keys = ("step", "tokens", "train_loss", "heldout_loss", "lr")
    assert [{k: r[k] for k in keys} for r in got] == [{k: r[k] for k in keys} for r in ref]


def test_config_errors(tmp_path, corpus_dir):
    with pytest.raises(InputError, match="unknown field"):
        TrainConfig.from_dict({"stepz": 3})
    with pytest.raises(InputError, match="steps = '3'"):
        TrainConfig.from_dict({"steps": "3"})
    with pytest.raises(InputError, match="capture step"):
        _cfg(tmp_path, corpus_dir, capture_steps=(0,)).check()
    with pytest.raises(InputError, match="size 'huge'"):
        TrainConfig(size="huge").check()
    assert TrainConfig.from_dict({"size": "small", "model": {"layers": 2}}).gpt() == \
        GPTConfig(d_model=384, layers=2, heads=6, ffn=1024)
    cfg = _cfg(tmp_path, corpus_dir, warmup=10, steps=110, min_lr_ratio=0.1)
    assert train_mod.lr_at(0, cfg) == pytest.approx(3e-4) and train_mod.lr_at(10, cfg) == pytest.approx(3e-3)
    assert train_mod.lr_at(109, cfg) == pytest.approx(3e-4, rel=1e-2)


# ---- driver -----------------------------------------------------------------------------------------------------


def _plan(tmp_path, corpus_dir, recipes=("bf16", "ufp4")):
    path = tmp_path / "plan.toml"
    path.write_text(f"""
out = "runs"
corpus = "{corpus_dir}"
[train]
steps = 4
batch = 2
eval_every = 2
eval_tokens = 256
warmup = 1
lr = 3e-3
corpus_glob = "*.py"
keep_checkpoint = false
[sizes.tiny]
model = {{ d_model = 64, layers = 2, heads = 2, ffn = 128, seq_len = 64 }}
[[runs]]
sizes = ["tiny"]
recipes = {json.dumps(list(recipes))}
seeds = [0, 1]
[[runs]]
sizes = ["tiny"]
recipes = ["ufp4"]
seeds = [0]
train = {{ capture_steps = [2] }}
""")
    return path


def test_driver_runs_only_what_is_missing(tmp_path, corpus_dir):
    runs = driver.load_plan(_plan(tmp_path, corpus_dir))
    assert [r.label for r in runs] == ["tiny/bf16/seed0", "tiny/ufp4/seed0", "tiny/bf16/seed1", "tiny/ufp4/seed1"]
    assert runs[1].cfg.capture_steps == (2,) and runs[3].cfg.capture_steps == ()
    assert [r.label for r in driver.select(runs, shard=(1, 2))] == ["tiny/ufp4/seed0", "tiny/ufp4/seed1"]
    assert driver.run_plan(runs, max_minutes=0, say=lambda s: None) == [(r, "missing") for r in runs]
    first = driver.select(runs, seeds=[0])
    train(replace(first[1].cfg, progress=False), stop_at=1)  # ufp4 seed 0 partial
    said: list[str] = []
    driver.run_plan(driver.select(runs, recipes=["bf16"], seeds=[0]), progress=False, say=said.append)
    bf16_log = Path(first[0].cfg.out, "metrics.csv")
    stamp = bf16_log.stat().st_mtime_ns
    said.clear()
    out = driver.run_plan(runs, progress=False, say=said.append)
    assert [s for _, s in out] == ["done"] * 4
    assert said == ["[2/4] tiny/ufp4/seed0: resume", "[3/4] tiny/bf16/seed1: start", "[4/4] tiny/ufp4/seed1: start"]
    assert bf16_log.stat().st_mtime_ns == stamp
    assert not Path(first[0].cfg.out, "checkpoint.pt").exists()  # keep_checkpoint = false
    assert (Path(first[1].cfg.out) / "captures" / "step_0000002").is_dir()
    assert [(r.label, s, n) for r, s, n in driver.statuses(runs)] == [(r.label, "done", 4) for r in runs]
    # the real runs summarize: a gap per (recipe, seed, metric) and one paired row set
    s = summary.summarize(tmp_path / "runs", tmp_path / "sum", pairs=(("ufp4", "bf16"),), plots=False)
    assert len(s["gaps"]) == 2 and s["notes"] == []


def test_a_failed_run_is_recorded_and_the_others_go_on(tmp_path, corpus_dir, monkeypatch, capsys):
    """A run that raises (a CUDA out-of-memory error, say) gets failed.json and the "failed" status, the next runs
    still train, and a later run_plan retries it from its checkpoint; bad input still stops the study."""
    runs = driver.select(driver.load_plan(_plan(tmp_path, corpus_dir)), seeds=[0])
    real = driver.train

    def flaky(cfg, **kw):
        if "ufp4" in cfg.out:
            real(cfg, stop_at=2, **kw)  # a checkpoint at step 2, then the crash
            raise RuntimeError("CUDA out of memory. Tried to allocate 256.00 MiB\nmore detail")
        return real(cfg, **kw)

    monkeypatch.setattr(driver, "train", flaky)
    said: list[str] = []
    runs = list(reversed(runs))  # the failing run first: the other one must still train
    out = driver.run_plan(runs, progress=False, say=said.append)
    assert [(r.label, st) for r, st in out] == [("tiny/ufp4/seed0", "failed"), ("tiny/bf16/seed0", "done")]
    record = json.loads(Path(runs[0].cfg.out, driver.FAILED).read_text())
    assert record["error"] == "RuntimeError" and record["message"] == "CUDA out of memory. Tried to allocate 256.00 MiB"
    assert "flaky" in record["traceback"]
    assert said[1].startswith("[1/2] tiny/ufp4/seed0: failed (RuntimeError); details in ")
    assert [(r.label, st, n) for r, st, n in driver.statuses(runs)] == [("tiny/ufp4/seed0", "failed", 2),
                                                                        ("tiny/bf16/seed0", "done", 4)]
    monkeypatch.setattr(driver, "train", real)
    said.clear()
    assert [st for _, st in driver.run_plan(runs, progress=False, say=said.append)] == ["done", "done"]
    assert said == ["[1/2] tiny/ufp4/seed0: resume"]
    assert not Path(runs[0].cfg.out, driver.FAILED).exists()

    def crash(cfg, **kw):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(driver, "train", crash)  # the study command reports the failure in its exit status
    plan = str(tmp_path / "plan.toml")
    assert _cli(monkeypatch, "study", plan, "--seeds", "1", "--recipes", "bf16", "--no-progress") == 1
    assert "1 failed (failed.json in their folders" in capsys.readouterr().out

    def bad_input(cfg, **kw):
        raise InputError("train: something the user must fix")

    monkeypatch.setattr(driver, "train", bad_input)
    with pytest.raises(InputError, match="must fix"):
        driver.run_plan(driver.select(driver.load_plan(_plan(tmp_path, corpus_dir)), seeds=[1]), progress=False,
                        say=lambda text: None)


def test_plan_errors(tmp_path, corpus_dir):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[runs]]\nsizes = ["tiny"]\nrecipes = ["nope"]\nseeds = [0]\n')
    with pytest.raises(InputError, match="unknown recipe 'nope'"):
        driver.load_plan(bad)
    bad.write_text('stepz = 3\n[[runs]]\nsizes = ["small"]\nrecipes = ["bf16"]\nseeds = [0]\n')
    with pytest.raises(InputError, match="unknown key"):
        driver.load_plan(bad)
    bad.write_text('[train]\nstepz = 3\n[[runs]]\nsizes = ["small"]\nrecipes = ["bf16"]\nseeds = [0]\n')
    with pytest.raises(InputError, match="unknown field"):
        driver.load_plan(bad)


def test_study_md_plan_example_loads_as_its_comments_say(tmp_path):
    """docs/study.md's plan file example, with the recipe file it names, loads: groups of sizes x seeds x recipes,
    folders <out>/<size>/<label>/seed<seed>, a label with its data order, per-group fields and the repeat copy."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "study.md").read_text()
    (block,) = re.findall(r"^```toml\n(.*?)^```", text, flags=re.S | re.M)
    (tmp_path / "recipes").mkdir()
    name = "e2m1-rht-all.toml"
    (tmp_path / "recipes" / name).write_text((Path(__file__).resolve().parents[1] / "examples" / "study" / "recipes"
                                              / name).read_text())
    (tmp_path / "plan.toml").write_text(block)
    runs = driver.load_plan(tmp_path / "plan.toml")
    assert len(runs) == 3 * 3 + 3 + 1
    folders = {Path(r.cfg.out).relative_to(tmp_path / "runs").as_posix() for r in runs}
    assert {"s2m/bf16/seed2", "s2m/e2m1-rht-all/seed0", "s2m/bf16-order1/seed1", "s2m/ufp4/seed0-repeat"} <= folders
    assert all(r.cfg.batch == 32 and r.cfg.deterministic and r.cfg.steps == 3420 for r in runs)
    assert all(r.cfg.gpt().d_model == 192 and r.cfg.gpt().layers == 4 for r in runs)
    assert {r.cfg.data_order for r in runs if r.recipe == "bf16-order1"} == {1}
    assert {tuple(r.cfg.capture_steps) for r in runs if not r.repeat and r.recipe != "bf16-order1"} == {(1000,)}
    assert [r.recipe for r in runs if r.repeat] == ["ufp4"]


def test_default_study_plan(tmp_path):
    """init writes the designed study: the pilot, the lr sweep and the plan with the 2x2 factorial, controls and
    repeats; every recipe fits the model widths; the repository's examples/study is exactly what init writes."""
    write_study(tmp_path)
    pilot = driver.load_plan(tmp_path / "pilot.toml")
    assert {r.recipe for r in pilot} == {"bf16", "ufp4", "e2m1-ref", "bf16-order1"} and len(pilot) == 4 * 6 + 1
    assert all(r.cfg.deterministic and r.cfg.corpus == data.PYTHON_PACKAGES for r in pilot)
    assert {r.cfg.data_order for r in pilot if r.recipe == "bf16-order1"} == {1}
    assert [r.label for r in pilot if r.repeat] == ["s2m/ufp4/seed0-repeat"]
    assert 1e6 < pilot[0].cfg.gpt().params < 7e6
    runs = driver.load_plan(tmp_path / "plan.toml")
    factorial = {"e2m1-rht-wgrad", "e2m1-rht-all", "e1m2-rht-wgrad", "e1m2-rht-all"}
    assert {r.recipe for r in runs} == {"bf16", "bf16-order1", "nvfp4", "mxfp4", "ufp4-e4m3"} | factorial
    for r in runs:
        assert 20 <= r.cfg.steps * r.cfg.batch * r.cfg.gpt().seq_len / r.cfg.gpt().params <= 80, r.label
    cells = {name: get_recipe(tmp_path / "recipes" / f"{name}.toml") for name in factorial}
    assert {(c.format, tuple(c.rht)) for c in cells.values()} == {
        (f, r) for f in ("e2m1-b16-fp32", "ufp4") for r in (("wgrad",), ("fprop", "dgrad", "wgrad"))}
    assert all(c.sr == ["dy"] for c in cells.values())
    assert recipe_to_toml(cells["e1m2-rht-all"]).replace("e1m2-rht-all", "ufp4").split("\n")[2:] == \
        recipe_to_toml(get_recipe("ufp4")).split("\n")[2:]  # the paper's UFP4 but for name and description
    for name in RECIPES:  # every recipe fits the model widths
        build_model(TrainConfig(size="tiny", model=TINY, recipe=str(tmp_path / "recipes" / f"{name}.toml")))
    shipped = EXAMPLE.parent / "study"
    assert {p.relative_to(shipped).as_posix(): p.read_text() for p in shipped.rglob("*.toml")} == study_files()


def test_init_never_rewrites_user_files_without_force(tmp_path):
    write_study(tmp_path)
    edited = tmp_path / "recipes" / "e1m2-rht-all.toml"
    edited.write_text("# mine\n")
    (tmp_path / "plan.toml").unlink()
    with pytest.raises(OutputError, match="exist"):
        write_study(tmp_path)
    assert edited.read_text() == "# mine\n" and not (tmp_path / "plan.toml").exists()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    (tmp_path / "plan.toml").symlink_to(outside)  # --force replaces a planted link, never writes through it
    write_study(tmp_path, force=True)
    assert outside.read_text() == "keep" and not (tmp_path / "plan.toml").is_symlink()
    assert edited.read_text() == study_files()["recipes/e1m2-rht-all.toml"]


# ---- summary ----------------------------------------------------------------------------------------------------


def _fake_run(root, size, recipe, seed, losses, params=1000, done=True, lr=1e-3):
    folder = root / size / recipe / f"seed{seed}"
    folder.mkdir(parents=True)
    rtoml = recipe_to_toml(get_recipe(recipe))
    ident = {"size": size, "seed": seed, "steps": 10 * len(losses), "lr": lr, "recipe_toml": rtoml}
    (folder / "config.json").write_text(json.dumps({"config": {"size": size, "seed": seed}, "identity": ident,
                                                    "params": params}))
    lines = [",".join(METRIC_COLUMNS)]
    for i, (tr, ho) in enumerate(losses):
        lines.append(f"{10 * (i + 1)},{100 * (i + 1)},{tr},{ho},0.001,1000.0,1.0")
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
    if done:
        (folder / "done.json").write_text(json.dumps({"elapsed_s": 5.0}))


def test_summarize_paired_statistics(tmp_path):
    root = tmp_path / "runs"
    g_e = {0: 1.0, 1: 1.5, 2: 0.8}  # percent gaps in the final window (last 2 of 20 evaluations)
    g_u = {0: 0.5, 1: 1.2, 2: 0.6}
    for seed in range(3):
        early = [(9.0 + seed, 9.5)] * 18
        _fake_run(root, "s", "bf16", seed, early + [(2.0, 2.5)] * 2)
        for recipe, g in (("e2m1-ref", g_e), ("ufp4", g_u)):
            _fake_run(root, "s", recipe, seed, [(7.0, 7.0)] * 18 + [(2.0 * (1 + g[seed] / 100),
                                                                     2.5 * (1 + 2 * g[seed] / 100))] * 2)
    _fake_run(root, "s", "ufp4", 3, [(2.0, 2.0)] * 20)  # no bf16 run of seed 3
    _fake_run(root, "s", "mxfp4", 0, [(2.0, 2.0)] * 20, lr=5e-3)  # not comparable with its bf16 run
    _fake_run(root, "s", "nvfp4", 0, [(2.0, 2.0)] * 5, done=False)  # unfinished
    s = summary.summarize(root, tmp_path / "out", window=0.1)
    gaps = {(g["recipe"], g["metric"]): g for g in s["gaps"]}
    m, se, n = stats.mean_se(list(g_u.values()))
    assert gaps[("ufp4", "train")]["n"] == 3 and gaps[("ufp4", "train")]["mean"] == pytest.approx(m)
    assert gaps[("ufp4", "train")]["se"] == pytest.approx(se)
    assert gaps[("ufp4", "heldout")]["mean"] == pytest.approx(2 * m)
    diffs = [g_u[k] - g_e[k] for k in range(3)]
    want = sum(diffs) / 3
    want_se = math.sqrt(sum((d - want) ** 2 for d in diffs) / 2 / 3)
    (p_train,) = [p for p in s["paired"] if p["metric"] == "train"]
    assert p_train["a"] == "ufp4" and p_train["b"] == "e2m1-ref" and p_train["n"] == 3
    assert p_train["mean"] == pytest.approx(want) and p_train["se"] == pytest.approx(want_se)
    assert p_train["ci_low"] == pytest.approx(want - 4.302653 * want_se, rel=1e-5)  # t(0.975, 2) = 4.302653
    assert p_train["p"] == pytest.approx(stats.t_two_sided_p(want / want_se, 2))
    assert p_train["p_holm"] == pytest.approx(p_train["p"])  # one training-loss row: Holm changes nothing
    (p_held,) = [p for p in s["paired"] if p["metric"] == "heldout"]
    assert math.isnan(p_held["p_holm"])
    assert len(s["notes"]) == 2 and any("seed 3" in n for n in s["notes"])
    assert any("mxfp4" in n and "differ" in n for n in s["notes"])
    out = tmp_path / "out"
    for f in ("runs.csv", "gaps.csv", "paired.csv", "alpha.csv", "summary.json", "summary.md", "loss_curves.png"):
        assert (out / f).is_file(), f
    assert not (out / "gap_vs_size.png").exists()  # one size: no plot against size; two sizes get one
    from fp4lab.study import plots

    plots.gap_vs_size(s["gaps"] + [{**g, "size": "tiny2", "params": 2 * g["params"]} for g in s["gaps"]],
                      out / "gap_vs_size.png")
    assert (out / "gap_vs_size.png").stat().st_size > 1000
    assert p_train["detectable"] == stats.detectable_difference(p_train["sd"], 3)  # n seeds by default
    assert p_train["median"] == pytest.approx(sorted(diffs)[1])  # the middle one of three (gaps from losses)
    assert p_train["p_signed_rank"] == 0.25  # three negative differences: 2 of the 8 sign assignments as extreme
    assert (out / "paired.png").stat().st_size > 1000
    runs = read_csv(out / "runs.csv")
    assert len(runs) == 3 * 3 + 3 and {r["status"] for r in runs} == {"done", "partial"}
    assert "ufp4 − e2m1-ref" in (out / "summary.md").read_text()
    assert summary.window_size(20, 0.1) == 2 and summary.window_size(5, 0.1) == 1
    with pytest.raises(InputError, match="window"):
        summary.summarize(root, out, window=0)


def test_summarize_loss_drop_timing(tmp_path):
    """Crossing steps, delays against the bf16 run of the same seed, and the fit of the gap on the delay: a gap
    that is exactly 0.5 points per 10 steps of delay gives r² 1 and slope 5 per 100 steps."""
    root = tmp_path / "runs"
    delays = {0: 10, 1: 30, 2: 60, 3: 20}  # steps (one evaluation every 10 steps)

    def curve(drop_at, final):  # 5.0 before the drop, 1.5 after it, ``final`` over the last two evaluations
        return [(5.0 if 10 * (i + 1) < drop_at else 1.5, 2.0) for i in range(18)] + [(final, 2.0)] * 2

    for seed, d in delays.items():
        _fake_run(root, "s", "bf16", seed, curve(50 + 10 * seed, 1.0))
        _fake_run(root, "s", "ufp4", seed, curve(50 + 10 * seed + d, 1.0 + 0.0005 * d))
    _fake_run(root, "s", "mxfp4", 0, [(5.0, 2.0)] * 18 + [(1.2, 2.0)] * 2)  # never reaches 1.5 before the window
    s = summary.summarize(root, tmp_path / "out", plots=False, crossing_levels=(1.5, 1.2, 1.0))
    rows = {(r["recipe"], r["seed"], r["level"]): r for r in s["crossings"]}
    assert rows[("ufp4", 2, 1.5)]["step"] == 130 and rows[("ufp4", 2, 1.5)]["baseline_step"] == 70
    assert rows[("ufp4", 2, 1.5)]["delay"] == 60 and rows[("ufp4", 2, 1.5)]["gap_train"] == pytest.approx(3.0)
    assert rows[("mxfp4", 0, 1.5)]["step"] == 190 and rows[("mxfp4", 0, 1.5)]["delay"] == 140
    assert rows[("ufp4", 1, 1.0)]["step"] is None and rows[("ufp4", 1, 1.0)]["delay"] is None
    timing = {(t["level"], t["recipe"]): t for t in s["timing"]}
    fit = timing[(1.5, "ufp4")]
    assert fit["n"] == 4 and fit["never"] == 0
    assert fit["r2"] == pytest.approx(1.0) and fit["slope"] == pytest.approx(5.0)
    assert fit["intercept"] == pytest.approx(0.0, abs=1e-9)  # the gap is the delay's alone
    assert timing[(1.5, "(all)")]["n"] == 5
    assert math.isnan(timing[(1.2, "ufp4")]["r2"])  # every run reaches 1.2 in the final window: no delay to fit
    assert timing[(1.0, "ufp4")]["n"] == 0 and timing[(1.0, "ufp4")]["never"] == 4  # ufp4 ends above 1.0
    assert [t["recipe"] for t in s["timing"]][:3] == ["(all)", "mxfp4", "ufp4"]  # level 1.5 first, (all) first
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "Loss-drop timing" in md and "| s | 1.5 | ufp4 | 4 | 0 | 1 | 5 | " in md
    assert len(read_csv(tmp_path / "out" / "crossings.csv")) == 5 * 3
    from fp4lab.study import plots

    plots.gap_vs_delay(s["crossings"], s["timing"], tmp_path / "timing.png")  # a panel per level, NaN fits too
    assert (tmp_path / "timing.png").stat().st_size > 1000
    assert not (tmp_path / "plain").exists()
    summary.summarize(root, tmp_path / "plain", plots=False)
    assert not (tmp_path / "plain" / "timing.csv").exists()
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(InputError, match="crossing level"):
            summary.summarize(root, tmp_path / "bad", plots=False, crossing_levels=(bad,))


# ---- command line -----------------------------------------------------------------------------------------------


def _cli(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["pretrain.py", *argv])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    return exc.value.code


def test_cli(monkeypatch, tmp_path, corpus_dir, capsys):
    assert _cli(monkeypatch, "--help") == 0
    assert "summarize" in capsys.readouterr().out
    assert _cli(monkeypatch, "corpus", "--corpus", str(corpus_dir), "--glob", "*.py") == 0
    assert "heldout_files" in capsys.readouterr().out
    assert _cli(monkeypatch, "train", "--out", str(tmp_path / "r"), "--recipe", "nope") == 2
    assert capsys.readouterr().err.startswith("error: unknown recipe 'nope'")
    args = ["train", "--out", str(tmp_path / "r"), "--corpus", str(corpus_dir), "--corpus-glob", "*.py",
            "--recipe", "nvfp4", "--steps", "2", "--batch", "2", "--eval-every", "2", "--eval-tokens", "128",
            "--d-model", "64", "--layers", "1", "--heads", "2", "--ffn", "128", "--seq-len", "64", "--no-progress"]
    assert _cli(monkeypatch, *args) == 0
    assert "done at step 2" in capsys.readouterr().out
    assert _cli(monkeypatch, "init", str(tmp_path / "study")) == 0
    assert _cli(monkeypatch, "study", str(tmp_path / "study" / "pilot.toml"), "--status", "--seeds", "0") == 0
    assert "0 of 5 runs done" in capsys.readouterr().out
    assert _cli(monkeypatch, "summarize", str(tmp_path / "r"), "--no-plots", "--crossing", "1.5") == 0
    assert (tmp_path / "r" / "summary" / "timing.csv").is_file()


RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


@pytest.mark.parametrize("plan, study", [("plan_h200_small.toml", "h200-small"),
                                         ("plan_h200_middle.toml", "h200-middle"),
                                         ("plan_h200_large.toml", "h200-large"), ("plan_h200_fp8.toml", "h200-fp8")])
def test_published_runs_are_those_of_their_plan(plan, study):
    """docs/results/runs.csv (every published run's final metrics) holds every run of a published plan, finished,
    with the plan's steps and tokens, and no other run of that study."""
    planned = {(r.size, r.recipe, r.seed): r.cfg for r in driver.load_plan(RESULTS / plan, out=RESULTS / "runs")}
    with open(RESULTS / "runs.csv", newline="") as f:
        rows = [row for row in csv.DictReader(f) if row["study"] == study]
    published = {(row["size"], row["recipe"], int(row["seed"])): row for row in rows}
    assert len(published) == len(rows) and set(published) == set(planned)
    for key, cfg in planned.items():
        row = published[key]
        assert row["status"] == "done", key
        seq_len = (cfg.model or SIZES[cfg.size]).seq_len
        assert int(row["steps"]) == cfg.steps and int(row["tokens"]) == cfg.steps * cfg.batch * seq_len, key
        assert np.isfinite(float(row["final_heldout"])), key


PUBLISH = RESULTS.parent.parent / "benchmarks" / "study_publish.py"


def test_published_study_summary_is_that_of_its_packs(tmp_path, monkeypatch):
    """docs/results/study's and study-secondary's tables are what the study's two summarize calls
    (benchmarks/study_publish.py, the commands in their READMEs) make of the packs, the README's gaps and four tests
    are those tables' numbers, and every packed run is one of examples/study/plan.toml's, with the plan's
    settings."""
    from fp4lab.study import pack

    publish = runpy.run_path(str(PUBLISH))
    monkeypatch.chdir(RESULTS.parent.parent)  # the folder column holds paths relative to the repository
    conf, sec = publish["summarize_study"]("docs/results/study/packs", (tmp_path / "c", tmp_path / "s"), plots=False)
    for name in ("runs.csv", "gaps.csv", "paired.csv", "paired_by_device.csv", "repeats.csv"):
        assert (tmp_path / "c" / name).read_text() == (RESULTS / "study" / name).read_text(), name
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == \
        sorted(n for n in publish["SECONDARY_KEEP"] if n != "README.md" and not n.endswith(".png"))  # no plots
    for name in ("gaps.csv", "paired.csv", "paired_by_device.csv", "crossings.csv", "timing.csv"):
        assert (tmp_path / "s" / name).read_text() == (RESULTS / "study-secondary" / name).read_text(), name
    readme = (RESULTS / "study" / "README.md").read_text().replace("\u2212", "-")  # the README's minus signs
    gap_rows = [r for r in publish["result_tables"](conf, sec).splitlines() if r.startswith("| `")]
    assert len(gap_rows) == len({g["recipe"] for g in conf["gaps"]}), gap_rows
    for row in gap_rows:  # "| `recipe` | seeds | gap ± se % | [ci] |": the same numbers on the recipe's README row
        recipe, rest = row[2:].split(" | ", 1)
        assert any(line.startswith(f"| {recipe} ") and line.endswith(f"| {rest}")
                   for line in readme.splitlines()), row
    fmt_p = publish["fmt_p"]
    for c in (c for c in conf["paired"] if c["metric"] == "train"):  # the four tests' row of the README
        assert (f"| {c['mean']:+.2f} | [{c['ci_low']:+.2f}, {c['ci_high']:+.2f}] | {fmt_p(c['p_holm'])} | "
                f"{c['median']:+.2f} | {fmt_p(c['p_signed_rank'])} |") in readme, (c["a"], c["b"])
    for c in (c for c in conf["paired_by_device"] if c["metric"] == "train"):  # its per-GPU columns
        assert f"| {c['mean']:+.2f} [{c['ci_low']:+.2f}, {c['ci_high']:+.2f}] |" in readme, (c["a"], c["device"])
    planned = {r.label: r for r in driver.load_plan("examples/study/plan.toml", out=tmp_path / "runs")}
    for where, rec in pack.load_packs("docs/results/study/packs"):
        run = planned[rec["label"]]
        assert rec["config"]["lr"] == run.cfg.lr and rec["config"]["steps"] == run.cfg.steps, where


def _slice_folder(folder: Path, runs: list[tuple[str, str]]) -> str:
    """A fetched slice's folder holding a packed record of each (label, status)."""
    folder.mkdir(parents=True)
    recs = [{"label": label, "size": "s", "recipe": "r", "seed": 0, "repeat": False, "status": status,
             "config": {}, "identity": {}, "rows": []} for label, status in runs]
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (folder / "slice.json").write_text("{}")
    return str(folder)


def test_publish_adds_slices_as_new_compressed_packs(tmp_path):
    """study_publish.add_slices: the next slice numbers, gzip files that unpack to the slice's own bytes, and a
    folder that is not a slice's pack is refused before anything is written."""
    import gzip

    publish = runpy.run_path(str(PUBLISH))
    packs = tmp_path / "packs"
    (packs / "slice-03").mkdir(parents=True)
    new = [_slice_folder(tmp_path / f"out{i}" / "slice", [(f"run{i}", "done")]) for i in range(2)]
    added = publish["add_slices"](new, packs)
    assert [p.name for p in added] == ["slice-04", "slice-05"]
    assert gzip.open(packs / "slice-05" / "runs.jsonl.gz").read() == (Path(new[1]) / "runs.jsonl").read_bytes()
    assert (packs / "slice-04" / "slice.json.gz").read_bytes()[3] == 0  # no name in the header (gzip -n)
    with pytest.raises(InputError, match="not a slice's pack"):
        publish["add_slices"]([_slice_folder(tmp_path / "out2" / "slice", [("run2", "done")]), str(tmp_path)], packs)
    assert sorted(p.name for p in packs.iterdir()) == ["slice-03", "slice-04", "slice-05"]


def test_publish_refuses_a_finished_run_twice_before_adding_anything(tmp_path):
    """A slice whose finished run is finished in a pack already, or in another slice of the same call, is refused
    with both places named, and no slice of the call is added; partial runs may repeat (the next slice reruns
    them)."""
    publish = runpy.run_path(str(PUBLISH))
    packs = tmp_path / "packs"
    packs.mkdir()
    publish["add_slices"]([_slice_folder(tmp_path / "a", [("run0", "done"), ("run1", "partial")])], packs)
    again = _slice_folder(tmp_path / "b", [("run0", "done")])
    fresh = _slice_folder(tmp_path / "c", [("run2", "done"), ("run1", "done")])
    with pytest.raises(InputError, match=r"run0 is finished in both .*slice-01.* and .*b/runs.jsonl:1"):
        publish["add_slices"]([fresh, again], packs)
    with pytest.raises(InputError, match="run2 is finished in both"):
        publish["add_slices"]([fresh, fresh], packs)
    assert sorted(p.name for p in packs.iterdir()) == ["slice-01"]
    assert [p.name for p in publish["add_slices"]([fresh], packs)] == ["slice-02"]


# ---- corpus streaming and python-packages -----------------------------------------------------------------------


def test_parts_read_windows_from_the_files_without_loading_them(corpus, corpus_dir):
    whole = corpus.train.array()
    assert whole.size == corpus.train.size == sum((corpus_dir / f).stat().st_size + 1 for f in corpus.train_files)
    rng = np.random.default_rng(1)
    for off, n in [(0, 1), (0, 700), (599, 3), (whole.size - 5, 5)] + \
            [(int(o), int(k)) for o, k in zip(rng.integers(0, whole.size - 2000, 20), rng.integers(1, 2000, 20))]:
        assert np.array_equal(corpus.train.read(off, n), whole[off:off + n]), (off, n)
    for order in (0, 3):  # a part gives the windows of its bytes in memory
        assert np.array_equal(data.train_batch(corpus.train, 2, 5, 4, 64, order),
                              data.train_batch(whole, 2, 5, 4, 64, order))
    assert not np.array_equal(data.train_batch(corpus.train, 2, 5, 4, 64, 1), data.train_batch(whole, 2, 5, 4, 64))
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    h.update(whole.tobytes())
    h.update(corpus.heldout.array().tobytes())
    assert corpus.fingerprint == h.hexdigest()
    with pytest.raises(InputError, match="outside"):
        corpus.train.read(whole.size - 1, 2)


def test_python_packages_corpus(tmp_path, monkeypatch):
    """--corpus python-packages: every *.py under the interpreter's site-packages (nested site-packages,
    __pycache__ and hidden folders skipped; file names that are not UTF-8 kept), the usual path-hash split, the
    name and fingerprint recorded; a file that changes after loading is an error, not silently other data."""
    site = tmp_path / "site-packages"
    for i in range(30):
        (site / f"pkg{i % 3}").mkdir(parents=True, exist_ok=True)
        (site / f"pkg{i % 3}" / f"m{i}.py").write_text(f"x = {i}\n" * 50)
    for skipped in ("__pycache__/c.py", ".hidden/h.py", "pkg0/site-packages/v.py", "pkg0/data.txt"):
        (site / skipped).parent.mkdir(parents=True, exist_ok=True)
        (site / skipped).write_text("skip me")
    odd = os.fsdecode(b"pkg1/caf\xe9.py")  # a Latin-1 file name
    (site / odd).write_text("y = 1\n" * 50)
    monkeypatch.setattr(data, "site_packages_dir", lambda: site)
    c = data.load_corpus(data.PYTHON_PACKAGES)
    files = set(c.train_files) | set(c.heldout_files)
    assert len(files) == 31 and odd in files and not any("skip" in (site / f).read_text() for f in files)
    assert set(c.heldout_files) == ({f for f in files if data.is_heldout(f)} or {min(files, key=data.path_digest)})
    assert c.describe()["name"] == "python-packages" and c.describe()["root"] == str(site)
    assert c.fingerprint == data.load_corpus(site, "*.py").fingerprint
    (site / c.train_files[0]).write_text("shorter")
    with pytest.raises(InputError, match="changed since"):
        c.train.array()


def test_python_packages_is_a_plan_and_run_setting(tmp_path, corpus_dir, monkeypatch):
    monkeypatch.setattr(data, "site_packages_dir", lambda: corpus_dir)
    path = _plan(tmp_path, corpus_dir)
    path.write_text(path.read_text().replace(f'corpus = "{corpus_dir}"', 'corpus = "python-packages"'))
    runs = driver.select(driver.load_plan(path), seeds=[0], recipes=["bf16"])
    assert runs[0].cfg.corpus == "python-packages"  # not taken relative to the plan's folder
    train(replace(runs[0].cfg, progress=False))
    meta = json.loads(Path(runs[0].cfg.out, "config.json").read_text())
    assert meta["corpus"]["name"] == "python-packages"
    assert meta["identity"]["corpus_fingerprint"] == data.load_corpus(corpus_dir, "*.py").fingerprint


# ---- packed slices, code versions, reruns -----------------------------------------------------------------------


def _two_runs(tmp_path, corpus_dir, out="runs"):
    runs = driver.select(driver.load_plan(_plan(tmp_path, corpus_dir), out=tmp_path / out), seeds=[0])
    return runs, driver.run_plan(runs, progress=False, say=lambda s: None)


def test_pack_a_slice_and_run_only_what_is_missing(tmp_path, corpus_dir):
    """A slice's results go into two small files; a later slice on a fresh machine skips what the packs hold as
    done; a pack is never overwritten; summaries from packs equal those from the run folders."""
    from fp4lab.study import pack

    runs, done = _two_runs(tmp_path, corpus_dir)
    paths = pack.pack_slice(done, tmp_path / "packs" / "slice1", {"command": ["test"]})
    assert [p.name for p in paths] == ["runs.jsonl", "slice.json"]
    assert sum(p.stat().st_size for p in paths) < 20_000
    with pytest.raises(OutputError, match="written once"):
        pack.pack_slice(done, tmp_path / "packs" / "slice1", {})
    records = pack.load_packs(tmp_path / "packs")
    assert [r["label"] for _, r in records] == [r.label for r in runs]
    assert all(r["status"] == "done" and r["identity"]["code_version"] == code_version() for _, r in records)
    assert json.loads(paths[1].read_text())["runs"] == {r.label: "done" for r in runs}
    # a fresh machine: no run folders, the packs say both are done
    fresh = driver.select(driver.load_plan(_plan(tmp_path, corpus_dir), out=tmp_path / "fresh"), seeds=[0, 1])
    skip = pack.done_runs(records, fresh)
    assert sorted(skip) == sorted(r.label for r in runs)
    said: list[str] = []
    out = driver.run_plan(fresh, progress=False, say=said.append, skip=frozenset(skip))
    assert [s for _, s in out] == ["done (packed)", "done (packed)", "done", "done"]
    assert all("seed1" in line for line in said) and not Path(fresh[0].cfg.out).exists()
    a = summary.summarize(tmp_path / "runs", tmp_path / "s1", pairs=(("ufp4", "bf16"),), plots=False)
    b = summary.summarize(tmp_path / "packs", tmp_path / "s2", pairs=(("ufp4", "bf16"),), plots=False)
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("s1", "s2"))
    assert a["gaps"] == b["gaps"] and a["paired"] == b["paired"] and len(a["gaps"]) == 2


def test_runs_csv_names_the_device_of_each_run(tmp_path, corpus_dir):
    """runs.csv's device: the run's done.json names it; a pack written before done.json did takes its slice.json's
    (plain or compressed); neither: empty."""
    import gzip

    from fp4lab.study import pack

    runs, done = _two_runs(tmp_path, corpus_dir)
    got = summary.summarize(tmp_path / "runs", tmp_path / "s0", plots=False)
    assert [r["device"] for r in got["runs"]] == ["cpu", "cpu"]
    paths = pack.pack_slice(done, tmp_path / "packs" / "a", {"device": "NVIDIA H100 80GB HBM3"})
    records = [json.loads(line) for line in paths[0].read_text().splitlines()]
    for rec in records:
        del rec["done"]["device"]
    paths[0].write_text("".join(json.dumps(rec) + "\n" for rec in records))
    got = summary.summarize(tmp_path / "packs", tmp_path / "s1", plots=False)
    assert [r["device"] for r in got["runs"]] == ["NVIDIA H100 80GB HBM3"] * 2
    paths[1].with_suffix(".json.gz").write_bytes(gzip.compress(paths[1].read_bytes()))
    paths[1].unlink()
    assert pack.slice_device(str(paths[0])) == "NVIDIA H100 80GB HBM3"
    (paths[1].parent / "slice.json.gz").unlink()
    got = summary.summarize(tmp_path / "packs", tmp_path / "s2", plots=False)
    assert [r["device"] for r in got["runs"]] == ["", ""]
    assert "device" in (tmp_path / "s2" / "runs.csv").read_text().splitlines()[0].split(",")
    assert (tmp_path / "s2" / "paired_by_device.csv").read_text().splitlines() == [",".join(summary.BY_DEVICE_COLUMNS)]


def test_paired_differences_split_by_the_gpu_of_each_seed():
    """A seed's device is the one GPU of all runs of its difference and their baselines, else "mixed"; each
    device's seeds get their own mean, SE and t-interval (none for one seed)."""
    devices = {("s", "a", 0): "H200", ("s", "b", 0): "H200", ("s", "bf16", 0): "H200",
               ("s", "a", 1): "H100", ("s", "b", 1): "H100", ("s", "bf16", 1): "H100",
               ("s", "a", 2): "H100", ("s", "b", 2): "H100", ("s", "bf16", 2): "H100",
               ("s", "a", 3): "H100", ("s", "b", 3): "H200", ("s", "bf16", 3): "H200",
               ("s", "a", 4): "", ("s", "b", 4): "H200"}
    on = [summary.seed_device(devices, "s", ["a", "b", "bf16"], seed) for seed in range(5)]
    assert on == ["H200", "H100", "H100", "mixed: H100 + H200", "mixed: ? + H200"]
    rows = summary.split_by_device([0, 1, 2, 3], [1.0, 2.0, 4.0, -1.0], on[:4])
    assert [(r["device"], r["n"], r["seeds"]) for r in rows] == \
        [("H200", 1, "0"), ("H100", 2, "1 2"), ("mixed: H100 + H200", 1, "3")]
    h100 = rows[1]
    assert h100["mean"] == 3.0 and h100["se"] == 1.0
    assert h100["ci_high"] - h100["mean"] == pytest.approx(12.7062047, rel=1e-6)  # t(0.975, 1)
    assert math.isnan(rows[0]["ci_low"]) and math.isnan(rows[0]["se"])


def test_packs_of_another_code_version_or_settings_are_refused(tmp_path, corpus_dir, monkeypatch):
    from fp4lab.study import pack

    runs, done = _two_runs(tmp_path, corpus_dir)
    pack.pack_slice(done, tmp_path / "packs" / "a", {})
    records = pack.load_packs(tmp_path / "packs")
    other = driver.select(driver.load_plan(_plan(tmp_path, corpus_dir), out=tmp_path / "o"), seeds=[0])
    monkeypatch.setattr(pack, "code_version", lambda: "0.1.0+000000000000")
    with pytest.raises(InputError, match="one study, one code version"):
        pack.done_runs(records, other)
    monkeypatch.undo()
    changed = [replace(r, cfg=replace(r.cfg, lr=1e-3)) for r in other]
    with pytest.raises(InputError, match="lr = 0.003"):
        pack.done_runs(records, changed)
    with pytest.raises(InputError, match="trained on corpus"):
        pack.done_runs(records, other, fingerprint=lambda cfg: "0" * 16)
    assert sorted(pack.done_runs(records, other, fingerprint=lambda cfg: data.load_corpus(
        cfg.corpus, cfg.corpus_glob).fingerprint)) == sorted(r.label for r in other)
    pack.pack_slice(done, tmp_path / "packs" / "b", {})  # the same finished runs packed twice
    with pytest.raises(InputError, match="finished in both"):
        pack.done_runs(pack.load_packs(tmp_path / "packs"), other)
    bad = tmp_path / "bad" / "runs.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"label": "x"}\n')
    with pytest.raises(InputError, match="runs.jsonl:1 is not a packed run"):
        pack.load_packs(bad.parent)


def test_compressed_packs_read_like_plain_ones(tmp_path, corpus_dir, monkeypatch):
    """A kept pack may be gzip-compressed: the same records; a corrupt or oversized one is a one-line error."""
    import gzip

    from fp4lab.study import pack

    runs, done = _two_runs(tmp_path, corpus_dir)
    plain = pack.pack_slice(done, tmp_path / "packs" / "a", {})[0]
    expected = [rec for _, rec in pack.load_packs(tmp_path / "packs")]
    (tmp_path / "packs" / "a" / "runs.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    got = pack.load_packs(tmp_path / "packs")
    assert [rec for _, rec in got] == expected and got[0][0].endswith("runs.jsonl.gz:1")
    fresh = driver.select(driver.load_plan(_plan(tmp_path, corpus_dir), out=tmp_path / "fresh"), seeds=[0])
    assert sorted(pack.done_runs(got, fresh)) == sorted(r.label for r in runs)
    (tmp_path / "packs" / "a" / "slice.json").unlink(missing_ok=True)
    (tmp_path / "packs" / "a" / "slice.json.gz").write_bytes(gzip.compress(b'{"device": "' + b"x" * 200 + b'"}'))
    monkeypatch.setattr(pack, "MAX_PACK_BYTES", 100)
    with pytest.raises(InputError, match="unpacks to more than"):
        pack.load_packs(tmp_path / "packs")
    with pytest.raises(InputError, match="slice.json.gz unpacks to more than"):  # the slice file beside it too
        pack.slice_device(got[0][0].rsplit(":", 1)[0])
    monkeypatch.undo()
    (tmp_path / "packs" / "a" / "runs.jsonl.gz").write_bytes(b"\x1f\x8b\x08not gzip")
    with pytest.raises(InputError, match="cannot read .*runs.jsonl.gz"):
        pack.load_packs(tmp_path / "packs")


def test_an_unfinished_packed_run_gives_way_to_its_finished_rerun(tmp_path, corpus_dir):
    """A slice packs the runs it cut off as partial; a later slice reruns them; the summary keeps the finished
    record wherever it lies, and still refuses two finished ones."""
    from fp4lab.study import pack

    runs, done = _two_runs(tmp_path, corpus_dir)
    pack.pack_slice(done, tmp_path / "packs" / "b", {})
    lines = (tmp_path / "packs" / "b" / "runs.jsonl").read_text().splitlines()
    cut = [json.loads(line) for line in lines]
    for rec in cut:
        rec.update(status="partial", done=None, rows=rec["rows"][:1])
    expected = summary.summarize(tmp_path / "packs", tmp_path / "s0", plots=False)
    for name in ("a", "c"):  # packed before the finished runs, then after them
        part = tmp_path / "packs" / name
        part.mkdir()
        (part / "runs.jsonl").write_text("".join(json.dumps(rec) + "\n" for rec in cut))
        got = summary.summarize(tmp_path / "packs", tmp_path / f"s-{name}", plots=False)
        assert json.dumps(got["gaps"]) == json.dumps(expected["gaps"])  # NaN SEs of one seed compare as text
        assert [r["status"] for r in got["runs"]] == ["done", "done"]
        (part / "runs.jsonl").unlink()
    pack.pack_slice(done, tmp_path / "packs" / "d", {})
    with pytest.raises(InputError, match="is in both"):
        summary.summarize(tmp_path / "packs", tmp_path / "s", plots=False)


def test_summarize_refuses_mixed_versions_corpora_and_duplicates(tmp_path, corpus_dir):
    from fp4lab.study import pack

    runs, done = _two_runs(tmp_path, corpus_dir)
    pack.pack_slice(done, tmp_path / "runs" / "pack", {})
    with pytest.raises(InputError, match="is in both"):  # a run folder and its pack: a rerun would hide one
        summary.summarize(tmp_path / "runs", tmp_path / "s", plots=False)
    (tmp_path / "runs" / "pack" / "runs.jsonl").unlink()
    cfg_path = Path(runs[1].cfg.out, "config.json")
    meta = json.loads(cfg_path.read_text())
    meta["identity"]["code_version"] = "0.0.9+abc"
    cfg_path.write_text(json.dumps(meta))
    with pytest.raises(InputError, match="2 code versions"):
        summary.summarize(tmp_path / "runs", tmp_path / "s", plots=False)
    s = summary.summarize(tmp_path / "runs", tmp_path / "s", plots=False, code_version=code_version())
    assert [r["recipe"] for r in s["runs"]] == ["bf16"]
    meta["identity"]["code_version"] = code_version()
    meta["identity"]["corpus_fingerprint"] = "0" * 16
    cfg_path.write_text(json.dumps(meta))
    with pytest.raises(InputError, match="2 corpora"):
        summary.summarize(tmp_path / "runs", tmp_path / "s", plots=False)


def test_negative_control_and_repeat_check(tmp_path, corpus_dir):
    """A labelled bf16 group with another data order pairs with bf16 (the negative control); a repeat group trains
    the same run again, stays out of the gaps, and repeats.csv finds it identical bit for bit (CPU)."""
    path = _plan(tmp_path, corpus_dir, recipes=("bf16",))
    path.write_text(path.read_text().split("[[runs]]")[0] + """
[[runs]]
sizes = ["tiny"]
recipes = ["bf16", "ufp4"]
seeds = [0]
[[runs]]
sizes = ["tiny"]
recipes = ["bf16"]
label = "bf16-order1"
seeds = [0]
train = { data_order = 1 }
[[runs]]
sizes = ["tiny"]
recipes = ["ufp4"]
seeds = [0]
repeat = true
""")
    runs = driver.load_plan(path)
    assert [r.label for r in runs] == ["tiny/bf16/seed0", "tiny/ufp4/seed0", "tiny/bf16-order1/seed0",
                                       "tiny/ufp4/seed0-repeat"]
    assert Path(runs[3].cfg.out).name == "seed0-repeat" and runs[3].cfg.replica == 1
    driver.run_plan(runs, progress=False, say=lambda s: None)
    s = summary.summarize(tmp_path / "runs", tmp_path / "s", plots=False, pairs=(("bf16-order1", "ufp4"),))
    gaps = {(g["recipe"], g["metric"]) for g in s["gaps"]}
    assert gaps == {(r, m) for r in ("ufp4", "bf16-order1") for m in ("train", "heldout")}
    neg = next(g for g in s["gaps"] if g["recipe"] == "bf16-order1" and g["metric"] == "train")
    assert neg["mean"] != 0  # another data order: other losses
    assert s["repeats"] == [{"size": "tiny", "recipe": "ufp4", "seed": 0, "rows": 2, "identical": True,
                             "max_abs_diff": 0.0}]
    assert "bf16-order1 − ufp4" in (tmp_path / "s" / "summary.md").read_text()
    with pytest.raises(InputError, match="a label names one recipe"):
        path.write_text(path.read_text().replace('recipes = ["bf16"]\nlabel', 'recipes = ["bf16", "ufp4"]\nlabel'))
        driver.load_plan(path)


def test_a_run_records_code_version_and_determinism(tmp_path, corpus_dir, corpus):
    cfg = _cfg(tmp_path, corpus_dir, steps=4, diag_every=0)
    train(cfg, stop_at=2, corpus=corpus)
    train(replace(cfg, deterministic=True), corpus=corpus)  # one session without: the run is not deterministic
    done = json.loads(Path(cfg.out, "done.json").read_text())
    assert done["code_version"] == code_version() and done["deterministic"] is False
    det = _cfg(tmp_path, corpus_dir, "det", steps=4, diag_every=0, deterministic=True)
    train(det, stop_at=2, corpus=corpus)
    train(det, corpus=corpus)
    assert json.loads(Path(det.out, "done.json").read_text())["deterministic"] is True
    assert json.loads(Path(det.out, "config.json").read_text())["identity"]["code_version"] == code_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+\+[0-9a-f]{12}", code_version())


def test_final_window_is_the_papers():
    """The final 1000 steps, or the final 10% of the evaluations if that is shorter."""
    steps = list(range(50, 20001, 50))  # 400 evaluations, 20000 steps: 10% = 2000 steps > 1000
    assert summary.window_size(len(steps), 0.1, steps, 1000) == 20
    short = list(range(50, 4601, 50))  # 92 evaluations: 10% = 10 of them (500 steps) < 1000 steps
    assert summary.window_size(len(short), 0.1, short, 1000) == 10
    assert summary.window_size(len(steps), 0.1, steps, None) == 40


def test_seeds_needed_matches_the_exact_paired_t_test():
    """Exact sample sizes of the two-sided paired t-test at 80% power (noncentral t; e.g. G*Power): effect
    size 1 -> 10 pairs, 0.5 -> 34, 0.25 -> 128 at level 0.05."""
    assert stats.seeds_needed(0.3, 0.3) == 10
    assert stats.seeds_needed(0.6, 0.3) == 34
    assert stats.seeds_needed(1.2, 0.3) == 128
    assert stats.seeds_needed(0.3, 0.3, alpha=0.05 / 8) > stats.seeds_needed(0.3, 0.3)
    assert stats.seeds_needed(float("nan")) is None
    for sd, alpha in ((0.3, 0.05), (0.78, 0.0125), (3.3, 0.0125)):  # the inverse: n seeds detect delta(n) ...
        for n in (8, 16, 32):
            delta = stats.detectable_difference(sd, n, alpha)
            assert stats.seeds_needed(sd, delta * 1.0001, alpha) <= n < stats.seeds_needed(sd, delta * 0.99, alpha)
    assert 0.48 < stats.detectable_difference(0.78, 32, 0.0125) < 0.49  # docs/study.md, "Seeds": 0.49
    assert stats.detectable_difference(1.0, 3, 0.0125) is None  # too few seeds for the approximation


def test_signed_rank_p_is_the_exact_sign_flip_distribution():
    """Wilcoxon's signed-rank p against every sign assignment of the (mid-)ranks, for small samples with ties and
    zeros; and against values of scipy.stats.wilcoxon(method="exact")."""
    def brute(values):
        nz = [v for v in values if v != 0]
        mags = sorted(abs(v) for v in nz)
        ranks = [sum(i + 1 for i, m in enumerate(mags) if m == abs(v)) / mags.count(abs(v)) for v in nz]
        t = sum(r for v, r in zip(nz, ranks) if v > 0)
        sums = [sum(r for r, up in zip(ranks, signs) if up) for signs in itertools.product((0, 1), repeat=len(nz))]
        return min(1.0, 2 * min(sum(x <= t for x in sums), sum(x >= t for x in sums)) / len(sums))

    rng = random.Random(0)
    for _ in range(150):
        values = [rng.choice((-3, -2, -1.5, -1, 0, 1, 1.5, 2, 3, 0.25)) for _ in range(rng.randint(1, 10))]
        if any(values):
            assert stats.signed_rank_p(values) == pytest.approx(brute(values), abs=1e-12), values
    assert stats.signed_rank_p([1, 2, 3, 4, 5]) == 2 / 32
    assert stats.signed_rank_p([0.5, -1.2, 3.3, 2.1, -0.4, 4.4, 1.0, 2.2]) == 0.078125  # scipy: 20 / 256
    assert math.isnan(stats.signed_rank_p([0.0, 0.0])) and math.isnan(stats.signed_rank_p([1.0, math.nan]))


def test_study_procs_runs_shards_and_packs(monkeypatch, tmp_path, corpus_dir, capsys):
    """--procs N: N shard processes (one here: each imports torch), then one pack of every run; a later call with
    --done-from runs nothing. The shard command lines: tests/test_study_hostile.py."""
    plan = _plan(tmp_path, corpus_dir, recipes=("bf16",))
    assert _cli(monkeypatch, "study", str(plan), "--procs", "1", "--seeds", "0,1", "--recipes", "bf16",
                "--pack", str(tmp_path / "p1")) == 0
    assert "2 of 2 runs done" in capsys.readouterr().out
    info = json.loads((tmp_path / "p1" / "slice.json").read_text())
    assert info["runs"] == {"tiny/bf16/seed0": "done", "tiny/bf16/seed1": "done"}
    assert list(info["logs"]) == ["shard0"] and info["logs"]["shard0"].startswith("exit 0: [1/2] tiny/bf16/seed0")
    assert _cli(monkeypatch, "study", str(plan), "--out", str(tmp_path / "fresh"), "--seeds", "0,1", "--recipes",
                "bf16", "--done-from", str(tmp_path / "p1")) == 0
    assert "2 of 2 runs done" in capsys.readouterr().out and not (tmp_path / "fresh").exists()


def test_t_distribution_and_holm():
    """Student's t against tabulated values, and Holm's adjustment on a worked example."""
    for t, df, p in ((2.228139, 10, 0.05), (12.7062, 1, 0.05), (1.0, 1, 0.5), (2.0, 1e9, 0.0455003)):
        assert stats.t_two_sided_p(t, df) == pytest.approx(p, rel=1e-4)
    assert stats.t_quantile(0.975, 10) == pytest.approx(2.228139, rel=1e-5)
    assert stats.t_quantile(0.975, 3) == pytest.approx(3.182446, rel=1e-5)
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])


def test_interaction_contrast(tmp_path):
    """A:B:C:D gives (gap_A - gap_B) - (gap_C - gap_D) per seed."""
    root = tmp_path / "runs"
    g = {"a": [1.0, 2.0, 1.5], "b": [0.5, 0.5, 1.0], "c": [2.0, 1.0, 3.0], "d": [0.0, 0.5, 0.5]}
    for seed in range(3):
        _fake_run(root, "s", "bf16", seed, [(2.0, 2.0)] * 10)
        for label, gaps in g.items():
            recipe = {"a": "ufp4", "b": "e2m1-ref", "c": "nvfp4", "d": "mxfp4"}[label]
            _fake_run(root, "s", recipe, seed, [(2.0 * (1 + gaps[seed] / 100), 2.0)] * 10)
    s = summary.summarize(root, tmp_path / "out", plots=False, pairs=(("ufp4", "e2m1-ref", "nvfp4", "mxfp4"),))
    (row,) = [p for p in s["paired"] if p["metric"] == "train"]
    want = [(g["a"][i] - g["b"][i]) - (g["c"][i] - g["d"][i]) for i in range(3)]
    assert row["a"] == "(ufp4 − e2m1-ref)" and row["b"] == "(nvfp4 − mxfp4)"
    assert row["mean"] == pytest.approx(sum(want) / 3)
    assert [float(x) for x in row["diffs"].split()] == pytest.approx(want, rel=1e-5)


@pytest.mark.subprocess
def test_slice_script_packs_then_skips_what_is_done(corpus_dir, tmp_path):
    """benchmarks/study_slice.sh from a copy of the code tree (STUDY_CODE). By default a slice takes whole seeds,
    one process per run (at most MAX_RUNS missing runs); with PROCS, the missing runs in plan order. Each slice
    packs what it trained, and a slice with DONE = the earlier packs trains nothing twice."""
    import shutil
    import subprocess

    root = Path(__file__).resolve().parents[1]
    code = tmp_path / "code"
    for part in ("fp4lab", "examples"):
        shutil.copytree(root / part, code / part, ignore=shutil.ignore_patterns("__pycache__"))
    plan = _plan(code / "examples", corpus_dir, recipes=("bf16",))  # 3 runs: bf16 seeds 0-1, ufp4 seed 0
    env = {**os.environ, "STUDY_CODE": str(code), "PLAN": str(plan.relative_to(code)), "MAX_MINUTES": "5",
           "DONE": str(tmp_path / "packs")}
    env.pop("PYTHONPATH", None)
    (tmp_path / "packs").mkdir()
    script = str(root / "benchmarks" / "study_slice.sh")

    def slice_(name: str, **extra: str) -> tuple[str, list[tuple[str, int, str]]]:
        out = tmp_path / "out" / name
        done = subprocess.run(["bash", script], env={**env, **extra, "OUT": str(out)}, capture_output=True,
                              text=True, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs = out / "slice" / "runs.jsonl"
        if not runs.is_file():
            return done.stdout, []
        kept = shutil.copytree(out / "slice", tmp_path / "packs" / name)  # as the packs of a study are kept:
        subprocess.run(["gzip", "-n", str(kept / "runs.jsonl"), str(kept / "slice.json")], check=True)  # compressed
        packed = [json.loads(line) for line in runs.read_text().splitlines()]
        return done.stdout, sorted((r["recipe"], r["seed"], r["status"]) for r in packed)

    said, packed = slice_("s1", MAX_RUNS="2")  # seed 0's two runs fit, seed 1's would make three
    assert "seeds 0, 2 processes" in said and packed == [("bf16", 0, "done"), ("ufp4", 0, "done")]
    assert "2 of 3 runs done" in (tmp_path / "out" / "s1" / "status.txt").read_text()
    fake = tmp_path / "bin"  # a daemon control that "starts": the slice then checks a CUDA client under it
    fake.mkdir()
    (fake / "nvidia-cuda-mps-control").write_text(  # logs its arguments, or with none the command on stdin
        f"#!/bin/sh\nif [ $# -eq 0 ]; then read -r c; echo \"$c\"; else echo \"$@\"; fi >> {tmp_path}/mps.log\n")
    (fake / "nvidia-cuda-mps-control").chmod(0o755)
    said, packed = slice_("s2", PROCS="1", MPS="1", PATH=f"{fake}:{os.environ['PATH']}")
    assert packed == [("bf16", 1, "done")]  # the slice runs with MPS or, as here without CUDA, without it
    mps = (tmp_path / "out" / "s2" / "mps.txt").read_text()
    if torch.cuda.is_available():
        assert mps.startswith("on"), mps
    else:
        assert mps.startswith("off: a CUDA client failed"), mps
        assert (tmp_path / "mps.log").read_text().split() == ["-d", "quit"]  # started, then quit at once
    said, packed = slice_("s3")
    assert "is done" in said and packed == []
    assert (tmp_path / "out" / "s3" / "status.txt").read_text().count("done (packed)") == 3


@pytest.mark.subprocess
def test_slices_script_runs_slices_back_to_back_within_its_budget(corpus_dir, tmp_path):
    """benchmarks/study_slices.sh: slices one after another, each skipping what the earlier ones packed, until
    nothing is left; none when the budget cannot hold one."""
    import shutil
    import subprocess

    root = Path(__file__).resolve().parents[1]
    code = tmp_path / "code"
    for part in ("fp4lab", "examples"):
        shutil.copytree(root / part, code / part, ignore=shutil.ignore_patterns("__pycache__"))
    plan = _plan(code / "examples", corpus_dir, recipes=("bf16",))  # 3 runs: bf16 seeds 0-1, ufp4 seed 0
    env = {**os.environ, "STUDY_CODE": str(code), "PLAN": str(plan.relative_to(code)), "MAX_RUNS": "2"}
    env.pop("PYTHONPATH", None)
    script = str(root / "benchmarks" / "study_slices.sh")
    done = subprocess.run(["bash", script], env={**env, "OUT": str(tmp_path / "out"), "BUDGET_MINUTES": "20"},
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    packed = {name: sorted((json.loads(line)["recipe"], json.loads(line)["seed"])
                           for line in (tmp_path / "out" / name / "runs.jsonl").read_text().splitlines())
              for name in ("slice-1", "slice-2")}
    assert packed == {"slice-1": [("bf16", 0), ("ufp4", 0)], "slice-2": [("bf16", 1)]}
    said = (tmp_path / "out" / "slices.txt").read_text().splitlines()
    assert said[0].startswith("slice 1: ") and said[2].startswith("slice 3: nothing left")
    assert not (tmp_path / "out" / "slice-3").exists()
    done = subprocess.run(["bash", script], env={**env, "OUT": str(tmp_path / "none"), "BUDGET_MINUTES": "0.5"},
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and "not enough for another" in done.stdout
    assert not (tmp_path / "none" / "slice-1").exists()


def test_compare_packs_finds_any_changed_loss(tmp_path, capsys):
    """benchmarks/study_compare_packs.py: a pack against itself has no differing row and speed ratio 1; a copy cut
    short (a probe slice) is compared on its rows; one changed loss bit makes it fail."""
    import gzip

    script = runpy.run_path(str(RESULTS.parent.parent / "benchmarks" / "study_compare_packs.py"))
    old = RESULTS / "study" / "packs" / "slice-03"
    assert script["main"]([str(old), str(old), "--json", str(tmp_path / "same.json")]) == 0
    same = json.loads((tmp_path / "same.json").read_text())
    assert same["differ"] == 0 and len(same["runs"]) == 13 and all(r["ratio"] == 1.0 for r in same["runs"])
    recs = [json.loads(line) for line in gzip.open(old / "runs.jsonl.gz", "rt")]
    for r in recs:
        r["status"], r["rows"] = "partial", r["rows"][:10]
    x = recs[3]["rows"][7]
    x["train_loss"] = float(np.nextafter(x["train_loss"], 10.0))
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rows = script["compare"](str(tmp_path / "probe"), str(old))
    assert [r["differ"] for r in rows].count(1) == 1 and sum(r["differ"] for r in rows) == 1
    assert all(r["rows"] == 10 and r["last_step"] == 500 for r in rows)
    changed = next(r for r in rows if r["differ"])  # one ulp of a loss near 1: a relative 2^-52 to 2^-53
    assert 2.0 ** -54 < changed["max_rel_diff"] <= 2.0 ** -52 and changed["last_rel_diff"] == 0.0
    assert all(r["max_rel_diff"] == 0.0 for r in rows if not r["differ"])
    assert script["main"]([str(tmp_path / "probe"), str(old)]) == 1
    out = capsys.readouterr().out
    assert "1 rows differ" in out and "1 differ (by up to " in out and "e-16 relative" in out
    for r in recs:  # runs that failed before their first row: nothing compared is a failure too
        r["status"], r["rows"] = "failed", []
    (tmp_path / "probe" / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert script["main"]([str(tmp_path / "probe"), str(old)]) == 1
    assert "0 rows compared; 0 rows differ" in capsys.readouterr().out
