"""Adversarial sweep: a few hundred malformed inputs through fp4lab's CLI and API, outcomes counted.

    python tests/fuzz/adversarial_sweep.py [--json FILE] [--timeout S] [--verbose] [--only FAMILY]

Families: format specs (field mutations and file-level damage), hwspec files, tensor files, corrupted
QuantizedTensors, API arguments, output paths, interrupts, rendering, the numba cache (subprocesses). The CLI is
run in-process (``fp4lab.cli.main``, stdout/stderr captured) except for the cache cases, which need a fresh process.
Not part of the test suite (about 1-3 minutes); ``tests/test_hostile_inputs.py`` pins the fixes.

Outcome of each case:

* ``clear``: refused with one line: an ``fp4lab.errors`` exception whose message is one line (API), or a non-zero
  exit with exactly one ``error:`` / ``interrupted`` line on stderr (CLI);
* ``traceback``: any other exception, or a CLI failure whose stderr is not one such line;
* ``silent``: accepted although the result is wrong (non-finite or all-zero output for finite input, a value
  differing from the known-good one, a validated spec that then fails when used, a file written outside the
  output folder or overwritten without being asked to);
* ``accepted``: accepted and the result checks out (edge cases the contract allows, e.g. a Fortran-order file);
* ``code``: a planted pickle ran (its marker file appeared);
* ``hang``: no answer within ``--timeout`` seconds (SIGALRM; compiled loops cannot be interrupted).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np

import fp4lab
from fp4lab import cli
from fp4lab.cli.formats import grid_report
from fp4lab.errors import Fp4labError

F32 = np.float32
OUTCOMES = ("clear", "traceback", "silent", "accepted", "code", "hang")
NOISE = ("torchao", "_pytree", "Failed to load", "W1201", "warn(", "UserWarning", "RuntimeWarning", "register_constant")


class Hang(BaseException):
    pass


class Silent(Exception):
    """Raised by a check: the call was accepted but its result is wrong."""


@dataclasses.dataclass
class Case:
    family: str
    name: str
    run: Callable[[], Any]
    kind: str = "api"  # api | cli


@dataclasses.dataclass
class Result:
    family: str
    name: str
    outcome: str
    detail: str


class Sweep:
    def __init__(self, root: Path, timeout: float):
        self.root = root
        self.timeout = timeout
        self.marker = root / "PAYLOAD_RAN"
        self.cases: list[Case] = []
        self.n = 0

    def path(self, name: str) -> Path:
        self.n += 1
        d = self.root / f"c{self.n:04d}"
        d.mkdir()
        return d / name

    def add(self, family: str, name: str, run: Callable[[], Any], kind: str = "api") -> None:
        self.cases.append(Case(family, name, run, kind))

    # ---- running ------------------------------------------------------------------------------------------------
    def _alarm(self, *_: Any) -> None:
        raise Hang()

    def run_one(self, case: Case) -> Result:
        self.marker.unlink(missing_ok=True)
        old = signal.signal(signal.SIGALRM, self._alarm)
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            outcome, detail = self._classify(case)
        except Hang:
            outcome, detail = "hang", f"no answer in {self.timeout} s"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if self.marker.exists():
            outcome, detail = "code", "planted payload ran"
        return Result(case.family, case.name, outcome, " ".join(detail.split())[:200])

    def _classify(self, case: Case) -> tuple[str, str]:
        try:
            detail = case.run()
        except Silent as exc:
            return "silent", str(exc)
        except Hang:
            raise
        except KeyboardInterrupt:
            return "traceback", "KeyboardInterrupt escaped"
        except Fp4labError as exc:
            msg = str(exc)
            return ("clear", msg) if "\n" not in msg and msg.strip() else ("traceback", f"multi-line: {msg!r}")
        except BaseException as exc:  # noqa: BLE001 - every other exception is what the sweep looks for
            return "traceback", f"{type(exc).__name__}: {exc}"
        if isinstance(detail, tuple):  # (outcome, detail) from a CLI run
            return detail
        return "accepted", str(detail or "")


def run_cli(argv: list[str], check: Callable[[str], None] | None = None) -> tuple[str, str]:
    """Run ``fp4lab argv`` in-process; classify exit status and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as exc:  # argparse refusals: usage line + error line, by design
            rc = exc.code if isinstance(exc.code, int) else 2
            if rc == 2:
                return "clear", "argparse usage error"
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip() and not any(n in ln for n in NOISE)]
    if rc == 0:
        if check is not None:
            check(out.getvalue())
        return "accepted", f"rc 0 {out.getvalue()[:80]}"
    if len(lines) == 1 and (lines[0].startswith("error:") or lines[0] == "interrupted"):
        return "clear", lines[0]
    return "traceback", f"rc {rc}: {' | '.join(lines)[:300]}"


class Payload:
    """Pickles to code that writes the marker file when unpickled."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


# ---- checks of accepted results ------------------------------------------------------------------------------------
def test_tensor(fmt: Any) -> np.ndarray:
    if fmt.block is None:
        shape = (8, 32)
    elif fmt.block.is_2d:
        shape = (4 * fmt.block.shape[0], 2 * fmt.block.shape[1])
    else:
        shape = (8, 4 * fmt.block.shape[0])
    x = np.random.default_rng(3).standard_normal(shape)
    return (x * np.exp2(np.linspace(-8, 8, shape[0]))[:, None]).astype(F32)


def use_format(fmt: Any) -> str:
    """Quantize, dequantize and show an accepted format; Silent if anything is wrong."""
    try:
        x = test_tensor(fmt)
        with np.errstate(all="ignore"):
            y = np.asarray(fp4lab.dequantize(fp4lab.quantize(x, fmt)))
        grid_report(fmt)  # what `fp4lab show` computes
    except Exception as exc:  # noqa: BLE001
        raise Silent(f"validated, then failed when used: {type(exc).__name__}: {exc}") from None
    if not np.all(np.isfinite(y)):
        raise Silent("validated, but finite inputs quantize to NaN/Inf")
    if not np.any(y != 0) and fmt.scale_rule.min_scale is None:  # a min_scale clamp may flush small data
        raise Silent("validated, but every element quantizes to zero")
    rel = np.max(np.abs(y - x)) / np.max(np.abs(x))
    return f"ok (max error {rel:.3g} of amax)"


# ---- families ------------------------------------------------------------------------------------------------------
BASE_SPECS = {
    "fp32-amax": {"name": "t", "element": "e2m1", "block": 16, "scale": "fp32", "scale_rule": {"method": "amax"}},
    "e8m0-floor": {"name": "t", "element": "e2m1", "block": 32,
                   "scale": {"kind": "pow2", "exponent_bits": 8, "bias": 127}, "scale_rule": {"method": "floor"}},
    "nvfp4-like": {"name": "t", "element": "e2m1", "block": 16, "scale": "ue4m3", "tensor_scale": "amax",
                   "scale_rule": {"method": "amax"}},
    "float-grid": {"name": "t", "element": {"kind": "float", "exponent_bits": 2, "mantissa_bits": 1, "bias": 1},
                   "block": 16, "scale": "fp32", "scale_rule": {"method": "amax"}},
}
HOSTILE = [float("nan"), float("inf"), float("-inf"), 0, -1, 1e308, 1e-320, 2**70, -(2**70), "x", True, [], {},
           "a" * 5000]
FIELDS = {  # (base, path) -> how the value is placed
    ("fp32-amax", ("scale_rule", "targets")): "list",
    ("fp32-amax", ("scale_rule", "min_scale")): "value",
    ("fp32-amax", ("scale_rule", "max_scale")): "value",
    ("nvfp4-like", ("scale_rule", "min_scale")): "value",
    ("nvfp4-like", ("scale_rule", "targets")): "list",
    ("e8m0-floor", ("scale", "bias")): "value",
    ("e8m0-floor", ("scale", "exponent_bits")): "value",
    ("float-grid", ("element", "bias")): "value",
    ("float-grid", ("element", "exponent_bits")): "value",
    ("float-grid", ("element", "mantissa_bits")): "value",
    ("fp32-amax", ("block", "shape")): "list",
    ("fp32-amax", ("name",)): "value",
    ("fp32-amax", ("description",)): "value",
}


def _set(d: dict, path: tuple[str, ...], value: Any) -> dict:
    d = json.loads(json.dumps(d))
    node = d
    for k in path[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {"shape": [node[k]]} if k == "block" else node.get(k) or {}
        node = node[k]
    node[path[-1]] = value
    return d


def _write_toml(path: Path, data: dict) -> None:
    import tomli_w

    path.write_text(tomli_w.dumps(data))


def family_format_specs(sw: Sweep) -> None:
    i = 0
    for (base, path), how in FIELDS.items():
        for v in HOSTILE:
            value = [v] if how == "list" else v
            data = _set(BASE_SPECS[base], path, value)
            label = f"{base}:{'.'.join(path)}={str(v)[:12]}"
            p = sw.path("spec.toml")
            try:
                _write_toml(p, data)
            except Exception:  # noqa: BLE001 - TOML cannot hold it (e.g. {} inside a list): JSON instead
                p = p.with_suffix(".json")
                p.write_text(json.dumps(data))
            i += 1
            if i % 4 == 0:
                sw.add("format-spec", label + " [cli validate+show]",
                       lambda p=p: _cli_validate_then_show(p), "cli")
            else:
                sw.add("format-spec", label, lambda p=p: use_format(fp4lab.load_format(p)))
    # specific known-bad specs of the issue
    extra = {
        "pow2 bias +1e5": _set(BASE_SPECS["e8m0-floor"], ("scale", "bias"), 100000),
        "pow2 bias -1e5": _set(BASE_SPECS["e8m0-floor"], ("scale", "bias"), -100000),
        "pow2 bias 200": _set(BASE_SPECS["e8m0-floor"], ("scale", "bias"), 200),
        "negative table": {"name": "t", "element": {"kind": "table", "bits": 4,
                                                    "values": [0.0] + [-float(i) for i in range(1, 16)]}},
        "target above grid": _set(BASE_SPECS["fp32-amax"], ("scale_rule", "targets"), [7.0]),
        "markup description": _set(BASE_SPECS["fp32-amax"], ("description",), "[/bold] [red]x"),
        "escape description": _set(BASE_SPECS["fp32-amax"], ("description",), "\x1b]0;pwned\x07"),
    }
    for label, data in extra.items():
        p = sw.path("spec.toml")
        _write_toml(p, data)
        sw.add("format-spec", label, lambda p=p: use_format(fp4lab.load_format(p)))
        sw.add("format-spec", label + " [cli validate+show]", lambda p=p: _cli_validate_then_show(p), "cli")


def _cli_validate_then_show(p: Path) -> tuple[str, str]:
    res = run_cli(["spec", "validate", str(p)])
    if res[0] != "accepted":
        return res
    res = run_cli(["show", str(p)])
    if res[0] != "accepted":
        return "silent", f"validated, then show failed: {res[1]}"
    return "accepted", use_format(fp4lab.load_format(p))


def family_spec_files(sw: Sweep) -> None:
    good = json.dumps(BASE_SPECS["fp32-amax"])
    files = {
        "binary garbage.toml": b"\xff\xfe\x00\x01garbage",
        "utf8 bom.toml": b"\xef\xbb\xbfname = 't'\nelement = 'e2m1'\n",
        "deep json.json": ('{"name": "t", "element": ' + "[" * 100000 + "]" * 100000 + "}").encode(),
        "deep toml.toml": ("a = " + "[" * 60000 + "]" * 60000 + "\n").encode(),
        "deep inline tables.toml": ("a = " + "{b = " * 30000 + "1" + "}" * 30000 + "\n").encode(),
        "2 MB.toml": ('name = "t"\nelement = "e2m1"\ndescription = "' + "x" * (2 << 20) + '"\n').encode(),
        "empty.toml": b"",
        "top-level list.json": b"[1, 2, 3]",
        "json NaN.json": good.replace('"amax"}', '"amax", "targets": [NaN]}').encode(),
        "name dotdot.toml": b'name = ".."\nelement = "e2m1"\n',
        "name slash.toml": b'name = "a/b"\nelement = "e2m1"\n',
        "name 10k.toml": ('name = "' + "n" * 10000 + '"\nelement = "e2m1"\n').encode(),
        "description 100k one word.toml": ('name = "t"\nelement = "e2m1"\ndescription = "' + "x" * 100000
                                           + '"\n').encode(),
        "unknown field.toml": b'name = "t"\nelement = "e2m1"\nrm_rf = true\n',
        "element int.toml": b'name = "t"\nelement = 5\n',
        "block bool.toml": (b'name = "t"\nelement = "e2m1"\nblock = true\nscale = "fp32"\n'
                            b'[scale_rule]\nmethod = "amax"\n'),
        "table 300 values.toml": ('name = "t"\n[element]\nkind = "table"\nbits = 4\nvalues = ['
                                  + ", ".join(str(i) for i in range(300)) + "]\n").encode(),
    }
    for name, blob in files.items():
        p = sw.path(name.replace(" ", "_"))
        p.write_bytes(blob)
        sw.add("spec-file", name, lambda p=p: use_format(fp4lab.load_format(p)))
        sw.add("spec-file", name + " [cli validate]", lambda p=p: _cli_validate_then_show(p), "cli")
    d = sw.path("folder.toml")
    d.mkdir()
    sw.add("spec-file", "a folder named .toml", lambda: use_format(fp4lab.load_format(d)))
    sw.add("spec-file", "missing file [cli]", lambda: run_cli(["show", str(sw.root / "nope.toml")]), "cli")
    paths = [str(sw.path("x.toml")) for _ in range(3)]
    _write_toml(Path(paths[0]), BASE_SPECS["fp32-amax"])
    Path(paths[1]).write_bytes(b"\xff")
    _write_toml(Path(paths[2]), BASE_SPECS["fp32-amax"])

    def validate_all() -> tuple[str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["spec", "validate", *paths])
        if rc == 2 and out.getvalue().count("ok:") == 2 and err.getvalue().count("error:") == 1:
            return "clear", "all three checked"
        return "traceback", f"rc {rc}, ok lines {out.getvalue().count('ok:')}"

    sw.add("spec-file", "spec validate good bad good [cli]", validate_all, "cli")
    for bad in (5, None, 1.5, ["nvfp4"], "x" * 10000, "a\x00b.toml"):
        sw.add("spec-file", f"get_format({str(bad)[:12]!r})", lambda bad=bad: use_format(fp4lab.get_format(bad)))


HW = '''name = "x"
vendor = "v"
arch = "a"
provenance = "assumed"
source = "s"
[kinds.k]
instruction = "i"
shape = "s"
k = 16
a_formats = ["bf16"]
b_formats = ["bf16"]
c_format = "f32"
accumulation = { algorithm = "t_fdpa", fused_len = 16, frac_bits = 25, e_zero = -133 }
output = { format = "f32", rounding = "rz", mantissa_bits = 23, nan_bits = 0x7FFFFFFF }
'''


def _use_hw(p: Path) -> str:
    spec = fp4lab.hwspec.load_hw(p)
    try:
        k = spec.kind("k")
        K = int(k.k)  # one instruction of ones: exact whenever K <= fused_len (no chained truncation)
        d = fp4lab.emulate_mma(np.ones((1, K)), np.ones((K, 1)), None, hw=spec, kind="k")
    except Exception as exc:  # noqa: BLE001
        raise Silent(f"validated, then failed when used: {type(exc).__name__}: {exc}") from None
    if not np.isfinite(d).all() or (K <= int(k.accumulation.fused_len) and float(d[0, 0]) != K):
        raise Silent(f"validated, but a {K}-term sum of ones gives {float(d[0, 0])!r}")
    return "ok"


def family_hwspec(sw: Sweep) -> None:
    values = ["nan", "inf", "-16", "0", "1e8", "16.5", "true", '"16"', str(2**70)]
    fields = {"k": "k = 16", "fused_len": "fused_len = 16", "frac_bits": "frac_bits = 25",
              "e_zero": "e_zero = -133", "mantissa_bits": "mantissa_bits = 23", "nan_bits": "nan_bits = 0x7FFFFFFF"}
    for field, text in fields.items():
        for v in values:
            p = sw.path("hw.toml")
            p.write_text(HW.replace(text, f"{field} = {v}"))
            sw.add("hwspec", f"{field}={v}", lambda p=p: _use_hw(p))
    structural = {
        "k and fused_len -16": HW.replace("k = 16", "k = -16").replace("fused_len = 16", "fused_len = -16"),
        "kinds = 5": HW.split("[kinds.k]")[0] + "kinds = 5\n",
        "kind = 5": HW.split("[kinds.k]")[0] + "[kinds]\nk = 5\n",
        "extends list": HW + '[kinds.j]\nextends = ["k"]\n',
        "extends cycle": HW + '[kinds.j]\nextends = "i"\n[kinds.i]\nextends = "j"\n',
        "inherits path": HW.replace('source = "s"', 'source = "s"\ninherits = "../../../../../tmp/evil"', 1),
        "inherits int": HW.replace('source = "s"', 'source = "s"\ninherits = 5', 1),
        "gst group 0": HW.replace('algorithm = "t_fdpa"', 'algorithm = "gst_fdpa", group = 0').replace(
            'a_formats = ["bf16"]\nb_formats = ["bf16"]', 'a_formats = ["e2m1"]\nb_formats = ["e2m1"]\n'
            'scales = [{ format = "ue8m0", block = 32 }]'),
        "frac_bits 50 (inexact sums)": HW.replace("frac_bits = 25", "frac_bits = 50"),
        "mantissa 23 on f16": HW.replace('format = "f32", rounding', 'format = "f16", rounding'),
        "source not a string": HW.replace('source = "s"', "source = 5", 1),
        "markup description": HW.replace('arch = "a"', 'arch = "a"\ndescription = "[/x] [red]y"'),
        "binary file": "\udcff",
    }
    for name, text in structural.items():
        p = sw.path("hw.toml")
        if name == "binary file":
            p.write_bytes(b"\xff\xfe\x00")
        else:
            p.write_text(text)
        sw.add("hwspec", name, lambda p=p: _use_hw(p))
        sw.add("hwspec", name + " [cli hw show]", lambda p=p: run_cli(["hw", "show", str(p)]), "cli")
    d = sw.path("dir.toml")
    d.mkdir()
    sw.add("hwspec", "a folder named .toml", lambda: _use_hw(d))
    sw.add("hwspec", "hw show ../../etc/passwd-like name [cli]",
           lambda: run_cli(["hw", "show", "../../../../../../etc/hostname"]), "cli")


def family_tensor_files(sw: Sweep) -> None:
    import torch

    from fp4lab.analysis import tensors_io

    good = np.random.default_rng(0).standard_normal((16, 64)).astype(F32)

    def expect(p: Path, want: np.ndarray | None = None) -> Callable[[], str]:
        def run() -> str:
            got = tensors_io.load_tensor(str(p))
            if want is None:
                raise Silent(f"malformed file accepted: shape {got.shape}")
            if not np.array_equal(got, want):
                raise Silent("values differ from the file's")
            return "values ok"
        return run

    files: dict[str, tuple[Callable[[Path], None], np.ndarray | None]] = {}

    def npy_header(shape, descr="<f4", body=b"\0" * 64):
        def w(p: Path) -> None:
            with open(p, "wb") as f:
                np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
                f.write(body)
        return w

    files["npy 4 TiB header.npy"] = (npy_header((1 << 40,)), None)
    files["npy truncated.npy"] = (npy_header((1000,), body=b"\0" * 100), None)
    files["npy int dtype.npy"] = (lambda p: np.save(p, np.arange(10)), None)
    files["npy object pickle payload.npy"] = (
        lambda p: np.save(p, np.array([Payload(sw.marker)], dtype=object), allow_pickle=True), None)
    files["npy bad magic.npy"] = (lambda p: p.write_bytes(b"NOTNUMPY" * 10), None)
    files["npy bad header.npy"] = (lambda p: p.write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}\n"), None)
    files["npy fortran order (valid).npy"] = (lambda p: np.save(p, np.asfortranarray(good)), good)
    files["npy big-endian (valid).npy"] = (lambda p: np.save(p, good.astype(">f4")), good)
    files["npy float64 (valid).npy"] = (lambda p: np.save(p, good.astype(np.float64)), good)
    files["npy empty file.npy"] = (lambda p: p.write_bytes(b""), None)

    def npz_two(p: Path) -> None:
        np.savez(p, a=good, b=good)

    def npz_bomb(p: Path) -> None:
        with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as z:
            for k in ("a", "b"):
                with z.open(f"{k}.npy", "w") as m:
                    np.lib.format.write_array_header_1_0(m, {"descr": "<f4", "fortran_order": False,
                                                             "shape": (1 << 33,)})
                    m.write(b"\0" * 4096)

    def npz_pickle(p: Path) -> None:
        buf = io.BytesIO()
        np.save(buf, np.array([Payload(sw.marker)], dtype=object), allow_pickle=True)
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("w.npy", buf.getvalue())

    files["npz two members, no key.npz"] = (npz_two, None)
    files["npz declared 32 GiB members.npz"] = (npz_bomb, None)
    files["npz pickle payload member.npz"] = (npz_pickle, None)
    files["npz member not npy.npz"] = (lambda p: zipfile.ZipFile(p, "w").writestr("w", b"hello"), None)
    files["npz corrupt zip.npz"] = (lambda p: p.write_bytes(b"PK\x03\x04" + b"\0" * 40), None)
    files["npz empty zip.npz"] = (lambda p: zipfile.ZipFile(p, "w").close(), None)

    def st(header: Any, body: bytes = b"", raw_len: int | None = None) -> Callable[[Path], None]:
        def w(p: Path) -> None:
            h = header if isinstance(header, bytes) else json.dumps(header).encode()
            p.write_bytes(struct.pack("<Q", len(h) if raw_len is None else raw_len) + h + body)
        return w

    files["safetensors 3 bytes.safetensors"] = (lambda p: p.write_bytes(b"abc"), None)
    files["safetensors header 1 TiB.safetensors"] = (st(b"{}", raw_len=1 << 40), None)
    files["safetensors header not json.safetensors"] = (st(b"\xff\xfe{{"), None)
    files["safetensors header a list.safetensors"] = (st([1, 2]), None)
    files["safetensors offsets beyond file.safetensors"] = (
        st({"w": {"dtype": "F32", "shape": [1 << 30], "data_offsets": [0, 1 << 32]}}, b"\0" * 16), None)
    files["safetensors shape/offset mismatch.safetensors"] = (
        st({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 16]}}, b"\0" * 16), None)
    files["safetensors unknown dtype.safetensors"] = (
        st({"w": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, b"\0" * 16), None)
    files["safetensors int tensor.safetensors"] = (
        st({"w": {"dtype": "I32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16), None)
    files["safetensors negative shape.safetensors"] = (
        st({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, b"\0" * 16), None)

    def st_valid(p: Path) -> None:
        from safetensors.numpy import save_file

        save_file({"w": good}, str(p))

    files["safetensors valid.safetensors"] = (st_valid, good)
    files["pt pickle payload.pt"] = (lambda p: torch.save({"w": Payload(sw.marker)}, p), None)
    files["pt legacy format.pt"] = (lambda p: torch.save({"w": torch.from_numpy(good)}, p,
                                                         _use_new_zipfile_serialization=False), None)
    files["pt corrupt zip.pt"] = (lambda p: p.write_bytes(b"PK\x03\x04" + b"\0" * 40), None)
    files["pt dict of strings.pt"] = (lambda p: torch.save({"w": "hello"}, p), None)
    files["pt int tensor.pt"] = (lambda p: torch.save(torch.arange(4), p), None)
    files["pt valid bf16.pt"] = (lambda p: torch.save({"w": torch.from_numpy(good).bfloat16()}, p),
                                 torch.from_numpy(good).bfloat16().float().numpy())
    for name, (write, want) in files.items():
        p = sw.path(name.split(" ")[0] + "_" + str(sw.n) + Path(name).suffix)
        try:
            write(p)
        except Exception as exc:  # noqa: BLE001
            print(f"(harness could not build {name}: {exc})", file=sys.stderr)
            continue
        sw.marker.unlink(missing_ok=True)  # building a payload file must not count
        sw.add("tensor-file", name, expect(p, want))
        if want is None:
            sw.add("tensor-file", name + " [cli compare]",
                   lambda p=p: run_cli(["compare", "e2m1", "--dist", str(p), "--rht", "0"]), "cli")
    p = sw.path("dir.npy")
    p.mkdir()
    sw.add("tensor-file", "folder named .npy", expect(p))
    npz = sw.path("two.npz")
    npz_two(npz)
    sw.add("tensor-file", "npz missing key", expect(Path(f"{npz}::nope")))


def family_quantized(sw: Sweep) -> None:
    import torch

    for name in ("nvfp4", "mxfp4", "ufp4", "e2m1"):
        x = np.random.default_rng(1).standard_normal((4, 64)).astype(F32)
        q = fp4lab.quantize(x, name)
        want = fp4lab.dequantize(q)
        scaled = q.fmt.scale_rule.method != "none"
        mods: dict[str, dict[str, Any]] = {
            "codes int64 with 259": {"codes": np.where(np.arange(q.codes.size).reshape(q.codes.shape) == 0, 259,
                                                       q.codes).astype(np.int64)},
            "codes float": {"codes": q.codes.astype(F32) + 0.7},
            "codes list": {"codes": q.codes.tolist()},
            "code 16": {"codes": np.where(np.arange(q.codes.size).reshape(q.codes.shape) == 0, 16, q.codes)
                        .astype(np.uint8)},
            "codes wrong shape": {"codes": q.codes[:, :7]},
            "axis 1.0": {"axis": 1.0},
            "axis True": {"axis": True},
            "axis 5": {"axis": 5},
            "rht 17": {"rht": 17},
            "fmt a string": {"fmt": name},
            "meta None": {"meta": None},
            "tensor scale on a one-level format" if q.tensor_scale is None else "tensor scale None":
                {"tensor_scale": F32(2.0) if q.tensor_scale is None else None},
        }
        if q.tensor_scale is not None:
            for v in (np.nan, np.inf, -1.0, 0.0):
                mods[f"tensor scale {v}"] = {"tensor_scale": F32(v)}
            mods["tensor scale array of 2"] = {"tensor_scale": np.array([1, 2], F32)}
            mods["tensor scale a string"] = {"tensor_scale": "1"}
        if scaled:
            s = q.scales.copy()
            s.flat[0] *= 2
            mods["scales disagree"] = {"scales": s}
            mods["scales float64"] = {"scales": q.scales.astype(np.float64)}
            mods["scales wrong shape"] = {"scales": q.scales[:, :1]}
            sc = q.scale_codes.copy()
            sc.flat[0] = 255 if sc.dtype == np.uint8 else 0x7F800000
            mods["scale code beyond format"] = {"scale_codes": sc}
            mods["scale codes int64"] = {"scale_codes": q.scale_codes.astype(np.int64)}
        for label, kw in mods.items():
            bad = dataclasses.replace(q, **kw)
            if not scaled and label == "codes wrong shape":  # element-only formats take any shape: valid
                def other_shape(bad=bad, w=q.fmt.element.values.astype(F32)[q.codes[:, :7]]) -> str:
                    if not np.array_equal(np.asarray(fp4lab.dequantize(bad)), w):
                        raise Silent("wrong values")
                    return "values ok"

                sw.add("quantized", f"{name}: other shape (valid)", other_shape)
                continue

            def run(bad=bad, want=want) -> str:
                got = np.asarray(fp4lab.dequantize(bad))
                if got.shape != want.shape or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                    raise Silent("corrupted tensor accepted; output differs from the original's")
                return "same output as the original"

            sw.add("quantized", f"{name}: {label}", run)
        tq = fp4lab.quantize(torch.from_numpy(x), name)

        def torch_int64(tq=tq) -> str:
            fp4lab.dequantize(dataclasses.replace(tq, codes=tq.codes.to(torch.int64)))
            raise Silent("accepted int64 torch codes")

        sw.add("quantized", f"{name}: torch codes int64", torch_int64)
    sw.add("quantized", "not a QuantizedTensor", lambda: fp4lab.dequantize({"codes": 1}))


def family_api_args(sw: Sweep) -> None:
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(F32)
    args = {"axis": [1.0, None, "0", True, 10**30], "seed": [None, 1.5, -(2**64), 2**64, "7"],
            "rht": [0, 17, 16.0, True, -16], "rht_seed": [None, 1.7, "x", 2**70],
            "rounding": [3, "nearest", "", b"rtne"], "sr_bits": [None, 0, 23, 24.0]}
    for arg, vals in args.items():
        for v in vals:
            def run(arg=arg, v=v) -> str:
                q = fp4lab.quantize(x, "nvfp4", **{arg: v})
                raise Silent(f"accepted {arg}={v!r} (rounding {q.rounding})")
            sw.add("api-args", f"quantize {arg}={str(v)[:16]}", run)
    inputs = {"ragged list": [[1.0, 2.0], [3.0]], "string": "abc", "None": None, "dict": {"a": 1},
              "object array": np.array([object()] * 32), "int array": np.arange(32), "0-d": np.float32(1.0),
              "complex": np.ones(32, np.complex64), "bytes": b"\0" * 32}
    for label, v in inputs.items():
        def run(v=v) -> str:
            fp4lab.quantize(v, "mxfp4")
            raise Silent("accepted a non-float input")
        sw.add("api-args", f"quantize x={label}", run)
    for kw in ({"size": 17}, {"seed": None}, {"axis": 0.5}, {"inverse": "yes"}, {"size": True}):
        def run(kw=kw) -> str:
            fp4lab.rht(np.ones((2, 16), F32), **kw)
            raise Silent(f"accepted rht({kw})")
        sw.add("api-args", f"rht {kw}", run)


def family_outputs(sw: Sweep) -> None:
    from fp4lab.analysis import conformance

    # the library comparison is not under test here
    conformance.agreement_table = lambda progress=None, formats=None: []
    conformance.LIVE_CHECKS = ()
    base = sw.path("out")
    base.mkdir()
    spec_dir = base / "specs"
    spec_dir.mkdir()
    spec = spec_dir / "my.toml"
    _write_toml(spec, _set(BASE_SPECS["fp32-amax"], ("name",), "mine"))
    existing = base / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("precious")
    afile = base / "afile"
    afile.write_text("x")

    def conf(argv: list[str], must_not_exist: list[Path] = (), unchanged: Path | None = None):
        def run() -> tuple[str, str]:
            snap = {p: p.read_bytes() for p in unchanged.rglob("*") if p.is_file()} if unchanged else {}
            res = run_cli(["conformance", *argv, "e2m1"])
            for p in must_not_exist:
                if p.exists():
                    return "silent", f"wrote {p}"
            if unchanged is not None and {p: p.read_bytes() for p in unchanged.rglob("*") if p.is_file()} != snap:
                return "silent", f"changed {unchanged} without --overwrite"
            return res
        return run

    sw.add("outputs", "conformance --out ''", conf(["--out", ""]), "cli")
    sw.add("outputs", "conformance --out existing file", conf(["--out", str(afile)]), "cli")
    sw.add("outputs", "conformance --out existing folder", conf(["--out", str(existing)], unchanged=existing), "cli")
    out2 = base / "vec2"

    def spec_path_case() -> tuple[str, str]:
        cwd = os.getcwd()
        os.chdir(spec_dir)
        try:
            res = run_cli(["conformance", "--out", str(out2), "../specs/my.toml", str(spec)])
        finally:
            os.chdir(cwd)
        stray = [p for p in base.rglob("*.npz") if out2 not in p.parents]
        if stray:
            return "silent", f"wrote outside --out: {stray}"
        if res[0] == "accepted" and sorted(os.listdir(out2)) != ["index.json", "library_agreement.json",
                                                                  "library_agreement.md", "mine.npz"]:
            return "silent", f"unexpected files {os.listdir(out2)}"
        return res

    sw.add("outputs", "conformance spec given as ../ and absolute path", spec_path_case, "cli")

    def plot(target: str, must_not_exist: list[Path]):
        def run() -> tuple[str, str]:
            res = run_cli(["compare", "e2m1", "--shape", "16x16", "--rht", "0", "--plot", target])
            for p in must_not_exist:
                if p.exists():
                    return "silent", f"wrote {p}"
            return res
        return run

    pdir = base / "plots"
    pdir.mkdir()
    sw.add("outputs", "compare --plot DIR", plot(str(pdir), [Path(str(pdir) + ".png")]), "cli")
    sw.add("outputs", "compare --plot without suffix", plot(str(base / "noext"), [base / "noext",
                                                                                   base / "noext.png"]), "cli")
    sw.add("outputs", "compare --plot missing folder", plot(str(base / "nope" / "g.png"), []), "cli")
    old_png = base / "old.png"
    old_png.write_bytes(b"old")

    def overwrite_png() -> tuple[str, str]:
        res = run_cli(["compare", "e2m1", "--shape", "16x16", "--rht", "0", "--plot", str(old_png)])
        if old_png.read_bytes() != b"old":
            return "silent", "overwrote an existing plot without being asked"
        return res

    sw.add("outputs", "compare --plot existing file", overwrite_png, "cli")
    sw.add("outputs", "compare --plot ''", plot("", []), "cli")


def family_interrupts(sw: Sweep) -> None:
    from fp4lab.analysis import conformance

    out = sw.path("vec")

    def interrupted() -> tuple[str, str]:
        run_cli(["conformance", "--out", str(out), "e2m1", "int4"])
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        real = conformance.vectors_for
        calls = []

        def boom(fmt: Any) -> Any:
            calls.append(fmt)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return real(fmt)

        conformance.vectors_for = boom
        try:
            res = run_cli(["conformance", "--out", str(out), "--overwrite", "e2m1", "int4"])
        finally:
            conformance.vectors_for = real
        after = {p.name: p.read_bytes() for p in out.iterdir()}
        if after != before:
            return "silent", f"interrupted run changed the folder: {sorted(set(after) ^ set(before)) or 'contents'}"
        return res

    sw.add("interrupt", "conformance interrupted after one format", interrupted, "cli")


def family_rendering(sw: Sweep) -> None:
    cases = {
        "show 128-char name, 1024-char one-word description": {"name": "n" * 128, "description": "x" * 1024},
        "show markup in description": {"description": "[/bold] [red]x [link=file:///etc/passwd]y[/link]"},
        "show unbalanced markup": {"description": "[/]"},
    }
    for label, fields in cases.items():
        p = sw.path("r.toml")
        _write_toml(p, {**BASE_SPECS["fp32-amax"], **fields})

        def run(p=p, fields=fields) -> tuple[str, str]:
            t = time.perf_counter()
            res = run_cli(["show", str(p)], check=lambda out, fields=fields: _printed_as_written(out, fields))
            if time.perf_counter() - t > 2.0:
                return "hang", f"show took {time.perf_counter() - t:.1f} s"
            return res
        sw.add("rendering", label, run, "cli")
    p = sw.path("hw.toml")
    p.write_text(HW.replace('arch = "a"', 'arch = "a"\ndescription = "[/x] [red]y' + "z" * 1500 + '"'))

    def hw_run() -> tuple[str, str]:
        t = time.perf_counter()
        res = run_cli(["hw", "show", str(p)],
                      check=lambda out: _printed_as_written(out, {"description": "[/x] [red]y"}))
        return ("hang", "slow") if time.perf_counter() - t > 2.0 else res

    sw.add("rendering", "hw show markup description", hw_run, "cli")


def _printed_as_written(out: str, fields: dict[str, str]) -> None:
    flat = out.replace("\n", "")
    for v in fields.values():
        if v[:200] not in flat:
            raise Silent(f"printed text differs from the spec's {v[:30]!r}")


def family_cache(sw: Sweep) -> None:
    """A planted numba index pickle in a cache directory others can write (fresh processes)."""
    code = ("import numpy as np\nfrom fp4lab.emulator.pack import pack_nibbles\n"
            "print(pack_nibbles(np.zeros((2, 4), np.uint8)).tolist())")

    def planted(var: str, mode: int) -> Callable[[], tuple[str, str]]:
        def run() -> tuple[str, str]:
            from numba.core import caching, config

            from fp4lab.emulator import pack

            cache = sw.path("cache")
            cache.mkdir()
            old = config.CACHE_DIR
            config.CACHE_DIR = str(cache)
            try:
                paths = [caching.FunctionCache(d.py_func)._cache_file._index_path
                         for d in vars(pack).values() if type(d).__name__ == "CPUDispatcher"]
            finally:
                config.CACHE_DIR = old
            for ip in paths:
                with open(ip, "wb") as f:
                    pickle.dump(Payload(sw.marker), f)
            for root, dirs, files in os.walk(cache):
                for n in dirs + files:
                    os.chmod(os.path.join(root, n), mode)
            os.chmod(cache, mode)
            env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "FP4LAB_CACHE_DIR")}
            env[var] = str(cache)
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
            if sw.marker.exists():
                return "code", "planted pickle ran"
            if r.returncode != 0:
                return "traceback", r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"rc {r.returncode}"
            warn = [ln for ln in r.stderr.splitlines() if "warning" in ln.lower()]
            return ("clear", warn[0]) if len(warn) == 1 else ("accepted", "ran without using the planted cache")
        return run

    sw.add("numba-cache", "NUMBA_CACHE_DIR mode 0777 with planted index", planted("NUMBA_CACHE_DIR", 0o777))
    sw.add("numba-cache", "NUMBA_CACHE_DIR mode 0775 (group) with planted index", planted("NUMBA_CACHE_DIR", 0o775))


FAMILIES = {
    "format-spec": family_format_specs, "spec-file": family_spec_files, "hwspec": family_hwspec,
    "tensor-file": family_tensor_files, "quantized": family_quantized, "api-args": family_api_args,
    "outputs": family_outputs, "interrupt": family_interrupts, "rendering": family_rendering,
    "numba-cache": family_cache,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="FILE", help="also write every case's outcome as JSON")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--only", nargs="+", choices=list(FAMILIES), help="run these families only")
    ap.add_argument("--verbose", action="store_true", help="print every case")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fp4lab-sweep-"))
    sw = Sweep(root, args.timeout)
    start = time.perf_counter()
    try:
        for name, build in FAMILIES.items():
            if args.only and name not in args.only:
                continue
            try:
                build(sw)
            except Exception as exc:  # noqa: BLE001 - a family that cannot be built (e.g. torch missing)
                print(f"(family {name} skipped: {type(exc).__name__}: {exc})", file=sys.stderr)
        fp4lab.quantize(np.ones((2, 32), F32), "nvfp4")  # compile outside the per-case timeout
        results = [sw.run_one(c) for c in sw.cases]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    counts = Counter(r.outcome for r in results)
    by_family: dict[str, Counter] = {}
    for r in results:
        by_family.setdefault(r.family, Counter())[r.outcome] += 1
    for r in results:
        if args.verbose or r.outcome not in ("clear", "accepted"):
            print(f"{r.outcome:9} {r.family:12} {r.name[:60]:60} {r.detail[:120]}")
    print()
    print(f"{'family':12} {'tried':>6} " + " ".join(f"{o:>9}" for o in OUTCOMES))
    for fam, c in by_family.items():
        print(f"{fam:12} {sum(c.values()):6d} " + " ".join(f"{c[o]:9d}" for o in OUTCOMES))
    print(f"{'all':12} {len(results):6d} " + " ".join(f"{counts[o]:9d}" for o in OUTCOMES))
    print(f"({time.perf_counter() - start:.0f} s; fp4lab from {Path(fp4lab.__file__).parent})")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": {"tried": len(results), **{o: counts[o] for o in OUTCOMES}},
                                               "cases": [dataclasses.asdict(r) for r in results]}, indent=1))
    return 0 if counts["traceback"] + counts["silent"] + counts["code"] + counts["hang"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
