"""Load tensors from files as float32 numpy arrays, never executing code from the file.

``.npy`` / ``.npz``: the ``.npy`` header is read and checked first (dtype, shape, declared size against the file
or zip member size and ``max_tensor_bytes()``), then only the requested array is read; pickled (object) arrays
are refused. ``.pt`` / ``.pth``: zip-format ``torch.save`` files only, declared sizes checked, then
``torch.load(weights_only=True, mmap=True)``. ``.safetensors``: the header is parsed and checked here (offsets,
sizes, dtypes) and only the requested tensor is read. A file holding several tensors needs ``key`` unless it
holds exactly one; a spec ``path::key`` names a tensor inside a file (a path that exists as written is never
split, so ``a::b.npy`` loads). torch tensors must be dense, with data (not sparse, nested or meta), and their
element count, not their stored bytes (a stride-0 tensor stores one), counts against the limit. Every refusal is a
one-line ``InputError`` naming the file.

The size limit (bytes of the float32 result, and of what is read) is 1 GiB, or ``FP4LAB_MAX_TENSOR_BYTES``.
"""

from __future__ import annotations

import math
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from fp4lab.errors import InputError, check_plain_data, require
from fp4lab.formats.spec_io import DuplicateKeyError, json_loads_unique

SUFFIXES: tuple[str, ...] = (".npy", ".npz", ".pt", ".pth", ".safetensors")
DEFAULT_MAX_TENSOR_BYTES = 1 << 30
_CHUNK = 1 << 20
_MAX_SAFETENSORS_HEADER = 100 << 20


def max_tensor_bytes() -> int:
    """Largest tensor (float32 bytes) a file may hand over: ``FP4LAB_MAX_TENSOR_BYTES`` or 1 GiB."""
    text = os.environ.get("FP4LAB_MAX_TENSOR_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_TENSOR_BYTES
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"FP4LAB_MAX_TENSOR_BYTES must be a positive integer, got {text[:40]!r}") from None
    if value <= 0:
        raise InputError(f"FP4LAB_MAX_TENSOR_BYTES must be a positive integer, got {value}")
    return value


def is_tensor_file(spec: str) -> bool:
    """True if ``spec`` (optionally ``path::key``) names a file with a supported suffix."""
    return Path(spec.split("::", 1)[0]).suffix.lower() in SUFFIXES


def _names(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:8])
    return (shown + f", ... ({len(names)} in all)" if len(names) > 8 else shown) or "nothing"


def _pick(tensors: dict[str, Any], key: str | None, path: Path) -> Any:
    if key is not None:
        if key not in tensors:
            raise InputError(f"{path}: no tensor named '{key[:80]}'; it holds {_names(list(tensors))}")
        return tensors[key]
    if len(tensors) != 1:
        raise InputError(f"{path}: holds {len(tensors)} tensors ({_names(list(tensors))}); name one as PATH::KEY")
    return next(iter(tensors.values()))


def _check_size(count: int, itemsize: int, where: str) -> None:
    limit = max_tensor_bytes()
    need = max(count * 4, count * itemsize)
    if need > limit:
        raise InputError(f"{where}: {count} elements ({need} bytes) exceed the limit of {limit} bytes "
                         "(FP4LAB_MAX_TENSOR_BYTES)")


def _to_float32(value: Any, where: str) -> np.ndarray:
    if type(value).__module__.startswith("torch"):
        import torch

        if not isinstance(value, torch.Tensor) or not torch.is_floating_point(value):
            raise InputError(f"{where}: expected a floating-point tensor, got "
                             f"{value.dtype if isinstance(value, torch.Tensor) else type(value).__name__}")
        check_plain_data(value, where)
        _check_size(value.numel(), value.element_size(), where)  # counts elements, not stored bytes (stride 0)
        t = value.detach().cpu()
        if t.dtype == torch.float32:
            return np.array(t.numpy(), dtype=np.float32, copy=True)  # never a view of a mapped file
        return t.to(torch.float32).numpy()
    arr = np.asarray(value)
    if arr.dtype.kind != "f":
        raise InputError(f"{where}: expected a floating-point array, got dtype {arr.dtype}")
    return np.asarray(arr, dtype=np.float32)


# ---- .npy / .npz ----------------------------------------------------------------------------------------------
def _npy_header(f: BinaryIO, where: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of a .npy stream positioned at its start; refuses pickles and non-floats."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
        else:  # 3.0 (utf-8 header): numpy's private reader, where this numpy has it
            impl = getattr(fmt, "_read_array_header", None)
            if impl is None:
                from numpy.lib import _format_impl as impl_mod  # numpy >= 2

                impl = impl_mod._read_array_header
            shape, fortran, dtype = impl(f, version)
    except (ValueError, EOFError, SyntaxError, TypeError) as exc:
        raise InputError(f"{where}: not a valid .npy array ({' '.join(str(exc).split())[:160]})") from None
    if dtype.hasobject:
        raise InputError(f"{where}: holds Python objects (a pickle); fp4lab never loads those")
    if not isinstance(shape, tuple) or any(not isinstance(s, int) or s < 0 for s in shape):
        raise InputError(f"{where}: not a valid .npy array (header declares shape {str(shape)[:80]})")
    if dtype.kind != "f":
        raise InputError(f"{where}: expected a floating-point array, got dtype {dtype}")
    return tuple(int(s) for s in shape), bool(fortran), dtype


def _read_into(f: BinaryIO, dtype: np.dtype, count: int, where: str) -> np.ndarray:
    """``count`` items of ``dtype`` read in chunks into one preallocated array (no second copy)."""
    out = np.empty(count, dtype=dtype)
    buf = memoryview(out.view(np.uint8).reshape(-1))
    pos = 0
    while pos < len(buf):
        n = f.readinto(buf[pos:pos + _CHUNK])
        if not n:
            raise InputError(f"{where}: truncated: {pos} of {len(buf)} declared bytes present")
        pos += n
    return out


def _load_npy_stream(f: BinaryIO, available: int, where: str, exact: bool) -> np.ndarray:
    shape, fortran, dtype = _npy_header(f, where)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    body = available - f.tell()
    if nbytes > body or (exact and nbytes != body):
        raise InputError(f"{where}: header declares shape {shape} of {dtype} ({nbytes} bytes) but {body} bytes "
                         "follow it")
    _check_size(count, dtype.itemsize, where)
    arr = _read_into(f, dtype, count, where).reshape(shape, order="F" if fortran else "C")
    return _to_float32(arr, where)


def _load_npz(path: Path, key: str | None) -> np.ndarray:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise InputError(f"{path}: not a valid .npz (zip) file ({exc})") from None
    with zf:
        members = {(i.filename[:-4] if i.filename.endswith(".npy") else i.filename): i for i in zf.infolist()
                   if not i.is_dir()}
        info = _pick(members, key, path)  # chosen before anything is decompressed
        name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        where = f"{path}::{name}"
        try:
            with zf.open(info) as f:
                return _load_npy_stream(f, info.file_size, where, exact=True)
        except (zipfile.BadZipFile, EOFError, NotImplementedError, RuntimeError) as exc:
            raise InputError(f"{where}: corrupt zip member ({' '.join(str(exc).split())[:160]})") from None


def _load_npy(path: Path) -> np.ndarray:
    with open(path, "rb") as f:
        return _load_npy_stream(f, os.fstat(f.fileno()).st_size, str(path), exact=False)


# ---- .safetensors ---------------------------------------------------------------------------------------------
_ST_DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "BF16": "<u2"}
_ST_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
             "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_ST_FLOATS = {"F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2"}


def _safetensors_header(f: BinaryIO, size: int, path: Path) -> tuple[dict[str, dict], int]:
    """(tensor entries checked against the file, offset of the data section)."""
    head = f.read(8)
    if len(head) < 8:
        raise InputError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    n = int.from_bytes(head, "little")
    if n > min(size - 8, _MAX_SAFETENSORS_HEADER):
        raise InputError(f"{path}: corrupt safetensors file: header declares {n} bytes, the file has {size}")
    try:
        header = json_loads_unique(f.read(n).decode("utf-8"))
    except DuplicateKeyError as exc:
        raise InputError(f"{path}: corrupt safetensors file: its header names '{str(exc.args[0])[:80]}' twice") \
            from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InputError(f"{path}: corrupt safetensors file: its header is not JSON") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: corrupt safetensors file: its header is not a JSON object")
    data_size = size - 8 - n
    entries: dict[str, dict] = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        ok = isinstance(e, dict) and isinstance(e.get("dtype"), str) and e["dtype"] in _ST_SIZES \
            and isinstance(e.get("shape"), list) and all(type(s) is int and s >= 0 for s in e["shape"]) \
            and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2 \
            and all(type(o) is int for o in e["data_offsets"])
        if not ok:
            raise InputError(f"{path}: corrupt safetensors file: bad entry for tensor '{str(name)[:80]}'")
        b, end = e["data_offsets"]
        nbytes = math.prod(e["shape"]) * _ST_SIZES[e["dtype"]]
        if not 0 <= b <= end <= data_size or end - b != nbytes:
            raise InputError(f"{path}: corrupt safetensors file: tensor '{str(name)[:80]}' declares shape "
                             f"{e['shape']} of {e['dtype']} ({nbytes} bytes) at offsets [{b}, {end}] of a "
                             f"{data_size}-byte data section")
        entries[str(name)] = e
    return entries, 8 + n


def _load_safetensors(path: Path, key: str | None) -> np.ndarray:
    with open(path, "rb") as f:
        entries, data_start = _safetensors_header(f, os.fstat(f.fileno()).st_size, path)
        name = _pick({n: n for n in entries}, key, path)
        e = entries[name]
        where = f"{path}::{name}"
        if e["dtype"] not in _ST_FLOATS:
            raise InputError(f"{where}: expected a floating-point tensor, got dtype {e['dtype']}")
        count = math.prod(e["shape"])
        _check_size(count, _ST_SIZES[e["dtype"]], where)
        if e["dtype"] in _ST_DTYPES:
            f.seek(data_start + e["data_offsets"][0])
            raw = _read_into(f, np.dtype(_ST_DTYPES[e["dtype"]]), count, where).reshape(e["shape"])
            if e["dtype"] == "BF16":  # exact: bfloat16 bits are the top half of the float32
                return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
            return np.asarray(raw, dtype=np.float32)
    require("torch", "torch", f"{where}: reading an fp8 safetensors tensor")
    safe_open = require("safetensors", None, f"{where}: reading an fp8 safetensors tensor").safe_open  # torch dtypes

    with safe_open(str(path), framework="pt") as sf:
        return _to_float32(sf.get_tensor(name), where)


# ---- .pt / .pth -----------------------------------------------------------------------------------------------
def _load_torch(path: Path, key: str | None) -> np.ndarray:
    import pickle

    torch = require("torch", "torch", f"{path}: reading a .pt file")

    if not zipfile.is_zipfile(path):
        raise InputError(f"{path}: not a zip-format torch file (torch.save since torch 1.6); fp4lab does not "
                         "load the legacy format")
    try:
        with zipfile.ZipFile(path) as zf:
            declared = sum(i.file_size for i in zf.infolist())
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise InputError(f"{path}: corrupt torch file ({exc})") from None
    limit = max_tensor_bytes()
    if declared > limit + (64 << 20):
        raise InputError(f"{path}: declares {declared} bytes of content, beyond the limit of {limit} bytes "
                         "(FP4LAB_MAX_TENSOR_BYTES)")
    try:
        with warnings.catch_warnings():  # torch's prototype warnings (nested tensors) are not the user's concern
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError:  # torch's message advises disabling the check: never repeat that
        raise InputError(f"{path}: refused: it holds objects other than tensors, numbers, strings and containers "
                         "(fp4lab loads torch files with weights_only=True and never runs their code)") from None
    except (RuntimeError, ValueError, EOFError, KeyError, TypeError, AttributeError, IndexError,
            zipfile.BadZipFile) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        detail = "" if "weights_only" in first else f": {first[:160]}"
        raise InputError(f"{path}: not a readable torch file ({type(exc).__name__}{detail})") from None
    if isinstance(obj, torch.Tensor):
        if key is not None:
            raise InputError(f"{path}: holds a single tensor; drop '::{key[:80]}'")
        return _to_float32(obj, str(path))
    if isinstance(obj, dict):
        tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        name = key if key is not None else (next(iter(tensors)) if len(tensors) == 1 else None)
        return _to_float32(_pick(tensors, key, path), f"{path}::{name}")
    raise InputError(f"{path}: holds a {type(obj).__name__}; expected a tensor or a dict of tensors")


def _split_key(text: str) -> tuple[str, str]:
    """(path, key) of ``path::key``: at the first ``::`` whose left side exists, so that a file or folder named
    ``a::b.npz`` works; at the first ``::`` if none does (the error then names that path)."""
    cuts = [i for i in range(len(text) - 1) if text.startswith("::", i)]
    at = next((i for i in cuts if os.path.lexists(text[:i])), cuts[0])
    return text[:at], text[at + 2:]


def load_tensor(spec: str | Path, key: str | None = None) -> np.ndarray:
    """float32 array from ``spec`` (``path`` or ``path::key``); see the module docstring for the loaders."""
    text = str(spec)
    if key is None and "::" in text and not os.path.lexists(text):
        text, key = _split_key(text)
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"{path}: unsupported tensor file type '{suffix[:20]}'; use {', '.join(SUFFIXES)}")
    try:
        if path.is_dir():
            raise InputError(f"{path}: is a directory, not a tensor file")
        if not path.is_file():
            if path.exists():
                raise InputError(f"{path}: not a regular file (a device, FIFO or socket)")
            raise InputError(f"{path}: no such file")
        if suffix == ".npy":
            if key is not None:
                raise InputError(f"{path}: a .npy file holds one array; drop '::{key[:80]}'")
            return _load_npy(path)
        if suffix == ".npz":
            return _load_npz(path, key)
        if suffix == ".safetensors":
            return _load_safetensors(path, key)
        return _load_torch(path, key)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except MemoryError:
        raise InputError(f"{path}: not enough memory to load the tensor") from None
