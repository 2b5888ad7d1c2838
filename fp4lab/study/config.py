"""The configuration of one pretraining run (``TrainConfig``) and its checks.

``TrainConfig.from_dict`` reads a plan's table or a ``config.json`` (unknown keys and values of the wrong type are
an error, never reinterpreted); ``TrainConfig.check`` rejects values out of range with one line. The fields in
``RUNTIME_FIELDS`` stay out of a run's identity (``fp4lab.study.train.identity``), so a resumed run may change
them: they say how a session runs (where it writes, how often it checkpoints, what it records, its names), or,
for ``recipe`` and ``corpus``, name files whose contents the identity holds instead.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from fp4lab.errors import InputError
from fp4lab.recipes import get_recipe
from fp4lab.study import distributed
from fp4lab.study.model import SIZES, GPTConfig
from fp4lab.study.runfolder import check_label

RUNTIME_FIELDS: tuple[str, ...] = ("out", "progress", "device", "ckpt_every", "keep_checkpoint", "diag_every",
                                   "capture_steps", "capture_layers", "capture_rows", "recipe", "corpus",
                                   "parallel", "fsdp_params", "deterministic", "label", "replica")
MAX_SEED = 2**31 - 1
MAX_EVAL_TOKENS = 1 << 24    # held-out windows are int64: at most 128 MiB of them
MAX_STEPS = 10**9


@dataclass(frozen=True)
class TrainConfig:
    """One run. ``size`` names a ``SIZES`` entry (a label only when ``model`` is given)."""

    out: str = "runs/run"
    size: str = "small"
    model: GPTConfig | None = None
    recipe: str = "bf16"
    quantize_head: bool = False
    seed: int = 0
    steps: int = 2000
    batch: int = 32
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_tokens: int = 131072
    diag_every: int | None = None
    capture_steps: tuple[int, ...] = ()
    capture_layers: tuple[str, ...] = ("blocks.0.*",)
    capture_rows: int = 1024
    ckpt_every: int = 500
    keep_checkpoint: bool = True
    corpus: str | None = None
    corpus_glob: str | None = None
    heldout_every: int = 20
    device: str = "auto"
    progress: bool = True
    parallel: str = "none"
    fsdp_params: str = "bf16"
    deterministic: bool = False
    data_order: int = 0
    label: str | None = None     # the run's name in tables (default: the recipe's name)
    replica: int = 0             # 0: the run; 1: its repeat, for the bit-identity check

    def gpt(self) -> GPTConfig:
        """The model shape: ``model`` or ``SIZES[size]``."""
        if self.model is not None:
            return self.model
        if self.size not in SIZES:
            raise InputError(f"TrainConfig: size '{self.size}' is not one of {', '.join(SIZES)}; give a model")
        return SIZES[self.size]

    @property
    def diag_interval(self) -> int:
        """Steps between alpha diagnostics (0: none); ``diag_every = None`` follows ``eval_every``."""
        return self.eval_every if self.diag_every is None else self.diag_every

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["model"] = dataclasses.asdict(self.gpt())
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "TrainConfig":
        """From ``to_dict`` output or a plan's table: unknown keys and values of the wrong type are an error."""
        if not isinstance(d, dict):
            raise InputError(f"TrainConfig: expected a table of fields, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(map(str, set(d) - names))
        if unknown:
            raise InputError(f"TrainConfig: unknown field(s) {', '.join(unknown)[:200]}; known: "
                             f"{', '.join(sorted(names))}")
        kw = dict(d)
        if kw.get("model") is not None and not isinstance(kw["model"], GPTConfig):
            kw["model"] = _model(kw["model"], kw.get("size", cls.size))
        for key, kind in (("capture_steps", int), ("capture_layers", str), ("betas", float)):
            if key in kw:
                kw[key] = _seq(key, kw[key], kind)
        for f in dataclasses.fields(cls):
            default = f.default
            if f.name not in kw:
                continue
            if isinstance(default, (bool, int, float, str)) and not _fits(kw[f.name], default):
                raise InputError(f"TrainConfig: {f.name} = {clipped_repr(kw[f.name])}; "
                                 f"expected {type(default).__name__}")
            if f.name in ("diag_every", "corpus", "corpus_glob", "label") and kw[f.name] is not None:
                want = int if f.name == "diag_every" else str
                if isinstance(kw[f.name], bool) or not isinstance(kw[f.name], want):
                    raise InputError(f"TrainConfig: {f.name} = {clipped_repr(kw[f.name])}; expected {want.__name__}")
        return cls(**kw)

    def check(self) -> None:
        """One-line InputError for values out of range (finite, positive where it must be)."""
        for name in ("steps", "batch", "eval_every", "eval_tokens", "heldout_every"):
            if getattr(self, name) < 1:
                raise InputError(f"TrainConfig: {name} = {getattr(self, name)}; it must be at least 1")
        for name in ("seed", "warmup", "ckpt_every", "diag_interval", "capture_rows", "data_order", "replica"):
            if getattr(self, name) < 0:
                raise InputError(f"TrainConfig: {name} = {getattr(self, name)}; it must be non-negative")
        for name, top in (("seed", MAX_SEED), ("data_order", MAX_SEED), ("eval_tokens", MAX_EVAL_TOKENS),
                          ("steps", MAX_STEPS), ("batch", 1 << 20)):
            if getattr(self, name) > top:
                raise InputError(f"TrainConfig: {name} = {getattr(self, name)}; it must be at most {top}")
        for name in ("lr", "min_lr_ratio", "weight_decay", "grad_clip"):
            if not math.isfinite(getattr(self, name)):
                raise InputError(f"TrainConfig: {name} = {getattr(self, name)}; it must be finite")
        if not self.lr > 0 or not 0 <= self.min_lr_ratio <= 1:
            raise InputError(f"TrainConfig: lr = {self.lr}, min_lr_ratio = {self.min_lr_ratio}; need lr > 0 and a "
                             f"ratio in [0, 1]")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise InputError(f"TrainConfig: weight_decay = {self.weight_decay}, grad_clip = {self.grad_clip}; both "
                             "must be non-negative (grad_clip = 0: no clipping)")
        if len(self.betas) != 2 or not all(math.isfinite(b) and 0 <= b < 1 for b in self.betas):
            raise InputError(f"TrainConfig: betas = {list(self.betas)}; need two numbers in [0, 1)")
        bad = [s for s in self.capture_steps if not 1 <= s <= self.steps]
        if bad:
            raise InputError(f"TrainConfig: capture step(s) {bad[:5]} outside 1..{self.steps}")
        m = self.gpt()
        for name in ("vocab", "d_model", "layers", "heads", "ffn", "seq_len"):
            if not 1 <= getattr(m, name) <= (1 << 20):
                raise InputError(f"TrainConfig: model {name} = {getattr(m, name)}; it must be in 1..{1 << 20}")
        if m.vocab < 256 or not (math.isfinite(m.rope_base) and m.rope_base > 1):
            raise InputError(f"TrainConfig: model vocab = {m.vocab}, rope_base = {m.rope_base}; need a vocabulary of "
                             "at least 256 (bytes) and a finite rope_base > 1")
        if m.d_model % m.heads or (m.d_model // m.heads) % 2:
            raise InputError(f"TrainConfig: d_model = {m.d_model} with {m.heads} heads; the head width must be even")
        check_device_name(self.device)
        check_label(self.size, "TrainConfig: size")
        if self.label is not None:
            check_label(self.label, "TrainConfig: label")
        check_label(get_recipe(self.recipe).name, "TrainConfig: recipe name")  # shown in progress lines and tables
        if self.parallel not in distributed.MODES or self.fsdp_params not in distributed.FSDP_PARAMS:
            raise InputError(f"TrainConfig: parallel = {self.parallel!r}, fsdp_params = {self.fsdp_params!r}; "
                             f"expected one of {', '.join(distributed.MODES)} and of "
                             f"{', '.join(distributed.FSDP_PARAMS)}")


def clipped_repr(value: Any) -> str:
    """``ascii(value)`` cut to 80 characters, for one-line error messages."""
    return ascii(value)[:80]


def _seq(key: str, value: Any, kind: type) -> tuple:
    """``value`` as a tuple of ``kind`` (a list or tuple of them; for floats, ints too), else an InputError."""
    ok = isinstance(value, (list, tuple)) and all(
        not isinstance(v, bool) and isinstance(v, (int, float) if kind is float else kind) for v in value)
    if not ok:
        raise InputError(f"TrainConfig: {key} = {clipped_repr(value)}; expected a list of {kind.__name__}")
    return tuple(value)


def _model(value: Any, size: Any) -> GPTConfig:
    """A model table (fields default to ``SIZES[size]``, or ``GPTConfig()`` for other labels) as a GPTConfig."""
    if not isinstance(value, dict):
        raise InputError(f"TrainConfig: model = {clipped_repr(value)}; expected a table of model fields")
    base = dataclasses.asdict(SIZES.get(size, GPTConfig()) if isinstance(size, str) else GPTConfig())
    bad = sorted(map(str, set(value) - set(base)))
    if bad:
        raise InputError(f"TrainConfig: unknown model field(s) {', '.join(bad)[:200]}")
    for k, v in value.items():
        if not _fits(v, base[k]):
            raise InputError(f"TrainConfig: model {k} = {clipped_repr(v)}; expected {type(base[k]).__name__}")
    return GPTConfig(**{**base, **value})


def check_device_name(name: str) -> None:
    """InputError unless ``name`` is auto, cpu, cuda or cuda:<index>."""
    if not (name in ("auto", "cpu", "cuda") or (name.startswith("cuda:") and name[5:].isdigit()
                                                 and len(name) < 12)):
        raise InputError(f"TrainConfig: device = {clipped_repr(name)}; expected auto, cpu, cuda or cuda:<index>")


def _fits(value: Any, default: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))
