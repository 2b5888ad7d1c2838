"""Where the analysis commands write: checked output paths and atomic writes.

* A file output (``compare --plot FILE.png``) is written to exactly the path given, which must end in the
  format's suffix, lie in an existing folder and not be a folder; an existing file is replaced only with
  ``overwrite``.
* Every file is written under a temporary name in its final folder and renamed into place, so an interrupted
  run leaves either the old file or the new one, never a truncated file under the real name.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from fp4lab.errors import OutputError


def check_output_file(path: str | os.PathLike, suffix: str, overwrite: bool, what: str) -> Path:
    """``path`` as a ``Path`` if a file may be written there (see the module docstring), else ``OutputError``."""
    text = os.fspath(path)
    if not text.strip():
        raise OutputError(f"{what}: the output path is empty; give a file name ending in {suffix}")
    p = Path(text)
    if p.suffix.lower() != suffix:
        raise OutputError(f"{what}: {p} does not end in {suffix}; the file is written exactly where named")
    if p.is_dir():
        raise OutputError(f"{what}: {p} is a folder; give a file name ending in {suffix}")
    if not p.parent.is_dir():
        raise OutputError(f"{what}: folder {p.parent} of {p} does not exist")
    if (p.exists() or p.is_symlink()) and not overwrite:
        raise OutputError(f"{what}: {p} exists; pass --overwrite to replace it")
    try:  # a file can be made there: known before any work, and said of the path given, not a temporary name
        os.unlink(_temp_beside(p))
    except OSError as exc:
        raise OutputError(f"{what}: cannot write {p}: {exc.strerror or exc}") from None
    return p


def _temp_beside(path: Path) -> str:
    """A new empty temporary file in ``path``'s folder."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return tmp


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``; renamed onto ``path`` when the block ends normally, removed otherwise."""
    tmp = _temp_beside(path)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_atomic(path: Path, write: Callable[[Path], None]) -> Path:
    """``write(tmp)`` then rename ``tmp`` onto ``path`` (see ``atomic_path``); returns ``path``."""
    with atomic_path(path) as tmp:
        write(tmp)
    return path
