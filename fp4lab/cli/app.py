"""The top-level ``fp4lab`` parser and ``main``: each command group's module adds its subcommands through
``register(subparsers)``. Every handler returns the process exit code; errors print one line to stderr and exit
with 2."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fp4lab.errors import Fp4labError, did_you_mean

from . import analysis, formats, hw, recipes, verify

GROUPS = (formats, analysis, hw, verify, recipes)  # the order of the subcommands in --help


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that reports unknown options with the usage of the subcommand they were given to
    (argparse hands a subcommand's leftovers up to the top-level parser, whose usage says nothing about them)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns, extras = super().parse_known_args(args, namespace)
        if extras and not hasattr(ns, "_extras_parser"):  # the innermost parser that saw them sets it first
            ns._extras_parser = self
        return ns, extras

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = getattr(ns, "_extras_parser", self)
            hints = [did_you_mean(e.split("=")[0], owner._option_string_actions) for e in extras if e.startswith("-")]
            hint = " ".join(h for h in hints if h)
            owner.error(f"unrecognized arguments: {' '.join(extras)}{' (' + hint + ')' if hint else ''}")
        return ns


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fp4lab", description="Design 4-bit number formats and emulate the "
                    "hardware that runs them, bit for bit.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (e.g. piped into head): nothing left to say
        return 1
    except (Fp4labError, ValueError, OSError) as exc:
        from fp4lab.formats.spec_io import one_line

        name = getattr(exc, "filename", None)  # an OSError from deep inside: say which file
        text = f"{exc.strerror}: {name}" if isinstance(exc, OSError) and name and exc.strerror else str(exc)
        print(f"error: {one_line(text, 2000)}", file=sys.stderr)
        return 2
    except RecursionError:
        print("error: RecursionError: the input is too deeply nested", file=sys.stderr)
        return 2
    except MemoryError as exc:  # numpy says how much it could not allocate, for which shape
        from fp4lab.formats.spec_io import one_line

        print(f"error: out of memory: {one_line(str(exc)) or 'the work asked for does not fit in memory'}",
              file=sys.stderr)
        return 2
