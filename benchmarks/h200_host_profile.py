"""Host (CPU) cost per call of the training path on a GPU: fake_quantize_triton, its kernel launch alone, the
pieces of an FP8 GEMM (E4M3 conversions, ``_scaled_mm``, the bf16-path kernel) beside ``torch.mm``, and a
QuantLinear forward+backward of a small layer (whose GPU work is negligible) per recipe of ``RECIPES``, with a
cProfile of the hot spots (for which backward runs in the calling thread, so the profile covers it; the timings
run it in autograd's own thread, as training does).

    python benchmarks/h200_host_profile.py
"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch

import fp4lab
from fp4lab.kernels.fakequant_launch import _PLANS, fake_quantize_triton
from fp4lab.kernels.fp8_convert_launch import to_e4m3_rows_triton
from fp4lab.kernels.unfit_mm_launch import unfit_mm_triton
from fp4lab.numerics.options import Blocking
from fp4lab.recipes import QuantLinear, fp8_gemm
from fp4lab.recipes.fp8_gemm import E4M3Rows

RECIPES = ("ufp4", "mxfp4", "mxfp4-fp8")


def per_call_us(fn, n: int = 200) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


def parts(x: torch.Tensor) -> None:
    """Host us per call of the pieces of an FP8 layer step (bf16 [256, 512] operands, y @ y^T for the GEMMs)."""
    fmt = fp4lab.get_format("mxfp4")
    y = fake_quantize_triton(x, fmt, along_k=Blocking(None, 0, 0))[0]
    y8 = E4M3Rows(*to_e4m3_rows_triton(y))
    out = torch.empty(256, 256, dtype=torch.bfloat16, device="cuda")
    counts = torch.zeros(2, dtype=torch.int64, device="cuda")

    def autocast_off() -> None:
        with torch.autocast("cuda", enabled=False):
            pass
    timings = {
        "autocast(enabled=False)": autocast_off,
        "fake_quantize_triton mxfp4 along K": lambda: fake_quantize_triton(x, fmt, along_k=Blocking(None, 0, 0)),
        "to_e4m3_rows rows": lambda: to_e4m3_rows_triton(y),
        "to_e4m3_rows columns": lambda: to_e4m3_rows_triton(y, True),
        "scaled_mm": lambda: fp8_gemm.scaled_mm(y8, y8, torch.bfloat16, False),
        "unfit_mm_triton": lambda: unfit_mm_triton(out, y, y, y8.unfit, y8.unfit, counts),
        "torch.mm": lambda: torch.mm(x, y.t()),
    }
    for what, fn in timings.items():
        print(f"{what}: {per_call_us(fn):.1f} us/call", flush=True)


def main() -> None:
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    for name, rk, rm in (("ufp4", 16, None), ("e2m1-b16-fp32", None, 16), ("nvfp4", None, 16)):
        fmt = fp4lab.get_format(name)
        state = {"i": 0}

        def call() -> None:
            state["i"] += 1
            fake_quantize_triton(x, fmt, "sr", along_k=Blocking(rk, 0, state["i"]), along_m=Blocking(rm, 0, 7),
                                 sr_bits=16)
        us = per_call_us(call)
        plan = next(p for k, p in _PLANS.items() if k[0] == id(fmt))
        yk = torch.empty_like(x)
        tsv = torch.zeros(8, dtype=torch.float32, device="cuda")  # tensor scales of two-level formats (ignored else)
        lead = (x.view(torch.int32), yk.view(torch.int16), yk.view(torch.int16), tsv)
        us_launch = per_call_us(lambda: plan.launch(*lead, 5, 6))
        L = plan.launch
        us_jit = per_call_us(lambda: L.fn[L.grid](*lead, *L.fixed, 5, 6, **L.consts, **L.options), 50)
        print(f"{name}: fake_quantize_triton {us:.1f} us/call; cached launch {us_launch:.1f} us; JIT launch "
              f"{us_jit:.1f} us; empty {per_call_us(lambda: torch.empty_like(x)):.1f} us", flush=True)
    parts(x)
    xx = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    lin = torch.nn.Linear(512, 512, bias=False, device="cuda", dtype=torch.bfloat16)

    def step(m) -> None:
        m.weight.grad = None
        xx.grad = None
        m(xx).backward(dy)
    print(f"host us per fwd+bwd: nn.Linear {per_call_us(lambda: step(lin)):.1f}", flush=True)
    for recipe in RECIPES:
        layer = QuantLinear(512, 512, bias=False, recipe=recipe, device="cuda", dtype=torch.bfloat16)
        print(f"host us per fwd+bwd: QuantLinear {recipe} {per_call_us(lambda: step(layer)):.1f}", flush=True)
        torch.autograd.set_multithreading_enabled(False)  # backward in this thread, so cProfile sees it
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(100):
            step(layer)
        prof.disable()
        torch.autograd.set_multithreading_enabled(True)
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
