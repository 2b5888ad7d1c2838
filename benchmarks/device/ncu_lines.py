"""Executed instructions of a profiled fake-quant kernel, per source line (no GPU needed once the profile exists).

On the GPU, profile one launch and export its SASS page:

    ncu --clock-control none --kernel-name regex:_fake_quant --launch-count 1 --import-source yes \
        --section SourceCounters --section InstructionStats -o fq python3 your_script.py
    ncu -i fq.ncu-rep --page source --csv --print-source sass > fq_sass.csv

Here, compile the same kernel for sm_90 (Triton's bundled ptxas and nvdisasm, as ``sass_count.py`` does), check
that its SASS is the profiled one opcode for opcode, and add up the profile's "Instructions Executed" per source
line of the line table (``nvdisasm -gi``). Warp instructions are reported per element (x 32 / elements):

    python benchmarks/device/ncu_lines.py fq_sass.csv nvfp4:rtne --rht-m 16 --tile 16x128x2 --shape 16384x4096

The case must match the profiled launch (format, rounding, blockings, RHT, SR width, tile, shape, bf16 input).
"""

from __future__ import annotations

import argparse
import collections
import csv
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: sass_count
import sass_count as sc  # noqa: E402  # sets up the compile-without-a-GPU environment first
import torch  # noqa: E402

import fp4lab  # noqa: E402
from fp4lab.numerics.options import Blocking  # noqa: E402


def compiled_case(fmt_name: str, rounding: str, along: str, rht_k: int, rht_m: int, sr_bits: int,
                  tile: tuple[int, int, int], shape: tuple[int, int]):
    """The sm_90 compile of the fake-quant launch that ``fake_quantize_triton`` makes for this case on a GPU."""
    cap = sc.capture_fakequant(torch.zeros(shape, dtype=torch.bfloat16), fp4lab.get_format(fmt_name), rounding,
                               Blocking(rht_k or None, 0, 1) if "k" in along else None,
                               Blocking(rht_m or None, 0, 2) if "m" in along else None, sr_bits, tile)
    return sc.compile_sm90(cap, tile[2])


def sass_with_lines(compiled) -> list[tuple[str, tuple[str, int] | None]]:
    """(instruction, (file, line) of the line table) for every SASS instruction, in address order."""
    insts, loc = [], None
    for ln in sc.disassemble(compiled, line_info=True).splitlines():
        m = re.match(r'\s*//## File "(.*?)", line (\d+)', ln)
        if m:
            loc = (m.group(1), int(m.group(2)))
        elif re.match(r"\s+/\*[0-9a-f]+\*/", ln):
            insts.append((re.sub(r"^\s+/\*[0-9a-f]+\*/\s+", "", ln).strip(), loc))
    return insts


def profiled_kernels(path: str) -> list[list[tuple[str, int]]]:
    """Per kernel of an ncu SASS-page CSV: (instruction, warp instructions executed) in address order."""
    kernels: list[list[tuple[str, int]]] = []
    col = None
    with open(path, newline="") as fh:
        for row in csv.reader(fh):
            if row and row[0] == "Kernel Name":
                kernels.append([])
            elif row and row[0] == "Address":
                col = row.index("Instructions Executed")
            elif row and kernels and col is not None:
                kernels[-1].append((row[1].strip(), int(row[col])))
    return kernels


def opcode(inst: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", inst).rstrip(" ;").split()[0].split(".")[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu -i REPORT --page source --csv --print-source sass")
    ap.add_argument("case", help="FORMAT:ROUNDING (rtne or sr)")
    ap.add_argument("--kernel", type=int, default=0, help="which profiled launch of the CSV (0 = first)")
    ap.add_argument("--along", default="km", choices=["k", "m", "km"])
    ap.add_argument("--rht-k", type=int, default=0)
    ap.add_argument("--rht-m", type=int, default=16)
    ap.add_argument("--sr-bits", type=int, default=16)
    ap.add_argument("--tile", default="32x64x4", help="BMxBKxWARPS of the profiled launch")
    ap.add_argument("--shape", default="16384x4096", help="MxK of the profiled input")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    name, _, rounding = args.case.partition(":")
    tile = tuple(map(int, args.tile.split("x")))
    shape = tuple(map(int, args.shape.split("x")))
    local = sass_with_lines(compiled_case(name, rounding or "rtne", args.along, args.rht_k, args.rht_m,
                                          args.sr_bits, tile, shape))
    prof = profiled_kernels(args.csv)[args.kernel]
    if len(local) != len(prof) or any(opcode(a) != opcode(b) for (a, _), (b, _) in zip(local, prof)):
        raise SystemExit(f"the local compile ({len(local)} instructions) is not the profiled kernel ({len(prof)}): "
                         "check the case, tile and shape")
    per_elem = 32 / (shape[0] * shape[1])
    lines: collections.Counter = collections.Counter()
    files: collections.Counter = collections.Counter()
    for (_, loc), (_, n) in zip(local, prof):
        key = (os.path.basename(loc[0]), loc[1]) if loc else ("?", 0)
        lines[key] += n
        files[key[0]] += n
    total = sum(lines.values())
    print(f"{total * per_elem:.1f} thread instructions per element; by file: "
          + ", ".join(f"{f} {n * per_elem:.1f}" for f, n in files.most_common()))
    text: dict[str, list[str]] = {}
    for (f, ln), n in lines.most_common(args.top):
        path = Path(sc.fq.__file__).parent / f
        if f not in text:
            text[f] = path.read_text().splitlines() if path.exists() else []
        src = text[f][ln - 1].strip()[:80] if 0 < ln <= len(text[f]) else ""
        print(f"{n * per_elem:7.2f}  {f}:{ln:<4d} {src}")


if __name__ == "__main__":
    main()
