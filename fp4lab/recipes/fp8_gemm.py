"""FP8 GEMMs for power-of-two-scaled recipes (``gemm_dtype = "fp8"`` / ``"fp8-fast"``).

A qualifying format (E8M0 block scales, no tensor scale, element values with at most 4 significant bits: mxfp4,
ufp4-e8m0, int4-b32-e8m0, ...) dequantizes to ``element * 2^s`` per block. A GEMM operand row (a row along the
GEMM's reduction axis) is then exactly ``q * 2^r`` with E4M3 codes ``q`` and one power of two ``2^r`` per row
whenever its block exponents span few enough binades. The rule, per row of bf16 values ``v``:

* ``r``, from the block-scale rule: ``s + E_TOP - 8`` (``+ 1`` where the grid's largest value ``m * 2^E_TOP``
  has ``m > 1.75``), where ``2^s`` is the scale the format's rule gives a block whose amax is the operand row's
  largest ``|y|`` of the (rotated) input, clamped to ``[R_MIN, 127]`` with ``R_MIN = -117`` (so ``2^r`` is a
  normal fp32 and ``2^(r-9) >= 2^-126``); 0 for a row of zeros; a row whose maximum is Inf or NaN is unfit.
  Since every single-target scale rule is non-decreasing in the amax, ``2^s`` is the row's largest block scale
  and every value of the row is at most 448 * 2^r (E4M3's largest finite value is 1.75 * 2^8). ``r`` is known
  before the values exist, so the fake-quant pass writes the E4M3 codes itself
  (``fp4lab.kernels.e4m3_operands_launch``).
* the row *fits* when every ``v / 2^r`` is an E4M3 number (normal: at most 4 significant bits and exponent
  >= -6; subnormal: a multiple of 2^-9) and no value is Inf or NaN.

The decision is exact, so ``r`` decides which rows fit, never a value. For MXFP4 (OCP floor rule, E2M1) ``r``
is the smallest exponent that holds the row's largest value, the optimal choice: if the row is E4M3 times *any*
power of two ``2^r'`` with ``r' >= R_MIN``, it fits with ``r`` (``r <= r'``; a smaller exponent keeps the
maximum in range and leaves every small value at least as many bits). There an MXFP4 row fits when its nonzero
block exponents span at most 15 binades (smallest nonzero element 0.5 * 2^s_min >= 2^-9 * 2^r with r =
s_max - 6). ``e4m3_rows_reference`` without a given ``r`` (and the Triton converter ``fp4lab.kernels.
fp8_convert``) computes that optimal ``r`` from the values themselves, for any bf16 operand;
``tests/test_fp8_gemm.py`` checks it against a search over every ``r``, and the rule's ``r`` against it.

GEMMs: ``torch._scaled_mm`` with E4M3 operands (A row-major, B column-major), fp32 scales ``2^r`` per row of A
and per column of B (row-wise scaling), fp32 accumulation promoted by the library's kernel (``"fp8"``:
``use_fast_accum=False``) or kept in the tensor cores' accumulator (``"fp8-fast"``: ``use_fast_accum=True``;
Hopper's FP8 wgmma keeps about 13 fraction bits, hwspec ``hopper-sm90`` ``wgmma.e4m3``). Rows of the output
that belong to an unfit row of A, and columns that belong to an unfit row of B, are recomputed from the bf16
values of those operand rows and written over the FP8 result: on CUDA by ``fp4lab.kernels.unfit_mm``, which reads the flags on the
device (its programs return at once where no flag is set), so the GEMM never waits for the host and can be
captured in a CUDA graph; the counts accumulate in device memory.

On the CPU the operand values come from the emulator, ``r`` from ``e4m3_exponents_reference`` (the numpy twin of
the exponent kernels), the codes from ``e4m3_rows_reference`` (the integer twin of the kernels' E4M3 encoding);
the values are decoded back (``q * 2^r``, exact) and multiplied like the bf16 path, so a CPU layer gives the
bf16 recipe's results bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fp4lab.errors import InputError
from fp4lab.recipes.config import FP8_GEMM_DTYPES, fp8_disqualification  # noqa: F401 (re-exported)

R_MIN = -117
TRITON_ON_CPU = False  # tests: route CPU tensors through the Triton kernels (needs TRITON_INTERPRET=1)


@dataclass
class E4M3Rows:
    """An FP8 GEMM operand: ``codes`` [rows, k] (torch.float8_e4m3fn, row-major), ``scale`` [rows] (fp32 2^r),
    ``unfit`` [rows] (int32, 1 where the row is not ``codes * scale``; its codes are then meaningless) and
    ``values`` (bf16 [rows, k], any strides: the operand's values, at least in its unfit rows, which the bf16 path
    reads)."""

    codes: torch.Tensor
    scale: torch.Tensor
    unfit: torch.Tensor
    values: Any = None

    def decode(self) -> torch.Tensor:
        """fp32 ``codes * scale`` per row (exact)."""
        return self.codes.float() * self.scale[:, None]


def _encode_torch(h: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 code, fits) of bf16 bits ``h`` (int32 in [0, 65535]) over 2^r: the Triton kernel's integer rule."""
    s = (h >> 15) & 1
    a = h & 0x7FFF
    eb, m = a >> 7, a & 0x7F
    ew = eb - 127 - r
    normal = ew >= -6
    shift = (-(ew + 2)).clamp(5, 7)
    sig = m | 0x80
    sub_ok = (ew >= -9) & (ew <= -7) & ((sig & ((1 << shift) - 1)) == 0)
    norm_ok = normal & ((m & 0xF) == 0) & ((ew < 8) | ((ew == 8) & (m <= 0x60)))
    ok = (eb != 0) & (eb != 255) & (sub_ok | norm_ok)
    code = torch.where(normal, ((ew + 7) << 3) | (m >> 4), sig >> shift)
    zero = a == 0
    code = torch.where(ok, code, 0) | torch.where(ok | zero, s << 7, 0)
    return code, ok | zero


def e4m3_rows_reference(t: torch.Tensor, transpose: bool = False, scale: Any = None, unfit: Any = None) -> E4M3Rows:
    """The E4M3 operand of bf16 ``t`` [R, C] (rows of ``t``; with ``transpose``, its columns), in torch integer
    arithmetic on any device: over the smallest ``r`` that holds each row's largest value (the same bits as
    ``fp4lab.kernels.fp8_convert_launch.to_e4m3_rows_triton``), or over given row scales ``scale`` = 2^r with
    given initial ``unfit`` flags (``e4m3_exponents_reference``; codes of values that do not fit are then 0x7F, as
    the fake-quant kernel writes them). ``values`` is the operand (``t`` or its transpose)."""
    if t.ndim != 2 or t.dtype != torch.bfloat16:
        raise InputError(f"to_e4m3_rows: expected a 2-D bfloat16 tensor, got {t.dtype} of shape {tuple(t.shape)}")
    x = (t.t() if transpose else t).contiguous()
    h = x.view(torch.int16).to(torch.int32) & 0xFFFF
    if scale is None:
        amax = (h & 0x7FFF).amax(dim=1) if x.shape[1] else torch.zeros(x.shape[0], dtype=torch.int32,
                                                                         device=x.device)
        r = (amax >> 7) - 135 + ((amax & 0x7F) > 0x60).to(torch.int32)
        bad = amax >= 0x7F80
        r = torch.where(amax == 0, 0, r.clamp(min=R_MIN))
        scale = ((r + 127) << 23).to(torch.int32).view(torch.float32)
        marker = 0
    else:
        r = (scale.view(torch.int32) >> 23) - 127
        bad = unfit != 0
        marker = 0x7F
    code, ok = _encode_torch(h, r[:, None])
    code = torch.where(ok, code, marker)
    unfit = (bad | ~ok.all(dim=1)).to(torch.int32)
    return E4M3Rows(code.to(torch.uint8).view(torch.float8_e4m3fn), scale, unfit, x)


def e4m3_exponents_reference(x: torch.Tensor, fmt: Any, along_k: Any, along_m: Any) -> tuple:
    """``(scale_k, unfit_k, scale_m, unfit_m)`` of ``fp4lab.kernels.e4m3_operands_launch.e4m3_exponents_triton``
    (same bits) in numpy: per row of ``x`` [M, K] rotated along K (``along_k``, a ``Blocking``) and per column of
    ``x`` rotated along M (``along_m``), fp32 ``2^r`` and int32 unfit flags from the format's block-scale rule
    at the row's largest ``|y|`` (module docstring); None for a blocking not asked for."""
    from fp4lab.emulator.ref_quantize import block_scale_codes
    from fp4lab.emulator.rht import rht_reference
    from fp4lab.kernels.e4m3_operands_launch import grid_top

    a = x.detach().to(torch.float32).contiguous().numpy()
    e_top, m_hi = grid_top(fmt)
    out: list[Any] = []
    for spec, axis in ((along_k, 1), (along_m, 0)):
        if spec is None:
            out += [None, None]
            continue
        with np.errstate(all="ignore"):
            y = rht_reference(a, spec.rht, spec.rht_seed, axis=axis) if spec.rht else a
        b = (y.view(np.uint32) & np.uint32(0x7FFFFFFF)).max(axis=axis).astype(np.int64)
        bad = b >= 0x7F800000
        s = fmt.scale.decode(block_scale_codes(np.where(bad, 0, b).astype(np.uint32).view(np.float32), fmt,
                                               fmt.targets[0], None)).astype(np.float32)
        sb = s.view(np.uint32).astype(np.int64)
        bad |= ~np.isfinite(s) | (s <= 0)
        r = np.clip((sb >> 23) - 127 + e_top - 8 + m_hi, R_MIN, 127)
        r = np.where(bad | (b == 0), 0, r)
        out += [torch.from_numpy(((r + 127) << 23).astype(np.int32).view(np.float32)),
                torch.from_numpy(bad.astype(np.int32))]
    return tuple(out)


def on_device(t: torch.Tensor) -> bool:
    """Whether FP8 GEMMs of ``t`` take the device path (Triton kernels, ``torch._scaled_mm``, the bf16 path by
    ``fp4lab.kernels.unfit_mm``): CUDA tensors, and CPU tensors under ``TRITON_ON_CPU`` (tests)."""
    return t.is_cuda or TRITON_ON_CPU


def to_e4m3_rows(t: torch.Tensor, transpose: bool = False) -> E4M3Rows:
    """E4M3 operand of bf16 ``t`` over the smallest ``r`` per row: the Triton kernel on the device, the torch twin
    on the CPU (same bits)."""
    if on_device(t):
        from fp4lab.kernels.fp8_convert_launch import to_e4m3_rows_triton

        return E4M3Rows(*to_e4m3_rows_triton(t, transpose), t.t() if transpose else t)
    return e4m3_rows_reference(t, transpose)


def e4m3_exponents(t: torch.Tensor, fmt: Any, along_k: Any, along_m: Any) -> tuple:
    """``(scale_k, unfit_k, scale_m, unfit_m)`` of the E4M3 operands of ``t`` (module docstring): the Triton
    kernels on the device, ``e4m3_exponents_reference`` on the CPU (same bits)."""
    if on_device(t):
        from fp4lab.kernels.e4m3_operands_launch import e4m3_exponents_triton

        return e4m3_exponents_triton(t, fmt, along_k, along_m)
    return e4m3_exponents_reference(t, fmt, along_k, along_m)


def fp8_operands(t: torch.Tensor, fmt: Any, rounding: str | None, along_k: Any, along_m: Any, sr_bits: int,
                 scales: tuple) -> tuple[E4M3Rows | None, E4M3Rows | None]:
    """The E4M3 operands of 2-D ``t`` [M, K] fake-quantized along K (operand rows = rows of ``t``: [M, K]) and
    along M (operand rows = columns of ``t``: [K, M]), None where not asked for, over the exponents ``scales``
    (``e4m3_exponents`` of the same blockings; their unfit flags are completed in place). On the device one
    fake-quant pass writes the codes (two where both blockings rotate), then the unfit rows' bf16 values are
    completed (``values``); on the CPU the emulator's bf16 operands are encoded by ``e4m3_rows_reference``."""
    if on_device(t):
        from fp4lab.kernels.e4m3_operands_launch import repair_unfit_rows_triton
        from fp4lab.kernels.fakequant_launch import e4m3_fusable, fake_quantize_e4m3_triton

        kw = dict(sr_bits=sr_bits, scales=scales)
        if e4m3_fusable(t, fmt, along_k, along_m):
            pairs = fake_quantize_e4m3_triton(t, fmt, rounding, along_k=along_k, along_m=along_m, **kw)
        else:  # rotations along both axes: one pass per blocking
            pairs = (fake_quantize_e4m3_triton(t, fmt, rounding, along_k=along_k, **kw)[0],
                     fake_quantize_e4m3_triton(t, fmt, rounding, along_m=along_m, **kw)[1])
        ops: list[E4M3Rows | None] = []
        for pair, scale, unfit in zip(pairs, scales[0::2], scales[1::2]):
            if pair is None:
                ops.append(None)
                continue
            repair_unfit_rows_triton(pair[0], pair[1], scale, unfit)
            ops.append(E4M3Rows(pair[0], scale, unfit, pair[1]))
        return ops[0], ops[1]
    from fp4lab.recipes.operands import fake_quant_operands

    vk, vm, _, _ = fake_quant_operands(t, fmt, rounding, along_k=along_k, along_m=along_m, sr_bits=sr_bits,
                                       gemm_dtype="bf16", fold_tensor_scale=False)
    return (None if vk is None else e4m3_rows_reference(vk, False, scales[0], scales[1]),
            None if vm is None else e4m3_rows_reference(vm, True, scales[2], scales[3]))


def cpu_values(op: E4M3Rows, transpose: bool = False) -> torch.Tensor:
    """bf16 values of a CPU operand for the bf16 GEMM path: decoded from the codes (``q * 2^r``, exact) in fit
    rows, ``op.values`` in unfit rows; as [rows, k], or with ``transpose`` as the contiguous [k, rows] (the layout
    the layer's bf16 recipe multiplies, so the products match it bit for bit)."""
    v = torch.where(op.unfit.bool()[:, None], op.values.float(), op.decode()).to(torch.bfloat16)
    return v.t().contiguous() if transpose else v


_FP32_OUT: dict[str, bool] = {}  # device type -> _scaled_mm with row-wise scales writes fp32 there


def scaled_mm(a: E4M3Rows, b: E4M3Rows, out_dtype: torch.dtype, fast_accum: bool, bias: Any = None) -> torch.Tensor:
    """``(a.codes * a.scale) @ (b.codes * b.scale)^T`` (+ bias) by ``torch._scaled_mm`` with row-wise scales, as
    ``out_dtype`` (fp32 where the library writes it with row-wise scales, else bf16 converted; bias then added
    separately)."""
    dev = a.codes.device.type
    kw = dict(scale_a=a.scale[:, None], scale_b=b.scale[None, :], use_fast_accum=fast_accum)
    if out_dtype == torch.float32 and _FP32_OUT.get(dev, True):
        try:
            y = torch._scaled_mm(a.codes, b.codes.t(), out_dtype=torch.float32, **kw)
            _FP32_OUT[dev] = True
            return y if bias is None else y.add_(bias.to(y.dtype))
        except RuntimeError:
            _FP32_OUT[dev] = False
    if bias is not None and bias.dtype == torch.bfloat16:
        return torch._scaled_mm(a.codes, b.codes.t(), bias=bias, out_dtype=torch.bfloat16, **kw).to(out_dtype)
    y = torch._scaled_mm(a.codes, b.codes.t(), out_dtype=torch.bfloat16, **kw).to(out_dtype)
    return y if bias is None else y.add_(bias.to(out_dtype))


def fp8_gemm(a: E4M3Rows, b: E4M3Rows, out_dtype: torch.dtype, fast_accum: bool, bias: Any = None,
             counts: Any = None) -> torch.Tensor:
    """``A @ B^T`` for A [M, K], B [N, K] given as E4M3 operands (rows along K); rows of A and rows of B that do
    not fit take the bf16 path on their ``values`` (``bf16_path_for_unfit``), counted into ``counts`` (int64 [2]
    on the operands' device: ``+= [M + N, unfit rows]``) when given."""
    y = scaled_mm(a, b, out_dtype, fast_accum, bias)
    return bf16_path_for_unfit(y, a, b, bias, counts)


def bf16_path_for_unfit(y: torch.Tensor, a: E4M3Rows, b: E4M3Rows, bias: Any = None,
                        counts: Any = None) -> torch.Tensor:
    """``y``, the FP8 product of ``fp8_gemm``, with the rows of unfit rows of A and the columns of unfit rows of B
    recomputed from the operands' bf16 values: ``a[i] @ b^T`` and ``a @ b[j]^T`` (+ bias), fp32 accumulation,
    one rounding, in place. On the device one Triton kernel decides and computes (``fp4lab.kernels.unfit_mm``:
    no host synchronization, graph-capturable); on the CPU torch indexing."""
    if counts is None:
        counts = torch.zeros(2, dtype=torch.int64, device=y.device)
    if on_device(y):
        from fp4lab.kernels.unfit_mm_launch import unfit_mm_triton

        return unfit_mm_triton(y, (a.codes, a.scale, a.unfit, a.values), (b.codes, b.scale, b.unfit, b.values),
                               counts, bias)
    a_bf16, b_bf16 = cpu_values(a), cpu_values(b)
    counts[0] += a.unfit.numel() + b.unfit.numel()
    counts[1] += a.unfit.sum() + b.unfit.sum()
    i = a.unfit.nonzero().flatten()
    if i.numel():
        y[i] = _bf16_mm(a_bf16[i], b_bf16.t(), y.dtype, bias)
    j = b.unfit.nonzero().flatten()
    if j.numel():
        y[:, j] = _bf16_mm(a_bf16, b_bf16[j].t(), y.dtype, None if bias is None else bias[j])
    return y


def _bf16_mm(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, bias: Any) -> torch.Tensor:
    """fp32 product of the (bf16) operands, plus the bias in fp32, rounded once to ``out_dtype`` (CPU)."""
    y = a.float() @ b.float()
    return (y if bias is None else y + bias.float()).to(out_dtype)
