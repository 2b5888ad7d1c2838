"""Published H200 tensor-core outputs (Khattak-Mikaitis vectors): the hopper-sm90 model must reproduce every row
bit for bit (5000/5000 per format) with the numba kernels, and a sample through the pure-Python reference."""

import numpy as np
import pytest

from fp4lab.hwspec.validation.vectors import CASES, emulate_rows, load_vectors

DATA = load_vectors()


@pytest.mark.parametrize("prefix,kind,dkey,use_c", CASES, ids=[c[1] for c in CASES])
def test_h200_vectors_numba_bit_exact(prefix, kind, dkey, use_c):
    got = emulate_rows(DATA, prefix, kind, use_c)
    assert got.shape == (5000,)
    assert int((got == DATA[dkey]).sum()) == 5000


@pytest.mark.parametrize("prefix,kind,dkey,use_c", CASES, ids=[c[1] for c in CASES])
def test_h200_vectors_reference_sample(prefix, kind, dkey, use_c):
    got = emulate_rows(DATA, prefix, kind, use_c, rows=slice(0, 200), impl="reference")
    assert np.array_equal(got, DATA[dkey][:200])


def test_fp8_vectors_reject_blackwell_rule():
    """Control: the Blackwell F = 25 rule must NOT fit the H200 FP8 rows (docs/hardware_validation.md section 2:
    2011/5000)."""
    got = emulate_rows(DATA, "E4M3", "tcgen05.f8f6f4", False, hw="blackwell-sm100")
    assert int((got == DATA["E4M3_d_fp32"]).sum()) < 4000
