"""Installation and first-run cost: numpy is not capped for every user, and README's
first command compiles no numba kernel (and, on the emulator backend, only the kernels it needs, each once).

The first-run time itself is measured by ``benchmarks/first_run.py`` (a subprocess with an empty numba cache).
"""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np

import fp4lab
from fp4lab import QuantizeOptions
from fp4lab.emulator import nb_quantize
from fp4lab.emulator.nb_quantize import Geometry, quantize_blocks
from fp4lab.emulator.nb_tables import tables_for
from fp4lab.emulator.quantize import _encode_multipliers, dequantize_emulated, quantize_emulated
from fp4lab.testing.bits import same_bits

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ("_quantize_items_fused", "_quantize_items_unfused", "_encode_flat_items", "_dequantize_items")


def _numpy_caps(reqs: list[str]) -> list[str]:
    """The numpy requirements in ``reqs`` that set an upper bound or a fixed version."""
    out = []
    for r in reqs:
        spec = r.split(";")[0].replace(" ", "")
        name = spec.split("<")[0].split(">")[0].split("=")[0].split("!")[0].split("~")[0]
        if name.lower() == "numpy" and any(op in spec for op in ("<", "==", "~=")):
            out.append(spec)
    return out


def test_core_dependencies_do_not_cap_numpy():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert _numpy_caps(project["dependencies"]) == []


def test_numpy_caps_of_extras_are_named_in_readme():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    readme = (ROOT / "README.md").read_text()
    for extra, reqs in project["optional-dependencies"].items():
        for cap in _numpy_caps(reqs):
            assert cap.removeprefix("numpy") in readme and f"[{extra}]" in readme, (extra, cap)


def _signatures() -> dict[str, int]:
    return {name: len(getattr(nb_quantize, name).signatures) for name in KERNELS}


def test_kernels_compile_one_specialization_each():
    """Read-only and writable inputs and tables, both block axes, one- and two-level and element-only formats:
    still at most one compiled signature per kernel (numba types read-only arrays apart)."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 128)) * 4).astype(np.float32)
    ro = x.copy()
    ro.setflags(write=False)
    for name in ("mxfp4", "nvfp4", "nvfp4-4over6", "e2m1"):
        fmt = fp4lab.get_format(name)
        for arr in (x, ro):
            for axis in (-1, 0):
                qt = quantize_emulated(arr, fmt, QuantizeOptions(axis=axis))
                qt.codes.setflags(write=False)
                dequantize_emulated(qt)
    fmt = fp4lab.get_format("mxfp4")  # the kernel's wrapper with writable copies of the cached tables
    tab = tables_for(fmt, "rtne")
    geo = Geometry.blocks_1d(x.shape, 1, fmt.block_size)
    codes = np.empty(x.size, np.uint8)
    nblk = x.size // fmt.block_size
    scode, scales = np.empty(nblk, np.uint32), np.empty(nblk, np.float32)
    quantize_blocks(x.reshape(-1), codes, scode, scales, geo.ints(), np.float32(1), np.float32(1), False,
                    _encode_multipliers(fmt, None), np.uint64(0), np.uint64(0), 24, *(a.copy() for a in tab.args()))
    want = quantize_emulated(x, fmt)
    assert np.array_equal(codes, want.codes.reshape(-1))
    assert same_bits(scales, want.scales.reshape(-1))
    sigs = _signatures()
    assert sigs["_quantize_items_fused"] == 1 and sigs["_dequantize_items"] == 1
    assert max(sigs.values()) <= 1, sigs


_PROBE = """
import contextlib, io, json, sys
import numba.core.registry
from fp4lab.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(["compare", "--json", *sys.argv[1:]])
compiled = {}
for mod_name, mod in list(sys.modules.items()):
    if not mod_name.startswith("fp4lab"):
        continue
    for attr, obj in list(vars(mod).items()):
        if isinstance(obj, numba.core.registry.CPUDispatcher) and obj.signatures:
            compiled[f"{mod_name}.{attr}"] = len(obj.signatures)
print(json.dumps({"rc": rc, "compiled": compiled}))
"""


def _compiled(*argv: str) -> dict[str, int]:
    """``{dispatcher: signatures}`` of every numba kernel a ``fp4lab compare --json ARGV`` process compiled."""
    res = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["rc"] == 0
    return doc["compiled"]


def test_compare_compiles_nothing_by_default():
    """README's first command (``fp4lab compare``) runs on the numpy reference: no numba kernel is compiled."""
    assert _compiled() == {}


def test_compare_on_the_emulator_compiles_only_its_kernels_once():
    """``fp4lab compare --backend emulator`` compiles (or loads from the cache) quantize, dequantize and RHT kernels
    only, one specialization each: no MMA, GEMM, packing or fake-quant kernel."""
    compiled = _compiled("--backend", "emulator")
    assert "fp4lab.emulator.nb_quantize._quantize_items_fused" in compiled
    assert all(n == 1 for n in compiled.values()), compiled
    allowed = ("fp4lab.emulator.nb_quantize.", "fp4lab.emulator.nb_encode.", "fp4lab.emulator.nb_rht.",
               "fp4lab.emulator.nb_philox.")
    assert [k for k in compiled if not k.startswith(allowed)] == []
