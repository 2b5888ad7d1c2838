"""Base class for format models: frozen pydantic data whose derived tables are cached on first use."""

from __future__ import annotations

import re
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from fp4lab.errors import SpecError

# C0/C1 controls but tab and newline, line/paragraph separators, and the bidirectional formatting characters
# (U+061C, U+200E/F, U+202A-E, U+2066-9), which reorder what a terminal shows (U+202E prints text reversed)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def check_text(value: str | None) -> str | None:
    """``value`` unchanged if it holds no control or bidirectional-formatting characters (tab and newline allowed),
    else a ``SpecError``: spec text is printed to terminals, where escape sequences act and U+202E reverses what
    follows."""
    if value is not None and _CONTROL.search(value):
        bad = _CONTROL.search(value).group()
        raise SpecError(f"control character {bad!r} not allowed in text fields (control and bidirectional "
                        "formatting characters act on terminals)")
    return value


def _allows_bool(annotation: Any) -> bool:
    if annotation is bool:
        return True
    return any(_allows_bool(a) for a in typing.get_args(annotation))


def refuse_booleans(model: type[BaseModel], data: Any) -> Any:
    """``data`` unchanged, or a ValueError if a field that takes numbers, names or tables was given true/false
    (pydantic would read ``min_scale = true`` as 1.0 and ``block = true`` as a block of 1)."""
    if isinstance(data, dict):
        for name, field in model.model_fields.items():
            for key in {name, field.alias or name}:
                v = data.get(key)
                if (isinstance(v, bool) or isinstance(v, list) and any(isinstance(i, bool) for i in v)) \
                        and not _allows_bool(field.annotation):
                    raise SpecError(f"{key}: true/false is not allowed here")
    return data


class SpecModel(BaseModel):
    """Frozen, strict spec model. Equality and hashing use the declared fields only, never cached derived tables
    (which ``functools.cached_property`` keeps in the instance ``__dict__``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans(cls, data: Any) -> Any:
        return refuse_booleans(cls, data)

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and self.model_dump() == other.model_dump()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.model_dump_json()))
