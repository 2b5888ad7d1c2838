"""Public entry points ``quantize`` / ``dequantize`` / ``rht`` / ``gemm`` / ``emulate_gemm``: dispatch by array type
and device.

numpy arrays and CPU torch tensors run on the numba emulator; CUDA tensors run on the Triton kernels. All
paths produce the same bits (see docs/numerics.md). Inputs are converted to float32 first (RTNE from float64;
exact from float16/bfloat16).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fp4lab.errors import InputError, check_plain_data
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.formats.registry import get_format
from fp4lab.numerics.options import RHT_SIZES, QuantizeOptions, check_int, split_seed_checked
from fp4lab.quantized import QuantizedTensor

FormatLike = str | Path | QuantFormat


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _to_float32_numpy(x: Any, what: str) -> np.ndarray:
    """float32 numpy copy/view of a numpy array or CPU torch tensor; rejects non-float dtypes."""
    check_plain_data(x, what)
    if _is_torch(x):
        import torch

        if not torch.is_floating_point(x):
            raise InputError(f"{what}: input tensor has dtype {x.dtype}; expected a floating-point tensor")
        return x.detach().to(torch.float32).contiguous().numpy()
    if isinstance(x, (str, bytes, dict, set)) or x is None:
        raise InputError(f"{what}: input must be a numpy array or torch tensor, got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:  # ragged nested lists and the like
        raise InputError(f"{what}: input is not an array ({' '.join(str(exc).split())[:200]})") from None
    if arr.ndim == 0:
        raise InputError(f"{what}: input is a 0-d scalar; give an array with at least one axis")
    if arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
        raise InputError(f"{what}: input array has dtype {arr.dtype}; expected float16, float32 or float64")
    with np.errstate(over="ignore"):  # RTNE cast: float64 beyond the float32 range becomes +-Inf, as documented
        return np.ascontiguousarray(arr, dtype=np.float32)


def _torch_fields(qt: QuantizedTensor) -> QuantizedTensor:
    """Same quantized tensor with its arrays as CPU torch tensors (for torch inputs)."""
    import dataclasses

    import torch

    def conv(a: Any) -> Any:
        a = np.asarray(a)
        return torch.from_numpy(a.view(np.int32) if a.dtype == np.uint32 else a)

    return dataclasses.replace(qt, codes=conv(qt.codes), scale_codes=conv(qt.scale_codes), scales=conv(qt.scales),
                               meta={**qt.meta, "torch": True})


def quantize(
    x: Any,
    fmt: FormatLike,
    rounding: str | None = None,
    seed: int = 0,
    axis: int = -1,
    rht: int | None = None,
    rht_seed: int = 0,
    *,
    sr_bits: int = 24,
    options: QuantizeOptions | None = None,
) -> QuantizedTensor:
    """Quantize ``x`` (numpy array or torch tensor) with format ``fmt`` (name, spec-file path or QuantFormat).

    ``rounding``: None (the format's default), "rtne", "rtna", "rtnz", "rtz", "rtp" (toward +Inf), "rtm"
    (toward -Inf) or "sr" (``seed`` is its Philox key).
    ``axis``: the blocked axis of 1-D blocks (2-D tiles take the last two axes).
    ``rht``: rotate along the blocked axis with ``fp4lab.rht(size=rht, seed=rht_seed)`` before scaling.
    ``sr_bits``: random bits per element for "sr" (24, 16, 8 or 4; docs/numerics.md, "Stochastic-rounding random bits").
    The arguments become one ``fp4lab.QuantizeOptions`` (which checks them: one-line ``InputError``s) that the
    backend takes; ``options`` gives that record instead of the arguments (not both).
    """
    fmt = get_format(fmt)
    given = (rounding, seed, axis, rht, rht_seed, sr_bits)
    if isinstance(rounding, QuantizeOptions) and options is None:
        raise InputError("quantize: a QuantizeOptions goes in as options=..., not in place of rounding")
    if options is not None:
        if not isinstance(options, QuantizeOptions):
            raise InputError(f"quantize: options must be a QuantizeOptions, got {type(options).__name__}")
        if given != (None, 0, -1, None, 0, 24):
            raise InputError("quantize: give the options either as arguments or as one QuantizeOptions, not both")
    else:
        options = QuantizeOptions(*given)
    if _is_torch(x) and x.is_cuda:
        from fp4lab.kernels.api import quantize_cuda

        return quantize_cuda(x, fmt, options)
    from fp4lab.emulator.quantize import quantize_emulated

    arr = _to_float32_numpy(x, "quantize")
    qt = quantize_emulated(arr, fmt, options)
    return _torch_fields(qt) if _is_torch(x) else qt


def pack(qt: QuantizedTensor) -> QuantizedTensor:
    """``qt`` with its 4-bit codes stored as kernels and hardware store them: two per byte along the last axis,
    element 2i in the low nibble, 2i+1 in the high one (``packed_codes`` [..., n/2] uint8 on the codes' device;
    ``codes`` None). A tensor already packed is returned as it is; ``unpack`` inverts it bit for bit."""
    import dataclasses

    if not isinstance(qt, QuantizedTensor):
        raise InputError(f"pack: expected a QuantizedTensor (as fp4lab.quantize returns), got {type(qt).__name__}")
    if qt.codes is None and qt.packed_codes is not None:
        return qt
    if qt.fmt.element.bits > 4:
        raise InputError(f"pack: format '{qt.fmt.name}' has {qt.fmt.element.bits}-bit codes; only 4-bit codes pack "
                         "two per byte")
    if not len(qt.shape) or qt.shape[-1] % 2:
        raise InputError(f"pack: the last axis must have even length to pack two codes per byte, got shape {qt.shape}")
    return dataclasses.replace(qt, codes=None, packed_codes=qt.packed())


def unpack(qt: QuantizedTensor) -> QuantizedTensor:
    """``qt`` with one uint8 code per element in ``codes`` (from ``packed_codes``, on their device) and no
    ``packed_codes``; an unpacked tensor is returned as it is. Raw packed bytes from elsewhere (another library,
    a file) become a QuantizedTensor with ``fp4lab.interop.from_packed``."""
    import dataclasses

    from fp4lab.layout import unpack_codes

    if not isinstance(qt, QuantizedTensor):
        raise InputError(f"unpack: expected a QuantizedTensor (as fp4lab.quantize returns), got {type(qt).__name__}")
    if qt.codes is not None or qt.packed_codes is None:
        return qt
    return dataclasses.replace(qt, codes=unpack_codes(qt.packed_codes), packed_codes=None)


def dequantize(qt: QuantizedTensor, rotated: bool = False) -> Any:
    """float32 values of ``qt`` (array or tensor, matching the input of ``quantize``): ``value[code] * S``, then
    ``* ts`` for two-level formats, each product rounded to float32 (``dequantize_order = "scale_product_first"``:
    ``value[code] * float32(S * ts)``; docs/numerics.md, "Pipeline").

    The RHT applied at quantization is undone unless ``rotated=True`` (then values stay in the rotated basis,
    as a GEMM on rotated operands sees them).
    """
    import dataclasses

    from fp4lab.emulator.quantize import dequantize_emulated
    from fp4lab.numerics.checks import check_quantized, tensor_scale_value

    if isinstance(qt, QuantizedTensor):
        qt = unpack(qt)  # codes stored packed (fp4lab.pack, quantize_triton(packed=True)) decode alike
    check_quantized(qt)  # the same checks on every backend
    if not isinstance(rotated, (bool, np.bool_)):
        raise InputError(f"dequantize: rotated must be True or False, got {type(rotated).__name__}")
    if _is_torch(qt.codes) and qt.codes.is_cuda:
        import torch

        from fp4lab.kernels.api import dequantize_cuda

        if qt.tensor_scale is not None and not isinstance(qt.tensor_scale, torch.Tensor):  # the kernel reads a tensor
            ts = torch.tensor(float(tensor_scale_value(qt.tensor_scale)), dtype=torch.float32, device=qt.codes.device)
            qt = dataclasses.replace(qt, tensor_scale=ts)
        return dequantize_cuda(qt, rotated=bool(rotated))

    def host(a: Any) -> Any:
        if not _is_torch(a):
            return a
        h = a.detach().cpu().numpy()
        return h.view(np.uint32) if h.dtype == np.int32 else h.view(np.uint16) if h.dtype == np.int16 else h

    np_qt = dataclasses.replace(qt, codes=host(qt.codes), scales=host(qt.scales), scale_codes=host(qt.scale_codes),
                                tensor_scale=host(qt.tensor_scale))
    out = dequantize_emulated(np_qt, rotated=bool(rotated), check=False)  # checked above
    if qt.meta.get("torch") or _is_torch(qt.codes):
        import torch

        return torch.from_numpy(out)
    return out


def rht(x: Any, size: int = 16, seed: int = 0, axis: int = -1, inverse: bool = False) -> Any:
    """Randomized Hadamard transform of ``x`` in consecutive ``size``-element chunks along ``axis``, whose length
    must be a multiple of ``size`` (16, 32, 64, 128 or 256); float32 result of ``x``'s shape and kind.

    Forward: ``c * FWHT(s * v)``; inverse: ``s * (c * FWHT(v))``, with ``s`` the +-1 signs of Philox key ``seed``
    (``fp4lab.numerics.rht.rht_signs``), FWHT unnormalized fp32 butterflies and ``c = fp32(1/sqrt(size))``
    (docs/numerics.md, "Randomized Hadamard transform")."""
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or int(size) not in RHT_SIZES:
        raise InputError(f"rht: size must be one of {', '.join(map(str, RHT_SIZES))}, got {size!r}"[:200])
    split_seed_checked(seed, "rht: seed")
    check_int(axis, "rht: axis")
    if not isinstance(inverse, (bool, np.bool_)):
        raise InputError(f"rht: inverse must be True or False, got {type(inverse).__name__}")
    if _is_torch(x) and x.is_cuda:
        from fp4lab.kernels.api import rht_cuda

        return rht_cuda(x, size=size, seed=seed, axis=axis, inverse=inverse)
    from fp4lab.emulator.nb_rht import rht as rht_numba

    out = rht_numba(_to_float32_numpy(x, "rht"), size=size, seed=seed, axis=axis, inverse=inverse)
    if _is_torch(x):
        import torch

        return torch.from_numpy(out)
    return out


def _on_cuda(q: Any) -> bool:
    return isinstance(q, QuantizedTensor) and _is_torch(q.codes) and q.codes.is_cuda


def gemm(qa: QuantizedTensor, qb: QuantizedTensor, mode: str = "exact") -> Any:
    """fp32 ``A @ B.T`` of quantized tensors qa [M, K] and qb [N, K] (same format, blocked along K).

    CUDA operands: ``exact`` is one Triton kernel decoding tiles in registers, K in ascending order: tensor-core
    ``tl.dot`` chains of the decoded bf16 tiles where every ``value * S`` is exact in bf16, else
    ``acc + (P_b * Sa_b) * Sb_b`` per block (see ``fp4lab.kernels.gemm``); two-level formats then take
    ``(acc * ts_a) * ts_b``. ``fast`` is Triton dequantize to bf16, then cuBLAS. CPU operands (numpy or CPU
    torch): ``exact`` emulates that kernel bit for bit, ``fast`` is a float32 dequantize + matmul
    (``fp4lab.cpu_gemm``). Operands stored packed (``fp4lab.pack``) are unpacked first.
    """
    qa, qb = (unpack(q) if isinstance(q, QuantizedTensor) else q for q in (qa, qb))
    if not (_on_cuda(qa) or _on_cuda(qb)):
        from fp4lab.cpu_gemm import gemm_cpu

        return gemm_cpu(qa, qb, mode=mode)
    from fp4lab.kernels.api import gemm as gemm_triton

    return gemm_triton(qa, qb, mode=mode)


def _mma_on_device(q: Any) -> bool:
    codes = getattr(q, "codes", None)
    if codes is None and getattr(q, "packed_codes", None) is not None:
        codes = q.packed_codes
    return _is_torch(codes) and codes.is_cuda


def emulate_gemm(qa: Any, qb: Any, hw: Any = "hopper-sm90", kind: str = "wgmma.bf16", block_k: int | None = None,
                 promotion_interval: int | None = None, *, impl: str | None = None, **kwargs: Any) -> Any:
    """A @ B.T (A [M, K], B [N, K], blocked along K) as a tiled GEMM kernel on ``hw``'s tensor cores computes it with
    instruction ``kind`` (the CPU model: ``fp4lab.hwspec.mma.emulate_gemm``, whose docstring gives every option).

    Quantized operands whose codes are CUDA tensors run on the GPU (``impl="triton"`` forces it, e.g. for CPU
    tensors under ``TRITON_INTERPRET=1``): the Triton kernels of fp4lab/kernels/mma_emulate.py, for block-scaled
    kinds (GST/ST/T/TR-FDPA), same bits as the CPU model; the result is a float32 tensor on the codes' device.
    Everything else runs the CPU model (``impl`` "numba", the default, or "reference") and returns numpy."""
    on_device = _mma_on_device(qa) or _mma_on_device(qb)
    if impl == "triton" or (impl is None and on_device):
        return _emulate_gemm_triton(qa, qb, hw, kind, block_k, promotion_interval, **kwargs)
    if on_device:
        raise InputError(f"emulate_gemm: impl={impl!r} runs the CPU model on CPU operands; these are CUDA tensors "
                         "(move them to the CPU, or leave impl unset for the Triton kernels)")
    from fp4lab.hwspec.mma import emulate_gemm as emulate_gemm_cpu

    return emulate_gemm_cpu(qa, qb, hw=hw, kind=kind, block_k=block_k, promotion_interval=promotion_interval,
                            impl=impl or "numba", **kwargs)


def _emulate_gemm_triton(qa: Any, qb: Any, hw: Any, kind: str, block_k: int | None, promotion_interval: int | None,
                         c: Any = None, k_order: Any = None, scale_mode: str = "fold", a_format: Any = None,
                         b_format: Any = None, scale_format: str | None = None) -> Any:
    """The GPU path of ``emulate_gemm``: the same checks and choices as the CPU model (formats from the operands'
    value tables, the scale format decided by ``decode_scales`` on a host copy of the scales), then
    ``fp4lab.kernels.mma_emulate_launch.emulated_matmul`` per promotion interval, fp32 additions between them and
    the tensor scales as two fp32 multiplies."""
    import torch

    from fp4lab.hwspec.mma import resolve_kind
    from fp4lab.hwspec.mma_operands import decode_scales, values_table
    from fp4lab.hwspec.mma_plan import lower_kind
    from fp4lab.kernels.mma_emulate_launch import emulated_matmul

    k = resolve_kind(hw, kind)
    qa, qb = (unpack(q) if isinstance(q, QuantizedTensor) else q for q in (qa, qb))
    for q, nm in ((qa, "qa"), (qb, "qb")):
        if not (_is_torch(getattr(q, "codes", None)) and values_table(getattr(q, "fmt", None)) is not None):
            raise InputError(f"emulate_gemm: on the GPU, {nm} must be a quantized tensor (torch .codes, .scales, "
                             ".fmt with a values table)")
    if not k.block_scaled:
        raise InputError(f"emulate_gemm: kind {k.name!r} has no block scales; the GPU kernels run block-scaled kinds "
                         "(pass CPU operands for the CPU model)")
    if k_order is not None:
        raise InputError("emulate_gemm: k_order must be a permutation of range(block_k), on a kind without block "
                         "scales")
    ca, cb = qa.codes, qb.codes
    if ca.ndim != 2 or cb.ndim != 2 or ca.shape[1] != cb.shape[1]:
        raise InputError(f"emulate_gemm: need qa [M,K] and qb [N,K]; got {tuple(ca.shape)} and {tuple(cb.shape)}")
    (M, K), N = ca.shape, cb.shape[0]
    sa, sb = (q.scales.to(torch.float32) for q in (qa, qb))
    sa = sa.repeat_interleave(M // sa.shape[0], dim=0)  # 2-D tiles: one scale row per tile
    sb = sb.repeat_interleave(N // sb.shape[0], dim=0)
    kinst = min([int(k.k)] + list(k.k_alt))
    if block_k is not None and (block_k <= 0 or K % block_k or block_k % kinst):
        raise InputError(f"emulate_gemm: block_k = {block_k} must divide K = {K} and be a multiple of {kinst}")
    if scale_mode not in ("fold", "per_block"):
        raise InputError(f"emulate_gemm: scale_mode {scale_mode!r} unknown; use 'fold' or 'per_block'")
    _, _, sfmt, bs = decode_scales(sa.cpu().numpy().astype(np.float64), sb.cpu().numpy().astype(np.float64).T, k, K,
                                   M, N, scale_format)
    ta, tb = values_table(qa.fmt), values_table(qb.fmt)  # the CPU model's element decoding (hwspec/mma.py)
    plan = lower_kind(hw, kind, ta, tb, sfmt)
    c0 = None
    if c is not None:
        c0 = torch.as_tensor(np.asarray(c, np.float32) if not _is_torch(c) else c, device=ca.device)
        if tuple(c0.shape) != (M, N) or c0.dtype != torch.float32:
            raise InputError(f"emulate_gemm: c has shape {tuple(c0.shape)} ({c0.dtype}), expected float32 {(M, N)}")
    ca, cb = ca.to(torch.uint8), cb.to(torch.uint8)
    if promotion_interval is None:
        acc = emulated_matmul(ca, sa, cb, sb, plan, c0)
    else:
        P = promotion_interval
        if P <= 0 or K % P or P % kinst or P % bs:
            raise InputError(f"emulate_gemm: promotion_interval = {P} must divide K = {K} and be a multiple of "
                             f"{kinst} and of the scale block {bs}")
        acc = c0.clone() if c0 is not None else torch.zeros((M, N), dtype=torch.float32, device=ca.device)
        for k0 in range(0, K, P):  # every P K-elements an fp32 round-to-nearest-even addition
            acc = acc + emulated_matmul(ca[:, k0:k0 + P], sa[:, k0 // bs:(k0 + P) // bs], cb[:, k0:k0 + P],
                                        sb[:, k0 // bs:(k0 + P) // bs], plan, check=k0 == 0)
        acc = _finish_torch(acc, plan, k)
    for q in (qa, qb):
        ts = getattr(q, "tensor_scale", None)
        if ts is not None:
            acc = _finish_torch(acc * torch.as_tensor(ts, dtype=torch.float32, device=acc.device).reshape(()), plan, k)
    return acc


def _finish_torch(x: Any, plan: Any, kind: Any) -> Any:
    """float32 values -> the kind's output format (f16: RNE) with its canonical NaN bits (hwspec.mma.finish)."""
    import torch

    if kind.output.format == "f16":
        x = x.to(torch.float16).to(torch.float32)
    nan = torch.full_like(x.view(torch.int32), plan.nan_bits32 - (1 << 32) if plan.nan_bits32 >> 31 else
                          plan.nan_bits32).view(torch.float32)
    return torch.where(torch.isnan(x), nan, x)
