"""The test markers of tests/conftest.py: every MARKS entry names a test that exists, and the guards record a test
that starts a Python process or launches a Triton kernel without the marker that says so."""

from __future__ import annotations

import ast
import fnmatch
import subprocess
import sys
from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parent


def _test_names(file: str) -> set[str]:
    tree = ast.parse((TESTS / file).read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_marks_entry_names_an_existing_test():
    for pattern in conftest.MARKS:
        file, name = pattern.split("::")
        assert (TESTS / file).is_file(), pattern
        assert any(fnmatch.fnmatchcase(n, name) for n in _test_names(file)), f"{pattern}: no such test"


def test_markers_for_ignores_parameters():
    assert conftest.markers_for("test_distributed.py::test_x[ddp]") == {"distributed", "subprocess"}
    assert conftest.markers_for("test_kernels.py::test_rht_matches_reference") == {"interpreter"}
    assert conftest.markers_for("test_kernels.py::test_no_such_test[a]") == set()


def test_an_unmarked_test_starting_python_is_recorded():
    assert conftest._violations == []
    try:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        subprocess.run(["true"], check=True)  # not an interpreter: not recorded
        assert len(conftest._violations) == 1
        assert "test_an_unmarked_test_starting_python_is_recorded starts python" in conftest._violations[0]
        assert "no 'subprocess' marker" in conftest._violations[0]
    finally:
        conftest._violations.clear()  # the guard would fail this test at the end of its call otherwise
