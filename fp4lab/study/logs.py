"""Append-only CSV logs with fixed columns, truncation on resume and a JSON twin."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

METRIC_COLUMNS: tuple[str, ...] = ("step", "tokens", "train_loss", "heldout_loss", "lr", "tokens_per_s",
                                   "elapsed_s")


def _parse(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a CSV file with numbers parsed (empty list if there is no file)."""
    p = Path(path)
    if not p.is_file():
        return []
    with p.open(newline="") as f:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(f)]


def write_csv(path: str | Path, columns: Iterable[str], rows: Iterable[dict[str, Any]]) -> None:
    """Write ``rows`` (missing keys empty) under a header of ``columns``, atomically."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, p)


def write_json(path: str | Path, data: Any) -> None:
    """JSON with non-finite floats as null, atomically."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(_finite(data), indent=1) + "\n")
    os.replace(tmp, p)


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


class CsvLog:
    """A CSV file of rows keyed by an integer ``step`` column; ``json_path`` mirrors it as ``{"rows": [...]}``."""

    def __init__(self, path: Path, columns: tuple[str, ...], json_path: Path | None = None) -> None:
        self.path, self.columns, self.json_path = path, columns, json_path
        self.rows: list[dict[str, Any]] = []

    def reset(self, keep_through: int) -> None:
        """Keep the rows with ``step <= keep_through`` (a resumed run's checkpoint step) and rewrite the files."""
        self.rows = [r for r in read_csv(self.path) if int(r["step"]) <= keep_through]
        write_csv(self.path, self.columns, self.rows)
        self._mirror()

    def append(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        self.rows.extend(rows)
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=list(self.columns), extrasaction="ignore").writerows(rows)
        self._mirror()

    def _mirror(self) -> None:
        if self.json_path is not None:
            write_json(self.json_path, {"columns": list(self.columns), "rows": self.rows})
