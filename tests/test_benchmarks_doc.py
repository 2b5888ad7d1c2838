"""BENCHMARKS.md and the docs cite raw results and scripts that exist, and benchmarks/results holds only what they
cite (each file named by what it holds, not by a work period)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TEXTS = [ROOT / "BENCHMARKS.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _cited(prefix: str) -> set[str]:
    """Every ``prefix...`` path in the texts, ``{a,b}`` alternatives expanded (``*`` kept as a pattern)."""
    out: set[str] = set()
    for text in TEXTS:
        for m in re.finditer(re.escape(prefix) + r"[\w.*{},/-]+", text.read_text()):
            path = m.group(0).rstrip(".,")
            alt = re.search(r"\{([^}]*)\}", path)
            names = [path[:alt.start()] + a + path[alt.end():] for a in alt.group(1).split(",")] if alt else [path]
            out.update(names)
    return out


def test_every_cited_result_exists_and_every_result_is_cited():
    cited = {c[len("benchmarks/results/"):] for c in _cited("benchmarks/results/")}
    files = {p.name for p in RESULTS.iterdir() if p.is_file()}
    for c in cited:
        assert any(fnmatch.fnmatchcase(f, c) for f in files), f"cited but missing: benchmarks/results/{c}"
    for f in files:
        assert any(fnmatch.fnmatchcase(f, c) for c in cited), f"benchmarks/results/{f} is cited nowhere"
        assert not re.search(r"session\d", f), f"{f}: name the content and date, not a work period"


def test_every_cited_script_exists():
    for path in _cited("benchmarks/") | _cited("tests/fuzz/"):
        if path.endswith((".py", ".sh")):
            assert list(ROOT.glob(path)), f"cited but missing: {path}"
