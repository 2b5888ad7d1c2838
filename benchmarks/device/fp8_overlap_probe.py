"""Can the WGRAD operands' E4M3 conversions hide behind the DGRAD GEMM? One CUDA GPU:

    python benchmarks/device/fp8_overlap_probe.py [--tokens 16384] [--k 4096] [--n 4096] [--json out.json]

The FP8 backward of an ``mxfp4-fp8`` layer (``fp4lab.recipes.linear``) runs, on one stream: the DGRAD operands'
row conversions, the DGRAD GEMM and its bf16-path kernel, then the WGRAD operands' column conversions (a
column-maximum pass and a transposing pass per operand, memory-bound), the WGRAD GEMM and its bf16-path kernel.
The column conversions do not depend on the DGRAD GEMM. This script times, on the operands of that backward
(fake-quantized by the recipe from random normal tensors), each part alone and the whole backward two ways:
``serial`` (one stream, as the layer runs it) and ``overlapped`` (the WGRAD conversions on a second stream,
forked before the DGRAD work and joined before the WGRAD GEMM). Times are medians of CUDA-graph replays
(``triton.testing.do_bench_cudagraph``), with the eager median beside them; the outputs of both ways are
compared bit for bit, so only the schedule differs. A bf16 ``nn.Linear`` backward (its two GEMMs) of the same
shape is the baseline.
"""

from __future__ import annotations

import argparse
import json
from typing import Callable

import torch
from triton.testing import do_bench, do_bench_cudagraph

from fp4lab.recipes import fp8_gemm
from fp4lab.recipes.linear import fake_quantize

RECIPE = "mxfp4-fp8"


def _time(fn: Callable[[], object]) -> dict[str, float]:
    """Median ms of ``fn`` replayed in a CUDA graph and called eagerly."""
    fn()
    torch.cuda.synchronize()
    return {"graph_ms": do_bench_cudagraph(fn, rep=200), "eager_ms": do_bench(fn, rep=200)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--k", type=int, default=4096, help="in_features")
    ap.add_argument("--n", type=int, default=4096, help="out_features")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    m, k, n = a.tokens, a.k, a.n
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    dyn = fake_quantize(dy, RECIPE, "dy", "dgrad", -1, seed=1)
    dym = fake_quantize(dy, RECIPE, "dy", "wgrad", 0, seed=2)
    xm = fake_quantize(x, RECIPE, "x", "wgrad", 0)
    wn = fake_quantize(w, RECIPE, "w", "dgrad", 0)
    counts = torch.zeros(2, dtype=torch.int64, device="cuda")
    side = torch.cuda.Stream()
    out: dict[str, torch.Tensor] = {}

    def dgrad_convert() -> tuple:
        return fp8_gemm.to_e4m3_rows(dyn), fp8_gemm.to_e4m3_rows(wn, True)

    def wgrad_convert() -> tuple:
        return fp8_gemm.to_e4m3_rows(dym, True), fp8_gemm.to_e4m3_rows(xm, True)

    def dgrad_gemm(ops: tuple) -> torch.Tensor:
        return fp8_gemm.fp8_gemm(ops[0], ops[1], dyn, wn.t(), torch.bfloat16, False, None, counts)

    def wgrad_gemm(ops: tuple) -> torch.Tensor:
        return fp8_gemm.fp8_gemm(ops[0], ops[1], dym.t(), xm.t(), torch.bfloat16, False, None, counts)

    def serial() -> None:
        out["dx"] = dgrad_gemm(dgrad_convert())
        out["dw"] = wgrad_gemm(wgrad_convert())

    def overlapped() -> None:
        main_stream = torch.cuda.current_stream()
        side.wait_stream(main_stream)
        with torch.cuda.stream(side):
            ops = wgrad_convert()
        out["dx"] = dgrad_gemm(dgrad_convert())
        main_stream.wait_stream(side)
        for op in ops:
            for t in (op.codes, op.scale, op.unfit):
                t.record_stream(main_stream)
        out["dw"] = wgrad_gemm(ops)

    serial()
    ref = {key: v.clone() for key, v in out.items()}
    overlapped()
    torch.cuda.synchronize()
    same = all(torch.equal(ref[key].view(torch.int16), out[key].view(torch.int16)) for key in ref)

    dc, wc = dgrad_convert(), wgrad_convert()
    lin_x = x.clone().requires_grad_(True)
    lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)

    def linear_backward() -> None:
        torch.mm(dy, lin.weight)
        torch.mm(dy.t(), lin_x)

    res = {
        "shape": [m, k, n],
        "device": torch.cuda.get_device_name(),
        "bits_equal": same,
        "dgrad_convert": _time(dgrad_convert),
        "wgrad_convert": _time(wgrad_convert),
        "dgrad_gemm": _time(lambda: dgrad_gemm(dc)),
        "wgrad_gemm": _time(lambda: wgrad_gemm(wc)),
        "serial": _time(serial),
        "overlapped": _time(overlapped),
        "bf16_linear_backward": _time(linear_backward),
    }
    for key, v in res.items():
        print(f"{key:22s} {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
