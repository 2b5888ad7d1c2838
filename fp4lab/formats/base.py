"""Base class for format models: frozen pydantic data whose derived tables are cached on first use."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class SpecModel(BaseModel):
    """Frozen, strict spec model. Equality and hashing use the declared fields only, never cached derived tables
    (which ``functools.cached_property`` keeps in the instance ``__dict__``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and self.model_dump() == other.model_dump()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.model_dump_json()))
