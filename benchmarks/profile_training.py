"""Where a training step's GPU time goes, per kernel (torch.profiler), on one CUDA GPU:

    python benchmarks/profile_training.py nn nvfp4 ufp4      # "nn": the model with bf16 nn.Linear layers

1. per recipe, ``QuantLinear`` forward + backward at 16384 tokens, 4096 -> 4096 (bf16 activations and weights; 5
   steps after 3 warm-up ones), and one whole training step of the study's middle-size GPT (2 steps after 3,
   bf16 autocast, fused AdamW, eager): the kernel table sorted by CUDA time;
2. the time of one 16384 x 4096 x 4096 bf16 ``torch.mm`` on random normal operands against the same operands
   fake-quantized by ufp4, nvfp4 and mxfp4 (tensor scales applied): tensor-core GEMM speed depends on the data.
"""

from __future__ import annotations

import argparse
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

from fp4lab.recipes import QuantLinear, quantize_model
from fp4lab.recipes.linear import fake_quantize
from fp4lab.study.model import GPT, SIZES


def _profiled(step: Callable[[], None], warmup: int, steps: int, rows: int) -> str:
    """Kernel table (by CUDA time) of ``steps`` calls of ``step`` after ``warmup`` unprofiled ones."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return p.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=260)


def profile_layer(name: str) -> str:
    torch.manual_seed(0)
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    if name == "nn":
        layer = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
    else:
        layer = QuantLinear(4096, 4096, bias=False, recipe=name, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        layer.weight.grad = None
        x.grad = None
        layer(x).backward(dy)
    return f"===== layer {name} (5 steps)\n{_profiled(step, 3, 5, 25)}"


def profile_step(name: str) -> str:
    cfg = SIZES["middle"]
    tokens = torch.randint(0, cfg.vocab, (32, cfg.seq_len + 1), device="cuda")
    inp, tgt = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    torch.manual_seed(0)
    model = GPT(cfg).cuda()
    if name != "nn":
        quantize_model(model, name, skip=("head",))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(inp).reshape(-1, cfg.vocab), tgt.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return f"===== step {name} (2 steps)\n{_profiled(step, 3, 2, 30)}"


def gemm_data_dependence() -> dict[str, float]:
    """ms of one bf16 GEMM on random operands and on their fake-quantized copies (random again at the end)."""
    torch.manual_seed(0)
    a = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    res = {"random": do_bench(lambda: torch.mm(a, w.t()), rep=300)}
    for r in ("ufp4", "nvfp4", "mxfp4"):
        aq = fake_quantize(a, r, "x", "fprop", -1)
        wq = fake_quantize(w, r, "w", "fprop", -1)
        res[r] = do_bench(lambda: torch.mm(aq, wq.t()), rep=300)
    res["random_again"] = do_bench(lambda: torch.mm(a, w.t()), rep=300)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipes", nargs="+", help="recipe names, or nn for bf16 nn.Linear layers")
    args = ap.parse_args()
    for name in args.recipes:
        print(profile_layer(name), flush=True)
        print(profile_step(name), flush=True)
    res = gemm_data_dependence()
    print("GEMM 16384x4096x4096 ms, random vs fake-quantized operands:", {k: round(v, 4) for k, v in res.items()})


if __name__ == "__main__":
    main()
