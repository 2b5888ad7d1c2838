"""Offline SASS statistics of the quantize/dequantize kernels for sm_90 (no GPU needed): instructions per element,
registers and the most frequent opcodes, from Triton's bundled ptxas/nvdisasm.

    python benchmarks/sass_count.py quantize mxfp4:rtne nvfp4:sr --tile 32x256x4
    python benchmarks/sass_count.py dequantize mxfp4 ufp4 --tile 16x512x4
    python benchmarks/sass_count.py fakequant ufp4:sr:16 mxfp4:rtne --tile 32x64x4 --along km --rht 16
    python benchmarks/sass_count.py fakequant nvfp4:rtne --tile 16x128x2 --along km --rht-m 16
    python benchmarks/sass_count.py gemm mxfp4 ufp4 --tile 128x64x8
    python benchmarks/sass_count.py mma blackwell-sm100:tcgen05.mxf4nvf4:e2m1:ue4m3 --tile 32x32x4   # BMxBNxWARPS

The kernels are ALU-issue-bound on the H200, so fewer instructions per element is the number to drive down before
spending device time. The count is static: a kernel with a runtime branch (the quantize kernel's per-tile lean
path, the reciprocal-division fallback) counts both sides, so treat it as an upper bound there.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import re
import subprocess
import tempfile

os.environ.pop("TRITON_INTERPRET", None)  # the kernels must be compilable JIT functions, so import them without it

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

import fp4lab  # noqa: E402
import fp4lab.kernels.dequantize as dq  # noqa: E402
import fp4lab.kernels.fakequant as fq  # noqa: E402
import fp4lab.kernels.gemm as gm  # noqa: E402
import fp4lab.kernels.host as host  # noqa: E402
import fp4lab.kernels.mma_emulate as mma  # noqa: E402
import fp4lab.kernels.quantize as q  # noqa: E402
from fp4lab.kernels.dequantize_launch import dequantize_triton  # noqa: E402
from fp4lab.kernels.fakequant_launch import fake_quantize_triton  # noqa: E402
from fp4lab.kernels.gemm_launch import gemm_triton  # noqa: E402
from fp4lab.kernels.mma_emulate_launch import emulated_matmul  # noqa: E402
from fp4lab.kernels.quantize_launch import quantize_triton  # noqa: E402
from fp4lab.numerics.blocks import BlockView  # noqa: E402
from fp4lab.numerics.options import Blocking  # noqa: E402

os.environ["TRITON_INTERPRET"] = "1"  # after the imports: kernels stay compilable, host wrappers accept CPU tensors
host.interpreting.cache_clear()  # read once per process: read it again now

TYPES = {torch.float32: "fp32", torch.int32: "i32", torch.uint8: "u8", torch.int16: "i16", torch.int8: "i8",
         torch.uint16: "u16", torch.float16: "fp16", torch.int64: "i64"}


class Capture:
    """Stands in for ``kernel[grid]``: records the launch arguments instead of running."""

    def __init__(self, kernel):
        self.kernel, self.args, self.kwargs = kernel, None, None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.args, self.kwargs = args, kwargs
        return launch


def compile_sm90(cap: Capture, num_warps: int):
    fn = cap.kernel
    vals = dict(zip(fn.arg_names, cap.args))
    vals.update({k: v for k, v in cap.kwargs.items() if k in fn.arg_names})
    if "INTERP" in vals:
        vals["INTERP"] = False
    sig, consts, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        v = vals[name]
        if fn.params[i].is_constexpr:
            sig[name], consts[name] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            sig[name], attrs[(i,)] = "*" + TYPES[v.dtype], [["tt.divisibility", 16]]
        elif isinstance(v, bool):
            sig[name] = "i1"
        elif isinstance(v, int):
            sig[name] = "i32"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            sig[name] = "fp32"
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps,
                                                                           "enable_fp_fusion": False})


def capture_fakequant(x: torch.Tensor, fmt, rounding: str, along_k, along_m, sr_bits: int,
                      tile: tuple[int, int, int]) -> Capture:
    """The fused fake-quant launch ``fake_quantize_triton`` makes for CPU tensor ``x``, tensor scales folded as the
    recipes launch it (the two-level formats' amax and tensor-scale kernels are not captured), with the bf16
    outputs as the int16 views the GPU path writes (the interpreter path writes int32 words), so the compile is
    the GPU's kernel instruction for instruction."""
    cap = fq._fake_quant_kernel = Capture(fq._fake_quant_kernel)
    amax_cap = fq._amax2_kernel = Capture(fq._amax2_kernel)
    scales_cap = fq._tensor_scales_kernel = Capture(fq._tensor_scales_kernel)
    try:
        fake_quantize_triton(x, fmt, rounding, along_k=along_k, along_m=along_m, sr_bits=sr_bits,
                             apply_tensor_scale=False, tile=tile)
    finally:
        fq._fake_quant_kernel, fq._amax2_kernel, fq._tensor_scales_kernel = (cap.kernel, amax_cap.kernel,
                                                                            scales_cap.kernel)
    args = list(cap.args)
    for i in (1, 2):
        if args[i].dtype == torch.int32:
            args[i] = args[i].view(torch.int16)
    cap.args = tuple(args)
    return cap


def disassemble(compiled, line_info: bool = False) -> str:
    """nvdisasm's listing of a compiled kernel (``line_info``: with the source line table, ``-gi``)."""
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as fh:
        fh.write(compiled.asm["cubin"])
    try:
        return subprocess.run([os.path.join(tools, "nvdisasm"), "-c"] + (["-gi"] if line_info else []) + [fh.name],
                              capture_output=True, text=True).stdout
    finally:
        os.unlink(fh.name)


def sass_stats(compiled) -> tuple[int, collections.Counter, str, list[str]]:
    """(instruction count, opcode histogram, registers, instructions without their addresses)."""
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as fh:
        fh.write(compiled.asm["cubin"])
    out = subprocess.run([os.path.join(tools, "nvdisasm"), "-c", fh.name], capture_output=True, text=True).stdout
    lines = [ln for ln in out.splitlines() if re.match(r"\s+/\*[0-9a-f]+\*/", ln)]
    listing = [re.sub(r"^\s+/\*[0-9a-f]+\*/\s+", "", ln).strip() for ln in lines]
    ops = collections.Counter(re.sub(r"^\s+/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?", "", ln).split()[0].split(".")[0]
                              for ln in lines)
    res = subprocess.run([os.path.join(tools, "cuobjdump"), "-res-usage", fh.name], capture_output=True, text=True)
    regs = re.search(r"REG:(\d+)", res.stdout)
    stack = re.search(r"STACK:(\d+)", res.stdout)
    os.unlink(fh.name)
    spill = f" (stack {stack.group(1)} B: spills)" if stack and int(stack.group(1)) else ""
    return len(lines), ops, (regs.group(1) if regs else "?") + spill, listing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernel", choices=["quantize", "dequantize", "fakequant", "gemm", "mma"])
    ap.add_argument("cases", nargs="+", help="FORMAT[:ROUNDING[:SR_BITS]] (rounding: quantize, fakequant); mma: "
                    "SPEC:KIND:ELEMENT:SCALE")
    ap.add_argument("--tile", default="32x256x4", help="BMxBKxWARPS (gemm: BM = BN)")
    ap.add_argument("--along", default="k", choices=["k", "m", "km"], help="fakequant: blockings")
    ap.add_argument("--rht", type=int, default=0, help="fakequant: RHT size on every blocking (0: none)")
    ap.add_argument("--rht-m", type=int, default=None, help="fakequant: RHT size along M only (default: --rht)")
    ap.add_argument("--dump", metavar="DIR", help="also write each case's instruction listing (addresses stripped) "
                    "to DIR, so that two trees can be compared with diff -r")
    args = ap.parse_args()
    bm, bk, warps = map(int, args.tile.split("x"))
    for case in args.cases:
        name, _, rest = case.partition(":")
        mode, _, srw = rest.partition(":")
        fmt = None if args.kernel == "mma" else fp4lab.get_format(name)
        x = torch.randn(2 * bm, 2 * bk, dtype=torch.bfloat16)
        if args.kernel == "fakequant":
            rht_m = args.rht if args.rht_m is None else args.rht_m
            cap = capture_fakequant(x, fmt, mode or "rtne", Blocking(args.rht or None, 0, 1) if "k" in args.along
                                    else None, Blocking(rht_m or None, 0, 1) if "m" in args.along else None,
                                    int(srw or 24), (bm, bk, warps))
        elif args.kernel == "quantize":
            cap = q._quantize_kernel = Capture(q._quantize_kernel)
            try:
                quantize_triton(x, fmt, fp4lab.QuantizeOptions(mode or "rtne", 1, sr_bits=int(srw or 24)), packed=True,
                                tensor_amax=x.float().abs().max().reshape(1), store_scales=False, tile=(bm, bk, warps))
            finally:
                q._quantize_kernel = cap.kernel
        elif args.kernel == "gemm":  # the exact GEMM kernel on emulator-quantized CPU operands [2 BM, 2 BK]
            qa, qb = (fp4lab.quantize(torch.randn(2 * bm, 2 * bk, generator=torch.Generator().manual_seed(i)), fmt)
                      for i in (0, 1))
            if fmt.tensor_scale != "none":
                qa, qb = (dataclasses.replace(q, tensor_scale=torch.tensor(float(q.tensor_scale))) for q in (qa, qb))
            cap = gm._gemm_kernel = Capture(gm._gemm_kernel)
            try:
                gemm_triton(qa, qb, "exact", tile=(bm, bm, bk, warps, 3))
            finally:
                gm._gemm_kernel = cap.kernel
        elif args.kernel == "mma":  # the tensor-core emulation kernel; tile BM x BN x warps (bk is BN here)
            from fp4lab.hwspec.mma_plan import lower_kind
            from fp4lab.kernels.host import interpreting

            interpreting.cache_clear()  # read TRITON_INTERPRET=1 again: the host side takes CPU tensors
            hw, kind, elem, sfmt = case.split(":")
            plan = lower_kind(hw, kind, elem, scale_format=sfmt)
            attr = "_gst_kernel" if plan.params.algorithm == "gst_fdpa" else "_fdpa_kernel"
            cap = Capture(getattr(mma, attr))
            setattr(mma, attr, cap)
            K = 4 * max(plan.k_multiple, plan.params.fused_len)
            blk = plan.scale.blocks[0]
            one = int(np.flatnonzero(plan.scale.values == 1.0)[0])
            codes = torch.zeros((2 * bm, K), dtype=torch.uint8)
            scales = torch.full((2 * bm, K // blk), one, dtype=torch.uint8)
            try:
                emulated_matmul(codes, scales, codes[:2 * bk], scales[:2 * bk], plan, check=False,
                                tile=(bm, bk, warps, 2 if attr == "_gst_kernel" else 4))
            finally:
                setattr(mma, attr, cap.kernel)
        else:
            codes = torch.randint(0, 255, (2 * bm, bk), dtype=torch.uint8)
            sc = None  # element-only formats
            if fmt.scale_rule.method != "none":
                sdt = torch.int32 if fmt.scale.kind == "fp32" else torch.uint8
                sshape = BlockView.for_format((2 * bm, 2 * bk), fmt, 1).scale_shape
                sc = torch.from_numpy(np.random.default_rng(0).integers(1, 100, sshape)).to(sdt)
            cap = dq._dequantize_kernel = Capture(dq._dequantize_kernel)
            try:
                dequantize_triton(codes, sc, torch.ones(()), fmt, 1, packed=True, out_dtype=torch.bfloat16,
                                     tile=(bm, bk, warps))
            finally:
                dq._dequantize_kernel = cap.kernel
        n, ops, regs, listing = sass_stats(compile_sm90(cap, warps))
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            name = re.sub(r"[^\w.-]", "_", case)
            stem = f"{args.kernel}-{name}-{args.tile}-{args.along}-rht{args.rht}.sass"
            with open(os.path.join(args.dump, stem), "w") as fh:
                fh.write("\n".join(listing) + "\n")
        per_elem = n * 32 * warps / (bm * bk)
        top = ", ".join(f"{k} {v}" for k, v in ops.most_common(8))
        print(f"{args.kernel} {case} {bm}x{bk}x{warps}: {n} SASS, {per_elem:.1f} per element, {regs} registers; {top}")


if __name__ == "__main__":
    main()
