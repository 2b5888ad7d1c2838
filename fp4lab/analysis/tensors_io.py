"""Load tensors from files as float32 numpy arrays, never executing code from the file.

``.npy`` / ``.npz``: ``numpy.load(allow_pickle=False)``; ``.pt`` / ``.pth``: ``torch.load(weights_only=True)``;
``.safetensors``: the safetensors reader. A file holding several tensors needs ``key`` unless it holds exactly one.
A spec ``path::key`` names a tensor inside a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

SUFFIXES: tuple[str, ...] = (".npy", ".npz", ".pt", ".pth", ".safetensors")


def is_tensor_file(spec: str) -> bool:
    """True if ``spec`` (optionally ``path::key``) names a file with a supported suffix."""
    return Path(spec.split("::", 1)[0]).suffix.lower() in SUFFIXES


def _pick(tensors: dict[str, Any], key: str | None, path: Path) -> Any:
    if key is not None:
        if key not in tensors:
            raise ValueError(f"{path}: no tensor named '{key}'; it holds {', '.join(sorted(tensors)) or 'nothing'}")
        return tensors[key]
    if len(tensors) != 1:
        raise ValueError(f"{path}: holds {len(tensors)} tensors ({', '.join(sorted(tensors)[:8])}); "
                         "name one as PATH::KEY")
    return next(iter(tensors.values()))


def _to_float32(value: Any, where: str) -> np.ndarray:
    if type(value).__module__.startswith("torch"):
        import torch

        if not isinstance(value, torch.Tensor) or not torch.is_floating_point(value):
            raise ValueError(f"{where}: expected a floating-point tensor, got {type(value).__name__}")
        return value.detach().to(torch.float32).cpu().numpy()
    arr = np.asarray(value)
    if arr.dtype.kind != "f":
        raise ValueError(f"{where}: expected a floating-point array, got dtype {arr.dtype}")
    return arr.astype(np.float32)


def load_tensor(spec: str | Path, key: str | None = None) -> np.ndarray:
    """float32 array from ``spec`` (``path`` or ``path::key``); see the module docstring for the loaders."""
    text = str(spec)
    if key is None and "::" in text:
        text, key = text.split("::", 1)
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"{path}: unsupported tensor file type '{suffix}'; use {', '.join(SUFFIXES)}")
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if suffix == ".npy":
        if key is not None:
            raise ValueError(f"{path}: a .npy file holds one array; drop '::{key}'")
        return _to_float32(np.load(path, allow_pickle=False), str(path))
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return _to_float32(_pick({k: z[k] for k in z.files}, key, path), f"{path}::{key}")
    if suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            names = list(f.keys())
            name = _pick({n: n for n in names}, key, path)
            return _to_float32(f.get_tensor(name), f"{path}::{name}")
    import torch

    obj = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(obj, torch.Tensor):
        if key is not None:
            raise ValueError(f"{path}: holds a single tensor; drop '::{key}'")
        return _to_float32(obj, str(path))
    if isinstance(obj, dict):
        tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        return _to_float32(_pick(tensors, key, path), f"{path}::{key}")
    raise ValueError(f"{path}: holds a {type(obj).__name__}; expected a tensor or a dict of tensors")
