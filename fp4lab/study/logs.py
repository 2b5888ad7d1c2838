"""CSV logs with fixed columns, truncation on resume and a JSON twin; every file written atomically.

Every write goes through ``fp4lab.analysis.outputs.write_atomic``: the new content is written to a fresh temporary
name in the target's folder and renamed over the target, so a crash leaves the old file or the new one (never a
row cut in half), and a symlink planted at the target (or at any fixed temporary name) is replaced, never
followed. A log holds one row per evaluation, so rewriting it whole at each append costs little.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable

from fp4lab.analysis.outputs import write_atomic
from fp4lab.errors import InputError

METRIC_COLUMNS: tuple[str, ...] = ("step", "tokens", "train_loss", "heldout_loss", "lr", "tokens_per_s",
                                   "elapsed_s")


def _parse(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def read_csv(path: str | Path, drop_incomplete: bool = False) -> list[dict[str, Any]]:
    """Rows of a CSV file with numbers parsed (empty list if there is no file). A row with fewer or more fields
    than the header is an ``InputError`` naming the file and line, or skipped with ``drop_incomplete``."""
    p = Path(path)
    if not p.is_file():
        return []
    rows = []
    try:
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for row in reader:
                if None in row or None in row.values():
                    if drop_incomplete:
                        continue
                    raise InputError(f"{p}: line {reader.line_num} does not have the header's "
                                     f"{len(reader.fieldnames or ())} fields")
                rows.append({k: _parse(v) for k, v in row.items()})
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{p}: not a readable CSV log ({str(exc).splitlines()[0][:120]})") from None
    return rows


def last_step_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the largest integer ``step`` (rows whose step is not an integer are left out)."""
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
    return [r for r in rows if steps and r.get("step") == max(steps)]


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (module docstring)."""
    return write_atomic(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_with(path: str | Path, write: Callable[[Path], None]) -> Path:
    """``write(tmp)`` then rename onto ``path`` (module docstring); for writers that take a path (torch.save)."""
    return write_atomic(Path(path), write)


def write_csv(path: str | Path, columns: Iterable[str], rows: Iterable[dict[str, Any]]) -> None:
    """Write ``rows`` (missing keys empty) under a header of ``columns``, atomically."""
    cols, body = list(columns), list(rows)

    def dump(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            w.writerows(body)

    write_atomic(Path(path), dump)


def write_json(path: str | Path, data: Any) -> None:
    """JSON with non-finite floats as null, atomically."""
    write_text(path, json.dumps(finite_json(data), indent=1) + "\n")


def finite_json(v: Any) -> Any:
    """``v`` with non-finite floats (at any depth of dicts, lists and tuples) replaced by None."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: finite_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite_json(x) for x in v]
    return v


class CsvLog:
    """A CSV file of rows keyed by an integer ``step`` column; ``json_path`` mirrors it as ``{"rows": [...]}``."""

    def __init__(self, path: Path, columns: tuple[str, ...], json_path: Path | None = None) -> None:
        self.path, self.columns, self.json_path = path, columns, json_path
        self.rows: list[dict[str, Any]] = []

    def reset(self, keep_through: int) -> None:
        """Keep the complete rows with ``step <= keep_through`` (a resumed run's checkpoint step) and rewrite the
        files."""
        self.rows = [r for r in read_csv(self.path, drop_incomplete=True)
                     if isinstance(r.get("step"), int) and r["step"] <= keep_through]
        write_csv(self.path, self.columns, self.rows)
        self._mirror()

    def append(self, rows: list[dict[str, Any]]) -> None:
        """Add ``rows`` and rewrite the files atomically."""
        if not rows:
            return
        self.rows.extend(rows)
        write_csv(self.path, self.columns, self.rows)
        self._mirror()

    def _mirror(self) -> None:
        if self.json_path is not None:
            write_json(self.json_path, {"columns": list(self.columns), "rows": self.rows})
