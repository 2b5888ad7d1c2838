"""``QuantLinear``: a drop-in ``torch.nn.Linear`` whose three GEMMs run on fake-quantized 4-bit operands.

Per training step of a layer with input X [M, K] and weight W [N, K] (``fp4lab.recipes.config``):

* forward: X is read once and fake-quantized along K (FPROP operand) and, when W needs a gradient, along M
  (the WGRAD operand, saved for backward in place of X: no more saved activations than ``nn.Linear``); W along K.
  ``Y = Xk Wk^T`` (+ bias), a bf16 tensor-core GEMM with fp32 accumulation (``gemm_dtype = "bf16"``) or fp32.
* backward: dY is read once and fake-quantized along N (DGRAD) and along M (WGRAD); W along N.
  ``dX = dYn Wn``, ``dW = dYm^T Xm``, ``db = sum of dY over M``.

Operands are the recipe's formats, dequantized in the rotated basis (the two rotated operands of a GEMM multiply
to the unrotated product). Two-level formats (NVFP4) leave their tensor scales out of the operands, whose
element x block-scale products are then exact in bf16, and multiply the GEMM's fp32-accumulated output by
``ts_a * ts_b`` instead, in cuBLAS's epilogue (``scaled_mm``). Stochastic rounding draws from a Philox key per
(layer, step, operand use) (``fp4lab.recipes.streams``), so no two layers, steps or GEMMs share random bits.
Under data parallelism a ``TokenShard`` (``set_token_shard``) makes every rank's layer quantize X and dY as the
rows of the global batch they are, so the bits equal those of one process over the global batch.
"""

from __future__ import annotations

import fnmatch
import warnings
from typing import Any

import torch

from fp4lab.errors import InputError
from fp4lab.formats.registry import get_format
from fp4lab.kernels.fakequant_launch import Blocking
from fp4lab.recipes import fp8_gemm, streams
from fp4lab.recipes.config import FP8_GEMM_DTYPES, Gemm, Operand, Recipe, get_recipe
from fp4lab.recipes.operands import fake_quant_operands
from fp4lab.recipes.scaled_mm import scaled_mm

GEMMS: tuple[Gemm, ...] = ("fprop", "dgrad", "wgrad")


class _LayerState:
    """What the autograd function needs from its layer: recipe constants and the layer's random streams."""

    def __init__(self, recipe: Recipe, stream: int) -> None:
        self.recipe = recipe
        self.stream = stream
        self.step = 0
        self.seed_slots: list[Any] | None = None  # per use, 1-element int64 device tensors (DeviceStreams)
        self.tokens: TokenShard | None = None  # this rank's rows of a data-parallel batch (set_token_shard)
        self.rht_seed = streams.rht_seed_for(stream, recipe.rht_seed, recipe.rht_signs)
        self.formats = {op: (None if recipe.format_of(op) is None else get_format(recipe.format_of(op)))
                        for op in ("x", "w", "dy")}
        self.fp8 = recipe.gemm_dtype in FP8_GEMM_DTYPES
        self.fp8_counts: dict[torch.device, torch.Tensor] = {}  # per device, see fp8_counter

    def fmt(self, operand: Operand) -> Any:
        return self.formats[operand]

    def rounding(self, operand: Operand) -> str | None:
        return "sr" if operand in self.recipe.sr else None

    def blocking(self, operand: Operand, gemm: Gemm) -> Blocking:
        r = self.recipe
        seed: Any = 0
        if operand in r.sr:
            use = f"{operand}.{gemm}"
            if self.seed_slots is not None:
                seed = self.seed_slots[streams.USES.index(use)]
            else:
                seed = streams.sr_seed(self.stream, self.step, use)
        return Blocking(r.rht_size if gemm in r.rht else None, self.rht_seed, seed)

    def fold(self, operand: Operand) -> bool:
        """Leave the tensor scale out of the operand (two-level formats)."""
        f = self.formats[operand]
        return f is not None and f.tensor_scale != "none"

    def operands(self, t: torch.Tensor, operand: Operand, k_gemm: Gemm | None, m_gemm: Gemm | None) -> tuple:
        """(along K, along M, ts_k, ts_m) of operand ``t`` for the GEMMs that block it along K / along M; with a
        token shard, X and dY that round stochastically or have a tensor scale are quantized as the global
        batch's operand, of which this rank keeps its rows."""
        fmt = self.formats[operand]
        if operand == "w" and not t.is_cuda:
            t = t.detach().clone()  # the CPU emulator reads through numpy, which pins the storage: FSDP2 frees it
        if self.tokens is not None and operand != "w" and fmt is not None \
                and (operand in self.recipe.sr or fmt.tensor_scale != "none"):
            yk, ym, ts_k, ts_m = self._operands(self.tokens.gather(t), operand, k_gemm, m_gemm)
            return self.tokens.rows(yk), self.tokens.rows(ym), ts_k, ts_m
        return self._operands(t, operand, k_gemm, m_gemm)

    def _operands(self, t: torch.Tensor, operand: Operand, k_gemm: Gemm | None, m_gemm: Gemm | None) -> tuple:
        fmt = self.formats[operand]
        if fmt is not None and fmt.block is not None and fmt.block.is_2d and m_gemm is not None:
            # 2-D tiles cover both axes: the along-M operand is the along-K quantization with its own blocking
            k = fake_quant_operands(t, fmt, self.rounding(operand), along_k=self.blocking(operand, m_gemm),
                                    along_m=None, sr_bits=self.recipe.sr_bits, gemm_dtype=self.recipe.gemm_dtype,
                                    fold_tensor_scale=self.fold(operand))
            if k_gemm is None:
                return None, k[0], None, k[2]
            j = self._operands(t, operand, k_gemm, None)
            return j[0], k[0], j[2], k[2]
        return fake_quant_operands(
            t, fmt, self.rounding(operand),
            along_k=None if k_gemm is None else self.blocking(operand, k_gemm),
            along_m=None if m_gemm is None else self.blocking(operand, m_gemm),
            sr_bits=self.recipe.sr_bits, gemm_dtype=self.recipe.gemm_dtype, fold_tensor_scale=self.fold(operand))

    def fp8_counter(self, device: torch.device) -> torch.Tensor:
        """The int64 [3, 2] counts (per GEMM: operand rows converted, rows that took the bf16 path) on ``device``,
        made on first use; a CUDA-graph capture must not be that first use (the counts would restart at every
        replay)."""
        c = self.fp8_counts.get(device)
        if c is None:
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise InputError(f"recipe '{self.recipe.name}': run one step of this layer outside CUDA-graph "
                                 "capture first (it sets up the layer's FP8 row counts)")
            c = self.fp8_counts[device] = torch.zeros((len(GEMMS), 2), dtype=torch.int64, device=device)
        return c

    def fp8_cpu(self, gemm: Gemm, *ops: tuple[torch.Tensor, bool]) -> list[torch.Tensor]:
        """CPU: each operand (tensor, its columns are the GEMM rows) rebuilt from its E4M3 operand, counted."""
        out = []
        for t, transpose in ops:
            v, n = fp8_gemm.cpu_operand(t, transpose)
            c = self.fp8_counter(t.device)[GEMMS.index(gemm)]
            c[0] += t.shape[1 if transpose else 0]
            c[1] += n
            out.append(v)
        return out

    def fp8_device(self, gemm: Gemm, a: torch.Tensor, a_t: bool, b: torch.Tensor, b_t: bool, out_dtype: torch.dtype,
                 bias: Any = None) -> torch.Tensor:
        """The device path (``fp8_gemm.on_device``): ``A @ B^T`` in FP8, A = a (a.t() if a_t) [M, K], B likewise
        [N, K]; rows that do not fit E4M3 take the bf16 path, decided and counted on the device (no host
        synchronization)."""
        a8, b8 = fp8_gemm.to_e4m3_rows(a, a_t), fp8_gemm.to_e4m3_rows(b, b_t)
        return fp8_gemm.fp8_gemm(a8, b8, a.t() if a_t else a, b.t() if b_t else b, out_dtype,
                                 self.recipe.gemm_dtype == "fp8-fast", bias,
                                 self.fp8_counter(a.device)[GEMMS.index(gemm)])


def _scale(ts_a: Any, ts_b: Any) -> Any:
    """Product of the folded tensor scales of a GEMM's operands (None when neither has one)."""
    if ts_a is None:
        return ts_b
    return ts_a if ts_b is None else ts_a * ts_b


def _mm(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, scale: Any = None, bias: Any = None) -> Any:
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


class _QuantLinearFunction(torch.autograd.Function):
    """The layer's three GEMMs on its recipe's operands; autocast is off inside (the operands' dtypes are the
    recipe's, and ``out_dtype`` is chosen by the caller)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: Any, state: _LayerState,
                needs_w: bool, out_dtype: torch.dtype) -> torch.Tensor:
        if not torch.is_autocast_enabled(x.device.type):  # (entering a disabled autocast costs host time)
            return _QuantLinearFunction._forward(ctx, x, weight, bias, state, needs_w, out_dtype)
        with torch.autocast(x.device.type, enabled=False):
            return _QuantLinearFunction._forward(ctx, x, weight, bias, state, needs_w, out_dtype)

    @staticmethod
    def _forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: Any, state: _LayerState,
                 needs_w: bool, out_dtype: torch.dtype) -> torch.Tensor:
        xk, xm, ts_xk, ts_xm = state.operands(x, "x", "fprop", "wgrad" if needs_w else None)
        wk, _, ts_wk, _ = state.operands(weight, "w", "fprop", None)
        ctx.save_for_backward(xm, weight, ts_xm)
        ctx.state, ctx.step, ctx.has_bias, ctx.x_dtype = state, state.step, bias is not None, x.dtype
        if state.fp8 and fp8_gemm.on_device(xk):
            return state.fp8_device("fprop", xk, False, wk, False, out_dtype, bias)
        if state.fp8:
            xk, wk = state.fp8_cpu("fprop", (xk, False), (wk, False))
        return _mm(xk, wk.t(), out_dtype, _scale(ts_xk, ts_wk), bias)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        if not torch.is_autocast_enabled(dy.device.type):
            return _QuantLinearFunction._backward(ctx, dy)
        with torch.autocast(dy.device.type, enabled=False):
            return _QuantLinearFunction._backward(ctx, dy)

    @staticmethod
    def _backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        xm, weight, ts_xm = ctx.saved_tensors
        state = ctx.state
        step, state.step = state.step, ctx.step  # the streams of the step whose forward saved these operands
        try:
            need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
            dyn, dym, ts_dyn, ts_dym = state.operands(dy.contiguous(), "dy", "dgrad" if need_x else None,
                                                      "wgrad" if need_w else None)
            dx = dw = db = None
            wn = ts_wn = None
            if need_x:
                _, wn, _, ts_wn = state.operands(weight, "w", None, "dgrad")
            if state.fp8 and fp8_gemm.on_device(dy):
                if need_x:
                    dx = state.fp8_device("dgrad", dyn, False, wn, True, ctx.x_dtype)
                if need_w:
                    dw = state.fp8_device("wgrad", dym, True, xm, True, weight.dtype)
            else:
                if state.fp8 and need_x:
                    dyn, wn = state.fp8_cpu("dgrad", (dyn, False), (wn, True))
                if state.fp8 and need_w:
                    dym, xm = state.fp8_cpu("wgrad", (dym, True), (xm, True))
                if need_x:
                    dx = _mm(dyn, wn, ctx.x_dtype, _scale(ts_dyn, ts_wn))
                if need_w:
                    dw = _mm(dym.t(), xm, weight.dtype, _scale(ts_dym, ts_xm))
            if ctx.has_bias and ctx.needs_input_grad[2]:
                db = dy.sum(0, dtype=torch.float32)
        finally:
            state.step = step
        return dx, dw, db, None, None, None


class QuantLinear(torch.nn.Linear):
    """``nn.Linear`` with a 4-bit training recipe (built-in name, recipe file or ``Recipe``).

    Inputs ``[..., in_features]`` are flattened to ``[M, in_features]``; in_features and out_features must be
    multiples of the recipe formats' block sizes along K and N, and M (tokens) along M when W needs a gradient.
    ``name`` (the qualified module name, as ``quantize_model`` passes it) or else ``seed`` fixes the layer's
    random streams; ``step`` counts training forward passes (each draws fresh stochastic-rounding bits).

    Dtypes: the output has the input's dtype, or under ``torch.autocast`` for the input's device the autocast
    dtype, as ``nn.Linear`` gives; the operands are quantized from the input and the parameters as they are (an
    fp32 input or master weight is not rounded to bf16 first), and the gradients have the dtypes of the input,
    weight and bias."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, recipe: Any = "ufp4",
                 seed: int = 0, name: str | None = None, device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.recipe = get_recipe(recipe)
        self.layer_name = name
        stream = streams.stream_of_name(name) if name is not None else streams.stream_of_seed(seed)
        self._state = _LayerState(self.recipe, stream)
        _check_features(self.recipe, in_features, out_features, name or type(self).__name__)

    @property
    def step(self) -> int:
        return self._state.step

    @step.setter
    def step(self, value: int) -> None:
        self._state.step = int(value)

    @property
    def fp8_stats(self) -> dict[str, dict[str, int]]:
        """FP8 recipes: per GEMM, the operand rows (along the reduction axis) converted so far and how many of
        them did not fit E4M3 times a power of two (their GEMM rows/columns took the bf16 path). The counts live
        in device memory (CUDA-graph replays count too); reading them waits for the GPU."""
        tot = sum((c.cpu() for c in self._state.fp8_counts.values()),
                  torch.zeros((len(GEMMS), 2), dtype=torch.int64))  # one host synchronization per device
        return {g: {"rows": rows, "bf16_rows": bf16_rows} for g, (rows, bf16_rows) in zip(GEMMS, tot.tolist())}

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, recipe: Any, seed: int = 0,
                    name: str | None = None) -> "QuantLinear":
        """A QuantLinear sharing ``linear``'s parameters."""
        q = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, recipe=recipe, seed=seed,
                name=name, device="meta")
        q.weight = linear.weight
        q.bias = linear.bias
        return q

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise InputError(f"QuantLinear: input has {x.shape[-1]} features in its last axis; expected "
                             f"{self.in_features}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise InputError(f"QuantLinear: input has dtype {x2.dtype}; expected bfloat16, float16 or float32")
        needs_w = torch.is_grad_enabled() and self.weight.requires_grad
        if self.recipe.format is not None and needs_w:
            _check_tokens(self._state, x2.shape[0], self.layer_name or type(self).__name__)
        dev = x2.device.type
        out_dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x2.dtype
        y = _QuantLinearFunction.apply(x2, self.weight, self.bias, self._state, needs_w, out_dtype)
        if self.training and torch.is_grad_enabled() and self._state.seed_slots is None:
            self._state.step += 1  # (with DeviceStreams, DeviceStreams.advance counts the steps)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.name}"


class TokenShard:
    """This process's rows of a data-parallel batch: the global operand [world * m, C] of a layer is the ranks'
    [m, C] operands concatenated in rank order over the process group ``group`` (rank r holds global rows
    r*m .. r*m + m - 1; every rank the same m). A layer with a shard all-gathers an X or dY that rounds
    stochastically or has a tensor scale, quantizes the global operand and keeps its rows: each element draws
    the SR bits of its global position (Philox counter = element index in the global operand) and tensor scales
    are the global batch's. Other operands quantize locally with the same bits: W is whole on every rank, and the
    blocks and RHT blocks of X and dY along M (tokens) fit in one rank's rows when m is a multiple of their size
    (QuantLinear checks m). Cost: per such operand an all-gather and a quantization of the global operand."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """The global operand: ``t`` [m, C] of every rank, in rank order."""
        import torch.distributed as dist

        t = t.contiguous()
        out = t.new_empty((self.world * t.shape[0], *t.shape[1:]))
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # (renamed in torch 2.13)
        gather(out, t, group=self.group)
        return out

    def rows(self, y: Any) -> Any:
        """A copy of this rank's rows of a global operand (None stays None): a saved operand holds no more."""
        if y is None:
            return None
        m = y.shape[0] // self.world
        return y[self.rank * m:(self.rank + 1) * m].clone()


def set_token_shard(model: torch.nn.Module, shard: TokenShard | None) -> None:
    """Give every ``QuantLinear`` of ``model`` the data-parallel shard ``shard`` (None: one process's batch)."""
    for m in model.modules():
        if isinstance(m, QuantLinear):
            m._state.tokens = shard


class DeviceStreams:
    """The stochastic-rounding seeds of every ``QuantLinear`` of a model kept in one int64 device buffer, which
    the kernels read when they run, so a training step can be captured in a CUDA graph and replayed: call
    ``advance()`` before each step (eager or replay). It writes each layer's seeds for its current step (the same
    keys as ``streams.sr_seed``, so the bits equal those of eager training) with one copy, then counts the step.

        ds = DeviceStreams(model)
        ds.advance(); train_step()                      # warm-up steps, eager
        with torch.cuda.graph(g): train_step()          # capture (after ds.advance())
        for ...: ds.advance(); g.replay()
    """

    def __init__(self, model: torch.nn.Module, device: Any = None) -> None:
        self.layers = [m for m in model.modules() if isinstance(m, QuantLinear)]
        dev = device if device is not None else next(model.parameters()).device
        # one 16-byte-aligned slot per (layer, use): the kernels' pointer arguments keep one alignment class
        self.buffer = torch.zeros((max(len(self.layers), 1), len(streams.USES), 2), dtype=torch.int64, device=dev)
        self._uses = [[(j, u) for j, u in enumerate(streams.USES) if u.split(".")[0] in m.recipe.sr]
                      for m in self.layers]
        for i, m in enumerate(self.layers):
            m._state.seed_slots = [self.buffer[i, j, 0:1] for j in range(len(streams.USES))]

    def advance(self) -> None:
        host = torch.zeros(tuple(self.buffer.shape), dtype=torch.int64)
        for i, (m, uses) in enumerate(zip(self.layers, self._uses)):
            st = m._state
            for j, use in uses:
                host[i, j, 0] = streams.sr_seed(st.stream, st.step, use)
            st.step += 1
        self.buffer.copy_(host)

    def detach(self) -> None:
        """Back to host-side seeds (each layer keeps its step count)."""
        for m in self.layers:
            m._state.seed_slots = None


def _block_along(fmt: Any, axis: str) -> int:
    """Block extent of ``fmt`` along the K ("k") or M/N ("m") axis of a 2-D operand (1: none)."""
    if fmt is None or fmt.block is None:
        return 1
    shape = list(fmt.block.shape)
    if len(shape) == 2:
        return shape[1] if axis == "k" else shape[0]
    return shape[0]


def _check_features(recipe: Recipe, k: int, n: int, where: str) -> None:
    """in/out features against the recipe's blocks and RHT (X, W along K; dY along N; W along N)."""
    for what, size, ops in (("in_features", k, ("x", "w")), ("out_features", n, ("dy", "w"))):
        for op in ops:
            f = recipe.format_of(op)
            if f is None:
                continue
            need = _block_along(get_format(f), "k" if what == "in_features" else "m")
            gemms = ("fprop",) if what == "in_features" else ("dgrad",)
            if any(g in recipe.rht for g in gemms):
                need = max(need, recipe.rht_size)
            if size % need:
                raise InputError(f"{where}: {what} = {size} is not a multiple of {need} (the block/RHT size of "
                                 f"format '{f}' for operand {op} in recipe '{recipe.name}')")


def _check_tokens(state: _LayerState, m: int, where: str) -> None:
    r = state.recipe
    for op in ("x", "dy"):
        need = _block_along(state.fmt(op), "m")
        if "wgrad" in r.rht:
            need = max(need, r.rht_size)
        if m % need:
            raise InputError(f"{where}: {m} tokens (rows of the flattened input) is not a multiple of {need}, the "
                             f"block/RHT size along M of the WGRAD operand {op} in recipe '{r.name}'")


def _blocks_fit(recipe: Recipe, linear: torch.nn.Linear) -> bool:
    try:
        _check_features(recipe, linear.in_features, linear.out_features, "")
    except InputError:
        return False
    return True


def quantize_model(model: torch.nn.Module, recipe: Any, seed: int = 0,
                   skip: tuple[str, ...] = ()) -> torch.nn.Module:
    """Replace every ``nn.Linear`` of ``model`` by a ``QuantLinear`` sharing its parameters, in place; returns the
    model. Layers whose qualified name matches a pattern of ``skip`` or of the recipe's ``high_precision``
    (fnmatch patterns, e.g. ``"lm_head"``, ``"blocks.0.*"``) stay as they are, as do layers whose widths are not
    multiples of the recipe's block sizes (one warning names them). Each layer's random streams derive from its
    qualified name (and ``seed``, which shifts every stream of the model)."""
    r = get_recipe(recipe)
    patterns = tuple(skip) + tuple(r.high_precision)
    unfit = []
    for name, child in list(model.named_modules()):
        if not isinstance(child, torch.nn.Linear) or isinstance(child, QuantLinear) or not name:
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        if not _blocks_fit(r, child):
            unfit.append(f"{name} ({child.in_features} -> {child.out_features})")
            continue
        parent, _, attr = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, attr, QuantLinear.from_linear(child, r, name=f"{seed}:{name}" if seed else name))
    if unfit:
        warnings.warn(f"quantize_model: kept {len(unfit)} linear layer(s) in high precision whose widths are not "
                      f"multiples of recipe '{r.name}''s block sizes: {', '.join(unfit)}", stacklevel=2)
    if isinstance(model, torch.nn.Linear) and not isinstance(model, QuantLinear):
        raise InputError("quantize_model: the model itself is an nn.Linear; wrap it (e.g. in nn.Sequential) or use "
                         "QuantLinear.from_linear")
    return model


def fake_quantize(t: torch.Tensor, recipe: Any, operand: Operand, gemm: Gemm, axis: int, seed: int = 0) -> Any:
    """The GEMM operand ``operand`` of ``gemm`` under ``recipe``, blocked along ``axis`` (-1: K, 0: M) of 2-D ``t``,
    as the recipe's GEMMs see it (``gemm_dtype``; two-level formats with their tensor scale applied); SR from
    ``seed``."""
    r = get_recipe(recipe)
    fmt = None if r.format_of(operand) is None else get_format(r.format_of(operand))
    spec = Blocking(r.rht_size if gemm in r.rht else None, r.rht_seed, seed)
    rounding = "sr" if operand in r.sr else None
    yk, ym, _, _ = fake_quant_operands(t, fmt, rounding, along_k=spec if axis in (-1, 1) else None,
                                       along_m=spec if axis == 0 else None, sr_bits=r.sr_bits,
                                       gemm_dtype=r.gemm_dtype, fold_tensor_scale=False)
    return yk if axis in (-1, 1) else ym
