"""README.md and docs/*.md point at things that exist: every relative link resolves, every file of the repository
they name by path exists, and every test they cite as ``tests/FILE.py::NAME`` is defined in that file (``*``
matches any part of a name). A test named in the docs pins a decision, so a renamed test takes its citations
along."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
IDS = [t.relative_to(ROOT).as_posix() for t in TEXTS]
REPO_PATH = re.compile(r"(?<![\w./$])((?:fp4lab|tests|benchmarks|examples|docs)/[\w./-]*\w\.(?:py|md|toml|sh))\b")


def _joined(text: str) -> str:
    """``text`` with backticked spans that the page wraps over two lines put back on one line."""
    return re.sub(r"(`[^`\n]*)\n\s*([^`\n]*`)", r"\1\2", text)


@pytest.mark.parametrize("doc", TEXTS, ids=IDS)
def test_relative_links_resolve(doc: Path):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
        if not re.match(r"[a-z]+:", target):
            assert (doc.parent / target).exists(), f"{doc.name}: link to {target}, which does not exist"


@pytest.mark.parametrize("doc", TEXTS, ids=IDS)
def test_named_repository_files_exist(doc: Path):
    """Paths under the repository's own folders, as written in backticks (``fp4lab/numerics/rht.py``)."""
    for span in re.findall(r"`([^`]+)`", _joined(doc.read_text())):
        for path in REPO_PATH.findall(span):
            assert (ROOT / path).exists(), f"{doc.name}: names {path}, which does not exist"


@pytest.mark.parametrize("doc", TEXTS, ids=IDS)
def test_cited_tests_are_defined(doc: Path):
    for path, names in re.findall(r"(tests/[\w/]+\.py)((?:::[\w*]+)+)", _joined(doc.read_text())):
        assert (ROOT / path).exists(), f"{doc.name}: cites {path}, which does not exist"
        source = (ROOT / path).read_text()
        for name in names.strip(":").split("::"):
            pattern = r"\w*".join(map(re.escape, name.split("*")))  # test_*_needs_a_name*: a family of tests
            assert re.search(rf"^\s*(?:def|class) {pattern}\b", source, flags=re.M), \
                f"{doc.name}: cites {path}::{name}, which is not defined there"


@pytest.mark.parametrize("doc", [*TEXTS, ROOT / "BENCHMARKS.md"], ids=[*IDS, "BENCHMARKS.md"])
def test_docs_stand_alone(doc: Path):
    """No page sends its reader to material outside the repository's docs, nor to a work item or work period."""
    text = doc.read_text()
    for pattern in (r"\.\./shared", r"\bDESIGN\.md", r"\breference/\w+\.md", r"(?i)\b(?:session|issue) #?\d+\b"):
        found = re.search(pattern, text)
        assert found is None, f"{doc.name}: {found.group(0)!r} (a doc says what is true and stands alone)"
