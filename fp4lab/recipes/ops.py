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

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch
from torch import Tensor

from fp4lab.recipes import runtime as rt
from fp4lab.recipes.operands import gemm_torch_dtype


@contextlib.contextmanager
def _no_autocast(device_type: str) -> Iterator[None]:
    """Autocast off inside an op (the operands' dtypes are the recipe's); entering a disabled autocast costs
    host time, so only when it is on."""
    if torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type):
        with torch.autocast(device_type, enabled=False):
            yield
    else:
        yield


def _empty_like_spec(x: Tensor, dtype: torch.dtype) -> Tensor:
    return x.new_empty(rt.EMPTY_SHAPE, dtype=dtype)


# ---- the layer ---------------------------------------------------------------------------------------------------
@torch.library.custom_op("fp4lab::quant_linear", mutates_args=())
def quant_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor], state: Tensor, counts: Tensor, spec: str,
                 needs_w: bool, out_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(Y [M, N] of ``out_dtype``, X's WGRAD operand [M, K], its tensor scale [1], FPROP's FP8 row counts [2]) of
    x [M, K] and weight [N, K] under the layer ``spec``; empty where not produced. ``counts`` (the layer's FP8
    counts, read by backward) is not touched here."""
    with _no_autocast(x.device.type):
        return rt.runtime(spec).forward(x, weight, bias, state, needs_w, out_dtype)


@quant_linear.register_fake
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


@torch.library.custom_op("fp4lab::quant_linear_backward", mutates_args=("state", "counts"))
def quant_linear_backward(dy: Tensor, xm: Tensor, weight: Tensor, ts_xm: Tensor, state: Tensor, counts: Tensor,
                          spec: str, need_x: bool, need_w: bool, need_b: bool,
                          x_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """(dX, dW, db), empty where not needed, of the layer ``spec`` given dY [M, N], forward's WGRAD operand of X
    and its tensor scale (empty: none); advances the step in ``state`` and adds the FP8 row counts of DGRAD and
    WGRAD to ``counts`` [3, 2]."""
    with _no_autocast(dy.device.type):
        dx, dw, db = rt.runtime(spec).backward(dy, xm, weight, ts_xm if ts_xm.numel() else None, state, counts,
                                               need_x, need_w, need_b, x_dtype)
    return (_empty_like_spec(dy, x_dtype) if dx is None else dx,
            _empty_like_spec(dy, weight.dtype) if dw is None else dw,
            _empty_like_spec(dy, torch.float32) if db is None else db)


@quant_linear_backward.register_fake
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


def _quant_linear_grad(ctx: Any, dy: Tensor, *unused: Any) -> tuple:
    xm, weight, ts_xm = ctx.saved_tensors
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    need_b = need_b and ctx.has_bias
    dx, dw, db = torch.ops.fp4lab.quant_linear_backward(dy, xm, weight, ts_xm, ctx.state, ctx.counts, ctx.spec,
                                                        need_x, need_w, need_b, ctx.x_dtype)
    return (dx if need_x else None, dw if need_w else None, db if need_b else None,
            None, None, None, None, None)


torch.library.register_autograd("fp4lab::quant_linear", _quant_linear_grad, setup_context=_quant_linear_setup)
