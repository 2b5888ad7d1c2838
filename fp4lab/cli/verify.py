"""``fp4lab verify``: the Triton kernels against the numpy reference, bit for bit (the tensor-core model is
checked by ``fp4lab hw verify``). Imports nothing heavy at module level."""

from __future__ import annotations

import argparse
import os
import sys
import time

from fp4lab.errors import Fp4labError, require

from .analysis import input_seed
from .output import add_json_options, check_json_out, emit_json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify", help="compare the Triton kernels with the emulator's reference, bit for bit",
        description="Quantize random and adversarial tensors with the Triton kernels and the numpy reference "
        "(every format, rtne and sr, RHT off and 16) and compare codes, scales, tensor scale and dequantized "
        "values bit for bit; fake-quantize 2-D tensors with the fused kernel along K and M (SR widths 24/16/8, "
        "bf16 and fp32 outputs) and compare both outputs and tensor scales. Exit code 1 on any mismatch. "
        "The tensor-core (MMA) model is checked by fp4lab hw verify.")
    p.add_argument("--formats", nargs="+", default=None, help="format names or spec files (default: all registered)")
    p.add_argument("--elements", type=float, default=2e5,
                   help="elements to aim for over all cases (default 2e5); every case takes at least 16384, so a "
                   "run of several formats can take more (the table counts them)")
    p.add_argument("--device", choices=("cuda", "interpreter"), default=None,
                   help="cuda (needs a GPU) or interpreter (TRITON_INTERPRET=1 on CPU); default: cuda if available")
    p.add_argument("--ops", nargs="+", choices=("quantize", "fakequant"), default=["quantize", "fakequant"],
                   help="kernels to verify (default both; with both, fakequant gets about a quarter of the elements)")
    p.add_argument("--seed", type=input_seed, default=0, help="input generator seed (default 0)")
    p.add_argument("--workers", type=int, default=1, help="processes (cuda only), each with its own context")
    add_json_options(p, "print the summary as JSON only")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    """Handler of ``fp4lab verify``."""
    check_json_out(args, "verify")
    device = args.device
    if device is None:
        device = "interpreter" if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") else "cuda"
    if device == "interpreter":
        if "fp4lab.kernels.tile" in sys.modules and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
            raise Fp4labError("verify --device interpreter: needs TRITON_INTERPRET=1 before the kernels are "
                              "imported; set it in the environment")
        os.environ["TRITON_INTERPRET"] = "1"
    for module in ("torch", "triton"):  # before any work (triton after TRITON_INTERPRET is settled)
        require(module, "gpu", "fp4lab verify")
    from rich.console import Console
    from rich.table import Table

    from fp4lab.formats.registry import get_format, list_formats
    from fp4lab.kernels.verify import plan_cases, run_cases, summarize

    console = Console(stderr=True) if args.json else Console()  # --json: stdout holds the JSON only
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():  # an error line on stderr, as hw verify says it
            raise Fp4labError("verify --device cuda: no CUDA GPU available (use --device interpreter)")
    formats = args.formats or list_formats()
    names = []
    for f in formats:
        fmt = get_format(f)
        names.append(fmt.name if f in list_formats() else f)
    cases = plan_cases(names, int(args.elements), seed=args.seed, ops=tuple(dict.fromkeys(args.ops)),
                       interpreter=device == "interpreter")
    t0 = time.time()
    # a progress bar on a terminal; elsewhere (a log file, CI) a line per kernel variant as it finishes, which a
    # run cut off leaves behind (on stderr with --json, whose stdout holds the JSON only)
    live = console.is_terminal
    outcomes = run_cases(cases, "cuda" if device == "cuda" else "cpu",
                         workers=args.workers if device == "cuda" else 1, progress=live and not args.json,
                         log=None if live else lambda line: console.print(line, highlight=False, soft_wrap=True))
    rows, first = summarize(outcomes)
    table = Table(title=f"fp4lab verify ({device}, {time.time() - t0:.1f} s)")
    for col in ("format", "cases", "elements", "failed_cases", "mismatches"):
        table.add_column(col, justify="left" if col == "format" else "right", no_wrap=col == "format")
    for i, r in enumerate(rows):  # quantize rows, then "name (fakequant)" rows, a rule between the two
        last_of_op = i + 1 < len(rows) and rows[i + 1]["op"] != r["op"]
        table.add_row(*(str(r[c]) for c in ("format", "cases", "elements", "failed_cases", "mismatches")),
                      style="red" if r["mismatches"] else None, end_section=last_of_op)
    total = sum(r["elements"] for r in rows)
    bad = sum(r["mismatches"] for r in rows)
    table.add_row("total", str(len(outcomes)), str(total), str(sum(r["failed_cases"] for r in rows)), str(bad))
    summary = {"device": device, "rows": rows, "elements": total, "mismatches": bad, "seconds": time.time() - t0,
               "first": None if first is None else {"case": first.case.label(), **first.detail}}
    if emit_json(args, summary, default=str):
        return 1 if first is not None else 0
    console.print(table)
    if first is not None:
        console.print(f"first mismatch: case {first.case.label()}", style="red")
        for k, v in first.detail.get("first", {}).items():
            console.print(f"  {k}: {v}", style="red")
        return 1
    console.print(f"all {total} elements match bit for bit", style="green")
    return 0
