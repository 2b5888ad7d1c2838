"""Spec files: TOML (or JSON) <-> pydantic models, with one-line errors that name the file and field."""

from __future__ import annotations

import json
import tomllib
import typing
from pathlib import Path
from typing import Any, TypeVar

import tomli_w
from pydantic import BaseModel, ValidationError

from fp4lab.errors import SpecError, did_you_mean, one_line

M = TypeVar("M", bound=BaseModel)


MAX_SPEC_BYTES = 1 << 20  # spec files are a few hundred bytes; anything beyond a MiB is not a spec


_TAGS = ("float", "int", "table")  # element-grid kinds: pydantic puts the chosen one into an error's location


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (``A | None``, ``Annotated[Union[A, B], ...]``, ``list[A]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


def _models_at(model: type[BaseModel], path: tuple[Any, ...]) -> list[type[BaseModel]]:
    """The models the table at ``path`` (an error location) of ``model`` can be: one, several for a union whose
    ``kind`` was not given, [] if the path leaves the models."""
    models = [model]
    for part in path:
        if isinstance(part, int):
            continue
        tagged = [m for m in models if "kind" in m.model_fields and m.model_fields["kind"].default == part]
        if len(models) > 1 and tagged:
            models = tagged
            continue
        fields = {f.alias or n: f for n, f in models[0].model_fields.items()} if len(models) == 1 else {}
        if part not in fields:
            return []
        models = _models_in(fields[part].annotation)
    return models


def _fields_at(model: type[BaseModel], path: tuple[Any, ...]) -> list[str]:
    """The field names a file may write in the table at ``path`` of ``model``; [] if not one model."""
    models = _models_at(model, path)
    return [f.alias or n for n, f in models[0].model_fields.items()] if len(models) == 1 else []


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _location(loc: tuple[Any, ...]) -> str:
    """``scale_rule.targets.1``: the dotted path of an error, without the element-grid kind pydantic inserts."""
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and p in _TAGS))


def _sentence(err: dict[str, Any], model: type[BaseModel] | None) -> str:
    """One pydantic error as a sentence: ``unknown field 'x' (did you mean 'y'?)``, ``missing required field 'x'``,
    ``element: unknown kind 'flot' (did you mean 'float'?); use 'float', 'int' or 'table'``, else
    ``loc: message (got value)``."""
    loc = tuple(err["loc"])
    kind, where = err["type"], _location(loc[:-1])
    lead = f"{where}: " if where else ""
    if kind in ("extra_forbidden", "missing") and loc:
        name = str(loc[-1])
        if kind == "missing":
            return f"{lead}missing required field '{one_line(name, 80)}'"
        hint = did_you_mean(name, _fields_at(model, loc[:-1])) if model is not None else ""
        return f"{lead}unknown field '{one_line(name, 80)}'{' (' + hint + ')' if hint else ''}"
    at = _location(loc)
    lead = f"{at}: " if at else ""
    ctx = err.get("ctx") or {}
    if kind == "union_tag_invalid":
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        hint = did_you_mean(str(ctx.get("tag")), tags)
        return (f"{lead}unknown kind '{one_line(str(ctx.get('tag')), 80)}'{' (' + hint + ')' if hint else ''}; use "
                f"{_either([repr(t) for t in tags])}")
    if kind == "union_tag_not_found":
        tags = [repr(m.model_fields["kind"].default) for m in (_models_at(model, loc) if model else [])
                if "kind" in m.model_fields]
        return f"{lead}the table needs a 'kind' field{': ' + _either(tags) if tags else ''}"
    if kind in ("model_attributes_type", "model_type", "dict_type"):
        named = {("element",): "a grid name or a table", ("scale",): "a scale-format name or a table",
                 ("block",): "an integer or a table"}.get(loc, "a table")
        return f"{lead}expected {named} (got {one_line(repr(err.get('input')), 60)})"
    msg = one_line(err["msg"].removeprefix("Value error, "))
    if kind == "value_error" or "input" not in err or isinstance(err["input"], (dict, list)):
        return f"{lead}{msg}"
    return f"{lead}{msg} (got {one_line(repr(err['input']), 60)})"


MAX_LISTED_ERRORS = 20  # a hostile file can hold thousands; a person's typos fit


def validation_message(err: ValidationError, where: str, model: type[BaseModel] | None = None) -> str:
    """One line: ``where:`` and every error of ``err`` as a sentence, separated by ``;`` (``n errors:`` first when
    there are several; beyond ``MAX_LISTED_ERRORS`` the rest are counted). ``model``: the validated model, for the
    field names an unknown field is compared with."""
    errors = err.errors()
    parts = [_sentence(e, model) for e in errors[:MAX_LISTED_ERRORS]]
    if len(errors) > MAX_LISTED_ERRORS:
        parts.append(f"and {len(errors) - MAX_LISTED_ERRORS} more errors of the same file")
    head = f"{len(errors)} errors: " if len(errors) > 1 else ""
    return f"{where}: {head}{'; '.join(parts)}"


def read_spec_text(path: str | Path, what: str = "spec") -> str:
    """The UTF-8 text of a spec file, or a one-line ``SpecError`` naming the file (missing, a directory,
    unreadable, larger than ``MAX_SPEC_BYTES``, not UTF-8)."""
    p = Path(path)
    try:
        if p.is_dir():
            raise SpecError(f"{p}: is a directory, not a {what} file")
        if not p.is_file():
            if p.exists():
                raise SpecError(f"{p}: not a regular file (a device, FIFO or socket); not a {what} file")
            raise SpecError(f"{p}: {what} file not found")
        size = p.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError(f"{p}: {size} bytes; a {what} file may hold at most {MAX_SPEC_BYTES}")
        with open(p, "rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"{p}: cannot read the {what} file: {exc.strerror or exc}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{p}: more than {MAX_SPEC_BYTES} bytes; not a {what} file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: not UTF-8 text (byte {exc.start}); is this a {what} file?") from None


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (``json_loads_unique``); ``args[0]`` is the key."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def json_loads_unique(text: str | bytes) -> Any:
    """``json.loads`` that raises ``DuplicateKeyError`` where an object names a key twice (plain ``json`` keeps
    the last value silently; TOML refuses duplicates itself)."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def read_spec_dict(path: str | Path, what: str = "spec") -> dict[str, Any]:
    """Parse a ``.toml`` or ``.json`` spec file into a dict; raises ``SpecError`` naming the file (``what``: the
    kind of file the messages name, e.g. "hwspec")."""
    p = Path(path)
    text = read_spec_text(p, what)
    kind = "JSON" if p.suffix.lower() == ".json" else "TOML"
    try:
        data = json_loads_unique(text) if kind == "JSON" else tomllib.loads(text)
    except DuplicateKeyError as exc:
        raise SpecError(f"{p}: not valid {kind}: the key '{str(exc.args[0])[:80]}' appears twice in one object") \
            from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"{p}: not valid {kind}: {one_line(str(exc))}") from None
    except RecursionError:
        raise SpecError(f"{p}: not valid {kind}: nested too deeply") from None
    if not isinstance(data, dict):
        raise SpecError(f"{p}: the top level must be a table (object), got {type(data).__name__}")
    return data


# top-level keys that only one kind of spec file has -> that kind, and the commands that take it
LOOKS_LIKE = ((("kinds", "inherits", "vendor"), "an accelerator spec",
               "fp4lab hw show or fp4lab spec validate --kind hwspec"),
              (("element",), "a format spec", "fp4lab show or fp4lab spec validate"),
              (("format",), "a training recipe", "fp4lab recipes show"))


def looks_like(data: Any, fields: set[str]) -> str:
    """``"; the file looks like <kind>: try <commands>"`` when ``data`` has a top-level key of another kind
    of spec file that ``fields`` (the expected kind's top-level names) lacks, else ``""``."""
    if isinstance(data, dict):
        for keys, what, commands in LOOKS_LIKE:
            if any(key in data and key not in fields for key in keys):
                return f"; the file looks like {what}: try {commands}"
    return ""


def validate_model(model: type[M], data: Any, where: str) -> M:
    """``model.model_validate(data)`` as a file's data: strict types (no numbers written as strings, no 0/1 for
    true/false) and field names as written in files (``bits``, not the Python attribute ``int_bits``); every
    failure is a one-line ``SpecError`` starting with ``where`` (naming the kind of spec file the data looks
    like where that is another one: ``looks_like``)."""
    try:
        return model.model_validate(data, strict=True, by_alias=True, by_name=False)
    except ValidationError as err:
        hint = looks_like(data, {f.alias or n for n, f in model.model_fields.items()})
        raise SpecError(validation_message(err, where, model) + hint) from None
    except RecursionError:
        raise SpecError(f"{where}: nested too deeply") from None
    except (ArithmeticError, TypeError, AttributeError, LookupError, ValueError) as exc:  # a check that broke
        raise SpecError(f"{where}: invalid spec ({type(exc).__name__}: {one_line(str(exc))})") from None


def load_model(model: type[M], path: str | Path) -> M:
    """Read and validate a spec file as ``model``; any problem raises a one-line ``SpecError``."""
    return validate_model(model, read_spec_dict(path), str(path))


def model_to_toml(obj: BaseModel) -> str:
    """TOML text that ``load_model`` turns back into an equal model."""
    return tomli_w.dumps(obj.model_dump(mode="json", by_alias=True, exclude_none=True))
