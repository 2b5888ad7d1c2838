"""Exceptions raised by fp4lab. Every message is one line naming what was wrong, where, and what is allowed."""

from __future__ import annotations

import difflib
import importlib
from types import ModuleType
from typing import Iterable


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'a' or 'b'?"`` for the choices closest to ``word`` (difflib, at most three), else ``""``."""
    close = [repr(c) for c in difflib.get_close_matches(str(word), list(choices), n=3)]
    if not close:
        return ""
    return f"did you mean {close[0] if len(close) == 1 else ', '.join(close[:-1]) + ' or ' + close[-1]}?"


class Fp4labError(Exception):
    """Base class of all fp4lab errors."""


class SpecError(Fp4labError, ValueError):
    """A format or hardware spec (file or model) is malformed."""


class UnknownFormatError(Fp4labError, LookupError):
    """A format name is neither registered nor a readable spec file."""

    def __str__(self) -> str:  # LookupError would quote the message like a dict key
        return str(self.args[0]) if self.args else ""


class InputError(Fp4labError, ValueError):
    """An input array has the wrong shape, dtype or values for the requested operation."""


class UnknownRecipeError(Fp4labError, LookupError, ValueError):
    """A recipe name is neither built in nor a readable recipe file."""


class OutputError(Fp4labError, ValueError):
    """An output path cannot be written as asked: it exists (and overwriting was not requested), is of the wrong
    kind (a folder where a file is expected, or the reverse), or its folder is missing."""


class MissingDependencyError(Fp4labError, ImportError):
    """An optional dependency that the requested work needs is not installed (the message names the extra)."""


def require(module: str, extra: str | None, what: str) -> ModuleType:
    """``module``, imported; if it cannot be, a ``MissingDependencyError`` naming ``what`` needs it and the pip
    command that installs it: ``fp4lab[extra]``, or the module itself where no extra holds it (``extra`` None).
    Call it before the work starts, so that nothing computed is lost to the missing module."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        hint = f"pip install 'fp4lab[{extra}]'" if extra else f"pip install {top}"
        why = "is not installed" if isinstance(exc, ModuleNotFoundError) else f"cannot be imported ({exc})"
        raise MissingDependencyError(f"{what} needs {top}, which {why}; {hint}"[:400]) from None


class DeviceError(Fp4labError, RuntimeError):
    """A GPU library call failed (the library's status code is in the message)."""


def check_plain_data(x: object, what: str) -> None:
    """Raise ``InputError`` where ``x`` holds no plain array data fp4lab could read value for value: a numpy masked
    array (its masked values would be quantized), a complex array (the imaginary part would be dropped), or a torch
    tensor that is meta (no data), sparse or nested. Anything else passes (other checks follow)."""
    import numpy as np

    kind = None
    if type(x).__module__.startswith("torch") and hasattr(x, "is_meta"):
        if x.is_meta:
            kind = "a meta tensor, which holds no data"
        elif x.is_nested or str(x.layout) != "torch.strided":
            kind = f"a {'nested' if x.is_nested else str(x.layout).removeprefix('torch.')} tensor; " \
                   "fp4lab reads dense (strided) tensors only"
        elif x.is_complex():
            kind = f"a complex tensor ({x.dtype}); fp4lab takes real values"
    elif isinstance(x, np.ma.MaskedArray):
        kind = "a numpy masked array; fill it (x.filled(value)) or drop the masked values first"
    elif getattr(getattr(x, "dtype", None), "kind", None) == "c":
        kind = f"a complex array ({x.dtype}); fp4lab takes real values"  # type: ignore[attr-defined]
    if kind is not None:
        raise InputError(f"{what}: the input is {kind}")
