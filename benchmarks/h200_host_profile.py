"""Host (CPU) cost per call of the training path on a GPU: fake_quantize_triton, its kernel launch alone, and a
QuantLinear forward+backward of a small layer (whose GPU work is negligible), with a cProfile of the hot spots.

    python benchmarks/h200_host_profile.py
"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch

import fp4lab
from fp4lab.kernels.fakequant_launch import _PLANS, Blocking, fake_quantize_triton
from fp4lab.recipes import QuantLinear


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
    layer = QuantLinear(512, 512, bias=False, recipe="ufp4", device="cuda", dtype=torch.bfloat16)
    xx = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    lin = torch.nn.Linear(512, 512, bias=False, device="cuda", dtype=torch.bfloat16)

    def step(m) -> None:
        m.weight.grad = None
        xx.grad = None
        m(xx).backward(dy)
    print(f"host us per fwd+bwd: QuantLinear ufp4 {per_call_us(lambda: step(layer)):.1f}, nn.Linear "
          f"{per_call_us(lambda: step(lin)):.1f}", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(100):
        step(layer)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
