"""Optional dependencies are checked before any work, with one line naming the extra that installs them.

Each case runs the CLI in a fresh interpreter where the module cannot be imported (``sys.modules[name] = None``
makes ``import name`` raise ``ModuleNotFoundError``, as on an install without that extra)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_without(blocked: list[str], argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    code = (f"import sys\nfor m in {blocked!r}:\n    sys.modules[m] = None\n"
            f"from fp4lab.cli import main\nsys.exit(main({argv!r}))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.parametrize("blocked", [["torch"], ["triton"]])
def test_verify_without_torch_or_triton_names_the_gpu_extra(tmp_path, blocked):
    out = run_without(blocked, ["verify", "--device", "interpreter", "--formats", "mxfp4"], tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "fp4lab verify" in lines[0] and blocked[0] in lines[0], lines
    assert "pip install 'fp4lab[gpu]'" in lines[0]


def test_compare_plot_without_matplotlib_stops_before_the_run(tmp_path):
    out = run_without(["matplotlib"], ["compare", "nvfp4", "--shape", "16x32", "--plot", "g.png"], tmp_path)
    assert out.returncode == 2 and out.stdout == "", (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "compare --plot" in lines[0] and "pip install 'fp4lab[plot]'" in lines[0], lines
    assert not (tmp_path / "g.png").exists()


def test_pt_file_without_torch_names_the_torch_extra(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((4, 32), np.float32))
    (tmp_path / "x.pt").write_bytes((tmp_path / "x.npy").read_bytes())
    out = run_without(["torch"], ["compare", "nvfp4", "--dist", "x.pt"], tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "x.pt" in lines[0] and "pip install 'fp4lab[torch]'" in lines[0], lines
