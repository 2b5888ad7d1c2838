"""Byte-level text corpus of a pretraining study: a directory of files split into train and held-out parts.

* Files: every regular file under the root whose name matches ``glob`` (default ``*.py`` for the standard
  library of the running interpreter, ``sysconfig.get_paths()["stdlib"]``, and ``*`` for any other directory),
  skipping ``site-packages``, ``dist-packages``, ``__pycache__`` and hidden folders, sorted by relative POSIX path.
* Split rule: a file is held out iff ``blake2b-64(relative path) % heldout_every == 0`` (the digest read as a
  little-endian integer; 1 file in 20 by default). If the rule holds out no file, the file with the smallest
  digest is held out; a corpus of one file cannot be split.
* Each part is its files' bytes in path order, each followed by one separator byte ``SEP`` (0), as a uint8 array.
* Batches: ``train_batch(tokens, seed, step, ...)`` draws window offsets from a generator seeded by
  ``(seed, step)`` alone, so every recipe trained under one seed sees the same batches, and a resumed run the same
  batches as an uninterrupted one. ``eval_windows`` takes fixed, evenly spaced windows of the held-out part.
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


def stdlib_dir() -> Path:
    """The standard-library source folder of the running interpreter."""
    return Path(sysconfig.get_paths()["stdlib"])


def path_digest(relpath: str) -> int:
    """blake2b-64 of a relative POSIX path, as a little-endian integer (the split rule's hash)."""
    return int.from_bytes(hashlib.blake2b(relpath.encode("utf-8"), digest_size=8).digest(), "little")


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


def _concat(root: Path, files: list[str]) -> np.ndarray:
    parts = []
    for rel in files:
        parts.append(Path(root, rel).read_bytes())
        parts.append(bytes([SEP]))
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


@dataclass(frozen=True)
class Corpus:
    """The two parts of a corpus as uint8 token arrays, with the files behind them."""

    root: Path
    train: np.ndarray
    heldout: np.ndarray
    train_files: tuple[str, ...]
    heldout_files: tuple[str, ...]

    @property
    def fingerprint(self) -> str:
        """blake2b-64 hex of both parts' bytes: runs on different corpora must not be paired."""
        h = hashlib.blake2b(digest_size=8)
        h.update(self.train.tobytes())
        h.update(self.heldout.tobytes())
        return h.hexdigest()

    def describe(self) -> dict[str, object]:
        """Summary for logs: root, file and byte counts, fingerprint."""
        return {"root": str(self.root), "train_files": len(self.train_files), "heldout_files": len(self.heldout_files),
                "train_bytes": int(self.train.size), "heldout_bytes": int(self.heldout.size),
                "fingerprint": self.fingerprint}


def load_corpus(root: str | Path | None = None, glob: str | None = None,
                heldout_every: int = HELDOUT_EVERY) -> Corpus:
    """The corpus under ``root`` (default: the standard library, ``*.py``; otherwise every file unless ``glob``)."""
    base = stdlib_dir() if root is None else Path(root)
    pattern = glob or ("*.py" if root is None else "*")
    if not base.is_dir():
        raise InputError(f"corpus: {base} is not a directory")
    if heldout_every < 2:
        raise InputError(f"corpus: heldout_every = {heldout_every}; it must be at least 2")
    train, held = split_files(list_files(base, pattern), heldout_every)
    return Corpus(base, _concat(base, train), _concat(base, held), tuple(train), tuple(held))


def _windows(tokens: np.ndarray, offsets: np.ndarray, length: int) -> np.ndarray:
    return tokens[offsets[:, None] + np.arange(length)[None, :]]


def _check_length(tokens: np.ndarray, length: int, what: str) -> None:
    if tokens.size < length + 1:
        raise InputError(f"corpus: the {what} part has {tokens.size} bytes; windows of {length} need more")


def train_batch(tokens: np.ndarray, seed: int, step: int, batch: int, seq_len: int) -> np.ndarray:
    """int64 [batch, seq_len + 1] windows of ``tokens`` at offsets drawn from ``default_rng([seed, step])``."""
    _check_length(tokens, seq_len + 1, "train")
    if seed < 0 or step < 0:
        raise InputError(f"train_batch: seed = {seed} and step = {step} must be non-negative")
    rng = np.random.default_rng([int(seed), int(step)])
    offsets = rng.integers(0, tokens.size - seq_len, size=batch)
    return _windows(tokens, offsets, seq_len + 1).astype(np.int64)


def eval_windows(tokens: np.ndarray, n_tokens: int, seq_len: int) -> np.ndarray:
    """int64 [n, seq_len + 1] windows, ``n = max(1, n_tokens // seq_len)``, evenly spaced over ``tokens``."""
    _check_length(tokens, seq_len + 1, "held-out")
    n = max(1, n_tokens // seq_len)
    offsets = np.linspace(0, tokens.size - seq_len - 1, n).round().astype(np.int64)
    return _windows(tokens, offsets, seq_len + 1).astype(np.int64)
