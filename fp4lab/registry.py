"""Registries of named specs (formats, accelerator specs, recipes), one set of verbs for all three.

The built-ins of a registry are the ``*.toml`` files of one folder (adding a file adds a built-in; no code), each
loaded and validated on first use. Users add their own objects by name. Every registry answers:

* ``names()``: the built-ins (those of ``display_first`` in that order, then the other files sorted by name),
  then the registered names in the order they were registered;
* ``get(x)``: ``x`` itself if it is already a spec object; the object of a built-in or registered name; else, for a
  path (a string or ``Path`` ending in ``.toml``/``.json``, or naming an existing file), the file loaded and
  validated, not registered; anything else is a one-line error that lists the known names;
* ``load(path)``: a spec file, validated, not registered (every problem a one-line ``SpecError`` naming the file);
* ``register(obj, overwrite=False)``: ``obj`` under its ``name``, which is returned by ``get`` from then on; a
  built-in name is refused, and so is a name already registered to a different object unless ``overwrite``
  (registering an equal object again is harmless).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from fp4lab.errors import Fp4labError, InputError, SpecError, did_you_mean, one_line

SPEC_SUFFIXES: tuple[str, ...] = (".toml", ".json")


class Named(Protocol):
    """A spec object: it has a ``name``."""

    name: str


T = TypeVar("T", bound=Named)


def spec_names(folder: Path, display_first: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Stems of the ``*.toml`` files of ``folder``: those in ``display_first`` in that order, then the rest sorted."""
    found = {p.stem for p in folder.glob("*.toml")}
    return tuple(n for n in display_first if n in found) + tuple(sorted(found - set(display_first)))


def is_spec_path(key: str) -> bool:
    """Whether ``key`` (not a known name) is meant as a spec file: it ends in a spec suffix or names a file."""
    if Path(key).suffix.lower() in SPEC_SUFFIXES:
        return True
    try:
        return Path(key).is_file()
    except (OSError, ValueError):  # a name too long for a path, or holding a NUL
        return False


class SpecRegistry(Generic[T]):
    """Built-in and registered objects of one spec model ``cls`` (see the module docstring).

    ``kind`` names one object in messages ("format"), ``plural`` several ("formats"); ``loader`` reads and
    validates a spec file; ``unknown`` is the error class of a name that is neither known nor a file."""

    def __init__(self, cls: type[T], folder: Path, loader: Callable[[str | Path], T], *, kind: str, plural: str,
                 display_first: tuple[str, ...] = (), unknown: type[Fp4labError] = SpecError) -> None:
        self.cls, self.folder, self.kind, self.plural, self.unknown = cls, folder, kind, plural, unknown
        self._loader = loader
        self.builtin_names: tuple[str, ...] = spec_names(folder, display_first)
        self.builtins: Mapping[str, T] = BuiltinView(self)
        self._loaded: dict[str, T] = {}
        self._registered: dict[str, T] = {}

    def names(self) -> list[str]:
        """Built-in names first (display order), then registered names in registration order."""
        return list(self.builtin_names) + list(self._registered)

    def load(self, path: str | Path) -> T:
        """The validated object of spec file ``path`` (not registered)."""
        return self._loader(path)

    def builtin(self, name: str) -> T:
        """Built-in ``name`` (one of ``builtin_names``), loaded from its file on first use."""
        if name not in self._loaded:
            path = self.folder / f"{name}.toml"
            obj = self.load(path)
            if obj.name != name:
                raise SpecError(f"{path}: built-in file declares name '{one_line(obj.name, 80)}', expected '{name}'")
            self._loaded[name] = obj
        return self._loaded[name]

    def get(self, x: str | Path | T) -> T:
        """``x`` if it is a ``cls``, else the object of a known name or of a spec-file path."""
        if isinstance(x, self.cls):
            return x
        if not isinstance(x, (str, Path)):
            raise self.unknown(f"{self.kind} must be a name, a spec-file path or a {self.cls.__name__}, got "
                               f"{type(x).__name__}")
        key = str(x)
        if key in self._registered:
            return self._registered[key]
        if key in self.builtin_names:  # a built-in by name only: never a path assembled from the argument
            return self.builtin(key)
        if is_spec_path(key):
            return self.load(key)
        raise self.unknown(self._unknown_message(key))

    def register(self, obj: T, *, overwrite: bool = False) -> T:
        """Add ``obj`` under ``obj.name`` and return it; built-in names and (without ``overwrite``) a name taken by a
        different object are refused."""
        if not isinstance(obj, self.cls):
            raise InputError(f"register: expected a {self.cls.__name__}, got {type(obj).__name__}")
        name = obj.name
        if name in self.builtin_names:
            raise InputError(f"register: '{one_line(name, 80)}' is a built-in {self.kind} name; choose another name")
        if name in self._registered and self._registered[name] != obj and not overwrite:
            raise InputError(f"register: a different {self.kind} named '{one_line(name, 80)}' is already registered "
                             "(overwrite=True)")
        self._registered[name] = obj
        return obj

    def _unknown_message(self, key: str) -> str:
        hint = did_you_mean(key, self.names())
        user = f"registered: {', '.join(self._registered)}; " if self._registered else ""
        return (f"unknown {self.kind} {one_line(key, 80)!r}; {hint + ' ' if hint else ''}not a registered name or a "
                f"{'/'.join(SPEC_SUFFIXES)} file; {user}built-in {self.plural}: {', '.join(self.builtin_names)}")


class BuiltinView(Mapping[str, T]):
    """The built-ins of a registry as a read-only mapping, each loaded on first access."""

    def __init__(self, registry: SpecRegistry[T]) -> None:
        self._registry = registry

    def __getitem__(self, name: str) -> T:
        if name not in self._registry.builtin_names:
            raise KeyError(name)
        return self._registry.builtin(name)

    def __contains__(self, name: object) -> bool:
        return name in self._registry.builtin_names

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.builtin_names)

    def __len__(self) -> int:
        return len(self._registry.builtin_names)
