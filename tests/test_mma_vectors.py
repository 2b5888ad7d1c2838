"""Published H200 tensor-core outputs (Khattak-Mikaitis vectors): the hopper-sm90 model must reproduce every row
bit for bit (5000/5000 per format), with the numba kernels; a sample also through the pure-Python reference."""

from pathlib import Path

import numpy as np
import pytest

from fp4lab.emulator.mma import Prepared, finish, resolve_kind

DATA = np.load(Path(__file__).parent / "data" / "km_h200" / "h200_vectors.npz")

CASES = [  # (file prefix, kind, result key, C used by the hardware run)
    ("fp16", "mma.sync.f16", "fp16_d_fp32", True),
    ("fp16", "mma.sync.f16.f16acc", "fp16_d_fp16", True),
    ("bf16", "mma.sync.bf16", "bf16_d_fp32", True),
    ("tf32", "mma.sync.tf32", "tf32_d_fp32", True),
    ("E4M3", "wgmma.e4m3", "E4M3_d_fp32", False),
    ("E5M2", "wgmma.e5m2", "E5M2_d_fp32", False),
]


def _rowwise(prefix: str, kind_name: str, use_c: bool, rows: slice, impl: str) -> np.ndarray:
    """One dot product per row: the rows are the diagonal of A @ B, so run each row as an M=N=1 chain."""
    kind = resolve_kind("hopper-sm90", kind_name)
    a = DATA[f"{prefix}_a"][rows].view(np.float32)
    b = DATA[f"{prefix}_b"][rows].view(np.float32)
    c = DATA[f"{prefix}_c"][rows].view(np.float32).astype(np.float64)
    if kind.c_format == "f16":
        c = c.astype(np.float16).astype(np.float64)
    if not use_c:
        c = np.zeros_like(c)
    out = np.empty(len(c))
    if impl == "numba":  # 500-row tiles as full 500 x 500 products; keep the diagonal
        for i in range(0, len(c), 500):
            sub = Prepared(kind, a[i:i + 500], np.ascontiguousarray(b[i:i + 500].T))
            out[i:i + 500] = np.diagonal(sub.run(np.repeat(c[i:i + 500, None], sub.N, axis=1)))
    else:
        for i in range(len(c)):
            one = Prepared(kind, a[i:i + 1], np.ascontiguousarray(b[i:i + 1].T))
            out[i] = one.run(np.array([[c[i]]]), impl=impl)[0, 0]
    return finish(out[None, :], kind)[0]


@pytest.mark.parametrize("prefix,kind,dkey,use_c", CASES, ids=[c[1] for c in CASES])
def test_h200_vectors_numba_bit_exact(prefix, kind, dkey, use_c):
    got = _rowwise(prefix, kind, use_c, slice(None), "numba").view(np.uint32)
    want = DATA[dkey]
    assert got.shape == (5000,)
    assert int((got == want).sum()) == 5000


@pytest.mark.parametrize("prefix,kind,dkey,use_c", CASES, ids=[c[1] for c in CASES])
def test_h200_vectors_reference_sample(prefix, kind, dkey, use_c):
    got = _rowwise(prefix, kind, use_c, slice(0, 200), "reference").view(np.uint32)
    assert np.array_equal(got, DATA[dkey][:200])


def test_fp8_vectors_reject_blackwell_rule():
    """Control: the Blackwell F = 25 rule must NOT fit the H200 FP8 rows (hw_numerics.md 4.1: 2011/5000)."""
    kind = resolve_kind("blackwell-sm100", "tcgen05.f8f6f4")
    a = DATA["E4M3_a"].view(np.float32)
    b = DATA["E4M3_b"].view(np.float32)
    out = np.empty(5000)
    for i in range(0, 5000, 500):
        sub = Prepared(kind, a[i:i + 500], np.ascontiguousarray(b[i:i + 500].T))
        out[i:i + 500] = np.diagonal(sub.run(np.zeros((500, 500))))
    got = finish(out[None, :], kind)[0].view(np.uint32)
    assert int((got == DATA["E4M3_d_fp32"]).sum()) < 4000
