"""The one output convention of every ``fp4lab`` command that has a JSON document.

* ``--json``: print the document on stdout, and nothing else there (no table, no progress bar).
* ``--json-out FILE.json``: also write the document, byte for byte as ``--json`` prints it, to exactly that path
  (replaced if it exists; written atomically). The path is checked before the command does any work, so an
  unwritable path costs one ``OutputError`` line and writes nothing.

Both may be given; ``--json-out`` alone keeps the human-readable output on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from fp4lab.errors import OutputError


def add_json_options(p: argparse.ArgumentParser, help: str = "print the result as JSON only",
                     suppress: bool = False) -> None:
    """Add ``--json`` and ``--json-out`` to ``p`` (``suppress``: no defaults, for a subcommand that repeats the
    options of its parent command, so that either position works)."""
    kw: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    p.add_argument("--json", action="store_true", help=help, **kw)
    p.add_argument("--json-out", metavar="FILE.json", help="also write the JSON document to exactly this path "
                   "(must end in .json; replaced if it exists)", **({"default": None} | kw))


def check_json_out(args: argparse.Namespace, command: str) -> Path | None:
    """The ``--json-out`` path, checked up front (``OutputError``, one line, if it cannot be written), or None."""
    path = getattr(args, "json_out", None)
    if path is None:
        return None
    from fp4lab.analysis.outputs import check_output_file

    p = check_output_file(path, ".json", True, f"{command} --json-out")
    if not os.access(p.parent, os.W_OK):
        raise OutputError(f"{command} --json-out: folder {p.parent} of {p} is not writable")
    return p


def wants_json(args: argparse.Namespace) -> bool:
    """True where the command prints JSON only (``--json``): no table and no progress bar on stdout."""
    return bool(getattr(args, "json", False))


def emit_json(args: argparse.Namespace, doc: Any, indent: int = 2, default: Any = None) -> bool:
    """Write ``doc`` to ``--json-out`` if given and print it with ``--json``; returns ``wants_json(args)`` (True: the
    handler is done, False: it prints its human-readable output)."""
    text = json.dumps(doc, indent=indent, default=default) + "\n"
    path = getattr(args, "json_out", None)
    if path is not None:
        from fp4lab.analysis.outputs import write_atomic

        write_atomic(Path(path), lambda tmp: tmp.write_text(text))
    if wants_json(args):
        sys.stdout.write(text)
        return True
    return False
