"""``fp4lab formats``, ``fp4lab show``, ``fp4lab spec validate`` and ``fp4lab schema``: the format registry and
spec files. Each handler returns the process exit code."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any

from fp4lab.errors import Fp4labError

from .output import add_json_options, check_json_out, emit_json


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)  # rich's highlighter is quadratic in the length of a word


def format_summary(name: str) -> dict[str, Any]:
    """One registry row: the format's structure in plain JSON types."""
    from fp4lab.formats import get_format

    f = get_format(name)
    return {
        "name": f.name,
        "element": f.element.label,
        "element_max": f.element.amax,
        "block": "x".join(map(str, f.block.shape)) if f.block else None,
        "scale": f.scale.label if f.scale else None,
        "scale_rule": f.scale_rule.method,
        "targets": f.targets if f.scale else None,
        "tensor_scale": f.tensor_scale,
        "rounding": f.rounding,
        "bits_per_element": f.bits_per_element,
        "description": f.description,
    }


def cmd_formats(args: argparse.Namespace) -> int:
    from fp4lab.formats import list_formats

    check_json_out(args, "formats")
    rows = [format_summary(n) for n in list_formats()]
    if emit_json(args, rows):
        return 0
    from rich.text import Text

    from fp4lab.cli.tables import compact_table, fit
    from fp4lab.formats.floats import float32_text

    table = compact_table("fp4lab format registry (fp4lab show NAME: levels and bias)",
                          [("name", "text"), ("element", "key"), ("max", "num"), ("block", "key"), ("scale", "key"),
                           ("rule", "key"), ("tensor\nscale", "key"), ("bits/\nelement", "num")])
    for r in rows:
        table.add_row(*(Text(str(v)) for v in (r["name"], r["element"], float32_text(r["element_max"]),
                                              r["block"] or "-", r["scale"] or "-", r["scale_rule"],
                                              r["tensor_scale"], float32_text(r["bits_per_element"]))))
    con = _console()
    con.print(fit(table, con))
    return 0


def grid_report(name: str) -> dict[str, Any]:
    """Levels, codes, RTNE bin edges and per-level shrinkage bias of a format's element grid.

    ``level_bias[i]`` is the locally-uniform magnitude bias ``(l - r)/2`` of ``levels[i]`` (paper Eq. 2), from the
    level's own neighbours on its side of zero (``fp4lab.analysis.bias.signed_level_bias``), so the two sides of an
    asymmetric grid each get their own.
    """
    from fp4lab.analysis.bias import signed_level_bias
    from fp4lab.formats import get_format

    f = get_format(name)
    g = f.element
    return {
        **format_summary(name),
        "levels": g.levels.tolist(),
        "codes": g.level_codes_pos.tolist(),
        "values_by_code": [None if v != v else v for v in g.values.tolist()],
        "bin_edges_rtne": g.thresholds("rtne").astype(float).tolist(),
        "level_bias": signed_level_bias(g).tolist(),
        "scale_rule_spec": f.scale_rule.model_dump(exclude_none=True),
    }


def cmd_show(args: argparse.Namespace) -> int:
    check_json_out(args, "show")
    rep = grid_report(args.name)
    if emit_json(args, rep):
        return 0
    from rich.table import Table
    from rich.text import Text

    con = _console()
    width = max(con.width, 40)
    # Text objects, no markup, wrapped by textwrap: linear in the lengths of the name and description
    head = Text(textwrap.fill(rep["name"] + (f": {rep['description']}" if rep["description"] else ""), width=width,
                              break_on_hyphens=False))
    head.stylize("bold", 0, len(rep["name"]))
    con.print(head, soft_wrap=True)
    con.print(Text(textwrap.fill(f"block {rep['block'] or '-'}, scale {rep['scale'] or '-'} by rule "
                                 f"'{rep['scale_rule']}', tensor scale {rep['tensor_scale']}, rounding "
                                 f"{rep['rounding']}, {rep['bits_per_element']:.4g} bits/element", width=width)),
              soft_wrap=True)
    table = Table(header_style="bold", title=Text(f"element grid '{rep['element']}'"),
                  caption=Text("lower edge: the smallest float32 x/s that rounds to the level (an edge one float32 "
                               "above a midpoint: the tie goes to the level below)"), caption_justify="left")
    for col in ("level", "code", "RTNE bin (lower edge)", "shrinkage bias (l-r)/2"):
        table.add_column(col, justify="right")
    edges = [None] + rep["bin_edges_rtne"]
    for lv, code, edge, bias in zip(rep["levels"], rep["codes"], edges, rep["level_bias"]):
        table.add_row(f"{lv:g}", f"0x{code:X}", "-" if edge is None else f"{edge:.9g}",
                      f"{bias:+.6g}")
    con.print(table)
    rule = ", ".join(f"{k} = {v}" for k, v in rep["scale_rule_spec"].items()) if rep["block"] else \
        "none (no block scale: elements are stored as they round)"
    con.print(Text(textwrap.fill(f"scale rule: {rule}", width=width, subsequent_indent="  ",
                                 break_long_words=False, break_on_hyphens=False)), soft_wrap=True)
    return 0


MAX_LISTED = 16  # magnitudes spelled out in full; larger grids show their first and last few


def _listed(values: list[float]) -> str:
    from fp4lab.formats.floats import float32_text

    shown = [float32_text(v) for v in values]
    if len(shown) > MAX_LISTED:
        shown = shown[:6] + [f"... ({len(values) - 9} more) ..."] + shown[-3:]
    return " ".join(shown)


def grid_text(g: Any) -> str:
    """One line: the element grid's family, fields (the exponent bias a float grid got, even by default) and
    levels: magnitudes for sign-symmetric grids, every level otherwise."""
    if g.kind == "float":
        default = " (default 2^(e-1) - 1)" if g.bias is None else ""
        head = (f"float E{g.exponent_bits}M{g.mantissa_bits}, exponent bias {g.exponent_bias}{default}"
                f"{'' if g.subnormals else ', no subnormals'}"
                f"{'' if g.specials == 'none' else ', specials ' + g.specials}")
    elif g.kind == "int":
        head = f"int{g.bits} ({g.range}), step {g.step:g}"
    else:
        head = f"table of {g.n_codes} codes"
    levels = [float(v) for v in g.levels]
    mags = sorted({abs(v) for v in levels})
    symmetric = sorted({-v for v in levels}) == levels
    what = (f"{len(levels)} levels, magnitudes {_listed(mags)}" if symmetric
            else f"{len(levels)} levels {_listed(levels)}")
    return f"{head}: {what} (largest magnitude {_listed([g.amax])})"


def twin_note(g: Any) -> str | None:
    """A warning when the grid shares a built-in grid's name or bit layout but not its values, e.g. a spelled-out
    ``exponent_bits = 1, mantissa_bits = 2`` (bias 0: up to 3.5) against the built-in ``e1m2`` (bias 1: up to 1.75)."""
    import numpy as np

    from fp4lab.formats.quant_format import NAMED_GRIDS, QuantFormat

    twins = []  # built-in grids of the same name or bit layout
    for name, fields in NAMED_GRIDS.items():
        same_layout = fields["kind"] == g.kind and (
            (g.kind == "float" and (fields["exponent_bits"], fields["mantissa_bits"]) == (g.exponent_bits,
                                                                                       g.mantissa_bits))
            or (g.kind == "int" and fields["bits"] == g.bits))
        if same_layout or g.name == name:
            twins.append((name, QuantFormat(name="ref", element=name).element))
    if not twins or any(np.array_equal(ref.values, g.values, equal_nan=True) for _, ref in twins):
        return None  # one of them is this grid (E4M3 spelled out is e4m3, not a wrong e4m3fnuz)
    name, ref = twins[0]
    why = f"exponent bias {ref.exponent_bias}, " if ref.kind == "float" else ""
    return (f"note: not the built-in grid '{name}' ({why}largest magnitude {_listed([ref.amax])}); "
            f"write element = \"{name}\" for it")


def saturation_note(fmt: Any) -> str | None:
    """A note when a scaled format's grid is not sign symmetric at its ends: the block amax maps onto the larger
    extreme, so the other side saturates at its own (docs/numerics.md, "Scale rules")."""
    g = fmt.element
    lo, hi = -g.min, g.max
    if fmt.block is None or fmt.scale_rule.targets or lo == hi:
        return None
    from fp4lab.formats.floats import float32_text

    short = float32_text(g.min if lo < hi else g.max)
    return (f"note: a block's amax maps onto {float32_text(max(lo, hi))}, the larger of the grid's extremes; "
            f"values past {short} on the other side saturate (compare's clip %)")


def _validate_one(path: str, kind: str) -> list[str]:
    """The lines printed for one accepted spec file; raises ``SpecError`` (one line) if it must be refused."""
    if kind == "hwspec":
        from fp4lab.hwspec import load_hw

        spec = load_hw(path)
        return [f"ok: {path}: hwspec '{spec.name}' ({len(spec.kinds)} kinds)"]
    from fp4lab.formats import load_format
    from fp4lab.formats.floats import float32_text
    from fp4lab.numerics.ref_quantize import smoke_check

    fmt = load_format(path)
    smoke_check(fmt, path)
    lines = [f"ok: {path}: format '{fmt.name}' ({fmt.element.label}, "
             f"{float32_text(fmt.bits_per_element)} bits/element)",
             f"  element: {grid_text(fmt.element)}"]
    notes = [twin_note(fmt.element), saturation_note(fmt)]
    return lines + [f"  {note}" for note in notes if note]


def cmd_spec_validate(args: argparse.Namespace) -> int:
    from fp4lab.formats.spec_io import one_line

    failed = 0
    for path in args.files:  # every file is checked, whatever the earlier ones held
        try:
            lines = _validate_one(path, args.kind)
        except Fp4labError as exc:
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
            continue
        except Exception as exc:  # noqa: BLE001 - a bug, reported on one line; the other files still get checked
            failed += 1
            print(f"error: {path}: unexpected {type(exc).__name__}: {one_line(str(exc))}", file=sys.stderr)
            continue
        print("\n".join(lines))
    return 2 if failed else 0  # bad input, as every other command reports it


def cmd_schema(args: argparse.Namespace) -> int:
    if args.kind == "format":
        from fp4lab.formats.schema import format_schema

        schema = format_schema()
    else:
        from fp4lab.hwspec.schema import file_schema

        schema = file_schema()
    sys.stdout.write(json.dumps(schema, indent=2) + "\n")
    return 0


def register(subparsers: Any) -> None:
    """Add ``formats``, ``show``, ``spec validate`` and ``schema`` to an ``argparse`` subparsers object."""
    p = subparsers.add_parser("formats", help="list the format registry")
    add_json_options(p, "print JSON instead of a table")
    p.set_defaults(func=cmd_formats)

    p = subparsers.add_parser("show", help="levels, codes, rounding bins and shrinkage bias of one format")
    p.add_argument("name", help="registered format name or spec file path")
    add_json_options(p, "print the levels, codes, bin edges and biases as JSON instead of the table")
    p.set_defaults(func=cmd_show)

    p = subparsers.add_parser("spec", help="spec-file tools")
    spec_sub = p.add_subparsers(dest="spec_command", required=True, metavar="ACTION")
    v = spec_sub.add_parser("validate", help="validate format spec files (TOML or JSON); checks every file")
    v.add_argument("files", nargs="+", metavar="FILE", help="spec files (.toml or .json); every one is checked")
    v.add_argument("--kind", choices=("format", "hwspec"), default="format",
                   help="what the files are: format specs (default) or hwspec files")
    v.set_defaults(func=cmd_spec_validate)

    p = subparsers.add_parser("schema", help="JSON schema of spec files (for editors)")
    p.add_argument("--kind", choices=("format", "hwspec"), default="format",
                   help="the schema of format spec files (default) or of hwspec files")
    p.set_defaults(func=cmd_schema)
