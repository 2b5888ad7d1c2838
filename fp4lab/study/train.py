"""One pretraining run of the study GPT under a recipe: ``train(TrainConfig(...))``.

Every block linear is a ``QuantLinear`` of the recipe (``quantize_model``, streams from the qualified names and
the seed); the embedding, the norms and the head stay in high precision (the head too is quantized with
``quantize_head``). Same seed, same initial weights and batches for every recipe (``fp4lab.study.data``).
AdamW (weight decay on matrices and the embedding only), linear warmup then cosine decay to
``min_lr_ratio * lr``, gradient clipping, bf16 autocast on CUDA and fp32 on the CPU.

Files in the run folder ``cfg.out``:

* ``config.json``: the configuration, the recipe as TOML, the corpus summary, parameter count;
* ``metrics.csv`` / ``metrics.json``: one row per evaluation (``logs.METRIC_COLUMNS``): ``train_loss`` is the
  mean training loss of the steps since the previous evaluation, ``heldout_loss`` the loss on the fixed held-out
  windows (model in eval mode: quantized forward GEMMs, no SR draws), ``tokens_per_s`` the training throughput of
  the interval (evaluation excluded; the steps that run alpha diagnostics or captures included), ``elapsed_s``
  the run's wall time over all its sessions;
* ``alpha.csv``: attenuation per layer, operand and GEMM every ``diag_every`` steps (``fp4lab.study.diagnostics``);
* ``captures/step_<step>/<layer>.<x|w|dy>.npy``: operands of step ``<step>`` (1-based) of ``capture_layers``
  (X and dY: the first ``capture_rows`` tokens);
* ``checkpoint.pt``: model, optimizer, step, each QuantLinear's ``step``, RNG states, the open interval's sums and
  ``binding`` (the hash of the run's identity: configuration, recipe, corpus fingerprint, code version), written
  every ``ckpt_every`` steps, when a run stops early and at the end (deleted then unless ``keep_checkpoint``).
  A checkpoint is loaded only if its binding matches the run and its step lies in ``0..steps``; it is written
  only while the training loss is finite;
* ``diverged.json``: written instead of a checkpoint when the training loss of an interval is not finite (the
  step and the loss); the run stops with a ``DivergedError`` and is never resumed or marked done;
* ``.lock``: held (``fcntl.flock``) by the process training the run (``fp4lab.study.runfolder``);
* ``done.json``: written when the run has finished: the final row, the wall time, the code version,
  ``deterministic`` (true iff every session of the run ran with ``deterministic = True``) and ``device`` (the
  name of the GPU that finished it, ``torch.cuda.get_device_name``, or "cpu"); for FP8 recipes also
  ``fp8_rows``, per GEMM the operand rows
  converted to E4M3 and those that took the bf16 path, over the block linears and the steps (evaluation forwards
  included) of the process that finished the run.

A run folder with a checkpoint resumes from it; rows logged after the checkpoint are dropped first, so a resumed
run writes the same rows (on the CPU, the same bits) as an uninterrupted one. Its configuration must agree with
``config.json`` except for the fields in ``RUNTIME_FIELDS`` (and recipe or corpus paths, which are compared by
content), and so must the code version (``runfolder.code_version``).

``parallel = "ddp"`` or ``"fsdp"`` trains data-parallel under torchrun (``fp4lab.study.distributed``): ``batch``
is the global batch, split over the ranks; rank 0 writes the run folder (``config.json`` also records
``world_size``); ``tokens_per_s`` counts the tokens of all ranks. Checkpoints keep the one-process format, so a
run resumes under any mode and number of ranks.

``data_order`` (default 0) changes the order of the training batches and nothing else (same initial weights, same
SR streams): two runs of one recipe and seed that differ only in it are the study's negative control.

``deterministic = True`` runs with ``torch.use_deterministic_algorithms(True)`` (and
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` where unset): on CUDA, ops with a nondeterministic default (atomic
accumulation in backward passes) take their deterministic implementation, and ops without one warn. Without it, two
identical CUDA runs can differ in the last bits from the first step on, and the difference grows with training
(docs/study.md, "Repeatability").
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from fp4lab.errors import Fp4labError, InputError
from fp4lab.recipes import get_recipe, recipe_to_toml
from fp4lab.recipes.config import FP8_GEMM_DTYPES
from fp4lab.recipes.convert import layer_steps, quantize_model, set_layer_steps
from fp4lab.recipes.linear import QuantLinear
from fp4lab.study import diagnostics, distributed
from fp4lab.study.config import RUNTIME_FIELDS, TrainConfig, check_device_name, clipped_repr
from fp4lab.study.data import Corpus, eval_windows, load_corpus, train_batch
from fp4lab.study.logs import METRIC_COLUMNS, CsvLog, write_json, write_with
from fp4lab.study.model import GPT
from fp4lab.study.progress import RunProgress
from fp4lab.study.runfolder import RunLock, code_version


class DivergedError(Fp4labError, RuntimeError):
    """The training loss of a run is not finite (NaN or Inf): the run stops and is not resumed."""


@dataclass(frozen=True)
class RunResult:
    """How a call of ``train`` ended: ``status`` "done" or "paused" (stopped early, checkpoint written)."""

    status: str
    step: int
    out: Path
    rows: list[dict[str, Any]] = field(default_factory=list)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate of 0-based step ``step``: linear warmup over ``warmup`` steps, then cosine to the floor."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    p = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * min(p, 1.0)))


def build_model(cfg: TrainConfig) -> GPT:
    """The GPT of ``cfg`` (initialised from ``seed``) with its block linears converted to the recipe."""
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.gpt())
    recipe = get_recipe(cfg.recipe)
    skip = () if cfg.quantize_head else ("head",)
    quantize_model(model, recipe, seed=cfg.seed, skip=skip)
    keep = tuple(skip) + tuple(recipe.high_precision)
    for name, m in model.named_modules():
        if type(m) is torch.nn.Linear and not any(fnmatch.fnmatchcase(name, p) for p in keep):
            raise InputError(f"train: layer {name} ({m.in_features} -> {m.out_features}) does not fit the blocks of "
                             f"recipe '{recipe.name}'; use widths that are multiples of its block and RHT sizes")
    return model


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on parameters of two or more dimensions only (fused on CUDA)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    plain = [p for p in model.parameters() if p.ndim < 2]
    fused = all(p.is_cuda for p in model.parameters()) or None
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": plain, "weight_decay": 0.0}], lr=cfg.lr, betas=cfg.betas, fused=fused)


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA if available, else the CPU), ``cpu``, ``cuda`` or ``cuda:<i>``, checked against the machine."""
    check_device_name(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (device.index or 0) >= count:
            raise InputError(f"train: device {name}: this machine has {count} CUDA device(s)")
    return device


def _autocast(device: torch.device) -> Any:
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def evaluate(model: torch.nn.Module, windows: torch.Tensor, batch: int, device: torch.device) -> float:
    """Mean next-byte cross entropy (nats) of ``model`` on ``windows`` [n, T + 1], in eval mode."""
    was = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    for i in range(0, windows.shape[0], batch):
        w = windows[i:i + batch].to(device)
        with _autocast(device):
            logits = model(w[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum").double()
        count += w[:, 1:].numel()
    model.train(was)
    return float(total) / count


def identity(cfg: TrainConfig, corpus: Corpus) -> dict[str, Any]:
    """What must agree between the sessions of one run."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in RUNTIME_FIELDS}
    d["recipe_toml"] = recipe_to_toml(get_recipe(cfg.recipe))
    d["corpus_fingerprint"] = corpus.fingerprint
    d["code_version"] = code_version()
    return json.loads(json.dumps(d))


def binding(ident: dict[str, Any]) -> str:
    """blake2b-64 hex of a run's identity (canonical JSON): what ties a checkpoint to its run."""
    return hashlib.blake2b(json.dumps(ident, sort_keys=True).encode(), digest_size=8).hexdigest()


def _check_config(run: Path, cfg: TrainConfig, corpus: Corpus, model: GPT,
                  par: distributed.Parallel) -> dict[str, Any]:
    """Compare ``cfg`` with the run's ``config.json`` (InputError naming the first field that differs), then write
    it (rank 0); returns the run's identity."""
    path = run / "config.json"
    ident = identity(cfg, corpus)
    if path.is_file():
        old = _read_json(path).get("identity")
        if not isinstance(old, dict):
            raise InputError(f"train: {path} has no identity table; it is not a run's config.json")
        for key in sorted(set(old) | set(ident)):
            if old.get(key) != ident.get(key):
                raise InputError(f"train: {run} holds a run with {key} = {old.get(key)!r}, not {ident.get(key)!r}; "
                                 f"use another out folder")
    par.barrier()  # every rank has read config.json before rank 0 rewrites it
    if not par.is_main:
        return ident
    meta = {"config": cfg.to_dict(), "identity": ident, "corpus": corpus.describe(),
            "params": sum(p.numel() for p in model.parameters()), "torch": torch.__version__,
            "code_version": ident["code_version"]}
    if par.mode != "none":
        meta["world_size"] = par.world
    write_json(path, meta)
    return ident


def _rng_state(device: torch.device) -> dict[str, Any]:
    st = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        st["cuda"] = torch.cuda.get_rng_state(device)
    return st


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a run folder's file, or a one-line InputError naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:
        raise InputError(f"train: {path} is not readable JSON ({str(exc).splitlines()[0][:100]})") from None
    if not isinstance(data, dict):
        raise InputError(f"train: {path} holds a {type(data).__name__}, not a JSON object")
    return data


def _save_checkpoint(run: Path, model: GPT, opt: torch.optim.Optimizer, step: int, loop: dict[str, Any],
                     device: torch.device, par: distributed.Parallel, bound: str) -> None:
    msd, osd = par.state_dicts(model, opt)
    if not par.is_main:
        return
    state = {"model": msd, "optimizer": osd, "step": step, "layer_steps": layer_steps(model), "loop": loop,
             "rng": _rng_state(device), "binding": bound}
    write_with(run / "checkpoint.pt", lambda tmp: torch.save(state, tmp))


def _load_checkpoint(run: Path, model: GPT, opt: torch.optim.Optimizer, device: torch.device,
                     par: distributed.Parallel, bound: str, steps: int) -> tuple[int, dict]:
    """Restore a checkpoint of this run (``binding`` equal to ``bound``, step in 0..steps); anything else, from a
    truncated file to another run's checkpoint, is a one-line InputError (torch's own message is not shown)."""
    path = run / "checkpoint.pt"
    fix = "delete it to restart the run"
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols before refusing them
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)  # loaders move to device
    except MemoryError:
        raise InputError(f"train: {path}: not enough memory to read it") from None
    except Exception as exc:  # torch raises many types for truncated or foreign files; its text suggests unsafe
        raise InputError(f"train: {path} is not a readable checkpoint ({type(exc).__name__}); {fix}") from None
    if not isinstance(state, dict) or state.get("binding") != bound:
        raise InputError(f"train: {path} belongs to another run (configuration, corpus or code version differ); "
                         f"{fix}")
    step = state.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= steps:
        raise InputError(f"train: {path}: step {clipped_repr(step)} is outside 0..{steps}; {fix}")
    try:
        par.load(model, opt, state["model"], state["optimizer"])
        set_layer_steps(model, state["layer_steps"])
        torch.set_rng_state(state["rng"]["cpu"].cpu())
        if device.type == "cuda" and "cuda" in state["rng"]:
            torch.cuda.set_rng_state(state["rng"]["cuda"].cpu(), device)
        loop = dict(state["loop"])
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        raise InputError(f"train: {path} does not fit this run's model ({type(exc).__name__}); {fix}") from None
    return step, loop


DIVERGED = "diverged.json"


def run_status(out: str | Path) -> str:
    """"done", "diverged" (``DIVERGED``), "partial" (a checkpoint to resume from) or "missing"."""
    run = Path(out)
    if (run / "done.json").is_file():
        return "done"
    if (run / DIVERGED).is_file():
        return "diverged"
    return "partial" if (run / "checkpoint.pt").is_file() else "missing"


def _diverged(run: Path, step: int, loss: float, is_main: bool) -> DivergedError:
    """Record the divergence (rank 0) and return the error to raise."""
    if is_main:
        write_json(run / DIVERGED, {"step": step, "train_loss": repr(loss)})
    return DivergedError(f"train: {run} diverged: the training loss is {loss} by step {step} ({DIVERGED}); "
                         "lower the learning rate, or delete the folder to start again")


@dataclass
class _Loop:
    """State of the training loop that a checkpoint carries besides model and optimizer: the open evaluation
    interval's loss sum and step count, its wall time so far, the run's wall time over earlier sessions, and
    whether every session so far ran with deterministic algorithms."""

    loss_sum: torch.Tensor
    loss_steps: int
    mark: float
    elapsed0: float
    session: float
    deterministic: bool

    @classmethod
    def restore(cls, saved: dict[str, Any], device: torch.device, deterministic: bool) -> "_Loop":
        now = time.monotonic()
        return cls(torch.tensor(float(saved.get("loss_sum", 0.0)), dtype=torch.float64, device=device),
                   int(saved.get("loss_steps", 0)), now - float(saved.get("interval_s", 0.0)),
                   float(saved.get("elapsed_s", 0.0)), now, deterministic and bool(saved.get("deterministic", True)))

    def saved(self) -> dict[str, Any]:
        return {"loss_sum": float(self.loss_sum), "loss_steps": self.loss_steps, "interval_s": self.interval(),
                "elapsed_s": self.elapsed(), "deterministic": self.deterministic}

    def finite(self) -> bool:
        """Whether the open interval's loss sum is finite (a NaN or Inf step loss makes it not)."""
        return bool(torch.isfinite(self.loss_sum))

    def interval(self) -> float:
        return time.monotonic() - self.mark

    def elapsed(self) -> float:
        return self.elapsed0 + time.monotonic() - self.session

    def close(self, step: int, cfg: TrainConfig, heldout: float, interval: float) -> dict[str, Any]:
        """The log row of the interval ending at ``step``; opens the next interval."""
        seq = cfg.gpt().seq_len
        row = {"step": step, "tokens": step * cfg.batch * seq, "train_loss": float(self.loss_sum) / self.loss_steps,
               "heldout_loss": heldout, "lr": lr_at(step - 1, cfg),
               "tokens_per_s": self.loss_steps * cfg.batch * seq / interval, "elapsed_s": self.elapsed()}
        self.loss_sum.zero_()
        self.loss_steps = 0
        self.mark = time.monotonic()
        return row


@contextlib.contextmanager
def deterministic_algorithms(on: bool):
    """torch's deterministic algorithms (warn-only) inside the block when ``on``; the previous setting after it."""
    if not on:
        yield
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    prev = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev, warn_only=prev_warn)


def train(cfg: TrainConfig, deadline: float | None = None, stop_at: int | None = None,
          corpus: Corpus | None = None) -> RunResult:
    """Run (or resume, or skip if finished) ``cfg``; stop early with a checkpoint at the first step boundary after
    ``time.monotonic() >= deadline`` or at step ``stop_at``. ``corpus`` saves reloading it for every run. A run
    whose training loss stops being finite raises ``DivergedError`` (``diverged.json``)."""
    cfg.check()
    with deterministic_algorithms(cfg.deterministic):
        return _train(cfg, deadline, stop_at, corpus)


def _finished(run: Path, cfg: TrainConfig) -> RunResult | None:
    """The result of a run that has ended (done, or diverged: raised), else None."""
    status = run_status(run)
    if status == "diverged":
        record = _read_json(run / DIVERGED)
        raise DivergedError(f"train: {run} diverged at step {record.get('step')} ({DIVERGED}); delete the folder "
                            "to start again")
    if status == "done":
        rows = _read_json(run / "metrics.json").get("rows")
        return RunResult("done", cfg.steps, run, rows if isinstance(rows, list) else [])
    return None


def _train(cfg: TrainConfig, deadline: float | None, stop_at: int | None, corpus: Corpus | None) -> RunResult:
    run = Path(cfg.out)
    ended = _finished(run, cfg)
    if ended is not None:
        return ended
    try:
        run.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"train: cannot create the run folder {run}: {exc.strerror}") from None
    corpus = corpus or load_corpus(cfg.corpus, cfg.corpus_glob, cfg.heldout_every)
    par = distributed.setup(cfg.parallel, resolve_device(cfg.device), cfg.fsdp_params)
    with RunLock(run, enabled=par.is_main):
        ended = _finished(run, cfg)  # another process may have finished it while this one waited to start
        return ended if ended is not None else _train_locked(cfg, deadline, stop_at, corpus, run, par)


def _train_locked(cfg: TrainConfig, deadline: float | None, stop_at: int | None, corpus: Corpus, run: Path,
                  par: distributed.Parallel) -> RunResult:
    logs = CsvLog(run / "metrics.csv", METRIC_COLUMNS, run / "metrics.json")
    alpha_log = CsvLog(run / "alpha.csv", diagnostics.ALPHA_COLUMNS)
    device = par.device
    par.local_batch(cfg.batch)
    if par.mode == "fsdp" and device.type == "cpu" and cfg.fsdp_params == "fp32" \
            and (cfg.diag_interval or cfg.capture_steps):
        raise InputError("train: FSDP2 with fp32 parameters on the CPU runs without diagnostics and captures (they "
                         "read the gathered weights through numpy, which pins the storage that FSDP2 frees); set "
                         "diag_every = 0 and no capture_steps, or use fsdp_params = 'bf16' or ddp")
    model = build_model(cfg).to(device)
    net = par.wrap(model)
    opt = make_optimizer(model, cfg)
    bound = binding(_check_config(run, cfg, corpus, model, par))
    resume = run_status(run) == "partial"
    step, saved = _load_checkpoint(run, model, opt, device, par, bound, cfg.steps) if resume else (0, {})
    if par.is_main:
        logs.reset(step)
        alpha_log.reset(step)
    windows = torch.from_numpy(eval_windows(corpus.heldout, cfg.eval_tokens, cfg.gpt().seq_len))
    title = f"{cfg.size} {get_recipe(cfg.recipe).name} seed {cfg.seed}"
    loop = _Loop.restore(saved, device, cfg.deterministic)

    def checkpoint() -> None:
        if not loop.finite():
            raise _diverged(run, step, float(loop.loss_sum), par.is_main)
        _save_checkpoint(run, model, opt, step, loop.saved(), device, par, bound)

    with RunProgress(title, cfg.steps, step, cfg.progress and par.is_main) as bar:
        while step < cfg.steps:
            if (deadline is not None and par.any(time.monotonic() >= deadline)) \
                    or (stop_at is not None and step >= stop_at):
                break
            loss, alpha_rows = _train_step(model, opt, cfg, corpus, step, device, run, net, par)
            step += 1
            loop.loss_sum += loss.double()
            loop.loss_steps += 1
            if par.is_main:
                alpha_log.append(alpha_rows)
            if step % cfg.eval_every == 0 or step == cfg.steps:
                _sync(device)
                interval = loop.interval()
                if not loop.finite():
                    raise _diverged(run, step, float(loop.loss_sum) / loop.loss_steps, par.is_main)
                with par.whole_batches(model):
                    heldout = evaluate(model, windows, cfg.batch, device)
                row = loop.close(step, cfg, heldout, interval)
                if par.is_main:
                    logs.append([row])
                bar.update(step, row["tokens_per_s"], row["train_loss"], row["heldout_loss"])
                bar.log(f"{title} step {step}: train {row['train_loss']:.4f} held-out {row['heldout_loss']:.4f} "
                        f"{row['tokens_per_s']:,.0f} tok/s")
            else:
                bar.update(step, loss=float(loss) if step % 10 == 0 and par.is_main else None)
            if cfg.ckpt_every and step % cfg.ckpt_every == 0 and step < cfg.steps:
                checkpoint()
        checkpoint()
    if step < cfg.steps:
        par.barrier()
        return RunResult("paused", step, run, logs.rows)
    if par.is_main:
        fp8 = _fp8_rows(model)
        write_json(run / "done.json", {"step": step, "final": logs.rows[-1] if logs.rows else None,
                                       "elapsed_s": loop.elapsed(), "code_version": code_version(),
                                       "deterministic": loop.deterministic,
                                       "device": torch.cuda.get_device_name(device) if device.type == "cuda"
                                       else device.type, **({"fp8_rows": fp8} if fp8 else {})})
        if not cfg.keep_checkpoint:
            (run / "checkpoint.pt").unlink()
    par.barrier()  # rank 0's files are written before any rank looks at the run folder again
    return RunResult("done", step, run, logs.rows)


def _fp8_rows(model: torch.nn.Module) -> dict[str, dict[str, int]] | None:
    """FP8 recipes: ``QuantLinear.fp8_stats`` summed over the model's layers (None for other recipes)."""
    layers = [m for m in model.modules() if isinstance(m, QuantLinear) and m.recipe.gemm_dtype in FP8_GEMM_DTYPES]
    if not layers:
        return None
    out = {g: {"rows": 0, "bf16_rows": 0} for g in ("fprop", "dgrad", "wgrad")}
    for m in layers:
        for g, c in m.fp8_stats.items():
            out[g]["rows"] += c["rows"]
            out[g]["bf16_rows"] += c["bf16_rows"]
    return out


def _train_step(model: GPT, opt: torch.optim.Optimizer, cfg: TrainConfig, corpus: Corpus, step: int,
                device: torch.device, run: Path, net: torch.nn.Module,
                par: distributed.Parallel) -> tuple[torch.Tensor, list[dict[str, Any]]]:
    """One optimizer step on batch ``step`` (0-based) through ``net`` (``model`` or its DDP wrapper), this rank's
    share of it under ``par``: (the global batch's loss, the alpha rows, from this rank's tokens)."""
    s = step + 1
    lr = lr_at(step, cfg)
    for g in opt.param_groups:
        g["lr"] = lr
    batch = par.rows(train_batch(corpus.train, cfg.seed, step, cfg.batch, cfg.gpt().seq_len, cfg.data_order))
    tokens = torch.from_numpy(batch).to(device)
    want_alpha = bool(cfg.diag_interval) and s % cfg.diag_interval == 0
    capture = run / "captures" / f"step_{s:07d}" if s in cfg.capture_steps and par.is_main else None
    with diagnostics.watch(model, s, want_alpha, capture, cfg.capture_layers, cfg.capture_rows) as rows:
        with _autocast(device):
            logits = net(tokens[:, :-1])
        loss, logged = par.loss(logits, tokens[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    return logged, rows
