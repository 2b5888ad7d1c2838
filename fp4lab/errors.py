"""Exceptions raised by fp4lab. Every message is one line naming what was wrong, where, and what is allowed."""

from __future__ import annotations


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
