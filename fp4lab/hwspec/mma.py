"""Bit-accurate tensor-core MMA emulation driven by an hwspec: ``emulate_mma`` (one instruction chain) and
``emulate_gemm`` (a tiled GEMM kernel: chained instructions, optional promotion to an fp32 accumulator).

Conventions
-----------
* ``a`` is [M, K], ``b`` is [K, N], ``c`` is [M, N]; K is split into fused steps of the kind's ``fused_len``
  (never more than K), taken in ascending K, each step's rounded output being the next step's C.
* Operands are float arrays of values exactly representable in one of the kind's input formats, or integer
  codes of that format. The format is named (``a_format``/``b_format``), typed (torch / ml_dtypes dtypes) or
  the only one the values allow, never guessed (fp4lab/hwspec/mma_operands.py). tf32 kinds take float32
  words and drop their low 13 bits, as the hardware does.
* Block-scaled kinds also take ``scale_a`` [M, K/block] and ``scale_b`` [K/block, N]: decoded scale values or
  integer codes of the scale format. Their element format may be any value table (a 1-D float64 array, e.g.
  ``fmt.element.values`` of a registry format): that is how a proposed grid (E1M2, INT4) runs on a model.
  GST kinds need group sums that are exact in float64: the table's values must lie on a common power-of-two
  grid spanning at most 2**16 steps (every 4-bit float or integer grid does).
* The result is float32 (fp16-accumulator kinds: the fp16 result widened exactly); every NaN has the kind's
  canonical bits (fp16 0x7FFF widens to 0x7FFFE000). Zero results follow the kind's ``output.zero_sign``: +0
  ("positive", every NVIDIA kind) or, for a nonzero result that rounds to zero, a zero of its sign
  ("keep_underflow_sign", AMD CDNA3 as MMA-Sim publishes it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from fp4lab.emulator.threads import launch as launch_threads
from fp4lab.errors import InputError, check_plain_data
from fp4lab.hwspec import mma_kernels as nb
from fp4lab.hwspec.mma_operands import align_exponents, decode_pair, decode_scales, typed_operand, values_table
from fp4lab.hwspec.mma_reference import ModelParams, mma_reference
from fp4lab.hwspec.native import fallback_scale_mode
from fp4lab.hwspec.operands import operand_format
from fp4lab.hwspec.registry import get_hw
from fp4lab.hwspec.schema import MMAKind

_OUT_RANGE = {"f32": (-126, 127), "f16": (-14, 15)}


def kind_params(kind: MMAKind) -> ModelParams:
    """Flatten a kind's accumulation/output fields into the numeric parameters of the model."""
    acc, out = kind.accumulation, kind.output
    o_emin, o_emax = _OUT_RANGE[out.format]
    return ModelParams(
        algorithm=acc.algorithm,
        fused_len=int(acc.fused_len),
        frac_bits=int(acc.frac_bits),
        e_zero=int(acc.e_zero) if acc.e_zero is not None else 0,
        group=int(acc.group) if acc.group is not None else 0,
        join_frac_bits=int(acc.join_frac_bits) if acc.join_frac_bits is not None else 0,
        separate_c=acc.c_add == "separate_rn",
        c_emin=_OUT_RANGE[kind.c_format][0],
        out_rne=out.rounding == "rne",
        out_mbits=int(out.mantissa_bits),
        out_emin=o_emin,
        out_emax=o_emax,
        keep_zero_sign=out.zero_sign.value == "keep_underflow_sign",
    )


def resolve_kind(hw: Any, kind: str) -> MMAKind:
    """The kind object of a spec given by name, path or object."""
    return get_hw(hw).kind(kind)


# ---- operand decoding (fp4lab/hwspec/mma_operands.py) ----------------------------------------------------------
def _check_group_exact(v: np.ndarray, which: str) -> None:
    """GST group sums must be exact in float64: all values on one power-of-two grid of at most 2**16 steps."""
    fin = np.abs(v[np.isfinite(v) & (v != 0)])
    if fin.size == 0:
        return
    m, e = np.frexp(fin)
    ints = (m * 2.0**53).astype(np.int64)
    lsb = e.astype(np.int64) - 53 + np.log2((ints & -ints).astype(np.float64)).astype(np.int64)
    if fin.max() > np.ldexp(1.0, int(lsb.min()) + 16):
        raise InputError(f"emulate_mma: {which} values span more than 2**16 grid steps; group sums would not be "
                         "exact")


def _sig_exp(s: np.ndarray, emin: int) -> tuple[np.ndarray, np.ndarray]:
    """Scale significand and exponent: s = sig * 2**e, e = max(floor(log2 s), emin); NaN -> (NaN, 0), 0 -> (0, emin)."""
    e = align_exponents(s, emin)
    e = np.where(s == 0, emin, e)
    return np.where(np.isnan(s), np.nan, np.ldexp(s, -e)), e


# ---- core -------------------------------------------------------------------------------------------------------
class Prepared:
    """Everything the kernels need for one (A, B) pair under one kind, independent of C and of the K range."""

    def __init__(self, kind: MMAKind, a, b, scale_a=None, scale_b=None, a_format=None, b_format=None,
                 scale_format=None):
        self.kind, self.p = kind, kind_params(kind)
        da, db = decode_pair(a, b, a_format, b_format, kind)
        M, K = da.values.shape
        if db.values.shape[0] != K:
            raise InputError(f"emulate_mma: a is {da.values.shape} and b is {db.values.shape}; need a [M,K], b [K,N]")
        self.M, self.K, self.N = M, K, db.values.shape[1]
        ks = [int(kind.k)] + list(kind.k_alt)
        if K == 0 or K % min(ks) or K % min(K, self.p.fused_len):
            raise InputError(f"emulate_mma: K = {K} is not a multiple of kind {kind.name!r}'s instruction K {ks}")
        self.a, self.b = da.values, db.values
        self.ea, self.eb = align_exponents(self.a, da.emin), align_exponents(self.b, db.emin)
        self.sa = self.sb = None
        if kind.block_scaled:
            sa, sb, sf, bs = decode_scales(scale_a, scale_b, kind, K, M, self.N, scale_format)
            of = operand_format(sf)
            self.block, self.s_emin = bs, of.emin
            if self.p.algorithm == "gst_fdpa":
                _check_group_exact(self.a, "a")
                _check_group_exact(self.b, "b")
                rep = bs // self.p.group
                self.sa, self.sb = np.repeat(sa, rep, axis=1), np.repeat(sb, rep, axis=0)
            else:  # exponent-add: fold the scales into the operands (exact) and their exponents into ea/eb
                self.a = self.a * np.repeat(sa, bs, axis=1)
                self.b = self.b * np.repeat(sb, bs, axis=0)
                self.ea = self.ea + np.repeat(_sig_exp(sa, of.emin)[1], bs, axis=1)
                self.eb = self.eb + np.repeat(_sig_exp(sb, of.emin)[1], bs, axis=0)
        elif scale_a is not None or scale_b is not None:
            raise InputError(f"emulate_mma: kind {kind.name!r} is not block-scaled; scale_a/scale_b must be None")

    def run(self, c: np.ndarray, k0: int = 0, k1: int | None = None, impl: str = "numba") -> np.ndarray:
        """float64 output-format values of the chain over K in [k0, k1) starting from c (float64 [M, N])."""
        k1 = self.K if k1 is None else k1
        p = self.p
        a, b = np.ascontiguousarray(self.a[:, k0:k1]), np.ascontiguousarray(self.b[k0:k1])
        ea, eb = np.ascontiguousarray(self.ea[:, k0:k1]), np.ascontiguousarray(self.eb[k0:k1])
        c = np.ascontiguousarray(c, dtype=np.float64)
        L = min(k1 - k0, p.fused_len)
        if impl != "reference":
            launch_threads()  # before numba's parallel kernels start their threading layer
        if p.algorithm == "gst_fdpa":
            g0, g1 = k0 // p.group, k1 // p.group
            sa, sb = self.sa[:, g0:g1], self.sb[g0:g1]
            if impl == "reference":
                return mma_reference(a, ea, b, eb, c, _with_L(p, L), sa, sb, self.s_emin)
            ssa, esa = _sig_exp(sa, self.s_emin)
            ssb, esb = _sig_exp(sb, self.s_emin)
            return nb.gst_fdpa_gemm(a, b, c, np.ascontiguousarray(ssa), np.ascontiguousarray(esa),
                                    np.ascontiguousarray(ssb), np.ascontiguousarray(esb), L, p.group,
                                    p.frac_bits, p.e_zero, p.c_emin, p.out_rne, p.out_mbits, p.out_emin, p.out_emax,
                                    p.keep_zero_sign)
        if impl == "reference":
            return mma_reference(a, ea, b, eb, c, _with_L(p, L))
        if p.algorithm in ("tr_fdpa", "gtr_fdpa"):
            return nb.tr_fdpa_gemm(a, ea, b, eb, c, L, p.frac_bits, p.join_frac_bits, p.algorithm == "gtr_fdpa",
                                   p.out_rne, p.out_mbits, p.out_emin, p.out_emax, p.keep_zero_sign)
        ea = np.where(a == 0, nb.ZERO_EXP, ea).astype(np.int32)
        eb = np.where(b == 0, nb.ZERO_EXP, eb).astype(np.int32)
        return nb.t_fdpa_gemm(a, ea, b, eb, c, L, p.frac_bits, p.e_zero, p.c_emin, p.separate_c, p.out_rne,
                              p.out_mbits, p.out_emin, p.out_emax, p.keep_zero_sign)


def _with_L(p: ModelParams, L: int) -> ModelParams:
    return replace(p, fused_len=L)


IMPLS = ("numba", "reference")


def _check_impl(impl: Any, what: str) -> None:
    if not isinstance(impl, str) or impl not in IMPLS:
        raise InputError(f"{what}: impl must be one of {', '.join(map(repr, IMPLS))}, got {str(impl)[:40]!r}")


def _check_c(c: Any, kind: MMAKind, M: int, N: int) -> np.ndarray:
    if c is None:
        return np.zeros((M, N))
    check_plain_data(c, "emulate_mma: c")
    c = np.asarray(c)
    if c.shape != (M, N):
        raise InputError(f"emulate_mma: c has shape {c.shape}, expected {(M, N)}")
    v = c.astype(np.float64)
    of = operand_format(kind.c_format)
    if not of.representable(v).all():
        raise InputError(f"emulate_mma: c has values not representable in the kind's accumulator {kind.c_format}")
    return v


def finish(x: np.ndarray, kind: MMAKind) -> np.ndarray:
    """Output-format values (float64) -> float32 array with the kind's canonical NaN bits."""
    nan = np.isnan(x)
    if kind.output.format == "f16":
        h = x.astype(np.float16)
        h.view(np.uint16)[nan] = np.uint16(int(kind.output.nan_bits))
        return h.astype(np.float32)
    out = x.astype(np.float32)
    out.view(np.uint32)[nan] = np.uint32(int(kind.output.nan_bits))
    return out


def emulate_mma(a, b, c=None, hw: Any = "hopper-sm90", kind: str = "wgmma.bf16", scale_a=None, scale_b=None, *,
                a_format: Any = None, b_format: Any = None, scale_format: str | None = None,
                impl: str = "numba") -> np.ndarray:
    """D = A @ B + C as the kind's tensor cores compute it, bit for bit (see module docstring).

    a [M,K], b [K,N]: values (float) or codes (integer); c [M,N] in the accumulator format (None = zeros).
    impl="reference" runs the readable pure-Python model instead of the numba kernels (same bits, slow)."""
    _check_impl(impl, "emulate_mma")
    k = resolve_kind(hw, kind)
    prep = Prepared(k, a, b, scale_a, scale_b, a_format, b_format, scale_format)
    return finish(prep.run(_check_c(c, k, prep.M, prep.N), impl=impl), k)


# ---- GEMM driver ------------------------------------------------------------------------------------------------
def _quantized_parts(q: Any, name: str):
    """(values-or-codes, scales, tensor_scale, values table) from a QuantizedTensor-like object or an array."""
    if hasattr(q, "codes"):
        table = values_table(q.fmt) if hasattr(q, "fmt") else None
        if table is None:
            raise InputError(f"emulate_gemm: {name} has codes but no fmt.element.values table")
        return np.asarray(q.codes), np.asarray(q.scales, dtype=np.float64), getattr(q, "tensor_scale", None), table
    return np.asarray(q), None, None, None


def emulate_gemm(qa: Any, qb: Any, hw: Any = "hopper-sm90", kind: str = "wgmma.bf16", block_k: int | None = None,
                 promotion_interval: int | None = None, *, c=None, k_order: Any = None,
                 scale_mode: str | None = None,
                 a_format: Any = None, b_format: Any = None, scale_format: str | None = None,
                 impl: str = "numba") -> np.ndarray:
    """A @ B.T as a tiled GEMM kernel on the given tensor cores computes it; A [M,K], B [N,K], both along K.

    qa/qb: float arrays of representable values, or quantized tensors (``.codes``, ``.scales`` [rows, K/block],
    ``.tensor_scale``, ``.fmt.element.values``). On a block-scaled kind the codes and block scales go into the
    instruction. On any other kind, ``scale_mode`` says how the kernel applies block scales: "fold" dequantizes
    the operands (element * block scale, which must be exact in the kind's input format); "per_block" runs each
    block's unscaled dot product through the instructions from C = 0 and adds ``(P_b * Sa_b) * Sb_b`` to an fp32
    accumulator (three fp32 roundings per block; fp4lab's exact GEMM kernel for fp32-scaled formats); None (the
    default) takes "per_block" for FP32 / BF16 scales and "fold" otherwise, as ``fp4lab hw show --format``
    advises (``native.route``). On a block-scaled kind a value-table format must be exact in one of the kind's
    operand formats (INT4 on E2M3, not on an E2M1-only kind). The K loop
    is a chain of instructions in ascending K (Triton's tl.dot loop measured on an H200), so ``block_k`` (the
    kernel's BLOCK_K) only has to divide K and be a multiple of the instruction K. ``promotion_interval`` P
    models CUTLASS/DeepSeek FP8 promotion: every P K-elements the chain restarts from 0 and its result is added
    into an fp32 accumulator by a round-to-nearest-even FADD. ``k_order`` (a permutation of range(block_k)) is
    the order in which a lowering feeds each BLOCK_K tile's K-elements to the instructions. Tensor scales are
    applied last, as two fp32 multiplies: D = (acc * ts_a) * ts_b. ``c`` (fp32 [M, N]) is the initial
    accumulator. ``a_format`` / ``b_format`` / ``scale_format`` name the operand formats where the kind takes
    several and the values do not decide (as for emulate_mma)."""
    _check_impl(impl, "emulate_gemm")
    k = resolve_kind(hw, kind)
    if not hasattr(qa, "codes"):  # typed arrays name their format
        qa, typed = typed_operand(qa)
        a_format = a_format if a_format is not None else typed
    if not hasattr(qb, "codes"):
        qb, typed = typed_operand(qb)
        b_format = b_format if b_format is not None else typed
    xa, sa, tsa, ta = _quantized_parts(qa, "qa")
    xb, sb, tsb, tb = _quantized_parts(qb, "qb")
    if xa.ndim != 2 or xb.ndim != 2 or xa.shape[1] != xb.shape[1]:
        raise InputError(f"emulate_gemm: need qa [M,K] and qb [N,K]; got {xa.shape} and {xb.shape}")
    (M, K), N = xa.shape, xb.shape[0]
    sa = None if sa is None else np.repeat(sa, M // sa.shape[0], axis=0)  # 2-D tiles: one scale row per tile
    sb = None if sb is None else np.repeat(sb, N // sb.shape[0], axis=0)
    kinst = min([int(k.k)] + list(k.k_alt))
    if block_k is not None and (block_k <= 0 or K % block_k or block_k % kinst):
        raise InputError(f"emulate_gemm: block_k = {block_k} must divide K = {K} and be a multiple of {kinst}")
    if scale_mode is None:  # as hw show --format advises (native.fallback_scale_mode)
        scale_mode = fallback_scale_mode(getattr(qa, "fmt", None))
    if scale_mode not in ("fold", "per_block"):
        raise InputError(f"emulate_gemm: scale_mode {scale_mode!r} unknown; use 'fold' or 'per_block'")
    if k_order is not None:
        perm = np.asarray(k_order)
        if block_k is None or k.block_scaled or not np.array_equal(np.sort(perm), np.arange(block_k)):
            raise InputError("emulate_gemm: k_order must be a permutation of range(block_k), on a kind without "
                             "block scales")
        if ta is not None or tb is not None:
            raise InputError("emulate_gemm: k_order needs float operands (dequantize first)")
        P = np.concatenate([k0 + perm for k0 in range(0, K, block_k)])
        xa, xb = xa[:, P], xb[:, P]
    per_block = scale_mode == "per_block" and not k.block_scaled
    if per_block and (ta is None or tb is None):
        raise InputError("emulate_gemm: scale_mode='per_block' needs quantized operands (codes and scales)")
    if k.block_scaled:
        if sa is None or sb is None:
            raise InputError(f"emulate_gemm: block-scaled kind {k.name!r} needs quantized operands with scales")
        prep = Prepared(k, xa, xb.T, sa, sb.T, a_format=qa.fmt if ta is not None else a_format,
                        b_format=qb.fmt if tb is not None else b_format, scale_format=scale_format)
    elif per_block:
        va, vb = ta[xa], tb[xb]
        if k.tf32_truncate:  # tf32 kinds read float32 words (the table values are exact there)
            va, vb = va.astype(np.float32), vb.astype(np.float32)
        prep = Prepared(k, va, np.ascontiguousarray(vb.T), a_format=a_format, b_format=b_format)
    else:
        va = ta[xa] * np.repeat(sa, K // sa.shape[1], axis=1) if ta is not None else xa
        vb = tb[xb] * np.repeat(sb, K // sb.shape[1], axis=1) if tb is not None else xb
        if k.tf32_truncate:
            va, vb = np.asarray(va, dtype=np.float32), np.asarray(vb, dtype=np.float32)
        prep = Prepared(k, va, np.ascontiguousarray(vb.T), a_format=a_format, b_format=b_format)
    c0 = _check_c(c, k, M, N) if c is not None else np.zeros((M, N))
    zero = np.zeros((M, N))
    if per_block:
        bs = K // sa.shape[1]
        if bs % kinst or promotion_interval is not None:
            raise InputError(f"emulate_gemm: per_block needs blocks of a multiple of {kinst} and no promotion_interval")
        acc = c0.astype(np.float32)
        for j in range(K // bs):
            part = finish(prep.run(zero, j * bs, (j + 1) * bs, impl=impl), k)
            acc = acc + (part * sa[:, j:j + 1].astype(np.float32)) * sb[:, j].astype(np.float32)[None, :]
        acc = finish(acc.astype(np.float64), k)
    elif promotion_interval is None:
        acc = finish(prep.run(c0, impl=impl), k)
    else:
        P = promotion_interval
        if P <= 0 or K % P or P % kinst:
            raise InputError(f"emulate_gemm: promotion_interval = {P} must divide K = {K} and be a multiple of {kinst}")
        acc = c0.astype(np.float32)
        for k0 in range(0, K, P):
            acc = acc + finish(prep.run(zero, k0, k0 + P, impl=impl), k)  # fp32 RNE FADD
        acc = finish(acc.astype(np.float64), k)
    for ts in (tsa, tsb):
        if ts is not None:
            acc = finish((acc * np.float32(np.asarray(ts).reshape(-1)[0])).astype(np.float64), k)
    return acc
