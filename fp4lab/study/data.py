"""Byte-level text corpus of a pretraining study: a directory of files split into train and held-out parts, read
on demand (never the whole corpus in memory).

* Corpora: ``None`` (the default) is the ``*.py`` files of the standard library of the running interpreter
  (``sysconfig.get_paths()["stdlib"]``); ``"python-packages"`` (``PYTHON_PACKAGES``) is every ``*.py`` file under
  its site-packages (``sysconfig.get_paths()["purelib"]``); any other value is a directory, with every file
  (``glob`` narrows both).
* Files: every regular file under the root whose name matches ``glob``, skipping ``site-packages``,
  ``dist-packages`` and ``__pycache__`` folders below the root and hidden folders, sorted by relative POSIX path.
* Split rule: a file is held out iff ``blake2b-64(relative path) % heldout_every == 0`` (the digest of the path's
  file-system bytes, ``os.fsencode``, read as a little-endian integer; 1 file in 20 by default). If the rule
  holds out no file, the file with the smallest digest is held out; a corpus of one file cannot be split.
* Each part (``Part``) is its files' bytes in path order, each followed by one separator byte ``SEP`` (0). A part
  keeps only its file list and offsets; ``Part.read`` reads the bytes of a window from the files. Loading hashes
  both parts once, streaming, for the fingerprint; a file whose size changes after that is an error.
* Batches: ``train_batch(part, seed, step, ...)`` draws window offsets from a generator seeded by ``(seed, step)``
  alone (``(seed, step, order)`` for a data order ``order > 0``), so every recipe trained under one seed sees the
  same batches, and a resumed run the same batches as an uninterrupted one. ``eval_windows`` takes fixed, evenly
  spaced windows of the held-out part.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fp4lab.errors import InputError

SEP = 0
HELDOUT_EVERY = 20
SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
PYTHON_PACKAGES = "python-packages"
_CHUNK = 1 << 20


def stdlib_dir() -> Path:
    """The standard-library source folder of the running interpreter."""
    return Path(sysconfig.get_paths()["stdlib"])


def site_packages_dir() -> Path:
    """The site-packages folder of the running interpreter (``purelib``)."""
    return Path(sysconfig.get_paths()["purelib"])


def path_digest(relpath: str) -> int:
    """blake2b-64 of a relative POSIX path's file-system bytes, as a little-endian integer (the split rule)."""
    return int.from_bytes(hashlib.blake2b(os.fsencode(relpath), digest_size=8).digest(), "little")


def is_heldout(relpath: str, every: int = HELDOUT_EVERY) -> bool:
    """The split rule for one file (before the at-least-one-file fallback of ``split_files``)."""
    return path_digest(relpath) % every == 0


def list_files(root: Path, glob: str) -> list[str]:
    """Relative POSIX paths of the corpus files under ``root``, sorted."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        for name in files:
            full = Path(folder, name)
            if fnmatch.fnmatchcase(name, glob) and full.is_file():
                found.append(full.relative_to(root).as_posix())
    return sorted(found)


def split_files(files: list[str], every: int = HELDOUT_EVERY) -> tuple[list[str], list[str]]:
    """(train, held-out) relative paths under the split rule (module docstring)."""
    if len(files) < 2:
        raise InputError(f"corpus: {len(files)} file(s) found; the train/held-out split needs at least 2")
    held = [f for f in files if is_heldout(f, every)] or [min(files, key=path_digest)]
    keep = set(held)
    return [f for f in files if f not in keep], held


def _shown(rel: str) -> str:
    return rel.encode("utf-8", "backslashreplace").decode("utf-8")


class Part:
    """One part of a corpus: ``files`` under ``root``, each followed by ``SEP``, as a virtual uint8 array of
    ``size`` bytes; ``read(offset, length)`` reads a slice of it from the files."""

    def __init__(self, root: Path, files: tuple[str, ...], sizes: tuple[int, ...]) -> None:
        self.root, self.files, self.sizes = root, files, sizes
        self.starts = np.zeros(len(files) + 1, dtype=np.int64)
        np.cumsum(np.asarray(sizes, dtype=np.int64) + 1, out=self.starts[1:])

    @property
    def size(self) -> int:
        return int(self.starts[-1])

    def _file(self, i: int, offset: int, length: int) -> bytes:
        path = Path(self.root, self.files[i])
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(length)
        except OSError as exc:
            raise InputError(f"corpus: cannot read {_shown(str(path))}: {exc.strerror}") from None
        if len(data) != length:
            raise InputError(f"corpus: {_shown(str(path))} changed since the corpus was loaded")
        return data

    def read(self, offset: int, length: int) -> np.ndarray:
        """uint8 [length]: bytes ``offset .. offset + length - 1`` of the part."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise InputError(f"corpus: bytes {offset}..{offset + length} outside a part of {self.size}")
        out = bytearray()
        pos, end = offset, offset + length
        i = int(np.searchsorted(self.starts, pos, side="right")) - 1
        while pos < end:
            local = pos - int(self.starts[i])
            take = min(self.sizes[i] - local, end - pos)
            if take > 0:
                out += self._file(i, local, take)
                pos += take
            if pos < end and pos == int(self.starts[i]) + self.sizes[i]:
                out.append(SEP)
                pos += 1
            i += 1
        return np.frombuffer(bytes(out), dtype=np.uint8)

    def array(self) -> np.ndarray:
        """The whole part in memory (small corpora and tests only)."""
        return self.read(0, self.size)

    def hash_into(self, h: "hashlib._Hash") -> None:
        """Feed the part's bytes to ``h`` in order, streaming (a file whose size changed is an error)."""
        for i, size in enumerate(self.sizes):
            done = 0
            while done < size:
                take = min(_CHUNK, size - done)
                h.update(self._file(i, done, take))
                done += take
            h.update(bytes([SEP]))


@dataclass(frozen=True, eq=False)
class Corpus:
    """The two parts of a corpus, with the files behind them and the fingerprint of their bytes."""

    root: Path
    name: str
    train: Part
    heldout: Part
    fingerprint: str  # blake2b-64 hex of both parts' bytes: runs on different corpora must not be paired

    @property
    def train_files(self) -> tuple[str, ...]:
        return self.train.files

    @property
    def heldout_files(self) -> tuple[str, ...]:
        return self.heldout.files

    def describe(self) -> dict[str, object]:
        """Summary for logs: name, root, file and byte counts, fingerprint."""
        return {"name": self.name, "root": _shown(str(self.root)), "train_files": len(self.train_files),
                "heldout_files": len(self.heldout_files), "train_bytes": self.train.size,
                "heldout_bytes": self.heldout.size, "fingerprint": self.fingerprint}


def _part(root: Path, files: list[str]) -> Part:
    sizes = []
    for rel in files:
        try:
            sizes.append(Path(root, rel).stat().st_size)
        except OSError as exc:
            raise InputError(f"corpus: cannot read {_shown(rel)}: {exc.strerror}") from None
    return Part(root, tuple(files), tuple(sizes))


def load_corpus(root: str | Path | None = None, glob: str | None = None,
                heldout_every: int = HELDOUT_EVERY) -> Corpus:
    """The corpus ``root`` (module docstring: None, ``"python-packages"`` or a directory), split and
    fingerprinted."""
    if root is None:
        base, name, pattern = stdlib_dir(), "python-stdlib", glob or "*.py"
    elif str(root) == PYTHON_PACKAGES:
        base, name, pattern = site_packages_dir(), PYTHON_PACKAGES, glob or "*.py"
    else:
        base, name, pattern = Path(root), "directory", glob or "*"
    if not base.is_dir():
        raise InputError(f"corpus: {_shown(str(base))} is not a directory")
    if heldout_every < 2:
        raise InputError(f"corpus: heldout_every = {heldout_every}; it must be at least 2")
    train, held = split_files(list_files(base, pattern), heldout_every)
    parts = _part(base, train), _part(base, held)
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        part.hash_into(h)
    return Corpus(base, name, parts[0], parts[1], h.hexdigest())


def _windows(tokens: Part | np.ndarray, offsets: np.ndarray, length: int) -> np.ndarray:
    if isinstance(tokens, np.ndarray):
        return tokens[offsets[:, None] + np.arange(length)[None, :]]
    return np.stack([tokens.read(int(o), length) for o in offsets]) if len(offsets) else \
        np.zeros((0, length), np.uint8)


def _check_length(tokens: Part | np.ndarray, length: int, what: str) -> None:
    if tokens.size < length + 1:
        raise InputError(f"corpus: the {what} part has {tokens.size} bytes; windows of {length} need more")


def train_batch(tokens: Part | np.ndarray, seed: int, step: int, batch: int, seq_len: int,
                order: int = 0) -> np.ndarray:
    """int64 [batch, seq_len + 1] windows of ``tokens`` at offsets drawn from ``default_rng([seed, step])``
    (``[seed, step, order]`` for ``order > 0``)."""
    _check_length(tokens, seq_len + 1, "train")
    if seed < 0 or step < 0 or order < 0:
        raise InputError(f"train_batch: seed = {seed}, step = {step} and order = {order} must be non-negative")
    rng = np.random.default_rng([int(seed), int(step)] + ([int(order)] if order else []))
    offsets = rng.integers(0, tokens.size - seq_len, size=batch)
    return _windows(tokens, offsets, seq_len + 1).astype(np.int64)


def eval_windows(tokens: Part | np.ndarray, n_tokens: int, seq_len: int) -> np.ndarray:
    """int64 [n, seq_len + 1] windows, ``n = max(1, n_tokens // seq_len)``, evenly spaced over ``tokens``."""
    _check_length(tokens, seq_len + 1, "held-out")
    n = max(1, n_tokens // seq_len)
    offsets = np.linspace(0, tokens.size - seq_len - 1, n).round().astype(np.int64)
    return _windows(tokens, offsets, seq_len + 1).astype(np.int64)
