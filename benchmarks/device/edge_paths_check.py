"""The Triton kernels against the numpy reference, bit for bit, on the paths that no registry format takes and
``fp4lab verify`` therefore does not reach: NaN elements of ``nan_policy = "ignore"`` blocks (the lean path's NaN
rule), the decoded-range cap under directed rounding (rtp / rtm) of a grid whose extreme levels overflow under a
huge scale, and float element grids with a negative exponent bias (decode by two exact multiplies). The formats are
written as spec files and run through ``fp4lab.kernels.verify`` (quantize and fake-quant cases, every input kind,
RHT off and 16) with the roundings rtne, sr, rtp and rtm, and the NaN formats also on tensors whose tiles are plain
but for one NaN (``sparse_nan_cases``). Exit status 1 on any mismatch. On a GPU the default 5e7 elements are
384 cases of 236 kernel variants (cases with one variant differ only in their data), most of the time their Triton
compiles: sm_90 compiles of sampled variants at their own tiles take 2.5-18 s each on one CPU core (the SR-8
fake-quant of the NaN-ignoring E4M3 format the longest; ``benchmarks/sass_count.py``), and
one process did not finish 1e7 elements in 150 s on an H100. Give ``--workers``: each worker compiles the variants
it takes, and prints a line per variant as it finishes (its cases, mismatches and seconds), so a run that is cut
off shows how far it got.

    python3 benchmarks/device/edge_paths_check.py --workers 15 --json out.json          # on a GPU
    TRITON_INTERPRET=1 python benchmarks/device/edge_paths_check.py --device interpreter --elements 2e4
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from fp4lab.formats.quant_format import QuantFormat
from fp4lab.formats.spec_io import model_to_toml
from fp4lab.kernels.verify import Case, plan_cases, run_cases, summarize

FORMATS = {
    # NaN elements of nan_policy "ignore" blocks: the scale leaves them out, the element takes nan_element's code
    "nan-ignore-decode": dict(element="e4m3", block={"shape": [16]}, scale="bf16", nan_element="nan",
                              scale_rule={"method": "amax", "nan_policy": "ignore", "element_scaling": "reciprocal"}),
    "nan-ignore-encode": dict(element="e4m3", block={"shape": [16]}, scale="bf16", nan_element="nan",
                              scale_rule={"method": "amax", "nan_policy": "ignore", "element_scaling": "reciprocal",
                                          "scale_arithmetic": "encode"}),
    "nan-ignore-e2m1": dict(element="e2m1", block={"shape": [16]}, scale="fp32",
                            scale_rule={"method": "amax", "nan_policy": "ignore"}),
    # the decoded-range cap: -128 * 2^121 overflows, so the most negative finite level is 0 there
    "zero-cap": dict(element={"kind": "table", "table_bits": 2, "magnitudes": [0.0, 128.0]}, block={"shape": [4]},
                     scale="e8m0", scale_rule={"method": "ceil"}, nan_element="nan", overflow="saturate",
                     signed_zero="keep"),
    # float element grids with a negative bias (levels up to 24 and 384)
    "neg-bias-1": dict(element={"kind": "float", "exponent_bits": 2, "mantissa_bits": 1, "bias": -1},
                       block={"shape": [16]}, scale="e8m0", scale_rule={"method": "amax"}),
    "neg-bias-4": dict(element={"kind": "float", "exponent_bits": 2, "mantissa_bits": 1, "bias": -4},
                       block={"shape": [32]}, scale="e8m0", scale_rule={"method": "amax"}),
}
ROUNDINGS = ("rtne", "sr", "rtp", "rtm")
NAN_IGNORE = tuple(n for n in FORMATS if n.startswith("nan-ignore"))


def sparse_nan_cases(specs: dict[str, str], rows: int) -> list[Case]:
    """Quantize and fake-quant cases of the ``NAN_IGNORE`` formats on N(0,1) tensors [rows, 256] with one NaN in
    every 16th row (verify's "sparse-nan" kind): tiles that are otherwise plain, where the kernels take their lean
    path (verify's adversarial inputs put Inf and huge values beside their NaNs, which keeps a tile off it)."""
    return [Case(specs[name], rounding, None, -1, "sparse-nan", rows, 256, 100 * i + j, op=op)
            for i, name in enumerate(NAN_IGNORE) for j, rounding in enumerate(ROUNDINGS)
            for op in ("quantize", "fakequant")]


def write_specs(folder: Path) -> dict[str, str]:
    """The formats of ``FORMATS`` as spec files in ``folder`` (validated on the way): name -> path."""
    paths = {}
    for name, fields in FORMATS.items():
        path = folder / f"{name}.toml"
        path.write_text(model_to_toml(QuantFormat.model_validate({"name": name, **fields})))
        paths[name] = str(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "interpreter"), default="cuda")
    ap.add_argument("--elements", type=float, default=5e7, help="about this many elements over all cases")
    ap.add_argument("--workers", type=int, default=1,
                    help="processes for the planned cases (cuda only), each with its own context: the cases' "
                         "Triton compiles and numpy references then run side by side")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        specs = write_specs(Path(tmp))
        device = "cpu" if args.device == "interpreter" else "cuda"
        cases = plan_cases(list(specs.values()), int(args.elements), roundings=ROUNDINGS,
                           interpreter=args.device == "interpreter")
        cases += sparse_nan_cases(specs, 64 if args.device == "interpreter" else 4096)
        outcomes = run_cases(cases, device, workers=args.workers if device == "cuda" else 1, progress=False,
                             log=lambda line: print(line.replace(tmp + "/", ""), flush=True))
    rows, first = summarize(outcomes)
    for row in rows:  # a spec file's name, not its temporary path
        row["format"] = Path(row["format"].split(" ")[0]).stem
    out = {"device": args.device, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "cases": len(cases), "elements": sum(c.elements for c in cases),
           "mismatches": sum(o.mismatches for o in outcomes), "seconds": round(time.perf_counter() - t0, 1),
           "rows": rows,
           "first_mismatch": None if first is None else {"case": str(first.case), **first.detail}}
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    raise SystemExit(1 if out["mismatches"] else 0)


if __name__ == "__main__":
    main()
