"""``QuantLinear``: a drop-in ``torch.nn.Linear`` whose three GEMMs run on fake-quantized 4-bit operands, and
``fake_quantize``, one operand as a recipe's GEMM sees it. Whole models: ``fp4lab.recipes.convert``
(``quantize_model``, the layers' steps); data parallelism: ``fp4lab.recipes.shard``.

The arithmetic (``fp4lab.recipes.runtime``) runs inside two custom ops (``fp4lab.recipes.ops``): the layer's
forward ``fp4lab::quant_linear``, differentiable, and its backward ``fp4lab::quant_linear_backward``. A layer
hands them its parameters, its encoded ``LayerSpec`` (recipe, RHT sign seed, token shard: one short string,
the same for every layer of a recipe) and two buffers: ``sr_state`` (int64 [2]: the layer's random stream and its
step, which the backward op advances) and ``fp8_counts`` (int64 [3, 2]). So ``torch.compile(fullgraph=True)``
traces a converted model with no graph break and one graph for all layers of a recipe, CUDA graphs replay
training steps with fresh stochastic-rounding bits each step, and activation checkpointing recomputes the very
operands of the first forward (forward reads the step, only backward advances it).

Two-level formats (NVFP4) leave their tensor scales out of the operands, whose element x block-scale products are
then exact in bf16, and multiply the GEMM's fp32-accumulated output by ``ts_a * ts_b`` instead, in cuBLAS's
epilogue (``scaled_mm``). Stochastic rounding draws from a Philox key per (layer, step, operand use)
(``fp4lab.recipes.streams``), so no two layers, steps or GEMMs share random bits.
"""
from __future__ import annotations

import math
import operator
from typing import Any

import torch

from fp4lab.errors import InputError
from fp4lab.formats.registry import get_format
from fp4lab.recipes import streams
from fp4lab.recipes.config import Gemm, Operand, Recipe, get_recipe, load_recipe_text, recipe_to_toml
from fp4lab.recipes.operands import gemm_torch_dtype
from fp4lab.recipes.ops import OperandSpec, QuantLinearFunction
from fp4lab.recipes.runtime import GEMMS, LayerSpec, register_format, register_recipe, runtime, sr_keys


class QuantLinear(torch.nn.Linear):
    """``nn.Linear`` with a 4-bit training recipe (built-in name, recipe file or ``Recipe``).

    Inputs ``[..., in_features]`` are flattened to ``[M, in_features]``; in_features and out_features must be
    multiples of the recipe formats' block sizes along K and N, and M (tokens) along M when W needs a gradient.
    ``name`` (the qualified module name, as ``quantize_model`` passes it) or else ``seed`` fixes the layer's
    random stream; ``step`` counts the backward passes that drew stochastic-rounding bits (each step draws fresh
    ones; recipes without stochastic rounding keep step 0). Stream and step live in the non-persistent buffer
    ``sr_state`` (so ``state_dict`` stays that of ``nn.Linear``; set ``step`` to resume a stream).

    Dtypes: the output has the input's dtype, or under ``torch.autocast`` for the input's device the autocast
    dtype, as ``nn.Linear`` gives; the operands are quantized from the input and the parameters as they are (an
    fp32 input or master weight is not rounded to bf16 first), and the gradients have the dtypes of the input,
    weight and bias."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, recipe: Any = "ufp4",
                 seed: int = 0, name: str | None = None, device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.recipe = get_recipe(recipe)
        if name is not None and not isinstance(name, str):
            raise InputError(f"QuantLinear: name must be a string (the qualified module name), got {name!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InputError(f"QuantLinear: seed must be an int, got {seed!r}")
        self.layer_name = name
        _check_features(self.recipe, in_features, out_features, name or type(self).__name__)
        self._set_stream(streams.stream_of_name(name) if name is not None else streams.stream_of_seed(seed), 0,
                         device)

    def _set_stream(self, stream: int, step: int, device: Any) -> None:
        """(Re)make the buffers on ``device`` for ``stream`` at ``step``, and the spec (RHT signs per stream)."""
        self._stream = stream
        self.register_buffer("sr_state", torch.tensor([streams.signed64(stream), step], dtype=torch.int64,
                                                       device=device), persistent=False)
        self.register_buffer("fp8_counts", torch.zeros((len(GEMMS), 2), dtype=torch.int64, device=device),
                             persistent=False)
        self._set_spec(LayerSpec(register_recipe(self.recipe),
                                 streams.rht_seed_for(stream, self.recipe.rht_seed, self.recipe.rht_signs)))

    def _set_spec(self, spec: LayerSpec) -> None:
        self.layer_spec = spec.encode()
        r = runtime(self.layer_spec)
        self._fp8 = r.fp8
        self._tokens_multiple = _token_multiple(self.recipe, r.formats) if self.recipe.format is not None else (1, "")

    @property
    def stream(self) -> int:
        """The layer's random stream id (64 bits)."""
        return self._stream

    def reset_parameters(self) -> None:
        """``nn.Linear``'s initialization, the random stream back to step 0 and the FP8 counts to 0."""
        super().reset_parameters()
        if "sr_state" in self._buffers and not self.sr_state.is_meta:
            self._restart()

    def _restart(self) -> None:
        """Write the layer's stream at step 0 into ``sr_state`` and zero ``fp8_counts``."""
        with torch.no_grad():
            self.sr_state.copy_(torch.tensor([streams.signed64(self._stream), 0], dtype=torch.int64))
            self.fp8_counts.zero_()

    def _apply(self, fn: Any, recurse: bool = True) -> "QuantLinear":
        """``nn.Module._apply`` (``to``, ``to_empty``, ...); buffers materialized from the meta device (``to_empty``
        leaves them unwritten) get the layer's stream at step 0 and zero FP8 counts, whatever initializes the
        weights afterwards."""
        was_meta = "sr_state" in self._buffers and self.sr_state.is_meta
        super()._apply(fn, recurse)
        if was_meta and not self.sr_state.is_meta:
            self._restart()
        return self

    @property
    def rht_seed(self) -> int:
        """The seed of the layer's RHT signs (the recipe's, or the layer's own under ``rht_signs = "per_layer"``)."""
        return LayerSpec.decode(self.layer_spec).rht_seed

    @property
    def step(self) -> int:
        """Backward passes that drew stochastic-rounding bits so far (reading it waits for the device)."""
        return int(self.sr_state[1])

    @step.setter
    def step(self, value: int) -> None:
        step = check_step("QuantLinear.step", value)
        with torch.no_grad():
            self.sr_state[1] = step

    @property
    def fp8_stats(self) -> dict[str, dict[str, int]]:
        """FP8 recipes: per GEMM, the operand rows (along the reduction axis) converted so far and how many of
        them did not fit E4M3 times a power of two (their GEMM rows/columns took the bf16 path). The counts live
        in device memory (CUDA-graph replays count too); reading them waits for the device."""
        return {g: {"rows": rows, "bf16_rows": bf16_rows}
                for g, (rows, bf16_rows) in zip(GEMMS, self.fp8_counts.tolist())}

    def operands(self, t: torch.Tensor, operand: Operand, k_gemm: Gemm | None = None, m_gemm: Gemm | None = None,
                 step: int | None = None) -> tuple:
        """(along K, along M, ts_k, ts_m): operand ``operand`` ("x", "w" or "dy") given as 2-D ``t``, fake-quantized
        as this layer's GEMMs ``k_gemm`` (blocked along K, the last axis) and ``m_gemm`` (along axis 0) see it at
        ``step`` (default: the current one); None where not asked for; ts: folded tensor scales of two-level
        formats (else None)."""
        _check_operand(f"{self._where()}.operands", t, operand, (k_gemm, m_gemm))
        if step is not None:
            step = check_step(f"{self._where()}.operands: step", step)
        state = self.sr_state if step is None else torch.tensor([streams.signed64(self._stream), step],
                                                                dtype=torch.int64, device=self.sr_state.device)
        r = runtime(self.layer_spec)
        with torch.no_grad():
            return r.operands(t, operand, k_gemm, m_gemm, sr_keys(state, advance=False) if r.draws else None)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, recipe: Any, seed: int = 0,
                    name: str | None = None) -> "QuantLinear":
        """A QuantLinear sharing ``linear``'s parameters; from a QuantLinear it also keeps the random stream and
        its step (``name`` and ``seed`` then unused). The QuantLinear takes ``linear``'s train/eval mode and its
        hooks (the handles that registered them still remove them). A lazy layer not yet run and a parametrized
        weight (``torch.nn.utils.parametrize``) are refused."""
        check_convertible(linear, name or "QuantLinear.from_linear")
        q = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, recipe=recipe, seed=seed,
                name=name, device="meta")
        q.weight = linear.weight
        q.bias = linear.bias
        if isinstance(linear, QuantLinear):
            q.layer_name = linear.layer_name
            q._set_stream(linear.stream, linear.step, linear.weight.device)
        else:
            q._set_stream(streams.stream_of_name(name) if name is not None else streams.stream_of_seed(seed), 0,
                          linear.weight.device)
        take_over(q, linear)
        return q

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise InputError(f"{self._where()}: input of shape {tuple(x.shape)}; expected [..., {self.in_features}]")
        for what, t in (("input", x), ("weight", self.weight), ("bias", self.bias)):
            if t is not None and t.dtype not in (torch.bfloat16, torch.float16, torch.float32):
                raise InputError(f"{self._where()}: {what} has dtype {t.dtype}; expected bfloat16, float16 or float32")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        needs_w = torch.is_grad_enabled() and self.weight.requires_grad
        if needs_w and x2.shape[0] % self._tokens_multiple[0]:
            need, why = self._tokens_multiple
            raise InputError(f"{self._where()}: {x2.shape[0]} tokens (rows of the flattened input) is not a multiple "
                             f"of {need}, {why}; a step without a weight gradient (torch.no_grad(), frozen weight) "
                             "takes any number")
        dev = x2.device.type
        autocast = dev != "meta" and torch.is_autocast_enabled(dev)  # (no autocast state for meta tensors)
        out_dtype = torch.get_autocast_dtype(dev) if autocast else x2.dtype
        eager = not torch.compiler.is_compiling() and dev != "meta"
        op = QuantLinearFunction.apply if eager else torch.ops.fp4lab.quant_linear
        y, _, _, counts = op(x2, self.weight, self.bias, self.sr_state, self.fp8_counts, self.layer_spec, needs_w,
                             out_dtype)
        if self._fp8:
            self.fp8_counts[0].add_(counts)
        return y.reshape(*lead, self.out_features)

    def _where(self) -> str:
        """The layer's name in error messages (read only when raising: a compiled graph never guards on it)."""
        return self.layer_name or type(self).__name__

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.name}"

    def __getstate__(self) -> dict[str, Any]:
        """Pickled as data only (``torch.load(weights_only=True)`` with ``QuantLinear`` allowed): the recipe as its
        TOML text, the spec without this process's registry keys."""
        state = self.__dict__.copy()
        spec = LayerSpec.decode(self.layer_spec)
        state["recipe"] = recipe_to_toml(self.recipe)
        state["layer_spec"] = str(spec.rht_seed)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        recipe = load_recipe_text(state.pop("recipe"))
        rht_seed = int(state.pop("layer_spec"))
        super().__setstate__(state)
        self.recipe = recipe
        self._set_spec(LayerSpec(register_recipe(recipe), rht_seed))


_HOOKS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
          "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_is_full_backward_hook",
          "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")


def take_over(new: torch.nn.Module, old: torch.nn.Module) -> None:
    """``new`` takes ``old``'s place: its train/eval mode and its hooks (the very dicts, which the handles of
    ``register_*_hook`` remove from)."""
    new.train(old.training)
    for attr in _HOOKS:
        if attr in old.__dict__:
            setattr(new, attr, old.__dict__[attr])


def check_convertible(linear: torch.nn.Linear, where: str) -> None:
    """Refuse layers whose weight a QuantLinear cannot share: lazy ones before their first run, parametrized ones."""
    from torch.nn.modules.lazy import LazyModuleMixin
    from torch.nn.utils import parametrize

    if isinstance(linear, LazyModuleMixin) and linear.has_uninitialized_params():
        raise InputError(f"{where}: a lazy linear layer whose in_features are not known yet; run the model once "
                         "before converting it")
    if parametrize.is_parametrized(linear):
        raise InputError(f"{where}: the layer's weight is parametrized (torch.nn.utils.parametrize, e.g. weight_norm), "
                         "which a QuantLinear does not keep; convert the layer before parametrizing it")


_GEMMS_OF = {"x": ("fprop", "wgrad"), "w": ("fprop", "dgrad"), "dy": ("dgrad", "wgrad")}


def check_step(where: str, value: Any) -> int:
    """``value`` as a step: an integer (a Python, numpy or one-element integer torch value, such as an optimizer's
    step tensor; not a bool) in [0, 2**63)."""
    item = value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
    try:
        step = None if isinstance(item, bool) else operator.index(item)
    except TypeError:
        step = None
    if step is None or not 0 <= step < 2**63:
        raise InputError(f"{where}: expected an int in [0, 2**63), got {value!r}")
    return step


def _check_operand(where: str, t: Any, operand: Any, gemms: tuple[Any, ...]) -> None:
    """``t`` a 2-D floating-point tensor, ``operand`` one of x, w, dy and each GEMM of ``gemms`` (None: not
    asked for) one that takes it."""
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{where}: expected a torch.Tensor, got {type(t).__name__}")
    if t.ndim != 2 or not t.dtype.is_floating_point:
        raise InputError(f"{where}: expected a 2-D floating-point tensor, got shape {tuple(t.shape)} of {t.dtype}")
    if operand not in _GEMMS_OF:
        raise InputError(f"{where}: operand must be 'x', 'w' or 'dy', got {operand!r}")
    for gemm in gemms:
        if gemm is not None and gemm not in _GEMMS_OF[operand]:
            raise InputError(f"{where}: {operand} is an operand of {' and '.join(_GEMMS_OF[operand])}, not of "
                             f"{gemm!r}")


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
    if recipe.gemm_numerics is not None:
        from fp4lab.recipes.hw_numerics import recipe_numerics, reduction_error

        for gemm, size in (("fprop", k), ("dgrad", n)):
            why = reduction_error(recipe_numerics(recipe), gemm, size)
            if why:
                raise InputError(f"{where}: {why} in recipe '{recipe.name}'")


def _token_multiple(recipe: Recipe, formats: dict[str, Any]) -> tuple[int, str]:
    """(the multiple of M that the WGRAD operands' blocks and RHT need, and what needs it, for messages)."""
    need, which = 1, "x"
    for op in ("x", "dy"):
        n = _block_along(formats[op], "m")
        if "wgrad" in recipe.rht:
            n = max(n, recipe.rht_size)
        if n > need:
            need, which = n, op
    why = f"the block/RHT size along M of the WGRAD operand {which} in recipe '{recipe.name}'"
    if recipe.gemm_numerics is not None:
        from fp4lab.recipes.hw_numerics import recipe_numerics

        kind = recipe_numerics(recipe)
        if math.lcm(need, kind.multiple) > need:
            need = math.lcm(need, kind.multiple)
            why = (f"as WGRAD reduces over the tokens on gemm_numerics kind {kind.kind!r} (instruction K "
                   f"{kind.multiple}) in recipe '{recipe.name}'")
    return need, why


def features_fit(recipe: Recipe, linear: torch.nn.Linear) -> bool:
    """Whether ``linear``'s widths are multiples of ``recipe``'s block and RHT sizes (``QuantLinear`` takes it)."""
    try:
        _check_features(recipe, linear.in_features, linear.out_features, "")
    except InputError:
        return False
    return True


def fake_quantize(t: torch.Tensor, recipe: Any, operand: Operand, gemm: Gemm, axis: int, seed: int = 0) -> Any:
    """The GEMM operand ``operand`` of ``gemm`` under ``recipe``, blocked along ``axis`` (-1: K, 0: M) of 2-D ``t``,
    as the recipe's GEMMs see it (``gemm_dtype``; two-level formats with their tensor scale applied); SR from
    ``seed`` (an int in [0, 2**63)); RHT signs from the recipe's ``rht_seed`` (a layer's own signs under
    ``rht_signs = "per_layer"`` and its SR keys: ``QuantLinear.operands``). The result is detached (no gradient
    flows through it). Runs as the custom op ``fp4lab::fake_quant`` (``torch.compile`` traces it)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InputError(f"fake_quantize: seed must be an int in [0, 2**63), got {seed!r}")
    _check_operand("fake_quantize", t, operand, (gemm,))
    if isinstance(axis, bool) or axis not in (-2, -1, 0, 1):
        raise InputError(f"fake_quantize: axis must be -1 (K) or 0 (M) of the 2-D tensor, got {axis!r}")
    spec = _operand_spec(recipe, operand, gemm, axis)
    if spec is None:
        return t.detach().to(gemm_torch_dtype(get_recipe(recipe).gemm_dtype))
    seeds = torch.full((2, 2), seed, dtype=torch.int64, device=t.device)
    yk, ym, _, _ = torch.ops.fp4lab.fake_quant(t.detach(), seeds, spec)
    return yk if axis in (-1, 1) else ym


@torch.compiler.assume_constant_result
def _operand_spec(recipe: Any, operand: Operand, gemm: Gemm, axis: int) -> str | None:
    """The encoded ``OperandSpec`` of ``fake_quantize`` (None: the operand has no format); a constant to
    ``torch.compile``."""
    r = get_recipe(recipe)
    if r.format_of(operand) is None:
        return None
    rht = r.rht_size if gemm in r.rht else 0
    along_k = axis in (-1, 1)
    return OperandSpec(register_format(get_format(r.format_of(operand))), "sr" if operand in r.sr else "",
                       rht if along_k else -1, r.rht_seed, -1 if along_k else rht, r.rht_seed, r.sr_bits,
                       r.gemm_dtype, False).encode()
