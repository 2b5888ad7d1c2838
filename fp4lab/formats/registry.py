"""The format registry (``fp4lab.registry.SpecRegistry``): the built-ins are the TOML files of
``fp4lab/formats/builtin``; users register their own ``QuantFormat``s."""

from __future__ import annotations

from pathlib import Path

from fp4lab.errors import UnknownFormatError
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.formats.spec_io import load_model
from fp4lab.registry import SpecRegistry

# Display order of the headline built-ins; any other file in builtin/ follows, sorted by name.
DISPLAY_FIRST: tuple[str, ...] = (
    "mxfp4", "nvfp4", "ufp4", "e2m1-b16-fp32", "int4-b32-e8m0", "int4-b16-fp32", "nf4-b64-fp32",
    "mxfp4-rceil", "mxfp4-ceil", "mxfp4-even", "nvfp4-torchao", "nvfp4-torchao-1level", "nvfp4-te", "nvfp4-4over6",
    "nvfp4-2d",
    "ufp4-e4m3", "ufp4-e8m0",
    "e2m1", "e1m2", "int4",
)


def load_format(path: str | Path) -> QuantFormat:
    """Validate a ``.toml``/``.json`` spec file and return its ``QuantFormat`` (not registered)."""
    return load_model(QuantFormat, path)


FORMATS: SpecRegistry[QuantFormat] = SpecRegistry(
    QuantFormat, Path(__file__).parent / "builtin", load_format, kind="format", plural="formats",
    display_first=DISPLAY_FIRST, unknown=UnknownFormatError)
BUILTIN_NAMES: tuple[str, ...] = FORMATS.builtin_names


def list_formats() -> list[str]:
    """Registered format names, built-ins first (in their documented order), then user formats."""
    return FORMATS.names()


def register(fmt: QuantFormat, *, overwrite: bool = False) -> QuantFormat:
    """Add ``fmt`` to the registry under ``fmt.name``; built-in names cannot be replaced, nor (without
    ``overwrite``) a different format of the same name."""
    return FORMATS.register(fmt, overwrite=overwrite)


def get_format(name: str | Path | QuantFormat) -> QuantFormat:
    """A registered format by name, a spec file by path, or ``name`` itself if it already is a ``QuantFormat``."""
    return FORMATS.get(name)
