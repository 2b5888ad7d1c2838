"""Every name that a module of fp4lab, a benchmark script or an example imports from fp4lab exists.

Many of these imports run only on a GPU (the lazy imports of the CUDA paths, ``benchmarks/device/*``,
``benchmarks/h200_*``), so no CPU test would execute them: a refactor that moves a name would otherwise surface
as a failed call on a lent GPU. Each ``from fp4lab.X import y`` is resolved with importlib (``y`` an attribute of
``fp4lab.X`` or its submodule), each ``import fp4lab.X`` imports ``fp4lab.X``; nothing else of the files runs.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(REPO / "fp4lab").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py"),
                  *(REPO / "examples").rglob("*.py")])


def _fp4lab_imports(path: Path, root: Path = REPO) -> list[tuple[str, str | None, int]]:
    """(module, name or None for ``import module``, line) of every absolute or relative import of fp4lab in
    ``path`` (relative imports resolved from its package folder below ``root``)."""
    package = list(path.relative_to(root).parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "fp4lab"]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: only inside the package
                module = ".".join(package[:len(package) - node.level + 1] + ([module] if module else []))
            if module.split(".")[0] == "fp4lab":
                out += [(module, a.name, node.lineno) for a in node.names]
    return out


def _missing(module: str, name: str | None) -> str | None:
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        return f"import {module}: {exc}"
    if name is None or name == "*" or hasattr(mod, name):
        return None
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return f"{module} has no {name}"
    return None


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_imported_fp4lab_name_exists(path):
    bad = [f"{path.relative_to(REPO).as_posix()}:{line}: {why}" for module, name, line in _fp4lab_imports(path)
           if (why := _missing(module, name))]
    assert not bad, "\n".join(bad)


def test_a_moved_name_is_caught(tmp_path):
    """The check itself: an import of a name that does not exist is reported with its line."""
    script = tmp_path / "script.py"
    script.write_text("def f():\n    from fp4lab.kernels.tile import no_such_helper\n")
    assert _fp4lab_imports(script, tmp_path) == [("fp4lab.kernels.tile", "no_such_helper", 2)]
    assert _missing("fp4lab.kernels.tile", "no_such_helper") == "fp4lab.kernels.tile has no no_such_helper"
    assert _missing("fp4lab.kernels", "tile") is None and _missing("fp4lab.kernels.tile", "blocks_of") is None
