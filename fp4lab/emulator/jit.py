"""``njit``: numba's ``njit`` with fp4lab's on-disk cache policy.

numba's cache files are pickles, loaded when a cached function is first called; whoever can write them runs code
in the next fp4lab process. So fp4lab's compiled kernels are cached only in a directory that nobody else can
write, and never in numba's own locations (the in-tree ``__pycache__`` or a shared ``NUMBA_CACHE_DIR`` that fails
the check):

* location: ``FP4LAB_CACHE_DIR``, else ``NUMBA_CACHE_DIR``, else ``$XDG_CACHE_HOME/fp4lab/numba``, else
  ``~/.cache/fp4lab/numba``; fp4lab creates missing directories with mode 0700;
* the directory must be owned by the current user and not writable by group or others; every ancestor must be
  owned by the user or root and not writable by group or others unless sticky (``/tmp``); if the directory can
  be entered by others, every file and directory below it must pass the same test;
* a directory that fails the check is not used: caching is off for the process, with one warning line on
  stderr;
* ``FP4LAB_NUMBA_CACHE=0`` (or ``off``, ``false``, ``no``) turns caching off (every process compiles again:
  about 13 s for ``fp4lab compare --backend emulator`` on 2 cores; the default compare compiles nothing);
* entries live in a subdirectory named by a digest of every fp4lab module that holds numba code
  (``NUMBA_SOURCES``) or constants that numba code compiles in (``NUMBA_CONSTANT_SOURCES``): numba checks only
  the timestamp of a function's own file, so a cached kernel would otherwise survive an edit of a helper it
  inlines from another module (``nb_encode.py`` called from ``nb_quantize.py``). Any edit of those modules
  compiles afresh.
* below that digest an entry is named by its module (``emulator/fp4lab.emulator.pack.pack_nibbles-37...``), not
  by where the file lies, and its validity stamp is the digest, not the file's timestamp: every copy of the same
  sources (another checkout or virtual environment, a study's frozen tree) shares one compiled kernel.

Only fp4lab's own functions are affected: numba's global configuration is left alone. ``cache_status()`` says
which directory is used, or why none is.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from pathlib import Path
from typing import Any, Callable

import numba

_OFF_WORDS = ("0", "off", "false", "no")
# fp4lab's modules with numba code (njit functions and the helpers they call across modules)
NUMBA_SOURCES = ("emulator/jit.py", "emulator/nb_tables.py", "emulator/nb_encode.py", "emulator/nb_quantize.py",
                 "emulator/pack.py", "emulator/nb_philox.py", "emulator/nb_rht.py", "emulator/threads.py",
                 "hwspec/mma_kernels.py")
# numpy modules whose constants njit code reads (numba compiles a global in as a literal): the Philox round count
# and multipliers, the plan enums' codes
NUMBA_CONSTANT_SOURCES = ("numerics/philox.py", "numerics/plan.py")


def sources_digest() -> str:
    """16 hex digits of SHA-256 over those modules' sources (with numba's version): the cache subdirectory."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(numba.__version__.encode())
    for rel in NUMBA_SOURCES + NUMBA_CONSTANT_SOURCES:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes())
    return h.hexdigest()[:16]
_MAX_ENTRIES = 20000  # bound of the tree walk of a directory that others can enter


def _default_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "fp4lab" / "numba"


def _insecure(path: Path, uid: int) -> str | None:
    """Why ``path`` (an existing directory) must not hold pickles this user loads, or None if it is safe."""
    real = Path(os.path.realpath(path))
    st = os.lstat(real)
    if not stat.S_ISDIR(st.st_mode):
        return f"{real} is not a directory"
    if st.st_uid != uid:
        return f"{real} is owned by uid {st.st_uid}, not by you (uid {uid})"
    if st.st_mode & 0o022:
        return f"{real} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    for parent in real.parents:
        pst = os.stat(parent)
        if pst.st_uid not in (0, uid):
            return f"its ancestor {parent} is owned by uid {pst.st_uid}"
        if pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX:
            return f"its ancestor {parent} is writable by group or others (mode {stat.S_IMODE(pst.st_mode):04o})"
    if st.st_mode & 0o011:  # others can enter: what lies below must be as safe
        seen = 0
        for root, dirs, files in os.walk(real):
            for name in dirs + files:
                seen += 1
                if seen > _MAX_ENTRIES:
                    return f"{real} holds more than {_MAX_ENTRIES} entries; not checked"
                est = os.lstat(os.path.join(root, name))
                if est.st_uid != uid or est.st_mode & 0o022:
                    return f"{os.path.join(root, name)} is not yours alone (uid {est.st_uid}, mode " \
                           f"{stat.S_IMODE(est.st_mode):04o})"
    return None


def _choose() -> tuple[Path | None, str]:
    """(cache directory or None, explanation)."""
    if os.environ.get("FP4LAB_NUMBA_CACHE", "").strip().lower() in _OFF_WORDS:
        return None, "off (FP4LAB_NUMBA_CACHE)"
    for var in ("FP4LAB_CACHE_DIR", "NUMBA_CACHE_DIR"):
        if os.environ.get(var):
            path, origin = Path(os.environ[var]).expanduser(), var
            break
    else:
        path, origin = _default_dir(), "default"
    if not path.is_absolute():
        return None, f"off: {origin} {path} is not an absolute path"
    if not hasattr(os, "getuid"):  # no POSIX ownership to check (Windows): a per-user location only
        return (path, f"{path} ({origin})") if origin == "default" else (None, "off: not checked on this OS")
    try:
        if not path.exists():
            path.mkdir(mode=0o700, parents=True)  # parents: default mode; the leaf: owner only
            os.chmod(path, 0o700)
        why = _insecure(path, os.getuid())
    except OSError as exc:
        why = f"{path}: {exc.strerror or exc}"
    if why is not None:
        return None, f"off: {why}"
    return path, f"{path} ({origin})"


_STATE: dict[str, Any] = {}


def cache_status() -> tuple[Path | None, str]:
    """(directory holding fp4lab's numba cache or None, one-line explanation); decided once per process."""
    if "dir" not in _STATE:
        _STATE["dir"], _STATE["why"] = _choose()
        if _STATE["dir"] is None and _STATE["why"].startswith("off:"):
            sys.stderr.write(f"fp4lab: warning: numba cache {_STATE['why']}; compiling without a cache "
                             "(set FP4LAB_NUMBA_CACHE=0 to silence)\n")
    return _STATE["dir"], _STATE["why"]


def _cache_class() -> Any:
    """A numba ``FunctionCache`` whose only locator is fp4lab's checked directory (built lazily)."""
    if "cls" in _STATE:
        return _STATE["cls"]
    from numba.core import caching

    digest = sources_digest()
    root = os.path.join(str(_STATE["dir"]), digest)

    class _Locator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        def __init__(self, py_func: Any, py_file: str):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            package, *sub = py_func.__module__.split(".")  # fp4lab.emulator.pack -> emulator
            self._ours = package == "fp4lab" and bool(sub)  # a module that the digest covers
            where = sub[:-1] if self._ours else [self.get_suitable_cache_subpath(py_file)]
            self._cache_path = os.path.join(root, *where)

        def get_cache_path(self) -> str:
            return self._cache_path

        def get_source_stamp(self) -> Any:
            """fp4lab's modules: the digest of their contents, wherever they lie and whatever their timestamps;
            any other file: numba's own stamp (its timestamp and size), which the digest does not cover."""
            return digest if self._ours else super().get_source_stamp()

        def ensure_cache_path(self) -> None:
            os.makedirs(self._cache_path, mode=0o700, exist_ok=True)
            caching.tempfile.TemporaryFile(dir=self._cache_path).close()

    class _Impl(caching.CompileResultCacheImpl):
        _locator_classes = [_Locator]

    class _Cache(caching.FunctionCache):
        _impl_class = _Impl

    _STATE["cls"] = _Cache
    return _Cache


def njit(*args: Any, cache: bool = False, **options: Any) -> Callable[..., Any]:
    """``numba.njit(**options)``; ``cache=True`` caches on disk under fp4lab's policy (module docstring).

    Unless ``options`` say otherwise, no C-callable (cfunc) wrapper is built: numba needs it only to pass a
    compiled function as a first-class value into another, which fp4lab never does, and it costs a fifth of the
    compile time of a small kernel (about 25 ms of 110 ms measured on 2 cores)."""
    options.setdefault("no_cfunc_wrapper", True)

    def decorate(fn: Callable[..., Any]) -> Any:
        disp = numba.njit(**options)(fn)
        if cache and cache_status()[0] is not None:
            try:
                disp._cache = _cache_class()(disp.py_func)  # what Dispatcher.enable_caching does
            except (RuntimeError, OSError):  # no usable location for this function: compile every time
                pass
        return disp

    if args and callable(args[0]) and len(args) == 1:
        return decorate(args[0])
    return decorate
