"""README's examples run as written: every ```python block, in order and in one namespace, in a fresh interpreter
(cwd a temporary directory); and every ``fp4lab ...`` command of the ```bash blocks exits 0, run as
``python -m fp4lab ...`` by the same interpreter.

Rules for the bash lines: a line is split at ``&&`` and ``;`` after its ``#`` comment is dropped; only commands
that start with ``fp4lab`` run (``pip install`` and ``pytest`` lines are the setup they describe). Commands that
need a GPU (``--device cuda``) are skipped. The files a command names as the user's own are made first: the
first ```toml block as ``my_grid.toml`` (README says so) and a small ``weights.safetensors``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
NEEDS_GPU = ("--device cuda",)


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def fp4lab_commands() -> list[str]:
    cmds = []
    for block in blocks("bash"):
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            cmds += [c.strip() for c in re.split(r"&&|;", line) if c.strip().startswith("fp4lab ")]
    return cmds


def env() -> dict[str, str]:
    return {**os.environ, "NUMBA_NUM_THREADS": "1", "TRITON_INTERPRET": "1", "MPLBACKEND": "Agg"}


def test_python_blocks_run(tmp_path):
    code = blocks("python")
    assert code, "README has no python example"
    runner = textwrap.dedent("""
        import sys, traceback
        ns = {"__name__": "__readme__"}
        for i, src in enumerate(BLOCKS, 1):
            try:
                exec(compile(src, f"README python block {i}", "exec"), ns)
            except BaseException:
                print(f"README python block {i} failed:", file=sys.stderr)
                traceback.print_exc()
                sys.exit(1)
    """).replace("BLOCKS", repr(code))
    r = subprocess.run([sys.executable, "-c", runner], cwd=tmp_path, env=env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]


@pytest.fixture
def user_files(tmp_path: Path) -> Path:
    np = pytest.importorskip("numpy")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    (tmp_path / "my_grid.toml").write_text(blocks("toml")[0])
    w = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    safetensors_numpy.save_file({"w": w}, str(tmp_path / "weights.safetensors"))
    return tmp_path


def test_commands_found():
    cmds = fp4lab_commands()
    assert "fp4lab compare" in cmds and len(cmds) >= 10, cmds


@pytest.mark.parametrize("cmd", fp4lab_commands())
def test_fp4lab_command_exits_0(user_files, cmd):
    if any(flag in cmd for flag in NEEDS_GPU):
        pytest.skip("needs a GPU")
    shell = f'"{sys.executable}" -m fp4lab' + cmd[len("fp4lab"):]
    r = subprocess.run(["bash", "-c", shell], cwd=user_files, env=env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stderr[-4000:]}"


def test_ci_runs_readme_test_command():
    """.ci/run ends with README's test command (the second bash block), character for character."""
    ci = (README.parent / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == blocks("bash")[1].strip()


def test_quick_command_leaves_out_every_heavy_marker():
    """README's quick command deselects exactly the markers that tests/conftest.py assigns to heavy tests, and
    pyproject.toml registers each of them."""
    import tomllib

    from conftest import HEAVY, MARKS

    quick = [b.strip() for b in blocks("bash") if re.search(r'pytest -m "', b)]
    assert len(quick) == 1, quick
    expr = re.search(r'-m "([^"]+)"', quick[0]).group(1)
    assert expr == " and ".join(f"not {m}" for m in HEAVY)
    registered = tomllib.loads((README.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    names = {line.split(":")[0] for line in registered["markers"]}
    assert set(HEAVY) <= names and {m for marks in MARKS.values() for m in marks} <= set(HEAVY)
