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


MAX_SPEC_BYTES = 1 << 20  # spec files are a few hundred bytes; anything beyond a MiB is not a spec


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def validation_message(err: ValidationError, where: str) -> str:
    """One line: ``where: field.path: message`` for the first error (and a count of the others)."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"] if not (isinstance(p, str) and p in ("float", "int", "table")))
    msg = one_line(first["msg"].removeprefix("Value error, "))
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{where}: {loc + ': ' if loc else ''}{msg}{more}"


def read_spec_text(path: str | Path, what: str = "spec") -> str:
    """The UTF-8 text of a spec file, or a one-line ``SpecError`` naming the file (missing, a directory,
    unreadable, larger than ``MAX_SPEC_BYTES``, not UTF-8)."""
    p = Path(path)
    try:
        if p.is_dir():
            raise SpecError(f"{p}: is a directory, not a {what} file")
        if not p.is_file():
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


def read_spec_dict(path: str | Path) -> dict[str, Any]:
    """Parse a ``.toml`` or ``.json`` spec file into a dict; raises ``SpecError`` naming the file."""
    p = Path(path)
    text = read_spec_text(p)
    kind = "JSON" if p.suffix.lower() == ".json" else "TOML"
    try:
        data = json.loads(text) if kind == "JSON" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"{p}: not valid {kind}: {one_line(str(exc))}") from None
    except RecursionError:
        raise SpecError(f"{p}: not valid {kind}: nested too deeply") from None
    if not isinstance(data, dict):
        raise SpecError(f"{p}: the top level must be a table (object), got {type(data).__name__}")
    return data


def validate_model(model: type[M], data: Any, where: str) -> M:
    """``model.model_validate(data)`` with every failure a one-line ``SpecError`` starting with ``where``."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise SpecError(validation_message(err, where)) from None
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


def smoke_check(fmt: Any, where: str) -> None:
    """Quantize a small test tensor with ``fmt`` through the reference pipeline and refuse the format (one-line
    ``SpecError``) if that raises, gives a non-finite value for finite inputs, or flushes every block to zero
    although the blocks span magnitudes 2^-20 .. 2^20. A backstop behind the model checks, for
    ``fp4lab spec validate``."""
    import numpy as np

    from fp4lab.emulator.ref_quantize import dequantize_reference, quantize_reference

    if fmt.block is None:
        shape = (8, 8)
    elif fmt.block.is_2d:
        shape = (4 * fmt.block.shape[0], 2 * fmt.block.shape[1])
    else:
        shape = (8, 4 * fmt.block.shape[0])
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    x *= np.exp2(np.linspace(-20, 20, shape[0]))[:, None]
    x = x.astype(np.float32)
    try:
        with np.errstate(all="ignore"):
            y = dequantize_reference(quantize_reference(x, fmt))
    except Exception as exc:  # noqa: BLE001 - whatever breaks, the format cannot be used
        raise SpecError(f"{where}: quantizing a test tensor fails ({type(exc).__name__}: {one_line(str(exc))})") \
            from None
    if not np.all(np.isfinite(y)):
        raise SpecError(f"{where}: quantizing finite test values gives NaN or Inf; check the scale rule and targets")
    if not np.any(y != 0) and fmt.scale_rule.min_scale is None:  # a min_scale clamp may flush small data
        raise SpecError(f"{where}: every block of a test tensor spanning 2^-20 .. 2^20 quantizes to zero; check "
                        "the scale format, min_scale and targets")
