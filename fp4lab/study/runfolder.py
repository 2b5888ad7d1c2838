"""What makes a run folder safe to write: labels that stay one path component, one writer at a time, and the
code version every run records.

* Labels (size labels, recipe names, group labels) become folder names ``<out>/<size>/<label>/seed<seed>``, so
  they must match ``LABEL_RE``: 1-64 characters of ``A-Z a-z 0-9 . _ + -``, starting with a letter or digit. No
  separator, no ``..``, no control character: a run folder never leaves the plan's ``out``.
* ``RunLock``: an exclusive ``fcntl.flock`` on ``<run>/.lock`` (opened without following a symlink), held while a
  process trains the run; a second process gets a one-line ``InputError`` instead of interleaving rows.
* ``code_version()``: ``<fp4lab.__version__>+<blake2b-48 hex>`` of the source of the ``fp4lab`` package (every
  ``*.py`` and ``*.toml`` file, by relative POSIX path and content, in path order). Any edit of the library's
  code or built-in recipes changes it; runs of different code versions are neither resumed nor paired.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import os
import re
from pathlib import Path
from types import TracebackType

from fp4lab.errors import InputError

LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
LOCK = ".lock"


def check_label(text: object, what: str) -> str:
    """``text`` if it is a safe label (module docstring), else a one-line ``InputError`` naming ``what``."""
    if not isinstance(text, str) or not LABEL_RE.fullmatch(text):
        shown = text if isinstance(text, str) else type(text).__name__
        raise InputError(f"{what} {ascii(shown)[:80]}: labels are 1-64 characters of A-Z a-z 0-9 . _ + -, "
                         "starting with a letter or digit (they name run folders)")
    return text


class RunLock:
    """``with RunLock(folder):`` holds the run folder's lock (module docstring); ``enabled=False`` does nothing."""

    def __init__(self, folder: str | Path, enabled: bool = True) -> None:
        self.path = Path(folder, LOCK)
        self.enabled = enabled
        self._fd: int | None = None

    def __enter__(self) -> "RunLock":
        if not self.enabled:
            return self
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise InputError(f"train: cannot open the lock file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise InputError(f"train: another process is training {self.path.parent}; wait for it or use "
                                 "another out folder") from None
            raise
        self._fd = fd
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None


@functools.cache
def code_version() -> str:
    """``<version>+<hash>`` of the fp4lab package source (module docstring)."""
    import fp4lab

    root = Path(fp4lab.__file__).parent
    h = hashlib.blake2b(digest_size=6)
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml") and p.is_file()
                       and "__pycache__" not in p.parts):
        rel = path.relative_to(root).as_posix().encode()
        body = path.read_bytes()
        h.update(len(rel).to_bytes(8, "little") + rel + len(body).to_bytes(8, "little") + body)
    return f"{fp4lab.__version__}+{h.hexdigest()}"
