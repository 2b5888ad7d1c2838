"""Published H200 tensor-core outputs (Khattak & Mikaitis, BSD-2; fp4lab/hwspec/data/README.md) and their
bit-exact check against the hopper-sm90 model: one dot product per row, D = A.B + C."""

from __future__ import annotations

from pathlib import Path

import numpy as np

VECTORS = Path(__file__).parents[1] / "data" / "km_h200_vectors.npz"

# (file prefix, hopper-sm90 kind, result key, whether the hardware run used C)
CASES: tuple[tuple[str, str, str, bool], ...] = (
    ("fp16", "mma.sync.f16", "fp16_d_fp32", True),
    ("fp16", "mma.sync.f16.f16acc", "fp16_d_fp16", True),
    ("bf16", "mma.sync.bf16", "bf16_d_fp32", True),
    ("tf32", "mma.sync.tf32", "tf32_d_fp32", True),
    ("E4M3", "wgmma.e4m3", "E4M3_d_fp32", False),
    ("E5M2", "wgmma.e5m2", "E5M2_d_fp32", False),
)


def load_vectors() -> dict[str, np.ndarray]:
    """All arrays of the vector file (uint32 fp32 bit patterns)."""
    with np.load(VECTORS) as z:
        return {k: z[k] for k in z.files}


def emulate_rows(data: dict[str, np.ndarray], prefix: str, kind_name: str, use_c: bool, rows: slice = slice(None),
                 hw: str = "hopper-sm90", impl: str = "numba") -> np.ndarray:
    """Emulated D (uint32 bits) of each row. numba: 500-row tiles as full products, keeping the diagonal."""
    from fp4lab.hwspec.mma import Prepared, finish, resolve_kind

    kind = resolve_kind(hw, kind_name)
    fmt = {"E4M3": "e4m3", "E5M2": "e5m2"}.get(prefix)  # FP8 kinds take e4m3 and e5m2: name which one
    a = data[f"{prefix}_a"][rows].view(np.float32)
    b = data[f"{prefix}_b"][rows].view(np.float32)
    c = data[f"{prefix}_c"][rows].view(np.float32).astype(np.float64)
    if kind.c_format == "f16":
        c = c.astype(np.float16).astype(np.float64)
    if not use_c:
        c = np.zeros_like(c)
    out = np.empty(len(c))
    step = 500 if impl == "numba" else 1
    for i in range(0, len(c), step):
        sub = Prepared(kind, a[i:i + step], np.ascontiguousarray(b[i:i + step].T), a_format=fmt, b_format=fmt)
        out[i:i + step] = np.diagonal(sub.run(np.repeat(c[i:i + step, None], sub.N, axis=1), impl=impl))
    return finish(out[None, :], kind)[0].view(np.uint32)


def check_published_vectors(impl: str = "numba") -> list[dict]:
    """Per case: kind, rows, bit-exact matches."""
    data = load_vectors()
    res = []
    for prefix, kind, dkey, use_c in CASES:
        got = emulate_rows(data, prefix, kind, use_c, impl=impl)
        res.append({"vectors": f"H200 {prefix} -> {dkey.split('_d_')[1]}", "kind": kind, "rows": int(got.size),
                    "bit_exact": int((got == data[dkey]).sum())})
    return res
