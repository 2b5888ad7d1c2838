"""Host side of the tensor-core emulation kernels (fp4lab/kernels/mma_emulate.py): ``emulated_matmul`` (and its two
halves ``prepare_operands`` / ``launch``, for callers that time or reuse them).

Contract of ``emulated_matmul(a_codes, a_scales, b_codes, b_scales, plan, c=None)``:

* ``plan``: ``fp4lab.hwspec.mma_plan.lower_kind(hw, kind, a_format, b_format, scale_format)`` (build it once per
  layer: it holds the kind's model parameters and every code's decomposition).
* ``a_codes`` uint8 [M, K] and ``b_codes`` uint8 [N, K]: one element code per byte (unpacked), both blocked along
  K (B is the weight-like [N, K] operand: the result is A @ B.T). ``a_scales`` [M, K / block] and ``b_scales``
  [N, K / block]: uint8 codes of the plan's scale format, or float32 scale values. The block is K / columns and
  must be one the kind takes with that scale format (``plan.scale.blocks``). From a ``QuantizedTensor`` q blocked
  along K: ``q.codes`` and ``q.scales`` (always), or ``q.scale_codes`` where its scale format encodes like the
  kind's (NVFP4's ue4m3, MXFP4's E8M0 = ue8m0); two-level formats apply ``q.tensor_scale`` after the GEMM as two
  fp32 multiplies, as ``fp4lab.emulate_gemm`` does.
* K: a multiple of the kind's instruction K (``plan.k_multiple``) and of its fused length; any M, N >= 1.
* ``c``: None (zeros) or float32 [M, N] holding values of the kind's accumulator format.
* Returns float32 [M, N] on the operands' device: the kind's D, bit for bit the CPU model's (every NaN as the
  kind's canonical bits). CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``.
* ``check=True`` validates codes and scales against their formats (one device-to-host sync); ``check=False``
  trusts them (codes outside the format then decode as 0, scales outside it give undefined bits).

The device work before the kernel (torch, exact integer operations): scales split into integer significand and
exponent from their float64 bits; for GST kinds the element codes become int8 grid values and per-group nonzero
bitmasks (the kernel's "some product of the group is nonzero" test is one AND of two masks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton

from fp4lab.errors import InputError
from fp4lab.kernels import mma_emulate as dev
from fp4lab.kernels.host import device_array

# (BM, BN, warps, stages | KC): the largest tiles sm_90 compiles without register spills (ptxas -v), both 8 outputs
# a thread; benchmarks/bench_mma.py --gpu sweeps the alternatives
_GPU_TILES = {"gst": (32, 32, 4, 2), "fdpa": (32, 32, 8, 4)}


def _pow2_64(e: Any) -> Any:
    """float64 2**e for an int64 tensor e in [-1022, 1023], built from bits (exact)."""
    import torch

    return ((e + 1023) << 52).view(torch.float64)


def split_scales(s: Any, bits: int, emin: int) -> tuple[Any, Any]:
    """(significand int32, exponent int32) of float32 block scales: s = sig * 2**(es - bits) with
    es = max(floor(log2 s), emin) (s = 0: sig 0, es = emin; NaN: sig -1, es 0), from s's float64 bits."""
    import torch

    s64 = s.to(torch.float64)
    e = ((s64.view(torch.int64) >> 52) & 0x7FF) - 1023
    es = torch.where(s64 == 0, emin, torch.clamp(e, min=emin))
    nan = torch.isnan(s64)
    es = torch.where(nan, 0, es)
    sig = torch.where(nan, -1.0, s64 * _pow2_64(bits - es)).to(torch.int32)
    return sig, es.to(torch.int32)


def _scale_values(x: Any, plan: Any, which: str) -> Any:
    import torch

    if x.dtype == torch.uint8:
        return device_array(plan.scale.values, x.device)[x.to(torch.int64)]
    if x.dtype != torch.float32:
        raise InputError(f"emulated_matmul: {which}_scales must be uint8 codes of {plan.scale.name} or float32 "
                         f"values, got {x.dtype}")
    return x


def _check_c(c: Any, plan: Any) -> None:
    """C values in the accumulator format (f16 accumulators: every finite value an f16)."""
    import torch

    cc = c[torch.isfinite(c)]
    if plan.params.c_emin == -14 and bool((cc.to(torch.float16).to(torch.float32) != cc).any()):
        raise InputError(f"emulated_matmul: c values not in the accumulator format f16 (kind {plan.kind!r})")


def _check_values(a_codes, b_codes, sa, sb, plan) -> None:
    """Codes within their formats, scales in the scale format (one sync)."""
    import torch

    svals = device_array(plan.scale.values, sa.device)
    sv = svals[~torch.isnan(svals)]
    flags = [a_codes.max().to(torch.int32) >= plan.a.ncodes, b_codes.max().to(torch.int32) >= plan.b.ncodes]
    for s in (sa, sb):
        fin = s[~torch.isnan(s)]
        flags.append(~torch.isin(fin, sv).all())
    bad = torch.stack([f.to(torch.bool).to(sa.device) for f in flags]).cpu().tolist()
    what = ["a codes beyond the element format", "b codes beyond the element format",
            f"a_scales not in {plan.scale.name}", f"b_scales not in {plan.scale.name}"]
    for b, w in zip(bad, what):
        if b:
            raise InputError(f"emulated_matmul: {w} (kind {plan.kind!r})")


def _shapes(a_codes, a_scales, b_codes, b_scales, plan) -> tuple[int, int, int, int, int]:
    """(M, N, K, block, L) after checking the contract's shapes."""
    for x, w in ((a_codes, "a_codes"), (b_codes, "b_codes"), (a_scales, "a_scales"), (b_scales, "b_scales")):
        if x.ndim != 2:
            raise InputError(f"emulated_matmul: {w} must be 2-D, got shape {tuple(x.shape)}")
    (M, K), (N, K2) = a_codes.shape, b_codes.shape
    if K != K2 or M == 0 or N == 0 or K == 0:
        raise InputError(f"emulated_matmul: need a_codes [M, K] and b_codes [N, K], got {tuple(a_codes.shape)} "
                         f"and {tuple(b_codes.shape)}")
    if max(M, N) * K >= 2**31 or M * N >= 2**31:
        raise InputError(f"emulated_matmul: [{M}, {K}] x [{N}, {K}] is beyond the kernels' int32 offsets "
                         "(M*K, N*K and M*N below 2**31); split the GEMM")
    p = plan.params
    L = min(K, p.fused_len)
    if K % plan.k_multiple or K % L:
        raise InputError(f"emulated_matmul: K = {K} is not a multiple of kind {plan.kind!r}'s instruction K "
                         f"{plan.k_multiple}")
    nb = a_scales.shape[1]
    if a_scales.shape[0] != M or tuple(b_scales.shape) != (N, nb) or K % nb:
        raise InputError(f"emulated_matmul: scales {tuple(a_scales.shape)} / {tuple(b_scales.shape)} do not give "
                         f"one scale per K-block of [M, K] = [{M}, {K}] / [N, K] = [{N}, {K}]")
    bs = K // nb
    if bs not in plan.scale.blocks:
        raise InputError(f"emulated_matmul: kind {plan.kind!r} takes {plan.scale.name} scales per "
                         f"{' or '.join(map(str, plan.scale.blocks))} K-elements, not {bs}")
    if p.algorithm == "gst_fdpa" and bs % p.group:
        raise InputError(f"emulated_matmul: block {bs} is not a multiple of the group {p.group}")
    return M, N, K, bs, L


def _out_consts(plan: Any) -> dict[str, Any]:
    p = plan.params
    return {"C_EMIN": p.c_emin, "RNE": p.out_rne, "MB": p.out_mbits, "O_EMIN": p.out_emin, "O_EMAX": p.out_emax,
                "FMB": 10 if p.out_emin == -14 else 23, "KEEP_SIGN": p.keep_zero_sign, "NAN_BITS": plan.nan_bits32}


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@dataclass(frozen=True)
class PreparedOperands:
    """A and B as the kernel reads them (``prepare_operands``): GST kinds int8 grid values, per-group nonzero
    bitmasks and per-group scale significands / exponents; the others codes and per-block scale significands /
    exponents (the per-code tables travel with the plan)."""

    plan: Any
    M: int
    N: int
    K: int
    block: int
    L: int
    a: tuple
    b: tuple


def prepare_operands(a_codes: Any, a_scales: Any, b_codes: Any, b_scales: Any, plan: Any, *,
                     check: bool = True) -> PreparedOperands:
    """Check the operands against the contract (module docstring) and lay them out for the kernel."""
    import torch

    from fp4lab.kernels.host import check_device

    for x, w in ((a_codes, "a_codes"), (b_codes, "b_codes"), (a_scales, "a_scales"), (b_scales, "b_scales")):
        check_device(x, f"emulated_matmul: {w}")
    for x, w in ((a_codes, "a_codes"), (b_codes, "b_codes")):
        if x.dtype != torch.uint8:
            raise InputError(f"emulated_matmul: {w} must be uint8 codes, got {x.dtype}")
    M, N, K, bs, L = _shapes(a_codes, a_scales, b_codes, b_scales, plan)
    sa, sb = _scale_values(a_scales, plan, "a"), _scale_values(b_scales, plan, "b")
    if check:
        _check_values(a_codes, b_codes, sa, sb, plan)
    ga, ea = split_scales(sa, plan.scale.bits, plan.scale.emin)
    gb, eb = split_scales(sb, plan.scale.bits, plan.scale.emin)
    a_codes, b_codes = a_codes.contiguous(), b_codes.contiguous()
    p = plan.params
    if p.algorithm == "gst_fdpa":
        if p.group > 62:
            raise InputError(f"emulated_matmul: group {p.group} > 62 (the kernel's nonzero bitmasks are int64)")
        a = _gst_operand(a_codes, plan.a, ga, ea, bs, p.group)
        b = _gst_operand(b_codes, plan.b, gb, eb, bs, p.group)
    else:
        a = (a_codes, *_tables(plan.a, a_codes.device), ga.contiguous(), ea.contiguous())
        b = (b_codes, *_tables(plan.b, b_codes.device), gb.contiguous(), eb.contiguous())
    return PreparedOperands(plan, M, N, K, bs, L, a, b)


def _tables(t: Any, device: Any) -> list[Any]:
    """The per-code tables (mant, qexp, aexp, cls) of an element format on ``device`` (cached by content)."""
    return [device_array(x, device) for x in (t.mant, t.qexp, t.aexp, t.cls)]


def launch(ops: PreparedOperands, c: Any = None, *, tile: tuple[int, int, int, int] | None = None) -> Any:
    """float32 [M, N] of the kernel on prepared operands, starting from C = ``c`` (float32 [M, N]) or zeros.
    ``tile``: (BM, BN, warps, stages) for GST kinds, (BM, BN, warps, KC) for the others (KC products a chunk)."""
    import torch

    from fp4lab.kernels.host import interpreting

    plan, p, M, N, K, L = ops.plan, ops.plan.params, ops.M, ops.N, ops.K, ops.L
    dvc = ops.a[0].device
    if c is not None:
        if tuple(c.shape) != (M, N) or c.dtype != torch.float32:
            raise InputError(f"emulated_matmul: c must be float32 [{M}, {N}], got {c.dtype} {tuple(c.shape)}")
        c = c.contiguous()
    out = torch.empty((M, N), dtype=torch.int32, device=dvc)
    interp = interpreting()
    cptr = c if c is not None else out
    consts = _out_consts(plan)
    if p.algorithm == "gst_fdpa":
        (va, ma, sga, sea), (vb, mb, sgb, seb) = ops.a, ops.b
        bm, bn, warps, stages = tile or ((32, 32, 4, 1) if interp else _GPU_TILES["gst"])
        opts = {} if interp else {"num_warps": warps, "num_stages": stages}
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        dev._gst_kernel[grid](va, vb, ma, mb, sga, sea, sgb, seb, cptr, out, M, N, K, L=L, G=p.group,
                              DK=_pow2_at_least(max(p.group, 32)), F=p.frac_bits, E_ZERO=p.e_zero,
                              QOFF=plan.a.grid_exp + plan.b.grid_exp - 2 * plan.scale.bits, HAS_C=c is not None,
                              BM=bm, BN=bn, GROUP_M=8, **consts, **opts)
        return out.view(torch.float32)
    bm, bn, warps, kc = tile or ((16, 16, 4, 32) if interp else _GPU_TILES["fdpa"])
    kc = min(kc, L & -L)  # a power of two dividing L
    opts = {} if interp else {"num_warps": warps}
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    tr = p.algorithm == "tr_fdpa"
    F2 = p.join_frac_bits if tr else p.frac_bits
    (ca, *ta, ga, ea), (cb, *tb, gb, eb) = ops.a, ops.b
    dev._fdpa_kernel[grid](ca, cb, *ta, *tb, ga, ea, gb, eb, cptr, out, M, N, K, L=L, KC=kc, BS=ops.block,
                           SBITS=plan.scale.bits, F=p.frac_bits, F2=F2, U=max(F2 + 1, p.frac_bits),
                           E_ZERO=p.e_zero, TR=tr, SEPARATE_C=p.separate_c, HAS_C=c is not None, BM=bm, BN=bn,
                           GROUP_M=8, **consts, **opts)
    return out.view(torch.float32)


def emulated_matmul(a_codes: Any, a_scales: Any, b_codes: Any, b_scales: Any, plan: Any, c: Any = None, *,
                    check: bool = True, tile: tuple[int, int, int, int] | None = None) -> Any:
    """float32 [M, N] = the plan's kind applied to A [M, K] and B [N, K] (A @ B.T) from C = ``c`` (or zeros), bit
    for bit the CPU model (module docstring: layouts, shapes, ``check``); ``prepare_operands`` then ``launch``."""
    ops = prepare_operands(a_codes, a_scales, b_codes, b_scales, plan, check=check)
    if check and c is not None:
        _check_c(c, plan)
    return launch(ops, c, tile=tile)


def _gst_operand(codes: Any, tables: Any, sig: Any, es: Any, bs: int, G: int) -> tuple[Any, Any, Any, Any]:
    """(int8 grid values, per-group nonzero bitmasks, per-group scale significands and exponents) of one operand;
    a group whose scale is 0 gets mask 0 (the model gives it e_zero)."""
    import torch

    rows, K = codes.shape
    grid = device_array(tables.grid, codes.device)
    v = grid[codes.to(torch.int64)]
    wdt = torch.int32 if G <= 31 else torch.int64
    w = torch.ones(G, dtype=wdt, device=codes.device) << torch.arange(G, dtype=wdt, device=codes.device)
    mask = ((v != 0).view(rows, K // G, G).to(wdt) * w).sum(-1, dtype=wdt)
    rep = bs // G
    sig_g, es_g = sig.repeat_interleave(rep, dim=1), es.repeat_interleave(rep, dim=1)
    mask = torch.where(sig_g == 0, 0, mask)
    return v.contiguous(), mask.contiguous(), sig_g.contiguous(), es_g.contiguous()
