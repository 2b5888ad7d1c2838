"""``fp4lab hw list``, ``fp4lab hw show NAME [--format FMT]`` and ``fp4lab hw verify`` (the MMA-model checks: the
published vectors, the tl.dot probe on a GPU, and with ``--device`` the Triton MMA kernels against the CPU model).
Handlers return the exit code; errors propagate to ``fp4lab.cli.main``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from fp4lab.errors import Fp4labError

from .output import add_json_options, check_json_out, emit_json

if TYPE_CHECKING:
    from fp4lab.hwspec.schema import HWSpec, MMAKind

_SCALE_ALIASES = {"e8m0": "ue8m0"}  # the format registry's E8M0 is the hardware's UE8M0 (no sign, no zero)


def _num(n: Any) -> str:
    if n is None:
        return "-"
    v = n.value
    mark = {"measured": "", "published": "", "assumed": "~", "unknown": "?"}[n.provenance]
    return f"{mark}{int(v) if float(v).is_integer() else v:g}" if isinstance(v, float) else f"{mark}{v}"


def kind_row(k: MMAKind) -> dict[str, Any]:
    """One kind as plain data: the model parameters a user compares across hardware."""
    acc = k.accumulation
    return {
        "kind": k.name, "instruction": k.instruction, "a": k.a_formats, "b": k.b_formats, "acc": k.c_format,
        "k": int(k.k), "algorithm": acc.algorithm, "fused_len": int(acc.fused_len), "frac_bits": int(acc.frac_bits),
        "e_zero": None if acc.e_zero is None else int(acc.e_zero),
        "output": f"{k.output.rounding}-{k.output.format}({int(k.output.mantissa_bits)} bits)",
        "scales": [f"{s.format}/{int(s.block)}" for s in k.scales],
        "peak_tflops": None if k.peak_tflops is None else k.peak_tflops.value,
        "provenance": k.provenance, "source": k.source,
        "weak_fields": sorted(n for n, v in k.nums().items() if v.provenance in ("assumed", "unknown")),
    }


def format_cost(spec: HWSpec, fmt_name: str) -> dict[str, Any]:
    """Which kind would run a registry format on this hardware, natively or after dequantization, and its peak."""
    from fp4lab.formats import get_format
    from fp4lab.hwspec.native import route

    f = get_format(fmt_name)
    el = f.element.label
    sc = _SCALE_ALIASES.get(f.scale.label, f.scale.label) if f.scale else None
    block = "x".join(map(str, f.block.shape)) if f.block else None
    r = route(spec, f)  # decided from the grid's values, the scale's values and the block
    return {"format": f.name, "layout": f"{el}, {sc or 'no scale'}, block {block or '-'}",
            "native": r.how == "native", "route": r.how, "kind": r.kind, "element": r.element,
            "scale_mode": r.scale_mode, "peak_tflops": None if r.kind is None else _peak(spec.kinds[r.kind]),
            "note": r.note}


def _peak(k: MMAKind) -> dict[str, Any] | None:
    p = k.peak_tflops
    return None if p is None else {"value": p.value, "provenance": p.provenance, "source": p.source}


def cmd_hw_list(args: argparse.Namespace) -> int:
    from fp4lab.hwspec.registry import get_hw, list_hw

    check_json_out(args, "hw list")
    rows = []
    for n in list_hw():
        s = get_hw(n)
        rows.append({"name": s.name, "vendor": s.vendor, "arch": s.arch, "kinds": len(s.kinds),
                     "provenance": s.provenance, "fields_by_provenance": s.provenance_counts(),
                     "description": s.description})
    if emit_json(args, rows):
        return 0
    from rich.text import Text

    from fp4lab.cli.tables import compact_table, console, fit

    t = compact_table("hardware specs (fp4lab hw show NAME)", [("name", "text"), ("vendor", "key"), ("arch", "key"),
                                                              ("kinds", "num"), ("numeric fields by provenance",
                                                                                 "text")])
    for r in rows:
        prov = ", ".join(f"{k} {v}" for k, v in sorted(r["fields_by_provenance"].items()))
        t.add_row(*(Text(str(v)) for v in (r["name"], r["vendor"], r["arch"], r["kinds"], prov)))
    con = console()
    con.print(fit(t, con))
    con.print()
    for r in rows:  # prose below the table, wrapped at words
        con.print(Text.assemble((r["name"], "bold"), ": ", r["description"]))
    return 0


def cmd_hw_show(args: argparse.Namespace) -> int:
    from fp4lab.hwspec.registry import get_hw, spec_to_dict

    check_json_out(args, "hw show")
    spec = get_hw(args.name)
    cost = format_cost(spec, args.format) if args.format is not None else None
    out = {"spec": spec_to_dict(spec), "kinds": [kind_row(k) for k in spec.kinds.values()]}
    if cost:
        out["format_cost"] = cost
    if emit_json(args, out):
        return 0
    from rich.text import Text

    from fp4lab.cli.tables import compact_table, console, fit

    con = console()
    inherits = f", inherits {spec.inherits}" if spec.inherits else ""
    con.print(Text.assemble((spec.name, "bold"), f" ({spec.vendor} {spec.arch}, provenance {spec.provenance}"
                            f"{inherits}): {spec.description}"))
    con.print(Text(f"source: {spec.source}"))
    # one table of operands and one of the accumulation model: together they would need about 130 columns
    t = compact_table("MMA kinds: operands and block scales (~ assumed, ? unknown)",
                      [("kind", "key"), ("A x B -> accumulator", "text"), ("block scales\n(format/block)", "text"),
                       ("provenance", "key")])
    for k in spec.kinds.values():
        a, b = "/".join(k.a_formats), "/".join(k.b_formats)
        t.add_row(*(Text(v) for v in (
            k.name, f"{a} (A and B) -> {k.c_format}" if a == b and "/" in a else f"{a} x {b} -> {k.c_format}",
            ", ".join(f"{s.format}/{_num(s.block)}" for s in k.scales) or "-", k.provenance)))
    con.print(fit(t, con))
    t = compact_table("MMA kinds: accumulation model (K: instruction depth, L: fused length, F: fraction bits)",
                      [("kind", "key"), ("K", "num"), ("model", "key"), ("L", "num"), ("F", "num"),
                       ("e_zero", "num"), ("output", "key"), ("peak\nTFLOPS", "num")])
    for k in spec.kinds.values():
        acc = k.accumulation
        t.add_row(*(Text(v) for v in (
            k.name, _num(k.k), acc.algorithm, _num(acc.fused_len), _num(acc.frac_bits), _num(acc.e_zero),
            f"{k.output.rounding} {k.output.format}/{_num(k.output.mantissa_bits)}", _num(k.peak_tflops))))
    con.print(fit(t, con))
    if spec.native:
        t = compact_table("native element / scale / block combinations",
                          [("element", "key"), ("scale", "key"), ("block", "num"), ("kind", "key"),
                           ("peak\nTFLOPS", "num"), ("note", "text")])
        for c in spec.native:
            t.add_row(*(Text(v) for v in (c.element, c.scale or "-", str(c.block or "-"), c.kind,
                                          _num(spec.kinds[c.kind].peak_tflops), c.note)))
        con.print(fit(t, con))
    weak = {k.name: kind_row(k)["weak_fields"] for k in spec.kinds.values() if kind_row(k)["weak_fields"]}
    if weak:
        n_unknown = sum(v.provenance == "unknown" for k in spec.kinds.values() for v in k.nums().values())
        con.print(Text.assemble(("warning:", "yellow"), f" {sum(map(len, weak.values()))} numeric fields are assumed "
                                f"or unknown ({n_unknown} unknown): results on this spec are what-if estimates, not "
                                "hardware behaviour."))
    if cost:
        p = cost["peak_tflops"]
        rate = f"{p['value']:g} TFLOPS ({p['provenance']})" if p else "no published rate"
        how = {"native": "native", "exact": f"exact as {cost['element']}"}.get(cost["route"], "not native")
        kind = f"kind {cost['kind']}" if cost["kind"] else "no kind runs it"
        con.print(Text(f"format {cost['format']} ({cost['layout']}): {how}, {kind}, {rate}. {cost['note']}"))
    return 0


def _kernel_runner(device: str) -> Any:
    """The implementation under test of ``hw verify --device``: ``fp4lab.emulate_gemm`` on torch operands on
    ``device`` through the Triton kernels; returns the result's float32 bits as numpy."""
    import torch

    from fp4lab.api import emulate_gemm
    from fp4lab.hwspec.validation.mma_verify import operands

    dev = "cuda" if device == "cuda" else "cpu"

    def run(case: Any, inp: dict) -> Any:
        qa, qb = operands(case, inp, wrap=lambda x: torch.from_numpy(x).to(dev))
        d = emulate_gemm(qa, qb, hw=case.hw, kind=case.kind, c=torch.from_numpy(inp["c"]).to(dev),
                         scale_format=case.scale, impl="triton")
        return d.cpu().numpy()

    return run


def verify_kernels(device: str, hws: list[str] | None, outputs: float, seed: int) -> list[dict[str, Any]]:
    """Per (spec, kind): cases, outputs, mismatches and the first mismatch of the Triton MMA kernels against the
    CPU model on fp4lab.hwspec.validation.mma_verify's inputs (every format pair, scale option and input style)."""
    from fp4lab.hwspec.validation.mma_verify import check_case, kernel_combos, plan_cases

    combos = kernel_combos(hws)
    cases = plan_cases(combos, int(outputs) // max(1, 4 * len(combos)), seed=seed)
    run = _kernel_runner(device)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for case in cases:
        r = check_case(case, run)
        row = rows.setdefault((case.hw, case.kind), {"hw": case.hw, "kind": case.kind, "cases": 0, "outputs": 0,
                                                     "finite": 0, "mismatches": 0})
        row["cases"] += 1
        for f in ("outputs", "finite", "mismatches"):
            row[f] += r[f]
        if r["mismatches"] and "first" not in row:
            row["first"] = {"case": r["case"], **r["first"]}
    return list(rows.values())


def cmd_hw_verify(args: argparse.Namespace) -> int:
    """Published H200 vectors through the hopper-sm90 model (CPU); with a CUDA GPU (``--gpu`` auto/on) also the
    tl.dot probe; with ``--device`` the Triton MMA kernels against the CPU model. Exit code 1 on any mismatch."""
    import os
    import sys

    from fp4lab.hwspec.validation.vectors import check_published_vectors

    check_json_out(args, "hw verify")
    if args.device == "interpreter":
        if "fp4lab.kernels.tile" in sys.modules and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
            raise Fp4labError("hw verify --device interpreter needs TRITON_INTERPRET=1 before the kernels are "
                              "imported; set it in the environment")
        os.environ["TRITON_INTERPRET"] = "1"
    res = check_published_vectors()
    ok = all(r["bit_exact"] == r["rows"] for r in res)
    report: dict[str, Any] = {"published_vectors": res}
    if args.device is not None:
        if args.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise Fp4labError("hw verify --device cuda: no CUDA GPU available (use --device interpreter)")
        outputs = args.outputs if args.outputs is not None else (2e4 if args.device == "interpreter" else 2e6)
        kern = verify_kernels(args.device, args.hw or None, outputs, args.seed)
        report["mma_kernels"] = {"device": args.device, "kinds": kern}
        ok &= all(r["mismatches"] == 0 for r in kern)
    if args.gpu != "off":
        import importlib.util

        cuda = False
        if importlib.util.find_spec("torch") is not None:
            import torch

            cuda = torch.cuda.is_available()
        if cuda:
            from fp4lab.hwspec.validation.gpu_probe import run_probe

            probe = run_probe(n=args.n, k=args.k)
            report["gpu_probe"] = probe
            ok &= all(r.get("mismatches", 1) == 0 for r in probe["results"])
        elif args.gpu == "on":
            raise Fp4labError("hw verify --gpu on: no CUDA GPU available")
    if not emit_json(args, report):
        for r in res:
            print(f"{r['vectors']:<28} {r['kind']:<22} {r['bit_exact']}/{r['rows']} bit-exact")
        for r in report.get("gpu_probe", {}).get("results", []):
            if "error" in r:
                print(f"gpu {r['label']:<16} error: {r['error']}")
            else:
                print(f"gpu {r['label']:<16} {r['kind']:<18} {r['matches']}/{r['outputs']} bit-exact "
                      f"({r['finite_outputs']} finite)")
        for r in report.get("mma_kernels", {}).get("kinds", []):
            print(f"kernels {r['hw']:<16} {r['kind']:<20} {r['outputs'] - r['mismatches']}/{r['outputs']} bit-exact "
                  f"({r['cases']} cases, {r['finite']} finite)" + (f"; first: {r['first']}" if "first" in r else ""))
        print("ok" if ok else "MISMATCH")
    return 0 if ok else 1


def register(subparsers: Any) -> None:
    """Add ``hw list|show|verify`` to the fp4lab command."""
    p = subparsers.add_parser("hw", help="accelerator specs: MMA models, native formats, peak rates")
    sub = p.add_subparsers(dest="hw_command", required=True, metavar="ACTION")
    q = sub.add_parser("list", help="list hardware specs")
    add_json_options(q, "print JSON instead of a table")
    q.set_defaults(func=cmd_hw_list)
    q = sub.add_parser("show", help="kinds, model parameters with provenance, native combinations, peak rates")
    q.add_argument("name", help="spec name or path to a .toml spec")
    q.add_argument("--format", default=None, help="registry format: which kind runs it here and at what peak")
    add_json_options(q, "print the spec (and --format's route) as JSON instead of tables")
    q.set_defaults(func=cmd_hw_show)
    q = sub.add_parser("verify", help="check the MMA models: published H200 vectors, tl.dot on a CUDA GPU, and "
                       "(--device) the Triton MMA kernels against the CPU model")
    q.add_argument("--gpu", choices=("auto", "on", "off"), default="auto", help="also run the tl.dot probe on CUDA")
    q.add_argument("--n", type=int, default=512, help="GPU probe: M = N (multiple of 64)")
    q.add_argument("--k", type=int, default=128, help="GPU probe: K")
    q.add_argument("--device", choices=("cuda", "interpreter"), default=None,
                   help="also check the Triton MMA kernels of every block-scaled kind against the CPU model: cuda, "
                        "or interpreter (TRITON_INTERPRET=1 on the CPU)")
    q.add_argument("--hw", nargs="+", default=None, help="--device: spec names or .toml paths (default: all)")
    q.add_argument("--outputs", type=float, default=None,
                   help="--device: outputs compared in all (default 2e4 interpreter, 2e6 cuda)")
    q.add_argument("--seed", type=int, default=0, help="--device: input seed")
    add_json_options(q, "print the report as JSON only")
    q.set_defaults(func=cmd_hw_verify)
