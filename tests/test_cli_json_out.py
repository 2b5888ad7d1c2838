"""The CLI's one output convention (fp4lab/cli/output.py): ``--json`` prints the JSON document on stdout,
``--json-out FILE.json`` also writes it, byte for byte, to a file checked before any work is done."""

from __future__ import annotations

import argparse
import json

import pytest

from fp4lab.cli import main
from fp4lab.cli.app import build_parser

COMPARE = ["compare", "e2m1", "--shape", "8x64", "--dist", "gaussian", "--rht", "0"]
COMMANDS = {  # cheap runs of every command with --json (verify: tests/test_kernels.py)
    "formats": ["formats"],
    "show": ["show", "ufp4"],
    "compare": COMPARE,
    "search-grids": ["search-grids", "--lattice", "8", "--scheme", "fp32", "--dist", "gaussian", "--shape", "8x256"],
    "sr-bias": ["sr-bias", "ufp4", "--widths", "4", "--seeds", "1", "--dist", "gaussian", "--shape", "8x64"],
    "hw list": ["hw", "list"],
    "hw show": ["hw", "show", "hopper-sm90", "--format", "ufp4"],
    "hw verify": ["hw", "verify", "--gpu", "off"],
    "recipes": ["recipes"],
    "recipes show": ["recipes", "show", "ufp4"],
}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs or path == ("recipes",):  # `recipes` runs by itself and has `show` below it
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaf_parsers(sub, path + (name,))


def test_every_command_with_json_has_json_out():
    with_json = {" ".join(path): set(p._option_string_actions) for path, p in _leaf_parsers(build_parser())
                 if "--json" in p._option_string_actions}
    assert set(COMMANDS) | {"verify", "conformance"} <= set(with_json)
    assert [cmd for cmd, opts in with_json.items() if "--json-out" not in opts] == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_json_out_writes_what_json_prints(capsys, tmp_path, command):
    path = tmp_path / "doc.json"
    code, out, _ = run(capsys, *COMMANDS[command], "--json", "--json-out", str(path))
    assert code == 0
    assert path.read_text() == out and json.loads(out) is not None


def test_json_out_alone_keeps_the_table(capsys, tmp_path):
    path = tmp_path / "formats.json"
    code, table, _ = run(capsys, "formats", "--json-out", str(path))
    assert code == 0 and "mxfp4" in table and not table.lstrip().startswith("[")
    _, printed, _ = run(capsys, "formats", "--json")
    assert path.read_text() == printed


def test_json_out_replaces_an_existing_file(capsys, tmp_path):
    path = tmp_path / "rows.json"
    path.write_text("old")
    assert run(capsys, "hw", "list", "--json-out", str(path))[0] == 0
    assert json.loads(path.read_text())[0]["name"] == "ada-sm89"


def test_recipes_json_out_before_or_after_show(capsys, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert run(capsys, "recipes", "--json-out", str(a), "show", "ufp4")[0] == 0
    assert run(capsys, "recipes", "show", "ufp4", "--json-out", str(b))[0] == 0
    assert a.read_text() == b.read_text() and json.loads(a.read_text())["name"] == "ufp4"


@pytest.mark.parametrize("bad, why", [("missing/doc.json", "does not exist"), ("", "empty"),
                                      ("doc.txt", "does not end in .json"), (".", "is a folder")])
def test_unwritable_json_out_is_one_line_and_writes_nothing(capsys, tmp_path, monkeypatch, bad, why):
    monkeypatch.chdir(tmp_path)
    if bad == ".":
        (tmp_path / "dir.json").mkdir()
        bad = "dir.json"
    code, out, err = run(capsys, *COMPARE, "--plot", "grid.png", "--json", "--json-out", bad)
    assert code == 2 and out == ""
    assert err.startswith("error: compare --json-out: ") and why in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == (["dir.json"] if bad == "dir.json" else [])


def test_conformance_checks_json_out_before_writing_vectors(capsys, tmp_path):
    out_dir = tmp_path / "vectors"
    code, _, err = run(capsys, "conformance", "--out", str(out_dir), "e2m1", "--json-out", str(tmp_path / "x/s.json"))
    assert code == 2 and "conformance --json-out" in err
    assert not out_dir.exists() or not any(out_dir.iterdir())


def test_a_folder_where_no_file_can_be_made_is_refused_before_the_work(capsys, tmp_path, monkeypatch):
    """The error names the path given (not the temporary file beside it) and comes before any case runs."""
    import tempfile

    from fp4lab.analysis import compare

    def no_room(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    ran = []
    monkeypatch.setattr(tempfile, "mkstemp", no_room)
    monkeypatch.setattr(compare, "_evaluate", lambda *a, **k: ran.append(a))
    code, out, err = run(capsys, *COMPARE, "--plot", str(tmp_path / "grid.png"))
    assert code == 2 and out == "" and ran == []
    assert err == f"error: compare --plot: cannot write {tmp_path / 'grid.png'}: Permission denied\n"
