"""Training speed of the recipes on a GPU, as ratios against baselines run in the same process.

    python benchmarks/bench_training.py --json out.json            # everything (H200: a few minutes)
    python benchmarks/bench_training.py --quick                    # fewer repeats, one shape

1. ``QuantLinear`` forward + backward per built-in recipe (bf16 activations and parameters; ``mxfp4-fp8`` on
   FP8 tensor-core GEMMs, with its count of operand rows that took the bf16 path) at 16384 tokens for
   4096 -> 4096 and 4096 -> 14336, against ``nn.Linear`` in bf16 (cuBLAS), the naive PyTorch fake-quant of the
   same recipe (benchmarks/naive_fakequant.py) and, for ufp4, its ``torch.compile``'d version; plus the
   time of the recipe's fake-quant kernels alone (what the GEMMs do not explain). ``--layer-graph`` also times
   each layer step, and ``nn.Linear``'s, as CUDA-graph replays (no host launch cost on either side: how a
   captured training step runs them).
2. One whole training step (forward, backward, fused AdamW; fp32 master weights, bf16 autocast) of the study's
   GPT model (``--model``: its sizes, or ``user-1024`` / ``user-2048`` / ``user-4096``, GPTs as users write
   them), in tokens/s against the same model with bf16 ``nn.Linear`` layers run the same way: eagerly, as a
   hand-made CUDA graph, or under ``torch.compile(fullgraph=True)`` in its "default", "reduce-overhead" and
   "max-autotune" modes (``--modes``), with graph breaks and recompiles counted.

    python benchmarks/bench_training.py --shapes '' --model user-1024 user-2048 \
        --modes eager default reduce-overhead --json compile.json

Times are medians over repeats of CUDA-event-timed loops; inputs are random normal (never zeros).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from naive_fakequant import NaiveQuantLinearFunction, naive_fake_quant  # noqa: E402

import fp4lab  # noqa: E402
from fp4lab.recipes import QuantLinear, get_recipe, list_recipes, quantize_model  # noqa: E402


def timed_loops(fn: Callable[[], Any], iters: int, repeats: int, warmup: int = 1) -> list[float]:
    """Milliseconds per call of ``fn`` in each of ``repeats`` event-timed loops of ``iters`` calls, after
    ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / iters)
    return out


def timed(fn: Callable[[], Any], iters: int, repeats: int) -> float:
    """Median milliseconds per call of ``fn`` over ``repeats`` event-timed loops of ``iters`` calls."""
    return statistics.median(timed_loops(fn, iters, repeats))


def linear_step(layer: Any, x: torch.Tensor, dy: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        layer.weight.grad = None
        if getattr(layer, "bias", None) is not None:
            layer.bias.grad = None
        x.grad = None
        layer(x).backward(dy)
    return step


def graphed_step(layer: Any, x: torch.Tensor, dy: torch.Tensor) -> Callable[[], None]:
    """``linear_step`` captured in a CUDA graph: the returned function replays it (QuantLinear layers draw their
    stochastic-rounding keys from their step in device memory, which each replay advances, as in training)."""
    step = linear_step(layer, x, dy)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    return g.replay


class _Naive(torch.nn.Module):
    def __init__(self, w: torch.nn.Parameter, recipe: Any, fq: Any) -> None:
        super().__init__()
        self.weight, self.bias, self.recipe, self.fq = w, None, recipe, fq

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return NaiveQuantLinearFunction.apply(x, self.weight, self.recipe, self.fq)


def _bf16_fq(t: torch.Tensor, fmt: Any, axis: int, rht: Any, sr: bool) -> torch.Tensor:
    return t.to(torch.bfloat16) if fmt is None else naive_fake_quant(t, fmt, axis, rht, sr)


def bench_linear(tokens: int, k: int, n: int, recipes: list[str], iters: int, repeats: int,
                 compiled: bool, graph: bool = False) -> dict[str, Any]:
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(tokens, k, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(tokens, n, device=dev, dtype=torch.bfloat16)
    ref = torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.bfloat16)
    res: dict[str, Any] = {"tokens": tokens, "k": k, "n": n}
    res["nn_linear_bf16_ms"] = base = timed(linear_step(ref, x, dy), iters, repeats)
    if graph:  # both sides as CUDA-graph replays: no host launch cost on either
        res["nn_linear_bf16_graph_ms"] = base_graph = timed(graphed_step(ref, x, dy), iters, repeats)
    flops = 6 * tokens * k * n
    res["nn_linear_tflops"] = flops / base / 1e9
    rows = {}
    for name in recipes:
        r = get_recipe(name)
        layer = QuantLinear(k, n, bias=False, recipe=r, device=dev, dtype=torch.bfloat16)
        with torch.no_grad():
            layer.weight.copy_(ref.weight)
        row = {"ms": timed(linear_step(layer, x, dy), iters, repeats)}
        row["vs_bf16"] = row["ms"] / base
        if graph:
            row["graph_ms"] = timed(graphed_step(layer, x, dy), iters, repeats)
            row["graph_vs_bf16"] = row["graph_ms"] / base_graph
        if r.gemm_dtype.startswith("fp8"):  # operand rows on the FP8 path and those that took the bf16 path
            row["fp8_stats"] = layer.fp8_stats
        naive = _Naive(layer.weight, r, _bf16_fq)
        row["naive_ms"] = timed(linear_step(naive, x, dy), max(iters // 4, 1), repeats)
        row["naive_over_ours"] = row["naive_ms"] / row["ms"]
        if compiled and name == "ufp4":
            cfq = torch.compile(_bf16_fq, dynamic=False)
            cnaive = _Naive(layer.weight, r, cfq)
            t0 = time.time()
            linear_step(cnaive, x, dy)()
            row["compile_s"] = time.time() - t0
            row["compiled_ms"] = timed(linear_step(cnaive, x, dy), iters, repeats)
            row["compiled_over_ours"] = row["compiled_ms"] / row["ms"]
        # the recipe's fake-quant operand passes alone (forward and backward)
        def fq_only() -> None:
            layer.operands(x.detach(), "x", "fprop", "wgrad")
            layer.operands(layer.weight.detach(), "w", "fprop", None)
            layer.operands(dy, "dy", "dgrad", "wgrad")
            layer.operands(layer.weight.detach(), "w", None, "dgrad")
        row["fake_quant_ms"] = timed(fq_only, iters, repeats)
        # operands agree with the naive PyTorch version (deterministic operand; a check of the benchmark itself)
        with torch.no_grad():
            ours = layer.operands(x.detach(), "x", "fprop", None)[0].float()
            fmt = r.format_of("x")
            if fmt is not None:
                theirs = naive_fake_quant(x.detach(), fmt, -1, r.rht_size if "fprop" in r.rht else None, False).float()
                if fp4lab.get_format(fmt).tensor_scale != "none":
                    ours = ours * layer.operands(x.detach(), "x", "fprop", None)[2]
                row["naive_rel_diff"] = float((ours - theirs).norm() / theirs.norm())
        rows[name] = row
        print(f"  {k}->{n} {name:9s} {row['ms']:7.3f} ms  {row['vs_bf16']:.3f}x bf16"
              + (f"  graph {row['graph_ms']:.3f} ms {row['graph_vs_bf16']:.3f}x" if graph else "")
              + f"  naive {row['naive_ms']:.2f} ms"
              + (f"  compiled {row['compiled_ms']:.2f} ms" if "compiled_ms" in row else "")
              + f"  fake-quant {row['fake_quant_ms']:.3f} ms", flush=True)
    res["recipes"] = rows
    return res


# whole-model shapes: the study's sizes, and a GPT as users write one (d_model 1024 x 8 blocks at 16 x 1024 tokens,
# d_model 2048 x 4 blocks at 8 x 1024, d_model 4096 x 2 blocks at 8 x 1024: the width of 7B-parameter models),
# each with its default batch (sequences per step)
USER_MODELS = {"user-1024": (dict(d_model=1024, layers=8, heads=16, ffn=2816, seq_len=1024), 16),
               "user-2048": (dict(d_model=2048, layers=4, heads=16, ffn=5632, seq_len=1024), 8),
               "user-4096": (dict(d_model=4096, layers=2, heads=32, ffn=11008, seq_len=1024), 8)}
MODES = ("eager", "graph", "default", "reduce-overhead", "max-autotune")


def model_config(size: str) -> Any:
    from fp4lab.study.model import SIZES, GPTConfig

    return GPTConfig(**USER_MODELS[size][0]) if size in USER_MODELS else SIZES[size]


def bench_model(size: str, batch: int, recipes: list[str], steps: int, repeats: int, mode: str = "eager",
                on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Whole training steps (forward, backward, fused AdamW; fp32 master weights, bf16 autocast; head kept in high
    precision) per recipe against the same model with bf16 ``nn.Linear`` layers run the same way. ``mode``:
    "eager"; "graph", the step captured by hand in a CUDA graph and replayed; or a ``torch.compile`` mode
    ("default", "reduce-overhead": CUDA graphs, "max-autotune") of the model with ``fullgraph=True``, with the
    graph count, graph breaks (``torch._dynamo.explain``) and the frames compiled during the timed steps (0: no
    recompile per step). ``on_row`` is called with the result so far after every recipe."""
    from torch._dynamo.utils import counters

    from fp4lab.study.model import GPT

    cfg = model_config(size)
    dev = "cuda"
    res: dict[str, Any] = {"size": size, "params": cfg.params, "batch": batch, "seq_len": cfg.seq_len,
                           "mode": mode}
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq_len + 1), device=dev)
    inp, tgt = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    rows: dict[str, Any] = {}
    res["recipes"] = rows
    compiled = mode not in ("eager", "graph")
    for name in ["bf16-nn.Linear"] + recipes:
        torch.manual_seed(0)
        model = GPT(cfg).to(dev)
        if name != "bf16-nn.Linear":
            quantize_model(model, name, skip=("head",))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True, capturable=mode == "graph")
        row: dict[str, Any] = {}
        net: Any = model
        if compiled:
            torch._dynamo.reset()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                ex = torch._dynamo.explain(model)(inp)
            row.update(graphs=ex.graph_count, graph_breaks=ex.graph_break_count)
            torch._dynamo.reset()
            net = torch.compile(model, mode=None if mode == "default" else mode, fullgraph=True)

        def body() -> None:
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=mode != "graph"):
                loss = torch.nn.functional.cross_entropy(net(inp).reshape(-1, cfg.vocab), tgt.reshape(-1))
            loss.backward()
            opt.step()

        def step() -> None:
            body()
            opt.zero_grad(set_to_none=True)
        try:
            t0 = time.time()
            if mode == "graph":
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    body()
                loops = timed_loops(g.replay, steps, repeats)
            else:  # eager steps are bound by the host for small models: more warm-up, and the spread kept
                for _ in range(3):
                    step()
                torch.cuda.synchronize()
                row["warmup_s"] = round(time.time() - t0, 1)
                frames = counters["frames"]["ok"]
                loops = timed_loops(step, steps, repeats, warmup=0)
                if compiled:
                    row["recompiles"] = counters["frames"]["ok"] - frames
            ms = statistics.median(loops)
        except Exception as exc:  # report and go on (a capture the runtime refuses, say)
            print(f"  model {size} batch {batch} {mode} {name}: {type(exc).__name__}: {exc}"[:600], flush=True)
            continue
        row.update(ms=ms, ms_loops=loops, tokens_per_s=batch * cfg.seq_len / ms * 1e3)
        base = rows.get("bf16-nn.Linear", {}).get("ms")  # (the first row)
        if base and name != "bf16-nn.Linear":
            row["vs_bf16"] = ms / base
        rows[name] = row
        if on_row is not None:
            on_row(res)
        extra = "".join(f" {k} {row[k]}" for k in ("graphs", "graph_breaks", "recompiles", "warmup_s") if k in row)
        print(f"  model {size} batch {batch} {mode} {name:14s} {ms:7.2f} ms/step ({min(loops):.2f}-{max(loops):.2f})"
              f"  {row['tokens_per_s'] / 1e3:8.1f} k tokens/s{extra}", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--shapes", default="4096x4096,4096x14336", help="KxN,...")
    ap.add_argument("--recipes", nargs="+", default=list_recipes())
    ap.add_argument("--model", nargs="*", default=["middle"],
                    help=f"whole-step models: study sizes or {', '.join(USER_MODELS)} (none: skip)")
    ap.add_argument("--batch", type=int, nargs="+", default=None,
                    help="sequences per step (default: 32 and 128 for study sizes, the user models' own)")
    ap.add_argument("--modes", nargs="+", default=["eager"], choices=MODES,
                    help="whole-step modes: eager, graph (hand-made CUDA graph), torch.compile modes")
    ap.add_argument("--layer-graph", action="store_true",
                    help="also time each layer step (and nn.Linear's) as CUDA-graph replays")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile'd naive baseline")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    iters, repeats = (5, 3) if args.quick else (20, 5)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "linear": []}
    import triton

    out["triton"] = triton.__version__
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",") if s]
    for k, n in shapes[:1] if args.quick else shapes:
        out["linear"].append(bench_linear(args.tokens, k, n, args.recipes, iters, repeats,
                                          compiled=not args.no_compile and (k, n) == shapes[0],
                                          graph=args.layer_graph))
    out["model"] = []

    def save(block: dict[str, Any]) -> None:  # after every recipe: a run stopped by its time slot keeps its rows
        if args.json:
            Path(args.json).write_text(json.dumps({**out, "model": out["model"] + [block]}, indent=2))

    for size in args.model:
        batches = args.batch or ([USER_MODELS[size][1]] if size in USER_MODELS else [32, 128])
        for b in batches:
            for mode in args.modes:
                out["model"].append(bench_model(size, b, args.recipes, max(iters // 2, 3), repeats, mode, save))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    print(json.dumps(summary(out)))


def summary(out: dict[str, Any]) -> dict[str, Any]:
    """The ratios of a run, by shape (layers) and batch (whole steps)."""
    def ratios(rows: dict[str, Any], key: str) -> dict[str, float]:
        return {name: round(v[key], 3) for name, v in rows.items() if key in v}
    shapes = {f"{r['k']}x{r['n']}": r["recipes"] for r in out["linear"]}
    return {"linear_vs_bf16": {s: ratios(rows, "vs_bf16") for s, rows in shapes.items()},
            "linear_graph_vs_bf16": {s: ratios(rows, "graph_vs_bf16") for s, rows in shapes.items()},
            "model_vs_bf16": {f"{m['size']} batch {m['batch']} {m['mode']}": ratios(m["recipes"], "vs_bf16")
                              for m in out.get("model", [])}}

if __name__ == "__main__":
    main()
