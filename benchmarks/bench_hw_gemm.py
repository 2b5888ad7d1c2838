"""Training with hardware numerics (recipe field ``gemm_numerics``) on a GPU: bits and speed, as JSON in $OUT.

    python benchmarks/bench_hw_gemm.py                 # $OUT/bench_hw_gemm.json (default ./out); H200: minutes
    python benchmarks/bench_hw_gemm.py --quick         # smaller check, fewer repeats

Run from the repository root (the example recipes name their hwspec files by relative paths).

1. Bits: for each example recipe with ``gemm_numerics``, a ``QuantLinear`` step (forward and backward, bf16, SR
   keys at step 3) on CUDA (Triton quantize and MMA-emulation kernels) against the same layer on the CPU (numba
   quantize and the CPU model of the kind): mismatching elements of Y, dX and dW (expected 0), for two shapes.
2. Speed: ``QuantLinear`` forward + backward at 16384 tokens, 4096 -> 4096, bf16, for each recipe, against bf16
   ``nn.Linear`` and the recipe without ``gemm_numerics`` (bf16 GEMMs of the fake-quantized operands), in the
   same process; and the parts of one FPROP: the operand quantization and ``emulated_matmul`` alone. The target
   is at most 3x ``nn.Linear``.

Times are medians of CUDA-event-timed loops; inputs are random normal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fp4lab.recipes import QuantLinear, Recipe, get_recipe  # noqa: E402
from fp4lab.recipes import runtime as rt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_training import timed  # noqa: E402  (the same event-timed loops as the training benchmark)

RECIPES = ["nvfp4-blackwell", "ufp4-proposal", "ufp4-proposal-f16"]


def recipe(name: str) -> Recipe:
    return get_recipe(f"examples/recipes/{name}.toml")


def without_numerics(r: Recipe) -> Recipe:
    return Recipe(**{**r.model_dump(), "name": f"{r.name}-bf16-gemms", "gemm_numerics": None})


def step_outputs(layer: QuantLinear, x: torch.Tensor, dy: torch.Tensor) -> list[torch.Tensor]:
    x = x.clone().requires_grad_(True)
    y = layer(x)
    y.backward(dy)
    return [y.detach(), x.grad, layer.weight.grad]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()]).cpu()


def check_bits(name: str, tokens: int, k: int, n: int) -> dict[str, Any]:
    """CUDA layer step against the CPU layer step: mismatching elements per GEMM output."""
    r = recipe(name)
    torch.manual_seed(0)
    cpu = QuantLinear(k, n, recipe=r, name="check", dtype=torch.bfloat16)
    gpu = QuantLinear(k, n, recipe=r, name="check", dtype=torch.bfloat16, device="cuda")
    gpu.load_state_dict(cpu.state_dict())
    cpu.step = gpu.step = 3
    g = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, k, generator=g).to(torch.bfloat16)
    dy = torch.randn(tokens, n, generator=g).to(torch.bfloat16)
    t0 = time.time()
    want = step_outputs(cpu, x, dy)
    t1 = time.time()
    got = step_outputs(gpu, x.cuda(), dy.cuda())
    torch.cuda.synchronize()
    return {"recipe": name, "shape": [tokens, k, n], "cpu_s": round(t1 - t0, 3),
            **{f"{what}_mismatches": int((bits(a) != bits(b)).sum())
               for what, a, b in zip(("y", "dx", "dw"), got, want, strict=True)},
            "elements": tokens * n + tokens * k + n * k}


def layer_step(layer: torch.nn.Module, x: torch.Tensor, dy: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        layer.weight.grad = layer.bias.grad = x.grad = None
        layer(x).backward(dy)
    return step


def bench_speed(tokens: int, k: int, n: int, iters: int, repeats: int) -> dict[str, Any]:
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(tokens, k, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(tokens, n, device=dev, dtype=torch.bfloat16)
    base = torch.nn.Linear(k, n, device=dev, dtype=torch.bfloat16)
    out: dict[str, Any] = {"shape": [tokens, k, n], "nn_linear_ms": timed(layer_step(base, x, dy), 10, repeats)}
    for name in RECIPES:
        r = recipe(name)
        row: dict[str, Any] = {}
        for label, rr in (("gemm_numerics", r), ("bf16_gemms", without_numerics(r))):
            layer = QuantLinear(k, n, recipe=rr, name="bench", device=dev, dtype=torch.bfloat16)
            row[f"{label}_ms"] = timed(layer_step(layer, x, dy), iters if label == "gemm_numerics" else 10, repeats)
        layer = QuantLinear(k, n, recipe=r, name="bench", device=dev, dtype=torch.bfloat16)
        hw = rt.runtime(layer.layer_spec).hw
        keys = rt.sr_keys(layer.sr_state, advance=False)
        a = hw.operand(x, "x", "fprop", "k", keys)
        b = hw.operand(layer.weight, "w", "fprop", "k", keys)
        row["fprop_quantize_x_ms"] = timed(lambda hw=hw, keys=keys: hw.operand(x, "x", "fprop", "k", keys), 5, repeats)
        row["fprop_emulated_matmul_ms"] = timed(lambda hw=hw, a=a, b=b: hw.gemm("fprop", a, b, torch.bfloat16), iters,
                                                repeats)
        row["ratio_vs_nn_linear"] = row["gemm_numerics_ms"] / out["nn_linear_ms"]
        row["target_3x_met"] = row["ratio_vs_nn_linear"] <= 3.0
        row["products_per_s_fprop"] = tokens * k * n / (row["fprop_emulated_matmul_ms"] / 1e3)
        out[name] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="output file (default $OUT/bench_hw_gemm.json)")
    args = ap.parse_args()
    out_dir = Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = Path(args.json) if args.json else out_dir / "bench_hw_gemm.json"
    res: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}

    def save() -> None:
        path.write_text(json.dumps(res, indent=1))

    shapes = [(256, 256, 128)] if args.quick else [(256, 256, 128), (1024, 1024, 512)]
    res["bits"] = []
    for name in RECIPES:
        for shape in shapes:
            try:
                res["bits"].append(check_bits(name, *shape))
            except Exception:
                res["bits"].append({"recipe": name, "shape": list(shape), "error": traceback.format_exc()[-2000:]})
            save()
            print(res["bits"][-1], flush=True)
    try:
        res["speed"] = bench_speed(16384, 4096, 4096, 1 if args.quick else 2, 2 if args.quick else 3)
    except Exception:
        res["speed"] = {"error": traceback.format_exc()[-2000:]}
    save()
    print(json.dumps(res.get("speed"), indent=1), flush=True)


if __name__ == "__main__":
    main()
