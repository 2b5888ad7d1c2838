"""GPU check of the FP8 GEMM path (``gemm_dtype = "fp8"``, recipe ``mxfp4-fp8``), written as JSON to $OUT.

    python benchmarks/device/h200_fp8_check.py                 # JSON to $OUT/h200_fp8_check.json (default ./out)
    python benchmarks/device/h200_fp8_check.py --quick         # smaller sizes, fewer repeats

1. Operands: the Triton E4M3 conversion on CUDA against the torch twin on the CPU, bit for bit (codes, scales,
   unfit flags), on every GEMM operand of ``QuantLinear`` under mxfp4 and on adversarial rows; the decoded
   E4M3 operands against the CPU emulator's dequantized values (``fake_quantize`` on the CPU), bit for bit.
2. Accumulation: ``torch._scaled_mm`` (row-wise scales, bf16 output, and fp32 output where the library offers
   it) against ``fp4lab.emulate_gemm`` on hopper-sm90 ``wgmma.e4m3`` with fp32 promotion every P K-elements
   (P = None: the tensor cores' accumulator all the way), for use_fast_accum False and True: mismatching outputs
   per P, on real mxfp4 operands (row scales applied after the GEMM, as the library's epilogue does) and on
   random E4M3 codes.
3. Speed: ``QuantLinear`` forward + backward for mxfp4 (bf16 GEMMs), mxfp4-fp8 and mxfp4-fp8-fast against bf16
   ``nn.Linear`` in the same process (``bench_training.bench_linear``), and the parts: the three GEMMs alone in
   bf16 and FP8, and the E4M3 conversion passes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: bench_training
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import fp4lab  # noqa: E402
from fp4lab.kernels.fp8_convert_launch import to_e4m3_rows_triton  # noqa: E402
from fp4lab.recipes import QuantLinear, Recipe, fake_quantize, get_recipe, recipe_to_toml  # noqa: E402
from fp4lab.recipes.fp8_gemm import E4M3Rows, e4m3_rows_reference, scaled_mm  # noqa: E402

INTERVALS = [None, 32, 64, 128, 256, 512, 1024]  # candidate fp32 promotion intervals (K-elements)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def compare_conversion(t: torch.Tensor, transpose: bool) -> dict[str, int]:
    """Triton on CUDA against the CPU twin: mismatching codes / scales / flags, and unfit rows."""
    q, s, u = to_e4m3_rows_triton(t, transpose)
    ref = e4m3_rows_reference(t.cpu(), transpose)
    return {"elements": t.numel(), "code_mismatches": int((bits(q).cpu() != bits(ref.codes)).sum()),
            "scale_mismatches": int((bits(s).cpu() != bits(ref.scale)).sum()),
            "flag_mismatches": int((u.cpu() != ref.unfit).sum()), "unfit_rows": int(u.sum()), "rows": u.numel()}


def check_operands(tokens: int, k: int, n: int) -> dict[str, Any]:
    torch.manual_seed(0)
    out: dict[str, Any] = {}
    layer = QuantLinear(k, n, bias=False, recipe="mxfp4-fp8", device="cuda", dtype=torch.bfloat16)
    x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16) * 0.5
    dy = torch.randn(tokens, n, device="cuda", dtype=torch.bfloat16) * 1e-3
    xk, xm, _, _ = layer.operands(x, "x", "fprop", "wgrad")
    wk = layer.operands(layer.weight.detach(), "w", "fprop", None)[0]
    wn = layer.operands(layer.weight.detach(), "w", None, "dgrad")[1]
    dyn, dym, _, _ = layer.operands(dy, "dy", "dgrad", "wgrad")
    for name, t, tr in (("x.fprop", xk, False), ("w.fprop", wk, False), ("dy.dgrad", dyn, False),
                        ("w.dgrad", wn, True), ("dy.wgrad", dym, True), ("x.wgrad", xm, True)):
        out[name] = compare_conversion(t, tr)
    from test_fp8_gemm import mixed_rows

    adv = torch.cat([mixed_rows(s, cols=512) for s in range(8)]).cuda()
    out["adversarial_rows"] = compare_conversion(adv, False)
    out["adversarial_cols"] = compare_conversion(adv[:, :512].contiguous(), True)
    # decoded operands against the CPU emulator (a smaller slice: the emulator is the numba twin)
    xs = x[:1024].cpu()
    r = get_recipe("mxfp4-fp8")
    emu = {"x.fprop": fake_quantize(xs, r, "x", "fprop", -1), "x.wgrad": fake_quantize(xs, r, "x", "wgrad", 0)}
    gpu = {"x.fprop": fake_quantize(x[:1024], r, "x", "fprop", -1),
           "x.wgrad": fake_quantize(x[:1024], r, "x", "wgrad", 0)}
    for name, tr in (("x.fprop", False), ("x.wgrad", True)):
        op = E4M3Rows(*to_e4m3_rows_triton(gpu[name], tr))
        dec = op.decode().cpu()
        ref = emu[name].t() if tr else emu[name]
        ok = op.unfit.cpu() == 0
        out[f"{name}.vs_emulator"] = {"elements": int(ok.sum()) * dec.shape[1], "unfit_rows": int((~ok).sum()),
                                      "mismatches": int((bits(dec[ok].to(torch.bfloat16)) != bits(ref[ok])).sum())}
    return out


def check_accumulation(m: int, n: int, k: int, intervals: list[Any], data: str) -> dict[str, Any]:
    """_scaled_mm against emulate_gemm(wgmma.e4m3, promotion every P): on mxfp4 operands of one layer (their
    E4M3 values have at most 2 significant bits, so many sums are exact in 13 bits), or on random E4M3 codes
    with magnitudes in [2^-4, 2^4] (full 4-bit significands: every promotion interval leaves its trace)."""
    torch.manual_seed(1)
    if data == "mxfp4":
        r = get_recipe("mxfp4-fp8")
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        a8 = E4M3Rows(*to_e4m3_rows_triton(fake_quantize(x, r, "x", "fprop", -1)))
        b8 = E4M3Rows(*to_e4m3_rows_triton(fake_quantize(w, r, "w", "fprop", -1)))
    else:
        vals = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
        vals = vals[torch.isfinite(vals) & (vals.abs() >= 2.0 ** -4) & (vals.abs() <= 16)]
        a8, b8 = (E4M3Rows(vals[torch.randint(0, vals.numel(), (rows, k))].to(torch.float8_e4m3fn).cuda(),
                           torch.ones(rows, device="cuda"), torch.zeros(rows, dtype=torch.int32, device="cuda"))
                  for rows in (m, n))
    assert int(a8.unfit.sum()) == 0 and int(b8.unfit.sum()) == 0
    av = a8.codes.float().cpu().double().numpy()
    bv = b8.codes.float().cpu().double().numpy()
    sa = a8.scale.cpu().numpy()[:, None]
    sb = b8.scale.cpu().numpy()[None, :]
    res: dict[str, Any] = {"data": data, "m": m, "n": n, "k": k, "per_interval": {}}
    expected = {}
    for p in intervals:
        acc = fp4lab.emulate_gemm(av, bv, "hopper-sm90", "wgmma.e4m3", promotion_interval=p)
        expected[p] = (acc.astype(np.float32) * sa.astype(np.float32)) * sb.astype(np.float32)  # exact: powers of 2
    for fast in (False, True):
        outs = {"bf16": scaled_mm(a8, b8, torch.bfloat16, fast)}
        try:
            outs["fp32"] = torch._scaled_mm(a8.codes, b8.codes.t(), scale_a=a8.scale[:, None],
                                            scale_b=b8.scale[None, :], out_dtype=torch.float32, use_fast_accum=fast)
        except RuntimeError as exc:
            res["fp32_output"] = f"not offered: {str(exc).splitlines()[0][:200]}"
        for dt, y in outs.items():
            yb = bits(y).cpu()
            for p, e in expected.items():
                et = torch.from_numpy(np.ascontiguousarray(e))
                eb = bits(et.to(torch.bfloat16) if dt == "bf16" else et)
                key = f"fast_accum={fast} out={dt} P={p}"
                diff = (yb != eb)
                rel = ((y.float().cpu() - et).abs() / et.abs().clamp_min(1e-30)).max()
                res["per_interval"][key] = {"mismatches": int(diff.sum()), "of": diff.numel(),
                                            "max_rel_diff": float(rel)}
    best = {}
    for fast in (False, True):
        rows = {k2: v for k2, v in res["per_interval"].items() if k2.startswith(f"fast_accum={fast} out=bf16")}
        best[str(fast)] = min(rows, key=lambda k2: rows[k2]["mismatches"])
    res["best_match_bf16"] = best
    return res


def time_parts(tokens: int, k: int, n: int, iters: int, repeats: int) -> dict[str, Any]:
    """The three GEMMs alone (bf16 torch.mm against FP8 _scaled_mm) and the conversion passes."""
    from bench_training import timed

    dev = "cuda"
    x = torch.randn(tokens, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    dy = torch.randn(tokens, n, device=dev, dtype=torch.bfloat16)
    r = get_recipe("mxfp4-fp8")
    xk, wk, dyn = (fake_quantize(t, r, "x", "fprop", -1) for t in (x, w, dy))
    out: dict[str, Any] = {}
    out["gemms_bf16_ms"] = timed(lambda: (torch.mm(xk, wk.t()), torch.mm(dyn, wk), torch.mm(dyn.t(), xk)),
                                 iters, repeats)
    ops = {name: E4M3Rows(*to_e4m3_rows_triton(t, tr)) for name, t, tr in
           (("x", xk, False), ("w", wk, False), ("dy", dyn, False), ("wT", wk, True), ("dyT", dyn, True),
            ("xT", xk, True))}
    for fast in (False, True):
        out[f"gemms_fp8_fast={fast}_ms"] = timed(lambda f=fast: (
            scaled_mm(ops["x"], ops["w"], torch.bfloat16, f), scaled_mm(ops["dy"], ops["wT"], torch.bfloat16, f),
            scaled_mm(ops["dyT"], ops["xT"], torch.bfloat16, f)), iters, repeats)
    for name, t, tr in (("rows_16384xK", xk, False), ("cols_16384xK", xk, True), ("rows_w", wk, False),
                        ("cols_w", wk, True)):
        out[f"convert_{name}_us"] = timed(lambda t=t, tr=tr: to_e4m3_rows_triton(t, tr), iters, repeats) * 1e3
    out["copy_16384xK_us"] = timed(lambda: xk.clone(), iters, repeats) * 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="output file (default $OUT/h200_fp8_check.json)")
    args = ap.parse_args()
    out_dir = Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = Path(args.json) if args.json else out_dir / "h200_fp8_check.json"
    iters, repeats = (5, 3) if args.quick else (20, 5)
    tokens = 4096 if args.quick else 16384
    res: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    import triton

    res["triton"] = triton.__version__

    def step(name: str, fn: Any) -> None:
        t0 = time.time()
        try:
            res[name] = fn()
        except Exception as exc:  # report and go on
            res[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000], "trace": traceback.format_exc()[-3000:]}
        print(f"{name} ({time.time() - t0:.1f} s): {json.dumps(res[name])[:3000]}", flush=True)
        path.write_text(json.dumps(res, indent=2))

    step("operands", lambda: check_operands(tokens, 4096, 4096))
    size = 128 if args.quick else 256
    for data in ("mxfp4", "e4m3-random"):
        step(f"accumulation_{data}", lambda d=data: check_accumulation(size, size, 4096, INTERVALS, d))
    step("parts_4096x4096", lambda: time_parts(tokens, 4096, 4096, iters, repeats))

    def linear() -> list[Any]:
        from bench_training import bench_linear

        tmp = Path(tempfile.mkdtemp())
        fast = Recipe(**{**get_recipe("mxfp4-fp8").model_dump(), "name": "mxfp4-fp8-fast", "gemm_dtype": "fp8-fast"})
        (tmp / "mxfp4-fp8-fast.toml").write_text(recipe_to_toml(fast))
        names = ["mxfp4", "mxfp4-fp8", str(tmp / "mxfp4-fp8-fast.toml")]
        shapes = [(4096, 4096)] if args.quick else [(4096, 4096), (4096, 14336)]
        return [bench_linear(tokens, k, n, names, iters, repeats, compiled=False) for k, n in shapes]
    step("linear", linear)
    print(json.dumps({"linear_vs_bf16": {f"{r['k']}x{r['n']}": {Path(k).stem: round(v["vs_bf16"], 3)
                                                               for k, v in r["recipes"].items()}
                                         for r in res["linear"]} if isinstance(res["linear"], list) else res["linear"],
                      "best_match": {d: res[f"accumulation_{d}"].get("best_match_bf16")
                                     for d in ("mxfp4", "e4m3-random")}}))


if __name__ == "__main__":
    main()
