"""The format registry: built-in formats (TOML files shipped in ``fp4lab/formats/builtin``) plus user formats."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fp4lab.errors import InputError, SpecError, UnknownFormatError, did_you_mean
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.formats.spec_io import builtin_names, load_model, one_line

# Display order of the headline built-ins; any other file in builtin/ follows, sorted by name.
DISPLAY_FIRST: tuple[str, ...] = (
    "mxfp4", "nvfp4", "ufp4", "e2m1-b16-fp32", "int4-b32-e8m0", "int4-b16-fp32", "nf4-b64-fp32",
    "mxfp4-rceil", "mxfp4-ceil", "mxfp4-even", "nvfp4-torchao", "nvfp4-torchao-1level", "nvfp4-te", "nvfp4-4over6",
    "nvfp4-2d",
    "ufp4-e4m3", "ufp4-e8m0",
    "e2m1", "e1m2", "int4",
)
BUILTIN_NAMES: tuple[str, ...] = builtin_names("fp4lab.formats", DISPLAY_FIRST)

_registry: dict[str, QuantFormat] = {}
_builtins_loaded = False


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    folder = resources.files("fp4lab.formats") / "builtin"
    for name in BUILTIN_NAMES:
        with resources.as_file(folder / f"{name}.toml") as path:
            fmt = load_model(QuantFormat, path)
        if fmt.name != name:
            raise SpecError(f"{path}: built-in file declares name '{fmt.name}', expected '{name}'")
        _registry.setdefault(name, fmt)
    _builtins_loaded = True


def list_formats() -> list[str]:
    """Registered format names, built-ins first (in their documented order), then user formats."""
    _load_builtins()
    return list(BUILTIN_NAMES) + [n for n in _registry if n not in BUILTIN_NAMES]


def load_format(path: str | Path) -> QuantFormat:
    """Validate a ``.toml``/``.json`` spec file and return its ``QuantFormat`` (not registered)."""
    return load_model(QuantFormat, path)


def register(fmt: QuantFormat, *, overwrite: bool = False) -> QuantFormat:
    """Add ``fmt`` to the registry under ``fmt.name``; built-in names cannot be replaced."""
    _load_builtins()
    if fmt.name in BUILTIN_NAMES:
        raise InputError(f"register: '{fmt.name}' is a built-in format name; choose another name")
    if fmt.name in _registry and not overwrite and _registry[fmt.name] != fmt:
        raise InputError(f"register: a different format named '{fmt.name}' is already registered (overwrite=True)")
    _registry[fmt.name] = fmt
    return fmt


def get_format(name: str | Path | QuantFormat) -> QuantFormat:
    """A registered format by name, a spec file by path, or ``name`` itself if it already is a ``QuantFormat``."""
    if isinstance(name, QuantFormat):
        return name
    if not isinstance(name, (str, Path)):
        raise UnknownFormatError(f"format must be a name, a spec-file path or a QuantFormat, got {type(name).__name__}")
    _load_builtins()
    key = str(name)
    if key in _registry:
        return _registry[key]
    try:
        is_file = Path(key).is_file()
    except (OSError, ValueError):  # a name too long for a path, or holding a NUL
        is_file = False
    if Path(key).suffix.lower() in (".toml", ".json") or is_file:
        return load_format(key)
    hint = did_you_mean(key, list_formats())
    raise UnknownFormatError(f"unknown format '{one_line(key, 80)}': not registered and not a spec file; "
                             f"{hint + ' ' if hint else ''}known: {', '.join(list_formats())}")
