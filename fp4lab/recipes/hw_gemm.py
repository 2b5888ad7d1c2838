"""A layer's three GEMMs with a tensor core's numerics: the recipe field ``gemm_numerics`` (which kind, and what
it takes: ``fp4lab.recipes.hw_numerics``). ``LayerRuntime.forward`` / ``backward`` hand the whole pass here.

Per GEMM (FPROP ``Y = X W^T``, DGRAD ``dX = dY W``, WGRAD ``dW = dY^T X``):

1. Each operand is quantized along the GEMM's reduction axis as the recipe's fake quantization quantizes it
   (format, RHT and its signs, rounding, the Philox key of the layer's step: ``LayerRuntime.blocking``), kept as
   codes and block scales: the Triton quantize kernel on CUDA, the numba emulator on the CPU (the bits of
   ``fp4lab.quantize``, whose dequantized values are the fake quantization's). An operand blocked along its axis
   0 is transposed (codes and scales); a 2-D tile's scale goes to each of its rows.
2. ``D`` = the kind's float32 result of A [rows, R] times B [cols, R]^T from C = 0: ``emulated_matmul`` (Triton)
   on CUDA, the CPU model (``fp4lab.hwspec.mma.emulate_gemm``) on the CPU; the same bits.
3. The epilogue, as a GEMM library applies it: ``alpha = ts_a * ts_b`` (the tensor scales of two-level formats,
   one fp32 product; none without them), ``y = fp32(D * alpha)``, ``y = fp32(y + bias)``, one rounding (RTNE) to
   the output dtype.

Forward saves the input X itself; backward quantizes it along M for WGRAD with the key of the same step. Reading
a stochastic-rounding key of a CUDA layer costs one device-to-host copy (the quantize kernel takes the key as an
argument), so such a step cannot be captured in a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from fp4lab.errors import InputError
from fp4lab.numerics.options import QuantizeOptions
from fp4lab.recipes import backend, operands, runtime
from fp4lab.recipes.hw_numerics import plans, recipe_numerics, reduction_error


@dataclass(frozen=True)
class HwOperand:
    """One GEMM operand as the instruction takes it: codes uint8 [rows, R], block scales float32 [rows, R / block]
    (blocked along R), the tensor scale (float32, 0-d) or None."""

    codes: torch.Tensor
    scales: torch.Tensor
    tensor_scale: torch.Tensor | None


class HwGemms:
    """The GEMMs of every layer of one ``LayerRuntime`` (its recipe names ``gemm_numerics``)."""

    def __init__(self, rt: Any) -> None:
        r = rt.recipe
        if rt.shard is not None:
            raise InputError(f"QuantLinear: recipe '{r.name}' runs its GEMMs as {r.gemm_numerics}, which has no "
                             "data-parallel token shard; run it in one process")
        self.rt = rt
        try:
            self.numerics = recipe_numerics(r)
        except ValueError as exc:  # a recipe validates this when it loads: only a changed hwspec file gets here
            raise InputError(f"QuantLinear: recipe '{r.name}': {exc}") from None
        self.plans = plans(self.numerics)

    # ---- operands -------------------------------------------------------------------------------------------
    def operand(self, t: torch.Tensor, op: str, gemm: str, axis: str, keys: Any) -> HwOperand:
        """Operand ``op`` of ``gemm`` from 2-D ``t``, blocked along its last axis (``axis`` "k") or axis 0 ("m",
        returned transposed), SR keys from ``keys`` (``runtime.sr_keys``)."""
        rt = self.rt
        fmt = rt.formats[op]
        b = rt.blocking(op, gemm, keys)
        seed = b.seed if isinstance(b.seed, int) else int(b.seed.item())
        two_d = fmt.block.is_2d  # tiles: quantized along K with this GEMM's blocking (runtime._operands)
        opts = QuantizeOptions(rt.rounding(op), seed, -1 if two_d or axis == "k" else 0, b.rht, b.rht_seed,
                               rt.recipe.sr_bits)
        if backend.on_triton(t):
            from fp4lab.kernels.quantize_launch import quantize_triton

            q = quantize_triton(t.detach(), fmt, opts)
            codes, scales, ts = q.codes, q.scales, q.tensor_scale
        else:
            from fp4lab.emulator.quantize import quantize_emulated

            with np.errstate(all="ignore"):
                q = quantize_emulated(t.detach().to(torch.float32, copy=True).numpy(), fmt, opts)
            codes, scales = torch.from_numpy(q.codes), torch.from_numpy(np.asarray(q.scales, np.float32))
            ts = None if q.tensor_scale is None else torch.tensor(q.tensor_scale, dtype=torch.float32)
        if two_d:
            rows, cols = fmt.block.shape
            if axis == "k":
                scales = scales.repeat_interleave(rows, 0)
            else:
                codes, scales = codes.t(), scales.t().repeat_interleave(cols, 0)
        elif axis == "m":
            codes, scales = codes.t(), scales.t()
        return HwOperand(codes.contiguous(), scales.to(torch.float32).contiguous(), ts)

    # ---- one GEMM ---------------------------------------------------------------------------------------------
    def gemm(self, gemm: str, a: HwOperand, b: HwOperand, out_dtype: torch.dtype, bias: Any = None) -> torch.Tensor:
        """``A @ B^T`` on the kind, then the epilogue (module docstring) in ``out_dtype``."""
        why = reduction_error(self.numerics, gemm, a.codes.shape[1])
        if why:
            raise InputError(f"QuantLinear (recipe '{self.rt.recipe.name}'): {why}")
        if backend.on_triton(a.codes):
            from fp4lab.kernels.mma_emulate_launch import emulated_matmul

            d = emulated_matmul(a.codes, a.scales, b.codes, b.scales, self.plans[gemm], check=False)
        else:
            from fp4lab.hwspec.mma import emulate_gemm

            t = self.numerics.gemms[gemm]
            qa, qb = (SimpleNamespace(codes=o.codes.numpy(), scales=o.scales.numpy(), tensor_scale=None, fmt=f)
                      for o, f in ((a, t.a_format), (b, t.b_format)))
            d = torch.from_numpy(np.asarray(emulate_gemm(qa, qb, hw=self.numerics.hw, kind=self.numerics.kind,
                                                         scale_format=t.scale_format), np.float32))
        return epilogue(d, a.tensor_scale, b.tensor_scale, bias, out_dtype)

    # ---- the two passes ---------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: Any, state: torch.Tensor,
                out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``LayerRuntime.forward``'s outputs: (Y, and empty tensors: X itself is saved for WGRAD)."""
        rt = self.rt
        keys = runtime.sr_keys(state, advance=False) if rt.forward_keys else None
        y = self.gemm("fprop", self.operand(x, "x", "fprop", "k", keys), self.operand(weight, "w", "fprop", "k", keys),
                      out_dtype, bias)
        dev = x.device
        gd = operands.gemm_torch_dtype(rt.recipe.gemm_dtype)
        return (y, runtime._empty(dev, gd), runtime._empty(dev, torch.float32), runtime._empty(dev, torch.int64))

    def backward(self, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor, need_x: bool,
                 need_w: bool, need_b: bool, x_dtype: torch.dtype) -> tuple[Any, Any, Any]:
        """``LayerRuntime.backward``'s (dX, dW, db) given the saved input ``x``; advances the step when the recipe
        draws random bits."""
        keys = runtime.sr_keys(state, advance=True) if self.rt.draws else None
        dy = dy.contiguous()
        dx = dw = db = None
        if need_x:
            dx = self.gemm("dgrad", self.operand(dy, "dy", "dgrad", "k", keys),
                           self.operand(weight, "w", "dgrad", "m", keys), x_dtype)
        if need_w:
            dw = self.gemm("wgrad", self.operand(dy, "dy", "wgrad", "m", keys),
                           self.operand(x, "x", "wgrad", "m", keys), weight.dtype)
        if need_b:
            db = dy.sum(0, dtype=torch.float32)
        return dx, dw, db


def epilogue(d: torch.Tensor, ts_a: Any, ts_b: Any, bias: Any, out_dtype: torch.dtype) -> torch.Tensor:
    """``out_dtype(fp32(fp32(d * alpha) + bias))`` with ``alpha = fp32(ts_a * ts_b)`` (the factors that are not
    None; no multiply without tensor scales, no add without a bias)."""
    alpha = ts_a if ts_b is None else (ts_b if ts_a is None else ts_a * ts_b)
    y = d if alpha is None else d * alpha.to(d.device)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(out_dtype)
