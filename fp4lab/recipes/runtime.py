"""What a ``QuantLinear`` computes, as functions of tensors and a layer spec: no module, no autograd.

A layer is described by a ``LayerSpec`` (its recipe, its RHT sign seed, its data-parallel token shard), encoded as
one short string: that string is what the custom ops (``fp4lab.recipes.ops``) and compiled graphs carry, so a
graph never holds a Python object and every layer of one recipe shares one compiled graph. ``runtime(spec)``
decodes it once into a ``LayerRuntime`` (formats resolved, plans cached by the kernels).

Per training step of a layer with input X [M, K] and weight W [N, K]:

* ``forward``: X is fake-quantized along K (FPROP operand) and, when W needs a gradient, along M (the WGRAD
  operand, returned for backward to save in place of X); W along K. ``Y = Xk Wk^T`` (+ bias).
* ``backward``: dY along N (DGRAD) and along M (WGRAD); W along N. ``dX = dYn Wn``, ``dW = dYm^T Xm``,
  ``db = sum of dY over M``; then the layer's step advances (recipes that round stochastically).

Stochastic rounding reads its Philox keys from the layer's int64 [2] state (stream, step) in device memory
(``fp4lab.kernels.sr_keys`` on CUDA; the same arithmetic on the host for CPU tensors, ``streams.sr_seed``), so
eager steps, compiled graphs and CUDA-graph replays draw the same bits without the host knowing the step.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import torch

from fp4lab.errors import InputError
from fp4lab.formats.registry import get_format
from fp4lab.numerics.options import Blocking
from fp4lab.recipes import backend, fp8_gemm, streams
from fp4lab.recipes.config import FP8_GEMM_DTYPES, Gemm, Operand, Recipe, recipe_to_toml
from fp4lab.recipes.operands import fake_quant_operands, gemm_torch_dtype
from fp4lab.recipes.scaled_mm import scaled_mm

GEMMS: tuple[Gemm, ...] = ("fprop", "dgrad", "wgrad")
EMPTY_SHAPE = (0,)  # an output a call does not produce (custom ops return tensors, never None)

_RECIPES: dict[str, Recipe] = {}
_SHARDS: dict[str, Any] = {}


def _register(table: dict[str, Any], name: str, toml_text: str, obj: Any) -> str:
    """``obj``'s key in ``table``: its name made safe, ``@``, and a digest of its TOML text (so two objects of one
    name but different contents get different keys); the first object of a key is the one kept."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:40]
    key = f"{safe}@{hashlib.blake2b(toml_text.encode('utf-8'), digest_size=8).hexdigest()}"
    table.setdefault(key, obj)
    return key


def register_recipe(recipe: Recipe) -> str:
    """The key of ``recipe`` in this process (``_register``), registered."""
    return _register(_RECIPES, recipe.name, recipe_to_toml(recipe), recipe)


_FORMATS: dict[str, Any] = {}


def register_format(fmt: Any) -> str:
    """The key of a ``QuantFormat`` in this process (``_register`` over its spec), registered."""
    from fp4lab.formats.spec_io import model_to_toml

    return _register(_FORMATS, fmt.name, model_to_toml(fmt), fmt)


def registered_format(key: str) -> Any:
    """The format registered under ``key`` (``register_format``)."""
    if key not in _FORMATS:
        raise InputError(f"fake_quant: format key '{key}' is not registered in this process (register_format)")
    return _FORMATS[key]


def register_shard(shard: Any) -> str:
    """The key of a ``TokenShard`` in this process (a digest of its process group's name), registered."""
    key = hashlib.blake2b(shard.group_name.encode("utf-8"), digest_size=6).hexdigest()
    _SHARDS[key] = shard
    return key


@dataclass(frozen=True)
class LayerSpec:
    """Everything constant about a layer's arithmetic: recipe key, RHT sign seed, token-shard key ("" for none)."""

    recipe: str
    rht_seed: int
    shard: str = ""

    def encode(self) -> str:
        return f"{self.recipe}|{self.rht_seed}|{self.shard}"

    @staticmethod
    def decode(text: str) -> "LayerSpec":
        recipe, seed, shard = text.rsplit("|", 2)
        return LayerSpec(recipe, int(seed), shard)


@functools.lru_cache(maxsize=256)
def runtime(spec: str) -> "LayerRuntime":
    """The ``LayerRuntime`` of an encoded ``LayerSpec`` (made once per spec)."""
    s = LayerSpec.decode(spec)
    if s.recipe not in _RECIPES:
        raise InputError(f"QuantLinear: recipe key '{s.recipe}' is not registered in this process (build the layer "
                         "with QuantLinear or load it with torch.load before running it)")
    if s.shard and s.shard not in _SHARDS:
        raise InputError(f"QuantLinear: token shard '{s.shard}' is not registered in this process "
                         "(set_token_shard)")
    return LayerRuntime(_RECIPES[s.recipe], s.rht_seed, _SHARDS[s.shard] if s.shard else None)


class LayerRuntime:
    """A layer's recipe resolved for running: formats, FP8 GEMMs, RHT seed, token shard (shared by every layer
    with the same spec; holds no per-layer state)."""

    def __init__(self, recipe: Recipe, rht_seed: int, shard: Any) -> None:
        self.recipe = recipe
        self.rht_seed = rht_seed
        self.shard = shard
        self.formats = {op: (None if recipe.format_of(op) is None else get_format(recipe.format_of(op)))
                        for op in ("x", "w", "dy")}
        self.fp8 = recipe.gemm_dtype in FP8_GEMM_DTYPES
        self.forward_keys = bool({"x", "w"} & set(recipe.sr))  # forward operands that round stochastically
        self.backward_keys = bool({"w", "dy"} & set(recipe.sr))
        self.draws = bool(recipe.sr)
        self.hw = None  # the kind's GEMMs of a recipe with gemm_numerics (fp4lab.recipes.hw_gemm)
        if recipe.gemm_numerics is not None:
            from fp4lab.recipes.hw_gemm import HwGemms

            self.hw = HwGemms(self)

    def saves_input(self, x_dtype: torch.dtype) -> bool:
        """Whether backward's WGRAD operand of X is the input itself (no format, and already the GEMM dtype; or
        gemm_numerics, whose backward quantizes X)."""
        if self.hw is not None:
            return True
        return self.formats["x"] is None and x_dtype == gemm_torch_dtype(self.recipe.gemm_dtype)

    def blocking(self, operand: Operand, gemm: Gemm, keys: Any) -> Blocking:
        r = self.recipe
        seed: Any = 0
        if operand in r.sr:
            seed = keys[streams.USES.index(f"{operand}.{gemm}"), 0:1]
        return Blocking(r.rht_size if gemm in r.rht else None, self.rht_seed, seed)

    def rounding(self, operand: Operand) -> str | None:
        return "sr" if operand in self.recipe.sr else None

    def fold(self, operand: Operand) -> bool:
        """Leave the tensor scale out of the operand (two-level formats)."""
        f = self.formats[operand]
        return f is not None and f.tensor_scale != "none"

    def operands(self, t: torch.Tensor, operand: Operand, k_gemm: Gemm | None, m_gemm: Gemm | None,
                 keys: Any = None) -> tuple:
        """(along K, along M, ts_k, ts_m) of operand ``t`` for the GEMMs that block it along K / along M, SR keys
        from ``keys`` (int64 [6, 2], ``sr_keys``); with a token shard, X and dY that round stochastically or have
        a tensor scale are quantized as the global batch's operand, of which this rank keeps its rows."""
        fmt = self.formats[operand]
        if operand == "w" and not t.is_cuda:
            t = t.detach().clone()  # the CPU emulator reads through numpy, which pins the storage: FSDP2 frees it
        if self.shard is not None and operand != "w" and fmt is not None \
                and (operand in self.recipe.sr or fmt.tensor_scale != "none"):
            yk, ym, ts_k, ts_m = self._operands(self.shard.gather(t), operand, k_gemm, m_gemm, keys)
            return self.shard.rows(yk), self.shard.rows(ym), ts_k, ts_m
        return self._operands(t, operand, k_gemm, m_gemm, keys)

    def _operands(self, t: torch.Tensor, operand: Operand, k_gemm: Gemm | None, m_gemm: Gemm | None,
                  keys: Any) -> tuple:
        fmt = self.formats[operand]
        r = self.recipe
        if fmt is not None and fmt.block is not None and fmt.block.is_2d and m_gemm is not None:
            # 2-D tiles cover both axes: the along-M operand is the along-K quantization with its own blocking
            k = fake_quant_operands(t, fmt, self.rounding(operand), along_k=self.blocking(operand, m_gemm, keys),
                                    along_m=None, sr_bits=r.sr_bits, gemm_dtype=r.gemm_dtype,
                                    fold_tensor_scale=self.fold(operand))
            if k_gemm is None:
                return None, k[0], None, k[2]
            j = self._operands(t, operand, k_gemm, None, keys)
            return j[0], k[0], j[2], k[2]
        return fake_quant_operands(
            t, fmt, self.rounding(operand),
            along_k=None if k_gemm is None else self.blocking(operand, k_gemm, keys),
            along_m=None if m_gemm is None else self.blocking(operand, m_gemm, keys),
            sr_bits=r.sr_bits, gemm_dtype=r.gemm_dtype, fold_tensor_scale=self.fold(operand))

    # ---- the two passes -------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: Any, state: torch.Tensor, needs_w: bool,
                out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(Y, X's WGRAD operand, its folded tensor scale, FPROP's FP8 row counts) for x [M, K], weight [N, K];
        outputs not produced are empty tensors (the WGRAD operand also when ``saves_input``)."""
        if self.hw is not None:
            return self.hw.forward(x, weight, bias, state, out_dtype)
        keys = sr_keys(state, advance=False) if self.forward_keys else None
        m_gemm = "wgrad" if needs_w and not self.saves_input(x.dtype) else None
        xk, xm, ts_xk, ts_xm = self.operands(x, "x", "fprop", m_gemm, keys)
        wk, _, ts_wk, _ = self.operands(weight, "w", "fprop", None, keys)
        counts = _empty(x.device, torch.int64)
        if self.fp8:
            counts = torch.zeros(2, dtype=torch.int64, device=x.device)
            y = self.fp8_mm(xk, False, wk, False, out_dtype, counts, bias)
        else:
            y = mm(xk, wk.t(), out_dtype, _scale(ts_xk, ts_wk), bias)
        return (y, _or_empty(xm, x.device, gemm_torch_dtype(self.recipe.gemm_dtype)),
                _or_empty(ts_xm, x.device, torch.float32), counts)

    def backward(self, dy: torch.Tensor, xm: torch.Tensor, weight: torch.Tensor, ts_xm: Any, state: torch.Tensor,
                 counts: torch.Tensor, need_x: bool, need_w: bool, need_b: bool,
                 x_dtype: torch.dtype) -> tuple[Any, Any, Any]:
        """(dX, dW, db), None where not needed; ``xm`` is forward's WGRAD operand of X (or the input itself);
        advances the layer's step when its recipe draws random bits; adds DGRAD's and WGRAD's FP8 row counts to
        ``counts`` [3, 2]."""
        if self.hw is not None:
            return self.hw.backward(dy, xm, weight, state, need_x, need_w, need_b, x_dtype)
        keys = sr_keys(state, advance=True) if self.backward_keys else None
        if self.draws and keys is None:
            advance(state)
        dy = dy.contiguous()
        dyn, dym, ts_dyn, ts_dym = self.operands(dy, "dy", "dgrad" if need_x else None,
                                                 "wgrad" if need_w else None, keys)
        dx = dw = db = None
        if need_x:
            _, wn, _, ts_wn = self.operands(weight, "w", None, "dgrad", keys)
            if self.fp8:
                dx = self.fp8_mm(dyn, False, wn, True, x_dtype, counts[1])
            else:
                dx = mm(dyn, wn, x_dtype, _scale(ts_dyn, ts_wn))
        if need_w:
            if self.fp8:
                dw = self.fp8_mm(dym, True, xm, True, weight.dtype, counts[2])
            else:
                dw = mm(dym.t(), xm, weight.dtype, _scale(ts_dym, None if ts_xm is None else ts_xm))
        if need_b:
            db = dy.sum(0, dtype=torch.float32)
        return dx, dw, db

    def fp8_mm(self, a: torch.Tensor, a_t: bool, b: torch.Tensor, b_t: bool, out_dtype: torch.dtype,
               counts: torch.Tensor, bias: Any = None) -> torch.Tensor:
        """``A @ B^T`` in FP8 (``fp4lab.recipes.fp8_gemm``), A = a (a.t() if a_t) [M, K], B likewise [N, K]; rows
        that do not fit E4M3 take the bf16 path, counted into ``counts`` (int64 [2]). On the CPU the operands are
        rebuilt from their E4M3 codes and multiplied like the bf16 path."""
        if fp8_gemm.on_device(a):
            a8, b8 = fp8_gemm.to_e4m3_rows(a, a_t), fp8_gemm.to_e4m3_rows(b, b_t)
            return fp8_gemm.fp8_gemm(a8, b8, a.t() if a_t else a, b.t() if b_t else b, out_dtype,
                                     self.recipe.gemm_dtype == "fp8-fast", bias, counts)
        ops = []
        for t, transpose in ((a, a_t), (b, b_t)):
            v, n = fp8_gemm.cpu_operand(t, transpose)
            counts[0] += t.shape[1 if transpose else 0]
            counts[1] += n
            ops.append(v)
        av, bv = ops
        return mm(av.t() if a_t else av, bv if b_t else bv.t(), out_dtype, None, bias)


def _empty(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(EMPTY_SHAPE, dtype=dtype, device=device)


def _or_empty(t: Any, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return _empty(device, dtype) if t is None else t


def _scale(ts_a: Any, ts_b: Any) -> Any:
    """Product of the folded tensor scales of a GEMM's operands (None when neither has one)."""
    if ts_a is None:
        return ts_b
    return ts_a if ts_b is None else ts_a * ts_b


def mm(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, scale: Any = None, bias: Any = None) -> Any:
    """``a @ b`` (``* scale``) (``+ bias``) as ``out_dtype``: on CUDA one tensor-core GEMM with fp32 accumulation,
    the folded tensor scale and the bias applied in cuBLAS's epilogue (``scaled_mm``: one rounding to
    ``out_dtype``), or, where that path is unavailable, the GEMM rounded to ``out_dtype`` then the scale (and bias)
    in one elementwise pass (a second rounding of bf16 outputs); on the CPU an fp32 GEMM of the (bf16-exact)
    operands, scaled and biased in fp32, rounded once."""
    if not a.is_cuda:
        y = a.float() @ b.float()
        if scale is not None:
            y = y * scale
        if bias is not None:
            y = y + bias.float()
        return y.to(out_dtype)
    if scale is None and bias is not None and a.dtype == out_dtype:
        return torch.addmm(bias.to(out_dtype), a, b)
    if scale is not None:
        y = scaled_mm(a, b, scale, out_dtype, bias)
        if y is not None:
            return y
    y = torch.mm(a, b) if a.dtype == out_dtype else torch.mm(a, b, out_dtype=out_dtype)
    if scale is None:
        return y if bias is None else y.add_(bias.to(out_dtype))
    s = scale.reshape(())
    return y.mul_(s) if bias is None else torch.addcmul(bias.to(out_dtype), y, s)


# ---- stochastic-rounding keys from the layer's state ---------------------------------------------------------


def sr_keys(state: torch.Tensor, advance: bool) -> torch.Tensor:
    """int64 [6, 2]: in ``[u, 0]`` the Philox key of use ``streams.USES[u]`` at the step held by ``state``
    (int64 [2]: stream, step), bit for bit ``streams.sr_seed``; ``advance``: then add 1 to the step in place."""
    keys = torch.empty((len(streams.USES), 2), dtype=torch.int64, device=state.device)  # (column 1: padding)
    if backend.on_triton(state):
        import numpy as np

        from fp4lab.kernels.host import device_array
        from fp4lab.kernels.sr_keys_launch import sr_keys_triton

        sr_keys_triton(state, device_array(np.array(streams.mixed_uses(), np.int64), state.device), keys, advance)
        return keys
    stream, step = state.tolist()
    stream &= (1 << 64) - 1
    keys[:, 0] = torch.tensor([streams.signed64(streams.sr_seed(stream, step, u)) for u in streams.USES])
    if advance:
        state[1] += 1
    return keys


def advance(state: torch.Tensor) -> None:
    """Add 1 to the step held by ``state`` (a recipe whose backward draws no keys)."""
    state[1:].add_(1)
