"""FP8 GEMMs for power-of-two-scaled recipes (``gemm_dtype = "fp8"`` / ``"fp8-fast"``).

A qualifying format (E8M0 block scales, no tensor scale, element values with at most 4 significant bits: mxfp4,
ufp4-e8m0, int4-b32-e8m0, ...) dequantizes to ``element * 2^s`` per block. A GEMM operand row (a row along the
GEMM's reduction axis) is then exactly ``q * 2^r`` with E4M3 codes ``q`` and one power of two ``2^r`` per row
whenever its block exponents span few enough binades. The rule, per row of bf16 values ``v``:

* ``r``: the smallest integer with ``max|v| / 2^r <= 448`` (E4M3's largest finite value, 1.75 * 2^8), i.e.
  ``E - 8`` for a largest magnitude ``m * 2^E`` with ``m <= 1.75`` and ``E - 7`` above, raised to ``R_MIN =
  -117`` if below (so ``2^r`` is a normal fp32 and ``2^(r-9) >= 2^-126``); 0 for a row of zeros.
* the row *fits* when every ``v / 2^r`` is an E4M3 number (normal: at most 4 significant bits and exponent
  >= -6; subnormal: a multiple of 2^-9) and no value is Inf or NaN.

The decision is exact and the choice optimal: if the row is E4M3 times *any* power of two ``2^r'`` with
``r' >= R_MIN``, it fits with ``r`` (``r <= r'``; between the two, a smaller exponent keeps the maximum in range
and leaves every small value at least as many bits: a larger one only moves values below 2^-9 or into the
subnormals, which hold fewer bits). For a qualifying format, a row fits when its nonzero block exponents span at
most 15 binades (for E2M1: smallest nonzero element 0.5 * 2^s_min >= 2^-9 * 2^r with r = s_max - 6).
``tests/test_fp8_gemm.py`` checks the decision against a search over every ``r``.

GEMMs: ``torch._scaled_mm`` with E4M3 operands (A row-major, B column-major), fp32 scales ``2^r`` per row of A
and per column of B (row-wise scaling), fp32 accumulation promoted by the library's kernel (``"fp8"``:
``use_fast_accum=False``) or kept in the tensor cores' accumulator (``"fp8-fast"``: ``use_fast_accum=True``;
Hopper's FP8 wgmma keeps about 13 fraction bits, hwspec ``hopper-sm90`` ``wgmma.e4m3``). Rows of the output
that belong to an unfit row of A, and columns that belong to an unfit row of B, are recomputed from the bf16
operands and written over the FP8 result: on CUDA by ``fp4lab.kernels.unfit_mm``, which reads the flags on the
device (its programs return at once where no flag is set), so the GEMM never waits for the host and can be
captured in a CUDA graph; the counts accumulate in device memory.

On the CPU the E4M3 operands and scales are computed by ``e4m3_rows_reference`` (the integer twin of the Triton
kernel ``fp4lab.kernels.fp8_convert``, same bits), decoded back (``q * 2^r``, exact) and multiplied like the bf16
path, so a CPU layer gives the bf16 recipe's results bit for bit when every row fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fp4lab.errors import InputError
from fp4lab.recipes import backend
from fp4lab.recipes.config import FP8_GEMM_DTYPES, fp8_disqualification  # noqa: F401 (re-exported)

R_MIN = -117


@dataclass
class E4M3Rows:
    """An FP8 GEMM operand: ``codes`` [rows, k] (torch.float8_e4m3fn, row-major), ``scale`` [rows] (fp32 2^r),
    ``unfit`` [rows] (int32, 1 where the row is not ``codes * scale``; its codes are then meaningless)."""

    codes: torch.Tensor
    scale: torch.Tensor
    unfit: torch.Tensor

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


def e4m3_rows_reference(t: torch.Tensor, transpose: bool = False) -> E4M3Rows:
    """The E4M3 operand of bf16 ``t`` [R, C] (rows of ``t``; with ``transpose``, its columns), in torch integer
    arithmetic on any device: the same bits as ``fp4lab.kernels.fp8_convert_launch.to_e4m3_rows_triton``."""
    if t.ndim != 2 or t.dtype != torch.bfloat16:
        raise InputError(f"to_e4m3_rows: expected a 2-D bfloat16 tensor, got {t.dtype} of shape {tuple(t.shape)}")
    x = (t.t() if transpose else t).contiguous()
    h = x.view(torch.int16).to(torch.int32) & 0xFFFF
    amax = (h & 0x7FFF).amax(dim=1) if x.shape[1] else torch.zeros(x.shape[0], dtype=torch.int32, device=x.device)
    r = (amax >> 7) - 135 + ((amax & 0x7F) > 0x60).to(torch.int32)
    bad = amax >= 0x7F80
    r = torch.where(amax == 0, 0, r.clamp(min=R_MIN))
    code, ok = _encode_torch(h, r[:, None])
    unfit = (bad | ~ok.all(dim=1)).to(torch.int32)
    scale = ((r + 127) << 23).to(torch.int32).view(torch.float32)
    return E4M3Rows(code.to(torch.uint8).view(torch.float8_e4m3fn), scale, unfit)


def on_device(t: torch.Tensor) -> bool:
    """Whether FP8 GEMMs of ``t`` take the device path (Triton conversion, ``torch._scaled_mm``, the bf16 path by
    ``fp4lab.kernels.unfit_mm``): ``fp4lab.recipes.backend.on_triton``."""
    return backend.on_triton(t)


def to_e4m3_rows(t: torch.Tensor, transpose: bool = False) -> E4M3Rows:
    """E4M3 operand of bf16 ``t``: the Triton kernel on CUDA, the torch twin on the CPU (same bits)."""
    if on_device(t):
        from fp4lab.kernels.fp8_convert_launch import to_e4m3_rows_triton

        return E4M3Rows(*to_e4m3_rows_triton(t, transpose))
    return e4m3_rows_reference(t, transpose)


def cpu_operand(t: torch.Tensor, transpose: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, number of unfit rows) for a CPU GEMM: ``t``'s bf16 values rebuilt from its E4M3 operand (rows of
    ``t``, or columns with ``transpose``) where they fit, ``t``'s own rows where not; ``t``'s layout and dtype."""
    op = to_e4m3_rows(t, transpose)
    unfit = op.unfit.bool()
    own = (t.t() if transpose else t).float()
    v = torch.where(unfit[:, None], own, op.decode())
    v = (v.t() if transpose else v).to(t.dtype)
    return v.contiguous() if t.is_contiguous() else v, op.unfit.sum()


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


def fp8_gemm(a: E4M3Rows, b: E4M3Rows, a_bf16: torch.Tensor, b_bf16: torch.Tensor, out_dtype: torch.dtype,
             fast_accum: bool, bias: Any = None, counts: Any = None) -> torch.Tensor:
    """``A @ B^T`` for A [M, K], B [N, K] given as E4M3 operands (rows along K) and as bf16 tensors of the same
    values (any strides); rows of A and rows of B that do not fit take the bf16 path (``bf16_path_for_unfit``),
    counted into ``counts`` (int64 [2] on the operands' device: ``+= [M + N, unfit rows]``) when given."""
    y = scaled_mm(a, b, out_dtype, fast_accum, bias)
    return bf16_path_for_unfit(y, a, b, a_bf16, b_bf16, bias, counts)


def bf16_path_for_unfit(y: torch.Tensor, a: E4M3Rows, b: E4M3Rows, a_bf16: torch.Tensor, b_bf16: torch.Tensor,
                        bias: Any = None, counts: Any = None) -> torch.Tensor:
    """``y``, the FP8 product of ``fp8_gemm``, with the rows of unfit rows of A and the columns of unfit rows of B
    recomputed from the bf16 operands: ``a_bf16[i] @ b_bf16^T`` and ``a_bf16 @ b_bf16[j]^T`` (+ bias), fp32
    accumulation, one rounding, in place. On CUDA one Triton kernel decides and computes on the device
    (``fp4lab.kernels.unfit_mm``: no host synchronization, graph-capturable); on the CPU torch indexing."""
    if counts is None:
        counts = torch.zeros(2, dtype=torch.int64, device=y.device)
    if on_device(y):
        from fp4lab.kernels.unfit_mm_launch import unfit_mm_triton

        return unfit_mm_triton(y, a_bf16, b_bf16, a.unfit, b.unfit, counts, bias)
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
