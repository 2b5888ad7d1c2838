"""``fp4lab recipes [show NAME_OR_PATH]``: registered on the main parser by ``register(subparsers)``.

Imports nothing heavy at module level; the handlers import the recipe registry when they run.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from fp4lab.cli.tables import visible

from .output import add_json_options, check_json_out, emit_json

if TYPE_CHECKING:
    from fp4lab.recipes.config import Recipe


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("recipes", help="list the built-in training recipes",
                              description="The built-in training recipes (docs/recipes.md), or one recipe in full.")
    add_json_options(p, "print JSON instead of a table")
    p.set_defaults(func=cmd_recipes)
    sub = p.add_subparsers(metavar="ACTION")
    s = sub.add_parser("show", help="every field of one recipe")
    s.add_argument("name", help="built-in recipe name or recipe file path (.toml/.json)")
    add_json_options(s, "print JSON", suppress=True)
    s.set_defaults(func=cmd_show)


def recipe_summary(recipe: Recipe) -> dict[str, Any]:
    """Every field of ``recipe`` in plain JSON types, plus the resolved format of each operand."""
    return {**recipe.model_dump(mode="json"),
            "operand_formats": {op: recipe.format_of(op) for op in ("x", "w", "dy")}}


def cmd_recipes(args: argparse.Namespace) -> int:
    from fp4lab.recipes.config import get_recipe, list_recipes

    check_json_out(args, "recipes")
    rows = [recipe_summary(get_recipe(n)) for n in list_recipes()]
    if emit_json(args, rows):
        return 0
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title="fp4lab training recipes", header_style="bold", box=box.SIMPLE_HEAD)
    for col in ("recipe", "formats x / w / dy", "RHT (size)", "SR", "sr_bits", "GEMM"):
        table.add_column(col, no_wrap=True)
    for r in rows:
        fx, fw, fdy = (f or "bf16" for f in r["operand_formats"].values())
        rht = ("all" if len(r["rht"]) == 3 else ",".join(r["rht"])) + f" ({r['rht_size']})" if r["rht"] else "-"
        table.add_row(visible(r["name"]), visible(fx if fx == fw == fdy else f"{fx} / {fw} / {fdy}"), rht,
                      ",".join(r["sr"]) or "-", str(r["sr_bits"]) if r["sr"] else "-", r["gemm_dtype"])
    Console().print(table)
    return 0


def _cell(value: Any) -> str:
    """A summary value as table text: None as '-', lists comma-separated, operand formats as 'x ufp4, ...'."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(value) or "[]"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v or 'bf16'}" for k, v in value.items())
    return str(value)


def cmd_show(args: argparse.Namespace) -> int:
    from fp4lab.recipes.config import get_recipe

    check_json_out(args, "recipes show")
    rep = recipe_summary(get_recipe(args.name))
    if emit_json(args, rep):
        return 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"recipe {visible(rep['name'])}"), show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value")
    for key, value in rep.items():
        table.add_row(key, Text(visible(_cell(value))))
    Console().print(table)
    return 0
