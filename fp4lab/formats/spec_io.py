"""Spec files: TOML (or JSON) <-> pydantic models, with one-line errors that name the file and field."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, TypeVar

import tomli_w
from pydantic import BaseModel, ValidationError

from fp4lab.errors import SpecError

M = TypeVar("M", bound=BaseModel)


def validation_message(err: ValidationError, where: str) -> str:
    """One line: ``where: field.path: message`` for the first error (and a count of the others)."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"] if not (isinstance(p, str) and p in ("float", "int", "table")))
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{where}: {loc + ': ' if loc else ''}{msg}{more}"


def read_spec_dict(path: str | Path) -> dict[str, Any]:
    """Parse a ``.toml`` or ``.json`` spec file into a dict; raises ``SpecError`` naming the file."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: spec file not found")
    try:
        text = p.read_text(encoding="utf-8")
        return json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"{p}: not valid {'JSON' if p.suffix.lower() == '.json' else 'TOML'}: {exc}") from None


def load_model(model: type[M], path: str | Path) -> M:
    """Read and validate a spec file as ``model``; any problem raises a one-line ``SpecError``."""
    data = read_spec_dict(path)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise SpecError(validation_message(err, str(path))) from None


def model_to_toml(obj: BaseModel) -> str:
    """TOML text that ``load_model`` turns back into an equal model."""
    return tomli_w.dumps(obj.model_dump(mode="json", by_alias=True, exclude_none=True))
