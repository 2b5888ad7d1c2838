"""GPU check of the directed rounding modes (rtp, rtm; with quotients x / S that underflow float32:
``fp4lab.testing``'s ``underflowing_quotients``) and the scale-rule fields select_by, dequantize_order and
scale_overflow on the compiled Triton kernels, written as JSON to $OUT (default ./out).

    python benchmarks/device/h200_library_fields_check.py
    TRITON_INTERPRET=1 python benchmarks/device/h200_library_fields_check.py --small   # CPU smoke run (interpreter)

For each case (format, rounding): quantize on CUDA (codes, scale codes, scales, tensor scale), dequantize on CUDA
(fp32 and bf16) and fused fake quantization along K and M (fp32 output) against the numpy reference on the same
input, bit for bit (NaNs compared by value: a GPU NaN may carry another payload). The interpreter runs the same
comparisons in tests/test_gfloat_diff.py and tests/test_library_semantics.py; this script repeats them on the
compiled kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import traceback
from pathlib import Path

import numpy as np
import torch

import fp4lab
from fp4lab import QuantizeOptions
from fp4lab.formats import QuantFormat
from fp4lab.kernels.api import dequantize_cuda, quantize_cuda
from fp4lab.kernels.fakequant_launch import fake_quantize_triton
from fp4lab.kernels.verify import make_input
from fp4lab.numerics.fakequant import fake_quantize_reference
from fp4lab.numerics.options import Blocking
from fp4lab.numerics.ref_quantize import dequantize_reference, quantize_reference
from fp4lab.testing import make_inputs

F32 = np.float32
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def variant(name: str, **rule) -> QuantFormat:
    d = fp4lab.get_format(name).model_dump()
    d["name"], d["matches"] = f"{name}-variant", []
    d["scale_rule"] = {**d["scale_rule"], **rule}
    return QuantFormat(**d)


def same(got: np.ndarray, want: np.ndarray) -> int:
    """Number of elements whose float32 bits differ (any NaN equal to any NaN)."""
    got, want = np.asarray(got, F32), np.asarray(want, F32)
    nan = np.isnan(got) & np.isnan(want)
    return int(np.sum(~nan & (got.view(np.uint32) != want.view(np.uint32))))


def inputs(scale_overflow: bool, rows: int, cols: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    gauss = (rng.standard_normal((rows, cols)) * np.exp2(rng.integers(-6, 7, (rows, 1)))).astype(F32)
    gauss[0, :4] = F32([np.nan, np.inf, -0.0, 0.0])
    gauss[1, :32] = 0.0
    if scale_overflow:
        gauss[3, :32] = F32(3.0e38)
    return {"gaussian": gauss, "adversarial": make_input("adversarial", rows, cols, seed=1),
            "underflowing_quotients": make_inputs("underflowing_quotients", (rows, cols), 3)}


def check(fmt: QuantFormat, mode: str, x: np.ndarray) -> dict:
    xt = torch.from_numpy(x).to(DEV)
    with np.errstate(all="ignore"):
        ref = quantize_reference(x, fmt, QuantizeOptions(mode))
        q = quantize_cuda(xt, fmt, QuantizeOptions(mode))
        out = {"codes": int(np.sum(q.codes.cpu().numpy() != ref.codes))}
        if ref.scale_codes.size:
            sc = q.scale_codes.cpu()
            sc = sc.view(torch.int16) if sc.dtype == torch.uint16 else sc
            out["scale_codes"] = int(np.sum(sc.numpy().view(ref.scale_codes.dtype) != ref.scale_codes))
            out["scales"] = same(q.scales.cpu().numpy(), ref.scales)
        if ref.tensor_scale is not None:
            out["tensor_scale"] = same(q.tensor_scale.reshape(1).cpu().numpy(), np.array([ref.tensor_scale], F32))
        want = dequantize_reference(ref)
        out["dequantize_fp32"] = same(dequantize_cuda(q).cpu().numpy(), want)
        w16 = torch.from_numpy(want).to(torch.bfloat16).float().numpy()
        out["dequantize_bf16"] = same(dequantize_cuda(q, out_dtype=torch.bfloat16).float().cpu().numpy(), w16)
        if fmt.block is not None:
            yk, ym, _, _ = fake_quantize_triton(xt, fmt, mode, along_k=Blocking(), along_m=Blocking(),
                                                out_dtype=torch.float32)
            for y, axis, key in ((yk, -1, "fakequant_k"), (ym, 0, "fakequant_m")):
                w, _ = fake_quantize_reference(x, fmt, mode, 0, axis, None, 0, 24, "fp32", True)
                out[key] = same(y.cpu().numpy(), w)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="64 x 128 inputs (interpreter smoke run)")
    args = ap.parse_args()
    rows, cols = (64, 128) if args.small else (256, 512)
    out_dir = Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = [(fp4lab.get_format(n), m) for n in ("mxfp4", "nvfp4", "int4-b32-e8m0", "nf4-b64-fp32", "e2m1")
             for m in ("rtp", "rtm")]
    cases += [(variant("nvfp4-4over6", select_by="sae"), "rtne"),
              (variant("nvfp4-4over6", select_by="sae", dequantize_order="scale_product_first"), "rtne"),
              (fp4lab.get_format("nvfp4-torchao"), "rtne"),  # the preset: scale_product_first
              (variant("nvfp4-torchao", dequantize_order="value_scale_first"), "rtne"),
              (variant("ufp4-e8m0", scale_overflow="nan"), "rtne"),
              (variant("ufp4-e8m0", scale_overflow="nan"), "rtp")]
    results, failures = [], 0
    for fmt, mode in cases:
        for kind, x in inputs(fmt.scale_rule.scale_overflow == "nan", rows, cols).items():
            row = {"format": fmt.name, "rule": fmt.scale_rule.model_dump(), "rounding": mode, "input": kind}
            try:
                row["mismatches"] = check(fmt, mode, x)
                failures += sum(row["mismatches"].values()) > 0
            except Exception:  # noqa: BLE001 - recorded in the JSON
                row["error"] = traceback.format_exc(limit=3)
                failures += 1
            results.append(row)
            print(fmt.name, mode, kind, row.get("mismatches", row.get("error")))
    device = torch.cuda.get_device_name() if DEV == "cuda" else "cpu (Triton interpreter)"
    report = {"device": device, "cases": len(results), "failing_cases": failures,
              "results": results}
    (out_dir / "h200_library_fields_check.json").write_text(json.dumps(report, indent=1))
    print(f"{failures} of {len(results)} cases with mismatches")


if __name__ == "__main__":
    main()
