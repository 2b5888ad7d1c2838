"""fp4lab's training path as ``torch.library`` custom ops, so that ``torch.compile(fullgraph=True)``, CUDA graphs
and AOTAutograd see each operation as one node with a known output shape and never trace fp4lab's host code
(plans, checks, kernel launches):

* ``fp4lab::quant_linear`` (differentiable: ``register_autograd``) and ``fp4lab::quant_linear_backward``: a
  ``QuantLinear``'s forward and backward (``fp4lab.recipes.runtime``), the layer given by its encoded
  ``LayerSpec`` string and its stream state tensor;
* ``fp4lab::fake_quant``: one operand fake-quantized along K and/or M (the fused Triton kernel with its amax and
  tensor-scale passes on CUDA, the emulator on the CPU), described by an encoded ``OperandSpec``;
* ``fp4lab::e4m3_rows``: the E4M3 operand of a bf16 tensor (FP8 recipes);
* ``fp4lab::fp8_mm``: an FP8 GEMM of two E4M3 operands with the bf16 path for rows that do not fit;
* ``fp4lab::scaled_mm``: ``scale * (a @ b) (+ bias)`` with a device-resident fp32 scale (cuBLAS's epilogue).

Every op has a fake (meta) implementation; outputs an op does not produce are empty tensors (shape [0]). Ops
that need no gradient are plain; only ``quant_linear`` carries an autograd formula. Nothing in a graph depends on
data: stochastic-rounding keys are read from the layer's state tensor on the device, and the backward op advances
it (a declared mutation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from fp4lab.recipes import runtime as rt
from fp4lab.recipes.operands import gemm_torch_dtype


def _autocast_on(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (the ops switch it off inside: the operands' dtypes are the
    recipe's; entering a disabled autocast costs host time, so only when it is on)."""
    return torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def _empty_like_spec(x: Tensor, dtype: torch.dtype) -> Tensor:
    return x.new_empty(rt.EMPTY_SHAPE, dtype=dtype)


# ---- the layer ---------------------------------------------------------------------------------------------------
# Defined with the low-level torch.library API (schema + one Python kernel for every backend): a compiled graph
# then reaches the Python implementation through the dispatcher alone. Eager steps skip the dispatcher and the
# custom-op autograd wrapper (``QuantLinearFunction``: the same forward, setup and gradient code).
_LIB = torch.library.Library("fp4lab", "FRAGMENT")
_LIB.define("quant_linear(Tensor x, Tensor weight, Tensor? bias, Tensor state, Tensor counts, str spec, "
            "bool needs_w, ScalarType out_dtype) -> (Tensor, Tensor, Tensor, Tensor)")
_LIB.define("quant_linear_backward(Tensor dy, Tensor xm, Tensor weight, Tensor ts_xm, Tensor(a!) state, "
            "Tensor(b!) counts, str spec, bool need_x, bool need_w, bool need_b, ScalarType x_dtype) "
            "-> (Tensor, Tensor, Tensor)")


def quant_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor], state: Tensor, counts: Tensor, spec: str,
                 needs_w: bool, out_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``fp4lab::quant_linear``: (Y [M, N] of ``out_dtype``, X's WGRAD operand [M, K], its tensor scale [1],
    FPROP's FP8 row counts [2]) of x [M, K] and weight [N, K] under the layer ``spec``; empty where not produced.
    ``counts`` (the layer's FP8 counts, which backward updates) is not touched here."""
    r = rt.runtime(spec)
    if not _autocast_on(x.device.type):
        return r.forward(x, weight, bias, state, needs_w, out_dtype)
    with torch.autocast(x.device.type, enabled=False):
        return r.forward(x, weight, bias, state, needs_w, out_dtype)


def quant_linear_backward(dy: Tensor, xm: Tensor, weight: Tensor, ts_xm: Tensor, state: Tensor, counts: Tensor,
                          spec: str, need_x: bool, need_w: bool, need_b: bool,
                          x_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """``fp4lab::quant_linear_backward``: (dX, dW, db), empty where not needed, of the layer ``spec`` given dY
    [M, N], forward's WGRAD operand of X and its tensor scale (empty: none); advances the step in ``state`` and
    adds the FP8 row counts of DGRAD and WGRAD to ``counts`` [3, 2]."""
    args = (dy, xm, weight, ts_xm if ts_xm.numel() else None, state, counts, need_x, need_w, need_b, x_dtype)
    if _autocast_on(dy.device.type):
        with torch.autocast(dy.device.type, enabled=False):
            dx, dw, db = rt.runtime(spec).backward(*args)
    else:
        dx, dw, db = rt.runtime(spec).backward(*args)
    return (_empty_like_spec(dy, x_dtype) if dx is None else dx,
            _empty_like_spec(dy, weight.dtype) if dw is None else dw,
            _empty_like_spec(dy, torch.float32) if db is None else db)


for _key in ("CPU", "CUDA"):  # meta tensors take the fake implementations
    _LIB.impl("quant_linear", quant_linear, _key)
    _LIB.impl("quant_linear_backward", quant_linear_backward, _key)


@torch.library.register_fake("fp4lab::quant_linear", lib=_LIB)
def _quant_linear_fake(x: Tensor, weight: Tensor, bias: Optional[Tensor], state: Tensor, counts: Tensor, spec: str,
                       needs_w: bool, out_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r = rt.runtime(spec)
    gd = gemm_torch_dtype(r.recipe.gemm_dtype)
    keeps = needs_w and not r.saves_input(x.dtype)
    y = x.new_empty((x.shape[0], weight.shape[0]), dtype=out_dtype)
    xm = x.new_empty(x.shape, dtype=gd) if keeps else _empty_like_spec(x, gd)
    ts = x.new_empty((1,), dtype=torch.float32) if keeps and r.fold("x") else _empty_like_spec(x, torch.float32)
    c = x.new_empty((2,), dtype=torch.int64) if r.fp8 else _empty_like_spec(x, torch.int64)
    return y, xm, ts, c


@torch.library.register_fake("fp4lab::quant_linear_backward", lib=_LIB)
def _quant_linear_backward_fake(dy: Tensor, xm: Tensor, weight: Tensor, ts_xm: Tensor, state: Tensor,
                                counts: Tensor, spec: str, need_x: bool, need_w: bool, need_b: bool,
                                x_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    dx = dy.new_empty((dy.shape[0], weight.shape[1]), dtype=x_dtype) if need_x else _empty_like_spec(dy, x_dtype)
    dw = dy.new_empty(weight.shape, dtype=weight.dtype) if need_w else _empty_like_spec(dy, weight.dtype)
    db = dy.new_empty((dy.shape[1],), dtype=torch.float32) if need_b else _empty_like_spec(dy, torch.float32)
    return dx, dw, db


def _quant_linear_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, weight, bias, state, counts, spec, needs_w, out_dtype = inputs
    _, xm, ts_xm, _ = output
    saved = x if rt.runtime(spec).saves_input(x.dtype) else xm
    ctx.save_for_backward(saved, weight, ts_xm)
    # the stream state and the counts are advanced by backward itself: kept outside the saved tensors, whose
    # version checks would refuse a layer used twice in one step
    ctx.state, ctx.counts = state, counts
    ctx.spec, ctx.x_dtype, ctx.has_bias = spec, x.dtype, bias is not None


def _quant_linear_grad(ctx: Any, dy: Tensor, backward: Any) -> tuple:
    xm, weight, ts_xm = ctx.saved_tensors
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    need_b = need_b and ctx.has_bias
    dx, dw, db = backward(dy, xm, weight, ts_xm, ctx.state, ctx.counts, ctx.spec, need_x, need_w, need_b,
                          ctx.x_dtype)
    return (dx if need_x else None, dw if need_w else None, db if need_b else None,
            None, None, None, None, None)


def _quant_linear_op_grad(ctx: Any, dy: Tensor, *unused: Any) -> tuple:
    return _quant_linear_grad(ctx, dy, torch.ops.fp4lab.quant_linear_backward)


torch.library.register_autograd("fp4lab::quant_linear", _quant_linear_op_grad, setup_context=_quant_linear_setup,
                                lib=_LIB)


class QuantLinearFunction(torch.autograd.Function):
    """Eager twin of the differentiable ``fp4lab::quant_linear``: the same implementation, setup and gradient
    without the dispatcher's round trip (``QuantLinear.forward`` uses it unless ``torch.compile`` is tracing)."""

    @staticmethod
    def forward(ctx: Any, *inputs: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        out = quant_linear(*inputs)
        _quant_linear_setup(ctx, inputs, out)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable  # the gradients of 4-bit GEMMs have no gradient: refuse, loudly
    def backward(ctx: Any, dy: Tensor, *unused: Any) -> tuple:
        return _quant_linear_grad(ctx, dy, quant_linear_backward)


# ---- the pieces, for layers of your own ----------------------------------------------------------------------------
@dataclass(frozen=True)
class OperandSpec:
    """One operand's fake quantization: format key (``runtime.register_format``), rounding ("" = the format's
    default), RHT size along K / along M (0 = none, -1 = that blocking not asked for) with their sign seeds,
    stochastic-rounding bits, GEMM dtype ("bf16" or "fp32") and whether the tensor scale is left out (folded)."""

    fmt: str
    rounding: str = ""
    rht_k: int = 0
    rht_seed_k: int = 0
    rht_m: int = -1
    rht_seed_m: int = 0
    sr_bits: int = 16
    gemm_dtype: str = "bf16"
    fold: bool = False

    def encode(self) -> str:
        return ";".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in self.__dict__.items())

    @staticmethod
    def decode(text: str) -> "OperandSpec":
        fields = dict(part.split("=", 1) for part in text.split(";"))
        ints = {k: int(fields[k]) for k in ("rht_k", "rht_seed_k", "rht_m", "rht_seed_m", "sr_bits")}
        return OperandSpec(fields["fmt"], fields["rounding"], gemm_dtype=fields["gemm_dtype"],
                           fold=fields["fold"] == "1", **ints)


def _blocking(rht: int, rht_seed: int, seed: Tensor) -> Any:
    from fp4lab.numerics.options import Blocking

    return None if rht < 0 else Blocking(rht or None, rht_seed, seed)


@torch.library.custom_op("fp4lab::fake_quant", mutates_args=())
def fake_quant(x: Tensor, seeds: Tensor, spec: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(along K, along M, ts_k, ts_m) of 2-D ``x`` [M, K] fake-quantized per the encoded ``OperandSpec``: the
    dequantized values in the rotated basis as the GEMM dtype, and the folded tensor scales ([1] fp32) of
    two-level formats; empty where not produced. ``seeds``: int64 [2, 2], the stochastic-rounding seeds of the
    K and M blockings in ``seeds[0, 0]`` and ``seeds[1, 0]`` (read on the device when the kernel runs)."""
    from fp4lab.recipes.operands import fake_quant_operands

    s = OperandSpec.decode(spec)
    fmt = rt.registered_format(s.fmt)
    out = fake_quant_operands(x, fmt, s.rounding or None, along_k=_blocking(s.rht_k, s.rht_seed_k, seeds[0, 0:1]),
                              along_m=_blocking(s.rht_m, s.rht_seed_m, seeds[1, 0:1]), sr_bits=s.sr_bits,
                              gemm_dtype=s.gemm_dtype, fold_tensor_scale=s.fold)
    gd = gemm_torch_dtype(s.gemm_dtype)
    return tuple(_empty_like_spec(x, dt) if t is None else t  # type: ignore[return-value]
                 for t, dt in zip(out, (gd, gd, torch.float32, torch.float32)))


@fake_quant.register_fake
def _fake_quant_fake(x: Tensor, seeds: Tensor, spec: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    s = OperandSpec.decode(spec)
    gd = gemm_torch_dtype(s.gemm_dtype)
    fold = s.fold and rt.registered_format(s.fmt).tensor_scale != "none"
    k, m = s.rht_k >= 0, s.rht_m >= 0
    return (x.new_empty(x.shape, dtype=gd) if k else _empty_like_spec(x, gd),
            x.new_empty(x.shape, dtype=gd) if m else _empty_like_spec(x, gd),
            x.new_empty((1,), dtype=torch.float32) if k and fold else _empty_like_spec(x, torch.float32),
            x.new_empty((1,), dtype=torch.float32) if m and fold else _empty_like_spec(x, torch.float32))


@torch.library.custom_op("fp4lab::e4m3_rows", mutates_args=())
def e4m3_rows(t: Tensor, transpose: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(E4M3 codes [R, C] as uint8 bytes, scale [R] fp32 2^r, unfit [R] int32) of bf16 ``t`` [R, C]
    (``transpose``: of its columns): ``fp4lab.recipes.fp8_gemm.to_e4m3_rows``."""
    from fp4lab.recipes import fp8_gemm

    op = fp8_gemm.to_e4m3_rows(t, transpose)
    return op.codes.view(torch.uint8), op.scale, op.unfit


@e4m3_rows.register_fake
def _e4m3_rows_fake(t: Tensor, transpose: bool) -> tuple[Tensor, Tensor, Tensor]:
    r, c = (t.shape[1], t.shape[0]) if transpose else (t.shape[0], t.shape[1])
    return (t.new_empty((r, c), dtype=torch.uint8), t.new_empty((r,), dtype=torch.float32),
            t.new_empty((r,), dtype=torch.int32))


@torch.library.custom_op("fp4lab::fp8_mm", mutates_args=("counts",))
def fp8_mm(a_codes: Tensor, a_scale: Tensor, a_unfit: Tensor, b_codes: Tensor, b_scale: Tensor, b_unfit: Tensor,
           a: Tensor, b: Tensor, bias: Optional[Tensor], counts: Tensor, out_dtype: torch.dtype,
           fast_accum: bool) -> Tensor:
    """``A @ B^T`` [M, N] from E4M3 operands of A [M, K] and B [N, K] (``e4m3_rows``: codes as uint8 bytes), rows
    that do not fit taken
    from the bf16 ``a`` and ``b`` (the same values, any strides); adds [M + N, unfit rows] to ``counts`` [2]
    (``fp4lab.recipes.fp8_gemm.fp8_gemm``)."""
    from fp4lab.recipes import fp8_gemm as fg

    e4m3 = torch.float8_e4m3fn
    return fg.fp8_gemm(fg.E4M3Rows(a_codes.view(e4m3), a_scale, a_unfit), fg.E4M3Rows(b_codes.view(e4m3), b_scale,
                       b_unfit), a, b, out_dtype, fast_accum, bias, counts)


@fp8_mm.register_fake
def _fp8_mm_fake(a_codes: Tensor, a_scale: Tensor, a_unfit: Tensor, b_codes: Tensor, b_scale: Tensor,
                 b_unfit: Tensor, a: Tensor, b: Tensor, bias: Optional[Tensor], counts: Tensor,
                 out_dtype: torch.dtype, fast_accum: bool) -> Tensor:
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.custom_op("fp4lab::scaled_mm", mutates_args=())
def scaled_mm(a: Tensor, b: Tensor, scale: Tensor, out_dtype: torch.dtype, bias: Optional[Tensor]) -> Tensor:
    """``scale * (a @ b) (+ bias)`` as ``out_dtype`` for a [M, K], b [K, N] and a one-element fp32 ``scale`` in
    device memory: one cuBLAS GEMM with the scale and bias in its epilogue on CUDA (``runtime.mm``)."""
    return rt.mm(a, b, out_dtype, scale, bias)


@scaled_mm.register_fake
def _scaled_mm_fake(a: Tensor, b: Tensor, scale: Tensor, out_dtype: torch.dtype, bias: Optional[Tensor]) -> Tensor:
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)
