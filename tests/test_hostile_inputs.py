"""Hostile inputs (docs/numerics.md, "Hostile inputs"): specs that validate but cannot quantize, corrupted
QuantizedTensors, output paths, interrupted runs, decompression bombs, one-line errors, quadratic rendering and the
numba cache. Every test here failed on the code before the fix."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import stat
import struct
import subprocess
import sys
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

import fp4lab
from fp4lab import cli
from fp4lab.analysis import conformance, metrics, tensors_io
from fp4lab.errors import InputError, OutputError, SpecError
from fp4lab.hwspec import load_hw

F32 = np.float32
BASE = 'name = "t"\nelement = "e2m1"\nblock = 16\nscale = "fp32"\n[scale_rule]\nmethod = "amax"\n'
POW2 = 'name = "t"\nelement = "e2m1"\nblock = 16\n[scale]\nkind = "pow2"\nbias = {}\n[scale_rule]\nmethod = "amax"\n'


def _one_line(msg: str, *needles: str) -> None:
    assert "\n" not in msg, msg
    for n in needles:
        assert n in msg, (n, msg)


# ---- 3. specs that validated but could not quantize ----------------------------------------------------------
BAD_FORMATS = {
    "target_nan": (BASE + "targets = [nan]\n", "targets"),
    "target_inf": (BASE + "targets = [inf]\n", "targets"),
    "target_above_grid": (BASE + "targets = [7.0]\n", "above the element grid's largest magnitude"),
    "target_tiny": (BASE + "targets = [1e-300]\n", "float32"),
    "min_scale_inf": (BASE + "min_scale = inf\n", "min_scale"),
    "min_scale_underflows": (BASE + "min_scale = 1e-50\n", "min_scale"),
    "max_scale_overflows": (BASE + "max_scale = 1e39\n", "max_scale"),
    "min_scale_above_format": (BASE.replace('"fp32"', '"ue4m3"') + "min_scale = 1000.0\n", "largest scale"),
    "max_scale_below_format": (BASE.replace('"fp32"', '"ue4m3"') + "max_scale = 1e-5\n", "smallest positive"),
    "pow2_bias_huge": (POW2.format(100000), "bias"),
    "pow2_bias_negative": (POW2.format(-100000), "bias"),
    "pow2_bias_beyond_float32": (POW2.format(200), "bias must lie in [127, 149]"),
    "float_grid_beyond_float32": ('name = "t"\n[element]\nkind = "float"\nexponent_bits = 8\nmantissa_bits = 3\n'
                                  'bias = -250\n', "float32 range"),
    "negative_table": ('name = "t"\n[element]\nkind = "table"\nbits = 4\nvalues = [0, -1, -2, -3, -4, -5, -6, -7, '
                       '-8, -9, -10, -11, -12, -13, -14, -15]\n', "positive value"),
    "long_description": ('name = "t"\nelement = "e2m1"\ndescription = "' + "x" * 100_000 + '"\n', "description"),
    "long_name": ('name = "' + "n" * 1000 + '"\nelement = "e2m1"\n', "name"),
    "escape_in_description": ('name = "t"\nelement = "e2m1"\ndescription = "\\u001b]0;pwned\\u0007"\n',
                              "control character"),
    "too_many_references": ('name = "t"\nelement = "e2m1"\nreferences = [' + ", ".join(['"r"'] * 100) + "]\n",
                            "references"),
}


@pytest.mark.parametrize("case", list(BAD_FORMATS))
def test_specs_that_cannot_quantize_are_refused(case, tmp_path):
    text, needle = BAD_FORMATS[case]
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        fp4lab.load_format(path)
    _one_line(str(info.value), str(path), needle)


def test_spec_validate_checks_every_file_and_show_works_on_what_validates(tmp_path, capsys):
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(BASE)
    bad.write_text(BASE + "targets = [nan]\n")
    assert cli.main(["spec", "validate", str(bad), str(tmp_path / "missing.toml"), str(good)]) == 2
    out, err = capsys.readouterr()
    assert f"ok: {good}" in out and err.count("error:") == 2
    assert cli.main(["show", str(good)]) == 0


def test_spec_validate_goes_on_after_an_unexpected_failure(tmp_path, capsys, monkeypatch):
    from fp4lab.formats import registry

    a, b, c = (tmp_path / f"{n}.toml" for n in "abc")
    for p in (a, b, c):
        p.write_text(BASE)
    real = registry.load_format

    def flaky(path):
        if Path(path).name == "b.toml":
            raise RuntimeError("boom\nsecond line")
        return real(path)

    monkeypatch.setattr(registry, "load_format", flaky)
    monkeypatch.setattr("fp4lab.formats.load_format", flaky)
    assert cli.main(["spec", "validate", str(a), str(b), str(c)]) == 2
    out, err = capsys.readouterr()
    assert out.count("ok:") == 2 and "unexpected RuntimeError: boom second line" in err
    assert len(err.strip().splitlines()) == 1


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
GST = HW.replace('algorithm = "t_fdpa"', 'algorithm = "gst_fdpa", group = 0').replace(
    'a_formats = ["bf16"]\nb_formats = ["bf16"]', 'a_formats = ["e2m1"]\nb_formats = ["e2m1"]\n'
    'scales = [{ format = "ue8m0", block = 32 }]')
BAD_HW = {
    "negative_k": (HW.replace("k = 16", "k = -16").replace("fused_len = 16", "fused_len = -16"), "kinds.k.k"),
    "fused_len_zero": (HW.replace("fused_len = 16", "fused_len = 0"), "fused_len"),
    "group_zero": (GST, "group"),
    "frac_bits_huge": (HW.replace("frac_bits = 25", "frac_bits = 1e8"), "frac_bits"),
    "frac_bits_inexact": (HW.replace("frac_bits = 25", "frac_bits = 50"), "53"),
    "fractional_k": (HW.replace("k = 16", "k = 16.5"), "integer"),
    "k_nan": (HW.replace("k = 16", "k = nan"), "finite"),
    "nan_bits_not_nan": (HW.replace("0x7FFFFFFF", "1"), "nan_bits"),
    "mantissa_beyond_f16": (HW.replace('format = "f32", rounding', 'format = "f16", rounding'), "mantissa_bits"),
    "kinds_not_a_table": (HW.split("[kinds.k]")[0] + "kinds = 5\n", "kinds"),
    "kind_not_a_table": (HW.split("[kinds.k]")[0] + "[kinds]\nk = 5\n", "kinds.k"),
    "extends_not_a_name": (HW + '[kinds.j]\nextends = ["k"]\n', "extends"),
    "escape_in_description": (HW.replace('arch = "a"', 'arch = "a"\ndescription = "\\u001b[2J"'), "control"),
}


@pytest.mark.parametrize("case", list(BAD_HW))
def test_bad_hwspec_files_are_refused_on_one_line(case, tmp_path):
    text, needle = BAD_HW[case]
    path = tmp_path / "hw.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_hw(path)
    _one_line(str(info.value), str(path), needle)


def test_inherits_never_follows_a_path_out_of_the_builtin_folder(tmp_path):
    parent = tmp_path / "evil.toml"
    parent.write_text(HW.replace('name = "x"', 'name = "evil"'))
    rel = os.path.relpath(parent.with_suffix(""), fp4lab.hwspec.registry.SPEC_DIR)
    child = tmp_path / "child.toml"
    child.write_text(HW.replace('name = "x"', 'name = "child"')
                     .replace('source = "s"', f'source = "s"\ninherits = "{rel}"', 1))
    with pytest.raises(SpecError) as info:
        load_hw(child)
    _one_line(str(info.value), str(child), "inherits unknown built-in spec")


def test_hw_lookup_by_name_never_builds_a_path(tmp_path):
    evil = tmp_path / "evil.toml"
    evil.write_text(HW)
    rel = os.path.relpath(evil.with_suffix(""), fp4lab.hwspec.registry.SPEC_DIR)
    with pytest.raises(SpecError, match="unknown hw"):
        fp4lab.get_hw(rel)  # only an explicit .toml path loads a file


# ---- 4. corrupted QuantizedTensors ----------------------------------------------------------------------------
def _qt(fmt="nvfp4"):
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(F32)
    return fp4lab.quantize(x, fmt)


def _corruptions():
    q = _qt()
    c259 = q.codes.astype(np.int64)
    c259[0, 0] = 259
    wrong_scale = q.scales.copy()
    wrong_scale[0, 0] *= 2
    big_scale_code = q.scale_codes.copy()
    big_scale_code[0, 0] = 200
    return {
        "int64_codes": (dataclasses.replace(q, codes=c259), "dtype int64"),
        "float_codes": (dataclasses.replace(q, codes=q.codes.astype(F32)), "dtype float32"),
        "list_codes": (dataclasses.replace(q, codes=q.codes.tolist()), "got list"),
        "missing_tensor_scale": (dataclasses.replace(q, tensor_scale=None), "tensor_scale is None"),
        "nan_tensor_scale": (dataclasses.replace(q, tensor_scale=F32(np.nan)), "positive and finite"),
        "negative_tensor_scale": (dataclasses.replace(q, tensor_scale=F32(-1)), "positive and finite"),
        "scales_disagree": (dataclasses.replace(q, scales=wrong_scale), "disagree with scale_codes"),
        "scale_code_out_of_format": (dataclasses.replace(q, scale_codes=big_scale_code), "scale code 200"),
        "scale_shape": (dataclasses.replace(q, scales=q.scales[:, :1]), "scales have shape"),
        "float_axis": (dataclasses.replace(q, axis=1.0), "axis must be an int"),
        "bad_rht": (dataclasses.replace(q, rht=17), "rht must be"),
        "fmt_is_a_string": (dataclasses.replace(q, fmt="nvfp4"), "QuantFormat"),
        "unexpected_tensor_scale": (dataclasses.replace(_qt("mxfp4"), tensor_scale=F32(2)), "no tensor scale"),
    }


@pytest.mark.parametrize("case", list(_corruptions()))
def test_corrupted_quantized_tensors_are_refused(case):
    qt, needle = _corruptions()[case]
    with pytest.raises(InputError) as info:
        fp4lab.dequantize(qt)
    _one_line(str(info.value), "dequantize:", needle)


def test_corrupted_torch_quantized_tensor_is_refused_like_numpy():
    import torch

    q = fp4lab.quantize(torch.randn(4, 32), "nvfp4")
    with pytest.raises(InputError, match="dtype int64"):
        fp4lab.dequantize(dataclasses.replace(q, codes=q.codes.to(torch.int64)))
    with pytest.raises(InputError, match="tensor_scale is None"):
        fp4lab.dequantize(dataclasses.replace(q, tensor_scale=None))


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "ufp4", "e2m1", "nvfp4-2d", "nvfp4-4over6", "nvfp4-te"])
def test_valid_quantized_tensors_still_decode_to_the_same_bits(name):
    import torch

    from fp4lab.numerics.ref_quantize import dequantize_reference

    x = conformance._cases(fp4lab.get_format(name))
    for _, v in x.values():
        v = np.asarray(v, F32)
        q = fp4lab.quantize(v, name)
        want = dequantize_reference(q).view(np.uint32)
        got = np.asarray(fp4lab.dequantize(q)).view(np.uint32)
        assert np.array_equal(np.isnan(got.view(F32)), np.isnan(want.view(F32)))
        ok = ~np.isnan(want.view(F32))
        assert np.array_equal(got[ok], want[ok])
        tq = fp4lab.quantize(torch.from_numpy(v), name)
        tgot = fp4lab.dequantize(tq).numpy().view(np.uint32)
        assert np.array_equal(tgot[ok], want[ok])


def test_argument_types_are_checked_before_the_backends():
    x = np.ones((2, 32), F32)
    for kw, needle in ((dict(axis=1.0), "axis"), (dict(rht_seed=None), "rht_seed"), (dict(seed=1.5), "seed"),
                       (dict(rounding=3), "rounding"), (dict(rht=0), "rht"), (dict(sr_bits=None), "sr_bits")):
        with pytest.raises(InputError) as info:
            fp4lab.quantize(x, "nvfp4", **kw)
        _one_line(str(info.value), needle)
    with pytest.raises(InputError, match="not an array"):
        fp4lab.quantize([[1.0, 2.0], [3.0]], "nvfp4")
    with pytest.raises(InputError, match="seed"):
        fp4lab.rht(np.ones((2, 16), F32), seed=None)


# ---- 5/6. conformance and plot outputs --------------------------------------------------------------------------
@pytest.fixture
def fast_conformance(monkeypatch):
    monkeypatch.setattr(conformance, "agreement_table", lambda progress=None, formats=None: [])
    monkeypatch.setattr(conformance, "LIVE_CHECKS", ())


def test_conformance_writes_only_under_out_named_after_the_format(tmp_path, fast_conformance, monkeypatch):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    spec = tmp_path / "a" / "my.toml"
    spec.write_text(BASE.replace('name = "t"', 'name = "mine"'))
    monkeypatch.chdir(work)
    assert cli.main(["conformance", "--out", "vec", "../my.toml", str(spec.resolve()), "--json"]) == 0
    assert sorted(os.listdir(work / "vec")) == ["index.json", "library_agreement.json", "library_agreement.md",
                                                "mine.npz"]
    assert sorted(os.listdir(tmp_path / "a")) == ["b", "my.toml"]  # nothing beside the spec


def test_conformance_refuses_an_existing_folder_unless_overwrite(tmp_path, fast_conformance, capsys):
    out = tmp_path / "vec"
    assert cli.main(["conformance", "--out", str(out), "e2m1", "int4"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert cli.main(["conformance", "--out", str(out), "e2m1"]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    with pytest.raises(OutputError, match="not empty"):
        conformance.write_vectors(out, ("e2m1",))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    (out / "notes.txt").write_text("mine")
    assert cli.main(["conformance", "--out", str(out), "--overwrite", "e2m1"]) == 0
    assert sorted(os.listdir(out)) == ["e2m1.npz", "index.json", "library_agreement.json", "library_agreement.md",
                                       "notes.txt"]  # int4.npz of the old run is stale: removed
    assert cli.main(["conformance", "--out", "", "e2m1"]) == 2
    assert cli.main(["conformance", "--out", str(out / "notes.txt"), "e2m1"]) == 2


def test_interrupted_conformance_leaves_the_old_files_and_one_line(tmp_path, fast_conformance, capsys, monkeypatch):
    out = tmp_path / "vec"
    assert cli.main(["conformance", "--out", str(out), "e2m1", "int4"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = conformance.vectors_for
    calls = []

    def interrupted(fmt):
        calls.append(fmt)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(fmt)

    monkeypatch.setattr(conformance, "vectors_for", interrupted)
    capsys.readouterr()
    assert cli.main(["conformance", "--out", str(out), "--overwrite", "e2m1", "int4"]) == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no staging folder, nothing half-written
    dead = out / ".conformance-dead.tmp"  # a SIGKILLed run's staging folder: cleaned by the next run
    dead.mkdir()
    (dead / conformance.STAGING_MARK).write_text("")
    (dead / "e2m1.npz").write_bytes(b"partial")
    monkeypatch.setattr(conformance, "vectors_for", real)
    assert cli.main(["conformance", "--out", str(out), "--overwrite", "e2m1"]) == 0
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_plot_goes_exactly_where_named(tmp_path, capsys):
    d = tmp_path / "plots"
    d.mkdir()
    for bad in (str(d), str(tmp_path / "noext"), str(tmp_path / "missing" / "g.png"), ""):
        assert cli.main(["compare", "e2m1", "--shape", "16x16", "--rht", "0", "--plot", bad]) == 2
    assert os.listdir(tmp_path) == ["plots"] and os.listdir(d) == []
    png = d / "g.png"
    png.write_bytes(b"old")
    assert cli.main(["compare", "e2m1", "--shape", "16x16", "--rht", "0", "--plot", str(png)]) == 2
    assert png.read_bytes() == b"old"
    assert cli.main(["compare", "e2m1", "--shape", "16x16", "--rht", "0", "--plot", str(png), "--overwrite"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.listdir(d) == ["g.png"]


# ---- 7. memory ------------------------------------------------------------------------------------------------
def _npz_two_members(path: Path) -> None:
    np.savez(path, a=np.ones(4, F32), b=np.ones(4, F32))


def test_npz_member_is_chosen_before_anything_is_decompressed(tmp_path, monkeypatch):
    path = tmp_path / "t.npz"
    _npz_two_members(path)

    def no_read(*a, **k):
        raise AssertionError("a member was opened")

    monkeypatch.setattr(zipfile.ZipFile, "open", no_read)
    with pytest.raises(InputError) as info:
        tensors_io.load_tensor(path)
    _one_line(str(info.value), "holds 2 tensors", "PATH::KEY")
    with pytest.raises(InputError, match="no tensor named"):
        tensors_io.load_tensor(f"{path}::c")


def test_declared_sizes_are_checked_before_allocating(tmp_path, monkeypatch):
    big = tmp_path / "huge.npy"
    with open(big, "wb") as f:  # a 4 TiB array declared in a 100-byte file
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
        f.write(b"\0" * 32)
    with pytest.raises(InputError) as info:
        tensors_io.load_tensor(big)
    _one_line(str(info.value), str(big), "header declares")
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("w.npy", "w") as m:
            np.lib.format.write_array_header_1_0(m, {"descr": "<f4", "fortran_order": False, "shape": (1 << 30,)})
            m.write(b"\0" * 64)
    with pytest.raises(InputError, match="header declares"):
        tensors_io.load_tensor(bomb)
    np.save(tmp_path / "ok.npy", np.ones(1000, F32))
    monkeypatch.setenv("FP4LAB_MAX_TENSOR_BYTES", "1000")
    with pytest.raises(InputError, match="FP4LAB_MAX_TENSOR_BYTES"):
        tensors_io.load_tensor(tmp_path / "ok.npy")


def test_load_and_measure_memory_is_a_small_multiple_of_the_tensor(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics, "CHUNK", 1 << 13)
    x = np.random.default_rng(1).standard_normal((256, 1024)).astype(F32)
    np.save(tmp_path / "x.npy", x)
    fmt = fp4lab.get_format("nvfp4")
    metrics.evaluate(x[:16], fmt)  # warm up caches outside the measurement
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        loaded = tensors_io.load_tensor(tmp_path / "x.npy")
        load_peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        m, _ = metrics.evaluate(loaded, fmt)
        eval_peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert np.array_equal(loaded, x)
    assert load_peak < 1.3 * x.nbytes and eval_peak < 5 * x.nbytes, (load_peak / x.nbytes, eval_peak / x.nbytes)
    monkeypatch.setattr(metrics, "CHUNK", 1 << 20)  # one chunk: the unchunked float64 arithmetic, bit for bit
    m1, qt = metrics.evaluate(x, fmt)
    y = fp4lab.dequantize(qt, rotated=True)
    t, q = metrics.normalized(x, qt)
    assert (m1.nmse, m1.alpha, m1.bias, m1.b_eff, m1.clip_rate) == (
        metrics.nmse(x, y), metrics.alpha(x, y), metrics.mean_signed_error(t, q), metrics.b_eff(qt),
        metrics.clip_rate(t, fmt))
    assert abs(m.sqnr_db - m1.sqnr_db) < 1e-9


# ---- 8. one-line errors ----------------------------------------------------------------------------------------
def test_torch_refusal_never_suggests_weights_only_false(tmp_path):
    import datetime

    import torch

    torch.save({"w": datetime.date(2020, 1, 1)}, tmp_path / "evil.pt")
    with pytest.raises(InputError) as info:
        tensors_io.load_tensor(tmp_path / "evil.pt")
    _one_line(str(info.value), "evil.pt", "refused")
    assert "weights_only=False" not in str(info.value)


@pytest.mark.parametrize("blob,needle", [
    (b"\x01", "shorter than"),
    (struct.pack("<Q", 1 << 42) + b"{}", "header declares"),
    (struct.pack("<Q", 4) + b"\xff\xfe{}", "not JSON"),
    (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
    (lambda: (lambda h: struct.pack("<Q", len(h)) + h + b"\0" * 8)(
        json.dumps({"w": {"dtype": "F32", "shape": [1 << 30], "data_offsets": [0, 1 << 32]}}).encode()),
     "declares shape"),
])
def test_corrupt_safetensors_are_one_line_errors(tmp_path, blob, needle):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(blob() if callable(blob) else blob)
    with pytest.raises(InputError) as info:
        tensors_io.load_tensor(path)
    _one_line(str(info.value), str(path), needle)


def test_deeply_nested_specs_are_one_line_errors(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"name": "t", "element": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(SpecError) as info:
        fp4lab.load_format(deep)
    _one_line(str(info.value), str(deep), "nested")
    toml = tmp_path / "deep.toml"
    toml.write_text("a = " + "[" * 50_000 + "]" * 50_000 + "\n")
    for load in (fp4lab.load_format, load_hw):
        with pytest.raises(SpecError) as info:
            load(toml)
        _one_line(str(info.value), str(toml))


def test_file_errors_name_the_file(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    for load in (fp4lab.load_format, load_hw, fp4lab.get_hw):
        with pytest.raises(SpecError) as info:
            load(str(folder))
        _one_line(str(info.value), str(folder), "directory")
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for load in (fp4lab.load_format, load_hw):
        with pytest.raises(SpecError) as info:
            load(binary)
        _one_line(str(info.value), str(binary), "UTF-8")
    from fp4lab.formats import spec_io

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", str(a[0]))

    good = tmp_path / "good.toml"
    good.write_text(BASE)
    monkeypatch.setattr(spec_io, "open", denied, raising=False)
    with pytest.raises(SpecError) as info:
        fp4lab.load_format(good)
    _one_line(str(info.value), str(good), "Permission denied")
    assert cli.main(["show", str(good)]) == 2
    err = capsys.readouterr().err
    assert str(good) in err and len(err.strip().splitlines()) == 1


# ---- 9. rendering ---------------------------------------------------------------------------------------------
def test_show_prints_text_as_written_and_in_linear_time(tmp_path, capsys):
    spec = tmp_path / "m.toml"
    spec.write_text('name = "' + "n" * 128 + '"\nelement = "e2m1"\ndescription = "[/bold] [red]x' + "y" * 1000
                    + '"\n')
    start = time.perf_counter()
    assert cli.main(["show", str(spec)]) == 0
    assert time.perf_counter() - start < 2.0
    out = capsys.readouterr().out
    assert "[/bold] [red]x" in out and "y" * 1000 in out.replace("\n", "")


# ---- 10. numba cache ------------------------------------------------------------------------------------------
def _python(code: str, env: dict[str, str], timeout: float = 240, cwd: Path | None = None
            ) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "FP4LAB_CACHE_DIR",
                                                              "FP4LAB_NUMBA_CACHE")}
    return subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def test_planted_pickle_in_a_writable_cache_dir_never_runs(tmp_path):
    from numba.core import caching, config

    from fp4lab.emulator import pack

    cache = tmp_path / "shared-cache"
    cache.mkdir()
    marker = tmp_path / "pwned"
    old = config.CACHE_DIR
    config.CACHE_DIR = str(cache)
    try:  # where numba would look for pack's kernels under NUMBA_CACHE_DIR
        index_paths = [caching.FunctionCache(d.py_func)._cache_file._index_path
                       for d in vars(pack).values() if type(d).__name__ == "CPUDispatcher"]
    finally:
        config.CACHE_DIR = old
    assert index_paths
    for p in index_paths:
        with open(p, "wb") as f:
            pickle.dump(_Payload(str(marker)), f)
    for root, dirs, files in os.walk(cache):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o777)
    os.chmod(cache, 0o777)
    res = _python("import numpy as np\nfrom fp4lab.emulator.pack import pack_nibbles\n"
                  "print(pack_nibbles(np.zeros((2, 4), np.uint8)).tolist())", {"NUMBA_CACHE_DIR": str(cache)})
    assert res.returncode == 0, res.stderr
    assert not marker.exists()
    assert "writable by group or others" in res.stderr and len(
        [ln for ln in res.stderr.splitlines() if "fp4lab: warning" in ln]) == 1


def test_default_cache_is_private_and_never_in_tree(tmp_path):
    code = ("from fp4lab.emulator import pack, jit\n"
            "d = [v for v in vars(pack).values() if type(v).__name__ == 'CPUDispatcher'][0]\n"
            "print(jit.cache_status()[0]); print(d._cache._cache_path)")
    res = _python(code, {"HOME": str(tmp_path), "XDG_CACHE_HOME": ""})
    assert res.returncode == 0, res.stderr
    root, path = res.stdout.split()
    assert root == str(tmp_path / ".cache" / "fp4lab" / "numba") and path.startswith(root)
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    off = _python("from fp4lab.emulator import pack\n"
                  "print({type(v._cache).__name__ for v in vars(pack).values() "
                  "if type(v).__name__ == 'CPUDispatcher'})", {"FP4LAB_NUMBA_CACHE": "0"})
    assert off.returncode == 0 and off.stdout.strip() == "{'NullCache'}", off.stderr


def test_cache_dir_checks(tmp_path):
    from fp4lab.emulator.jit import _insecure

    d = tmp_path / "c"
    d.mkdir(mode=0o700)
    uid = os.getuid()
    assert _insecure(d, uid) is None
    os.chmod(d, 0o770)
    assert "writable by group" in _insecure(d, uid)
    os.chmod(d, 0o755)
    (d / "sub").mkdir()
    os.chmod(d / "sub", 0o777)
    assert "not yours alone" in _insecure(d, uid)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    (shared / "c").mkdir(mode=0o700)
    assert "ancestor" in _insecure(shared / "c", uid)
    assert "owned by uid" in _insecure(d, uid + 1)


def test_cache_entries_are_keyed_by_every_numba_module():
    """numba checks only a function's own file; fp4lab's cache subdirectory is a digest of all its numba modules,
    so editing a helper in another module (nb_encode.py, inlined into nb_quantize.py) cannot reuse stale code."""
    from pathlib import Path

    import fp4lab
    from fp4lab.emulator import jit, pack

    root = Path(fp4lab.__file__).parent
    with_numba = {str(p.relative_to(root)) for p in root.rglob("*.py")
                  if "import numba" in p.read_text() or "njit" in p.read_text()}
    assert with_numba == set(jit.NUMBA_SOURCES)
    for rel in jit.NUMBA_CONSTANT_SOURCES:  # numpy modules whose constants a numba module imports
        module = "fp4lab." + rel.removesuffix(".py").replace("/", ".")
        assert rel not in with_numba and any(f"from {module} import" in (root / m).read_text()
                                             for m in jit.NUMBA_SOURCES), rel
    if jit.cache_status()[0] is not None:
        d = next(v for v in vars(pack).values() if type(v).__name__ == "CPUDispatcher")
        assert jit.sources_digest() in Path(d._cache._cache_path).parts


def test_copies_of_the_sources_share_one_cache_entry(tmp_path):
    """A cache entry is named by module and stamped with the sources' digest: a copy of fp4lab elsewhere, with
    other timestamps, loads the kernel another copy compiled; a copy whose numba sources differ compiles afresh."""
    import shutil

    import fp4lab

    src = Path(fp4lab.__file__).parent
    copies = {name: tmp_path / name for name in ("a", "b", "edited")}
    for name, where in copies.items():
        shutil.copytree(src, where / "fp4lab", ignore=shutil.ignore_patterns("__pycache__"))
    os.utime(copies["b"] / "fp4lab" / "emulator" / "pack.py", (1e9, 1e9))  # another timestamp, same bytes
    with open(copies["edited"] / "fp4lab" / "emulator" / "nb_philox.py", "a") as f:
        f.write("# edited\n")  # a numba module that pack.py does not import
    code = ("import numpy as np\nfrom fp4lab.emulator import pack\n"
            "pack.pack_nibbles(np.zeros((2, 4), np.uint8))\n"
            "ds = [v for v in vars(pack).values() if type(v).__name__ == 'CPUDispatcher']\n"
            "print(pack.__file__, sum(sum(d.stats.cache_hits.values()) for d in ds), "
            "sum(sum(d.stats.cache_misses.values()) for d in ds))")
    cache = tmp_path / "cache"
    said = {}
    for name in ("a", "b", "edited"):
        res = _python(code, {"FP4LAB_CACHE_DIR": str(cache), "PYTHONPATH": str(copies[name])}, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        file, hits, misses = res.stdout.split()
        assert Path(file) == copies[name] / "fp4lab" / "emulator" / "pack.py", file  # the copy, not this tree
        said[name] = (int(hits), int(misses))
    assert said == {"a": (0, 1), "b": (1, 0), "edited": (0, 1)}, said
    assert len(list(cache.iterdir())) == 2  # one digest for a and b, one for the edited copy


# ---- tensor files: torch layouts, element counts, npy shapes, odd paths -------------------------------------------
def _torch_cases():
    import torch

    return {
        "stride0": (lambda: torch.zeros(1).expand(1 << 29), "exceed the limit"),  # 1.5 KB file, 2 GiB as float32
        "sparse": (lambda: torch.eye(4).to_sparse(), "sparse"),
        "meta": (lambda: torch.empty(4, 4, device="meta"), "meta"),
        "nested": (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "nested"),
    }


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case", ["stride0", "sparse", "meta", "nested"])
def test_torch_files_count_elements_and_refuse_layouts_without_data(tmp_path, case, capsys):
    torch = pytest.importorskip("torch")
    make, needle = _torch_cases()[case]
    path = tmp_path / f"{case}.pt"
    torch.save(make(), path)
    for spec in (str(path), f"{tmp_path / 'd.pt'}::w"):
        if spec.endswith("::w"):
            torch.save({"w": make()}, tmp_path / "d.pt")
        with pytest.raises(InputError) as info:
            tensors_io.load_tensor(spec)
        _one_line(str(info.value), str(spec.split("::")[0]), needle)
    assert cli.main(["compare", "nvfp4", "--dist", str(path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_npy_headers_with_negative_dimensions_name_the_file(tmp_path, suffix):
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (-4, 4)})
    blob = buf.getvalue() + b"\0" * 64
    path = tmp_path / f"neg{suffix}"
    if suffix == ".npy":
        path.write_bytes(blob)
    else:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("w.npy", blob)
    with pytest.raises(InputError) as info:
        tensors_io.load_tensor(path)
    _one_line(str(info.value), str(path), "shape")


def test_odd_tensor_paths(tmp_path):
    """A file named with '::' loads as written (and with a key after it); a link to a device is named as such."""
    x = np.arange(32, dtype=F32).reshape(2, 16)
    np.save(tmp_path / "a::b.npy", x)
    np.savez(tmp_path / "c::d.npz", w=x, v=x)
    assert np.array_equal(tensors_io.load_tensor(str(tmp_path / "a::b.npy")), x)
    assert np.array_equal(tensors_io.load_tensor(str(tmp_path / "c::d.npz") + "::w"), x)
    os.symlink("/dev/zero", tmp_path / "zero.npy")
    with pytest.raises(InputError) as info:
        tensors_io.load_tensor(tmp_path / "zero.npy")
    _one_line(str(info.value), "zero.npy", "not a regular file")
    with pytest.raises(InputError) as info:
        tensors_io.load_tensor(str(tmp_path / "missing.npz") + "::w")
    _one_line(str(info.value), "missing.npz", "no such file")


# ---- API inputs without plain data, impl, distributions, duplicate keys, seeds -------------------------------------
def _no_plain_data_cases():
    torch = pytest.importorskip("torch")
    masked = np.ma.masked_array(np.ones((16, 32), F32), mask=np.eye(16, 32, dtype=bool))
    masked.data[0, 0] = 1e30  # a masked value must not become the block's amax
    return {"masked": (masked, "masked"), "complex": (np.ones((16, 32), np.complex64), "complex"),
            "complex-torch": (torch.ones(16, 32, dtype=torch.complex64), "complex"),
            "meta": (torch.empty(16, 32, device="meta"), "meta"),
            "sparse": (torch.eye(32).to_sparse(), "sparse"),
            "nested": (torch.nested.nested_tensor([torch.ones(32), torch.ones(32)]), "nested")}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case", ["masked", "complex", "complex-torch", "meta", "sparse", "nested"])
def test_inputs_without_plain_data_are_refused(case):
    x, needle = _no_plain_data_cases()[case]
    for call, what in ((lambda: fp4lab.quantize(x, "nvfp4"), "quantize"), (lambda: fp4lab.rht(x, 16), "rht")):
        with pytest.raises(InputError) as info:
            call()
        _one_line(str(info.value), what, needle)
    with pytest.raises(InputError) as info:
        fp4lab.emulate_mma(x, np.ones((32, 16)), hw="hopper-sm90", kind="wgmma.bf16")
    _one_line(str(info.value), "emulate_mma", needle)


def test_mma_refuses_complex_accumulators_and_unknown_impls():
    a, b = np.ones((16, 32)), np.ones((32, 16))
    with pytest.raises(InputError) as info:
        fp4lab.emulate_mma(a, b, np.zeros((16, 16), complex), hw="hopper-sm90", kind="wgmma.bf16")
    _one_line(str(info.value), "c", "complex")
    for call in (lambda: fp4lab.emulate_mma(a, b, hw="hopper-sm90", kind="wgmma.bf16", impl="bogus"),
                 lambda: fp4lab.emulate_gemm(a, b.T, hw="hopper-sm90", kind="wgmma.bf16", impl="bogus")):
        with pytest.raises(InputError) as info:
            call()
        _one_line(str(info.value), "impl", "'bogus'")


def test_from_torch_refuses_meta_tensors():
    torch = pytest.importorskip("torch")
    from fp4lab import interop

    data = torch.empty(16, 8, dtype=torch.float4_e2m1fn_x2, device="meta")
    scale = torch.empty(16, 1, dtype=torch.float8_e4m3fn, device="meta")
    with pytest.raises(InputError) as info:
        interop.from_torch(data, scale, "nvfp4", torch.ones(()))
    _one_line(str(info.value), "from_torch", "meta")


@pytest.mark.parametrize("spec", ["outliers:k=nan", "outliers:k=inf", "student-t:nu=nan", "lognormal:sigma=-inf"])
def test_distribution_parameters_must_be_finite(spec, capsys):
    from fp4lab.analysis import distributions

    with pytest.raises(InputError) as info:
        distributions.parse(spec)
    _one_line(str(info.value), spec, "must be finite")
    assert cli.main(["compare", "nvfp4", "--dist", spec]) == 2


def test_duplicate_json_keys_are_refused(tmp_path):
    spec = tmp_path / "dup.json"
    spec.write_text('{"name": "a", "name": "b", "element": "e2m1", "block": 16, "scale": "fp32", '
                    '"scale_rule": {"method": "amax"}}')
    with pytest.raises(SpecError) as info:
        fp4lab.load_format(spec)
    _one_line(str(info.value), str(spec), "'name' appears twice")
    entry = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    header = ('{"w": ' + json.dumps(entry) + ', "w": ' + json.dumps({**entry, "data_offsets": [8, 16]}) + "}").encode()
    st = tmp_path / "dup.safetensors"
    st.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    with pytest.raises(InputError) as info:
        tensors_io.load_tensor(st)
    _one_line(str(info.value), str(st), "'w' twice")


def test_spec_path_to_a_device_is_named_as_such(tmp_path):
    link = tmp_path / "zero.toml"
    os.symlink("/dev/zero", link)
    for load in (fp4lab.load_format, load_hw):
        with pytest.raises(SpecError) as info:
            load(link)
        _one_line(str(info.value), str(link), "not a regular file")


@pytest.mark.parametrize("argv", [["compare", "nvfp4", "--seed", "-1"], ["compare", "nvfp4", "--seed", str(2**64)],
                                  ["verify", "--seed", "-1"], ["sr-bias", "--data-seed", "x"]])
def test_seed_options_are_named(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert f"argument {argv[-2]}" in capsys.readouterr().err


def test_conformance_deletes_only_what_it_wrote(tmp_path, fast_conformance, capsys):
    """A user's folder named like a staging folder is content (refused without --overwrite, kept with it); a
    hand-written index.json listing a user's .npz deletes nothing; a file an earlier run wrote and listed with
    its SHA-256 is still removed when a later run no longer writes it."""
    out = tmp_path / "vec"
    mine = out / ".conformance-mine.tmp"
    mine.mkdir(parents=True)
    (mine / "thesis.npz").write_bytes(b"mine")
    assert cli.main(["conformance", "--out", str(out), "e2m1"]) == 2
    assert "pass --overwrite" in capsys.readouterr().err and (mine / "thesis.npz").read_bytes() == b"mine"
    assert cli.main(["conformance", "--out", str(out), "--overwrite", "e2m1", "int4"]) == 0
    assert (mine / "thesis.npz").read_bytes() == b"mine"
    (out / "precious.npz").write_bytes(b"keep me")
    index = json.loads((out / "index.json").read_text())
    index["formats"]["precious"] = {"file": "precious.npz", "sha256": "0" * 64}
    (out / "index.json").write_text(json.dumps(index))
    assert cli.main(["conformance", "--out", str(out), "--overwrite", "e2m1"]) == 0
    assert (out / "precious.npz").read_bytes() == b"keep me" and (mine / "thesis.npz").is_file()
    assert not (out / "int4.npz").exists()  # written by the earlier run, listed with its digest: stale


def test_bidirectional_overrides_and_escapes_never_reach_the_terminal(tmp_path, capsys):
    """Format specs refuse U+202E (and the other bidirectional formatting characters) like control characters;
    a recipe file's name and description print with such characters escaped, never raw."""
    spec = tmp_path / "rlo.toml"
    spec.write_text('name = "t"\ndescription = "ok \u202eevil"\nelement = "e2m1"\nblock = 16\nscale = "fp32"\n'
                    '[scale_rule]\nmethod = "amax"\n')
    with pytest.raises(SpecError) as info:
        fp4lab.load_format(spec)
    _one_line(str(info.value), str(spec), "bidirectional")
    recipe = tmp_path / "evil.toml"
    recipe.write_text('name = "x\\u001b[2Jy"\ndescription = "a \u202e b \\u001b]0;title\\u0007"\nformat = "mxfp4"\n')
    assert cli.main(["recipes", "show", str(recipe)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    flat = "".join(out.split())
    assert "x\\x1b[2Jy" in flat and "\\u202e" in flat
