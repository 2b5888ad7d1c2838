"""``fp4lab compare``, ``fp4lab search-grids``, ``fp4lab conformance`` and ``fp4lab sr-bias``: registered on the
main parser by ``register(subparsers)``; each handler returns the process exit code. ``--json`` prints only JSON
on stdout, ``--json-out`` also writes it to a file (``output``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fp4lab.errors import InputError

from .output import add_json_options, check_json_out, emit_json


def _csv_ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text[:40]}'")
    return values


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(v) for v in text.lower().replace("x", ",").split(",") if v.strip())
    except ValueError:
        shape = ()
    if not shape or any(s < 1 for s in shape):
        raise argparse.ArgumentTypeError(f"expected a shape like 256x1024, got '{text}'")
    return shape


def input_seed(text: str) -> int:
    """An input generator's seed (numpy ``default_rng``): an integer in [0, 2**64)."""
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2**64:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**64), got '{text[:40]}'")
    return seed


def philox_seed(text: str) -> int:
    """A Philox seed (RHT signs, stochastic rounding): an integer in [-2**63, 2**64), as ``quantize`` takes."""
    try:
        seed = int(text)
    except ValueError:
        seed = 2**64
    if not -2**63 <= seed < 2**64:
        raise argparse.ArgumentTypeError(f"expected an integer in [-2**63, 2**64), got '{text[:40]}'")
    return seed


def _fmt(v: Any, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def _progress(total: int, enabled: bool, description: str):  # type: ignore[no-untyped-def]
    """(context manager, advance callback) for a rich progress bar on stderr, or no-ops."""
    import contextlib

    if not enabled:
        return contextlib.nullcontext(), (lambda label: None)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    prog = Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[label]}", markup=False), console=Console(stderr=True),
                    transient=True)
    task = prog.add_task(description, total=total, label="")
    return prog, (lambda label: prog.update(task, advance=1, label=label))


def compare_main(args: argparse.Namespace) -> int:
    """Handler of ``fp4lab compare``."""
    from fp4lab.analysis.compare import CompareConfig, n_cases, run_compare

    cfg = CompareConfig()
    if args.formats:
        cfg.formats = list(args.formats)
    if args.dist:
        cfg.inputs = list(args.dist)
    if args.rht is not None:
        cfg.rht = args.rht
    if args.shape is not None:
        cfg.shape = args.shape
    cfg.seed, cfg.rht_seed, cfg.rounding, cfg.backend = args.seed, args.rht_seed, args.rounding, args.backend
    if args.plot is not None:  # checked before the run, not after it
        from fp4lab.analysis.outputs import check_output_file
        from fp4lab.errors import require

        require("matplotlib", "plot", "compare --plot")
        check_output_file(args.plot, ".png", args.overwrite, "compare --plot")
    check_json_out(args, "compare")
    ctx, advance = _progress(n_cases(cfg), not args.json and sys.stderr.isatty(), "compare")
    with ctx:
        result = run_compare(cfg, progress=advance)
    if args.plot:
        from fp4lab.analysis.plot import plot_grids

        plot_grids(result["config"]["formats"], args.plot, result)  # each format once, as run
    if emit_json(args, result, indent=1):
        return 0
    _print_compare(result, args.plot)
    return 0


def display_names(result: dict[str, Any]) -> dict[str, str]:
    """``{format as given: label}``: the format's own name (a spec file's ``name``), or what was given where two
    given formats share a name."""
    names = {f: result["formats"][f]["name"] for f in result["config"]["formats"]}
    count: dict[str, int] = {}
    for n in names.values():
        count[n] = count.get(n, 0) + 1
    return {f: n if count[n] == 1 else f for f, n in names.items()}


def _case(label: str, rht: int, bits: float) -> str:
    from fp4lab.formats.floats import float32_text

    return f"{label} ({float32_text(bits)} bits/element, {'RHT ' + str(rht) if rht else 'no RHT'})"


def verdict_line(label: str, verdict: dict[str, Any], names: dict[str, str], bits: dict[str, float]) -> str:
    """One line per input: the best SQNR and the smallest |bias| (block-amax unit), with their cases."""
    return f"verdict for {label}: " + _verdict_parts(verdict, names, bits)


def equal_bits_lines(verdict: dict[str, Any], names: dict[str, str], bits: dict[str, float]) -> list[str]:
    """One line per storage cost when the formats differ in bits per element: the verdict among equals."""
    groups = verdict.get("by_bits", {})
    if len(groups) < 2:
        return []
    return [f"  among {b}-bit formats: " + _verdict_parts(v, names, bits) for b, v in groups.items()]


def _verdict_parts(verdict: dict[str, Any], names: dict[str, str], bits: dict[str, float]) -> str:
    parts = []
    best, small = verdict["best_sqnr"], verdict["smallest_abs_bias"]
    if best is not None:
        cases = " = ".join(_case(names[c["format"]], c["rht"], bits[c["format"]]) for c in best["cases"])
        parts.append(f"best SQNR {cases}: {best['sqnr_db']:.2f} dB")
    if small is not None:
        cases = " = ".join(_case(names[c["format"]], c["rht"], bits[c["format"]]) for c in small["cases"])
        parts.append(f"smallest |bias| {cases}: {100 * small['bias_amax']:+.4f}% of the block amax")
    return "; ".join(parts) if parts else "no finite result"


def _print_hanging(con: Any, line: str, indent: str) -> None:
    """``line`` wrapped at spaces to the console width, each "; "-separated part on a new line, continuation lines
    indented by ``indent`` (format names and paths are never split, even at hyphens, nor a number from its unit)."""
    import re
    import textwrap

    from rich.text import Text

    width = max(con.width, 40)
    parts = re.sub(r"(\d) (dB|bits/element)", "\\1\u00a0\\2", line).split("; ")  # a number keeps its unit
    out = []
    for i, part in enumerate(parts):
        out.append(textwrap.fill(part + (";" if i < len(parts) - 1 else ""), width=width,
                                 initial_indent=indent if i else "", subsequent_indent=indent,
                                 break_long_words=False, break_on_hyphens=False))
    con.print(Text("\n".join(out).replace("\u00a0", " ")), soft_wrap=True)


def _print_compare(result: dict[str, Any], plot: str | None) -> None:
    import textwrap

    from rich.text import Text

    from fp4lab.cli.tables import compact_table, console, fit
    from fp4lab.formats.floats import float32_text

    con = console()
    names = display_names(result)
    bits = {f: result["formats"][f]["bits_per_element"] for f in result["config"]["formats"]}
    rht0 = result["config"]["rht"][0]
    for label in result["config"]["inputs"]:
        shape = "x".join(map(str, result["config"]["input_shapes"][label]))
        table = compact_table(Text(f"input: {label} ({shape})"),
                              [("format", "text"), ("bits/\nelem", "num"), ("RHT", "num"), ("SQNR\ndB", "num"),
                               ("ΔSQNR\ndB", "num"), ("bias\ngrid", "num"), ("bias %\namax", "num"), ("α", "num"),
                               ("B_eff", "num"), ("clip\n%", "num"), ("0blk\n%", "num")], padding=0)
        for name in result["config"]["formats"]:
            for rec in (x for x in result["results"] if x["input"] == label and x["format"] == name):
                d = rec["delta_sqnr_db"]
                first = rec["rht"] == rht0
                table.add_row(Text(names[name]) if first else "", float32_text(bits[name]) if first else "",
                              str(rec["rht"] or "-"), _fmt(rec["sqnr_db"], ".2f"),
                              Text("" if d is None else f"{d:+.2f}", style="" if d is None else
                                   ("green" if d > 0 else "red")),
                              _fmt(rec["bias"], "+.4f"), _fmt(None if rec["bias_amax"] is None else
                                                               100 * rec["bias_amax"], "+.4f"),
                              _fmt(rec["alpha"], ".4f"), _fmt(rec["b_eff"], ".3f"),
                              f"{100 * (rec['clip_rate'] or 0):.2f}", f"{100 * (rec['zero_block_rate'] or 0):.2f}")
        con.print(fit(table, con))
        _print_hanging(con, verdict_line(label, result["verdicts"][label], names, bits), "    ")
        for line in equal_bits_lines(result["verdicts"][label], names, bits):
            _print_hanging(con, line, "      ")
        con.print()
    con.print(Text(textwrap.fill(
        "bias grid: mean signed error of |x|/s in grid units (negative = shrinkage); bias % amax: mean "
        "(|Q(x)| - |x|) / block amax in percent, comparable across formats; α = <Q(x),x>/||x||²; "
        "B_eff = exp(bucket entropy)/K; ΔSQNR vs no RHT; clip: saturated elements; 0blk: non-zero "
        f"blocks flushed to zero. {len(result['results'])} cases in {result['elapsed_s']:.1f} s.",
        width=max(con.width, 40), break_on_hyphens=False)), soft_wrap=True)
    if plot:
        con.print(Text(f"grid plot written to {plot}"), soft_wrap=True)  # a path, whole


def search_main(args: argparse.Namespace) -> int:
    """Handler of ``fp4lab search-grids``."""
    from fp4lab.analysis.search import SCHEMES, post_rht_data, run_search

    schemes = tuple(args.scheme.split(",")) if args.scheme else SCHEMES
    for sch in schemes:
        if sch not in SCHEMES:
            raise InputError(f"search-grids: unknown scheme '{sch[:40]}'; use {', '.join(SCHEMES)}")
    check_json_out(args, "search-grids")
    x = post_rht_data(tuple(args.dist) if args.dist else post_rht_data.__defaults__[0], shape=args.shape,
                      rht=args.rht, seed=args.seed)
    steps = sum(4 if sch == "e8m0" else 1 for sch in schemes)
    ctx, advance = _progress(steps, not args.json and sys.stderr.isatty(), "search-grids")
    with ctx:
        result = run_search(x, lattice=args.lattice, schemes=schemes, progress=advance)
    if emit_json(args, result, indent=1):
        return 0
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for sch, res in result["schemes"].items():
        refs: dict[str, Any] = {}
        for r in res["named"]:  # best SQNR first: keep each reference grid's best top level
            if r["name"] in ("e2m1", "e1m2/int4", "lloyd-max"):
                refs.setdefault(r["name"], r)
        table = Table(title=f"scale {sch}: Pareto front of SQNR vs |bias| ({res['n_grids']} grids, "
                      f"{result['n_samples']} post-RHT samples)", title_justify="left", box=box.SIMPLE_HEAD,
                      show_edge=False, pad_edge=False, collapse_padding=True)
        for col in ("grid", "interior magnitudes", "top", "SQNR", "bias", "α"):
            table.add_column(col, justify="left" if col in ("grid", "interior magnitudes") else "right",
                             no_wrap=True)
        rows = res["front"] + [dict(r, name=f"[dim]{r['name']} (ref)[/]") for r in refs.values()]
        for r in rows:
            table.add_row(r["name"], " ".join(f"{m:.2f}"[1:] for m in r["magnitudes"][1:-1]),
                          _fmt(r["top"], "g"), f"{r['sqnr_db']:.2f}", f"{r['bias']:+.5f}", f"{r['alpha']:.4f}")
        console.print(table)
        gaps = [abs(r["verified_sqnr_db"] - r["sqnr_db"]) for r in res["front"] if "verified_sqnr_db" in r]
        if gaps:
            console.print(f"front re-measured with fp4lab.quantize: SQNR within {max(gaps):.2g} dB")
    console.print("Grids: m_0 = 0 < ... < m_7 = 1; bias: mean signed error of |x|/s in units of the top level; "
                  "SQNR (dB) on post-RHT data; top: the top level's mantissa under E8M0. "
                  "Findings: docs/grid_search.md.")
    return 0


def conformance_main(args: argparse.Namespace) -> int:
    """Handler of ``fp4lab conformance``."""
    from fp4lab.analysis.conformance import (
        LIVE_CHECKS,
        _check_out_dir,
        _resolve_formats,
        write_vectors,
    )
    from fp4lab.formats.registry import BUILTIN_NAMES

    formats = tuple(args.formats) if args.formats else BUILTIN_NAMES
    out = _check_out_dir(args.out, args.overwrite)  # refuse before any work
    names = set(_resolve_formats(formats))
    check_json_out(args, "conformance")
    checks = sum(name in names for name, *_ in LIVE_CHECKS)
    ctx, advance = _progress(len(formats) + checks, not args.json and sys.stderr.isatty(), "conformance")
    with ctx:
        index = write_vectors(out, formats, progress=advance, overwrite=args.overwrite)
    rows = json.loads((out / "library_agreement.json").read_text())
    summary = {"out": str(out.resolve()), "formats": list(index["formats"]),
               "files": sorted(v["file"] for v in index["formats"].values()), "agreement": rows}
    if emit_json(args, summary, indent=1):
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    table = Table(title="library agreement (bit for bit, codes and scale codes)", title_justify="left")
    for col in ("format", "rounding", "library", "status", "cases matching"):
        table.add_column(col)
    for r in rows:
        n = sum(v == "match" for v in r["cases"].values())
        table.add_row(escape(r["format"]), r["rounding"], escape(r["library"]), r["status"],
                      f"{n}/{len(r['cases'])}" if r["cases"] else "—")
    if rows:
        console.print(table)
    else:
        console.print(Text("library agreement: no library implements these formats (rows exist for built-ins only)"))
    console.print(Text(f"golden vectors for {len(index['formats'])} formats x {len(index['roundings'])} roundings "
                       f"x {len(index['cases'])} cases written to {out} (index.json, library_agreement.md)"),
                  soft_wrap=True)
    return 0


def sr_bias_main(args: argparse.Namespace) -> int:
    """Handler of ``fp4lab sr-bias``."""
    from fp4lab.analysis.sr_bias import DEFAULT_DISTS, DEFAULT_FORMATS, run_sr_bias

    if args.seeds < 1:
        raise InputError(f"sr-bias: --seeds must be at least 1, got {args.seeds}")
    formats = list(args.formats) or list(DEFAULT_FORMATS)
    dists = list(args.dist) if args.dist else list(DEFAULT_DISTS)
    if len(args.shape) != 2:
        raise InputError(f"sr-bias: --shape takes ROWSxCOLS, got {'x'.join(map(str, args.shape))}")
    rows, cols = args.shape
    check_json_out(args, "sr-bias")
    ctx, advance = _progress(len(formats) * len(dists), not args.json and sys.stderr.isatty(), "sr-bias")
    with ctx:
        result = run_sr_bias(formats, args.widths, dists, rows, cols, args.seeds, rht=args.rht or None,
                             rht_seed=args.rht_seed, data_seed=args.data_seed, progress=advance)
    if emit_json(args, result, indent=1):
        return 0
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(highlight=False)
    cfg = result["config"]
    rht = f", RHT-{cfg['rht']}" if cfg["rht"] else ""
    for label in cfg["dists"]:
        table = Table(title=f"input: {escape(label)} ({cfg['shape'][0]}x{cfg['shape'][1]}), "
                            f"{len(cfg['seeds'])} SR seeds"
                      f"{rht}; unit: block amax", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                      pad_edge=False, padding=(0, 1, 0, 0))
        table.add_column("format", no_wrap=True)
        for col in ("bits", "signed", "±SE", "expect", "p-unif", "|x|err", "α"):
            table.add_column(col, justify="right", no_wrap=True)
        last = None
        for r in (x for x in result["results"] if x["dist"] == label):
            table.add_row("" if r["format"] == last else escape(r["format"]),
                          "rtne" if r["width"] is None else str(r["width"]), f"{r['signed']:+.2e}",
                          "—" if r["width"] is None else f"{r['signed_se']:.1e}", _fmt(r["expected"], "+.2e"),
                          _fmt(r["expected_uniform"], "+.2e"), f"{r['magnitude']:+.2e}", f"{r['alpha']:.4f}")
            last = r["format"]
        console.print(table)
    console.print("bits: SR random-bit width (rtne: the grid's own rounding); signed: mean (Q(x) - x) / block amax "
                  "over elements and SR seeds, ±SE across seeds; expect: -E(p - floor(p 2^w)/2^w) gaps given the "
                  "data; p-unif: -2^-(w+1) gaps; |x|err: mean (|Q(x)| - |x|) / block amax (shrinkage); "
                  f"α = <Q(x),x>/||x||². {len(result['results'])} rows in {result['elapsed_s']:.1f} s. "
                  "Reading: docs/sr_bias.md.", markup=False, highlight=False)
    return 0


def register(subparsers: Any) -> None:
    """Add the analysis subcommands to an ``argparse`` subparsers object."""
    from fp4lab.analysis.compare import (
        BACKENDS,
        DEFAULT_FORMATS,
        DEFAULT_RHT,
        DEFAULT_SHAPE,
        REFERENCE_MAX_ELEMENTS,
    )
    from fp4lab.analysis.distributions import DEFAULT_DISTRIBUTIONS
    from fp4lab.formats.grids import ROUNDING_MODES

    p = subparsers.add_parser(
        "compare", help="compare formats on distributions or tensor files: SQNR, bias, alpha, B_eff, RHT effects",
        description="Quantize each input with each format (with and without RHT) and report SQNR, shrinkage bias, "
        "attenuation alpha, effective bucket ratio, clip rate and zero-block rate. JSON keys: docs/compare.md.")
    p.add_argument("formats", nargs="*", metavar="FORMAT",
                   help=f"format names or spec files (default: {' '.join(DEFAULT_FORMATS)})")
    p.add_argument("--dist", nargs="+", metavar="INPUT",
                   help="distribution specs name[:k=v,...] (gaussian, laplace, student-t:nu=3, lognormal:sigma=1, "
                   "outliers:k=20,every=97, swiglu) or tensor files .npy/.npz/.pt/.safetensors[::key] "
                   f"(default: {' '.join(DEFAULT_DISTRIBUTIONS)})")
    p.add_argument("--rht", type=_csv_ints, default=None, metavar="SIZES",
                   help=f"comma-separated RHT sizes, 0 = none (default: {','.join(map(str, DEFAULT_RHT))})")
    p.add_argument("--shape", type=_shape, default=None,
                   help=f"shape of synthetic inputs (default: {'x'.join(map(str, DEFAULT_SHAPE))})")
    p.add_argument("--seed", type=input_seed, default=0, help="input generator seed (default 0)")
    p.add_argument("--rht-seed", type=philox_seed, default=0, help="RHT sign seed (default 0)")
    p.add_argument("--rounding", default=None, choices=ROUNDING_MODES, metavar="MODE",
                   help=f"override every format's rounding ({', '.join(ROUNDING_MODES)})")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="numpy reference or numba emulator (same bits; default auto: the reference up to "
                        f"{REFERENCE_MAX_ELEMENTS:,} quantized elements per run, which compiles nothing)")
    add_json_options(p)
    p.add_argument("--plot", metavar="FILE.png", help="write a PNG of each grid's levels, bins and bias to exactly "
                   "this path (must end in .png; an existing file needs --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")
    p.set_defaults(func=compare_main)

    p = subparsers.add_parser(
        "search-grids", help="search symmetric 16-code grids: Pareto front of SQNR vs |shrinkage bias| after RHT",
        description="Evaluate every grid on a fine lattice plus parameterized families (power, normal-quantile, "
        "two-slope, Lloyd-Max) on post-RHT data under FP32, E4M3 and E8M0 block scales; print each scheme's "
        "Pareto front. Method: fp4lab.analysis.search; findings: docs/grid_search.md.")
    p.add_argument("--lattice", type=int, default=32, help="interior magnitudes on k/L, L a power of two (default 32)")
    p.add_argument("--scheme", default=None, help="comma-separated subset of fp32,e4m3,e8m0 (default: all)")
    p.add_argument("--dist", nargs="+", metavar="SPEC", help="input distributions (default: the compare defaults)")
    p.add_argument("--shape", type=_shape, default=(64, 1024), help="per-distribution shape (default 64x1024)")
    p.add_argument("--rht", type=int, default=16, help="RHT size applied to the data (default 16)")
    p.add_argument("--seed", type=input_seed, default=0, help="input generator seed (default 0)")
    add_json_options(p)
    p.set_defaults(func=search_main)

    p = subparsers.add_parser(
        "conformance", help="write golden vectors for every built-in format and a library-agreement table",
        description="Write <format>.npz golden vectors (inputs, codes, scale codes, tensor scale, dequantized "
        "values; every rounding mode and edge case), index.json, and library_agreement.{json,md} comparing the "
        "given built-ins bit for bit with ml_dtypes and torchao where installed. Layout: "
        "fp4lab.analysis.conformance.")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing; files are "
                   "named after the formats and go only there; a folder that is not empty needs --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the conformance files of an earlier run in DIR (others are kept)")
    p.add_argument("formats", nargs="*", metavar="FORMAT",
                   help="built-in formats or spec files (default: every built-in)")
    add_json_options(p, "print a JSON summary only")
    p.set_defaults(func=conformance_main)

    p = subparsers.add_parser(
        "sr-bias", help="bias left by each stochastic-rounding random-bit width (sr_bits), with RTNE for reference",
        description="Quantize synthetic inputs with stochastic rounding at each random-bit width over several SR "
        "seeds and report the mean signed error relative to the block amax (with its standard error), the "
        "expected width deficit, the magnitude (shrinkage) error and alpha; RTNE rows for reference. Method: "
        "fp4lab.analysis.sr_bias; findings: docs/sr_bias.md.")
    p.add_argument("formats", nargs="*", metavar="FORMAT",
                   help="format names or spec files (default: ufp4 e2m1-b16-fp32 nvfp4 mxfp4)")
    p.add_argument("--widths", nargs="+", type=int, choices=(24, 16, 8, 4), default=[24, 16, 8, 4], metavar="W",
                   help="SR random-bit widths among 24 16 8 4 (default: all four)")
    p.add_argument("--seeds", type=int, default=8, metavar="N", help="SR seeds 0..N-1 per width (default 8)")
    p.add_argument("--dist", nargs="+", metavar="SPEC",
                   help="distribution specs name[:k=v,...] (default: gaussian laplace student-t:nu=3)")
    p.add_argument("--shape", type=_shape, default=(256, 2048), help="input shape ROWSxCOLS (default 256x2048)")
    p.add_argument("--rht", type=int, default=None, help="RHT size applied before quantizing (default: none)")
    p.add_argument("--rht-seed", type=philox_seed, default=0, help="RHT sign seed (default 0)")
    p.add_argument("--data-seed", type=input_seed, default=0, help="input generator seed (default 0)")
    add_json_options(p)
    p.set_defaults(func=sr_bias_main)
