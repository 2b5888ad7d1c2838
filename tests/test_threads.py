"""fp4lab leaves the caller's threading alone: numba's OpenMP layer must not reset torch's thread count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import json, sys
import numpy as np
import torch
if sys.argv[1] == "set":
    torch.set_num_threads(1)
import fp4lab
seen = [torch.get_num_threads()]
fp4lab.quantize(np.ones((16, 32), np.float32), "nvfp4")
seen.append(torch.get_num_threads())
fp4lab.emulate_mma(np.ones((4, 32)), np.ones((32, 4)), hw="hopper-sm90", kind="wgmma.bf16")
seen.append(torch.get_num_threads())
print(json.dumps(seen))
"""


@pytest.mark.parametrize("how", ["env", "set"])
def test_torch_threads_unchanged(how):
    """OMP_NUM_THREADS=1 or torch.set_num_threads(1) holds across quantize and emulate_mma (numba: 3 threads)."""
    env = dict(os.environ, NUMBA_NUM_THREADS="3", PYTHONPATH=str(ROOT))
    env.pop("OMP_NUM_THREADS", None)
    if how == "env":
        env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", SCRIPT, how], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [1, 1, 1]
