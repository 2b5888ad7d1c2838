"""The compare engine, its JSON document, the CLI subcommand and the grid plot."""

import argparse
import json

import numpy as np
import pytest

from fp4lab.analysis.compare import CompareConfig, run_compare
from fp4lab.cli import analysis as cli
from fp4lab.errors import InputError


def _run_cli(argv):
    ap = argparse.ArgumentParser(prog="fp4lab")
    cli.register(ap.add_subparsers(dest="cmd"))
    args = ap.parse_args(argv)
    return args.func(args)


def test_compare_document_keys_and_deltas():
    cfg = CompareConfig(formats=["mxfp4", "ufp4"], inputs=["gaussian", "outliers:k=20,every=97"], rht=[0, 16],
                        shape=(32, 384))
    doc = run_compare(cfg)
    assert doc["schema"] == "fp4lab.compare/1"
    assert len(doc["results"]) == 8
    json.dumps(doc, allow_nan=False)  # no NaN/Inf leak into JSON
    keys = {"format", "input", "rht", "sqnr_db", "nmse", "alpha", "bias", "bias_amax", "b_eff", "clip_rate",
            "zero_block_rate", "delta_sqnr_db", "delta_b_eff", "scale_code_histogram"}
    for rec in doc["results"]:
        assert set(rec) == keys
    by = {(r["format"], r["input"], r["rht"]): r for r in doc["results"]}
    r0, r16 = by[("ufp4", "outliers:k=20,every=97", 0)], by[("ufp4", "outliers:k=20,every=97", 16)]
    assert r0["delta_sqnr_db"] is None and r16["delta_sqnr_db"] == pytest.approx(r16["sqnr_db"] - r0["sqnr_db"])
    assert r16["delta_sqnr_db"] > 2.0  # uniform grid gains from RHT on outlier channels
    assert by[("ufp4", "gaussian", 0)]["scale_code_histogram"] is None  # fp32 scales: no histogram
    hist = by[("mxfp4", "gaussian", 0)]["scale_code_histogram"]
    assert sum(hist.values()) == 32 * 384 // 32
    assert doc["formats"]["ufp4"]["magnitudes"] == [0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75]
    assert doc["formats"]["mxfp4"]["level_bias"][4] == -0.125


@pytest.mark.parametrize("rounding", [None, "sr"])
def test_compare_backends_agree(rounding):
    """The reference and the emulator give the same document (bit-identical quantization, so equal metrics)."""
    base = dict(formats=["nvfp4", "ufp4", "mxfp4-rceil", "nvfp4-4over6", "nf4-b64-fp32"],
                inputs=["student-t:nu=3", "outliers:k=20,every=97"], rht=[0, 16], shape=(16, 256), rounding=rounding)
    docs = [run_compare(CompareConfig(**base, backend=b)) for b in ("reference", "emulator")]
    assert [d["config"].pop("backend") for d in docs] == ["reference", "emulator"]
    for d in docs:
        d.pop("elapsed_s")
    assert docs[0] == docs[1]


def test_compare_auto_backend_threshold():
    from fp4lab.analysis.compare import REFERENCE_MAX_ELEMENTS, choose_backend

    cfg = CompareConfig()  # 10 formats x 2 RHT sizes
    per_input = REFERENCE_MAX_ELEMENTS // 20
    assert choose_backend(cfg, per_input) == "reference"
    assert choose_backend(cfg, per_input + 1) == "emulator"
    assert run_compare(CompareConfig(formats=["ufp4"], inputs=["gaussian"], rht=[0], shape=(4, 32)))[
        "config"]["backend"] == "reference"
    with pytest.raises(ValueError, match="backend must be one of auto, reference, emulator"):
        run_compare(CompareConfig(formats=["ufp4"], inputs=["gaussian"], rht=[0], shape=(4, 32), backend="gpu"))


def test_compare_rejects_bad_rht():
    with pytest.raises(ValueError, match="RHT size 8"):
        run_compare(CompareConfig(formats=["ufp4"], inputs=["gaussian"], rht=[8], shape=(4, 32)))


@pytest.mark.parametrize("empty", ["formats", "inputs", "rht"])
def test_compare_with_nothing_to_compare_is_one_line(empty):
    cfg = CompareConfig(formats=["ufp4"], inputs=["gaussian"], rht=[0], shape=(4, 32))
    setattr(cfg, empty, [])
    with pytest.raises(InputError, match=r"^compare: no .* to compare; give at least one$"):
        run_compare(cfg)


@pytest.mark.parametrize("sizes", ["", ",,", " "])
def test_cli_rht_without_a_size_is_an_argument_error(sizes, capsys):
    with pytest.raises(SystemExit) as info:
        _run_cli(["compare", "ufp4", "--rht", sizes])
    assert info.value.code == 2 and "argument --rht: expected comma-separated integers" in capsys.readouterr().err


def test_compare_names_the_input_a_block_or_rht_size_does_not_divide_before_any_case_runs(tmp_path):
    odd = tmp_path / "odd.npy"
    np.save(odd, np.ones((7, 33), np.float32))
    square = tmp_path / "square.npy"
    np.save(square, np.ones((64, 64), np.float32))
    done = []
    with pytest.raises(InputError, match=r"^compare: input .*odd\.npy \(7x33\), format nvfp4: quantize: axis 1 has "
                       r"length 33, not a multiple of format 'nvfp4' block size 16$"):
        run_compare(CompareConfig(formats=["nvfp4"], inputs=["gaussian", str(odd)], shape=(4, 32)), done.append)
    with pytest.raises(InputError, match=r"^compare: input .*square\.npy \(64x64\): the last axis \(64\) is not a "
                       r"multiple of RHT size 128"):
        run_compare(CompareConfig(formats=["ufp4"], inputs=["gaussian", str(square)], rht=[0, 128], shape=(4, 128)),
                    done.append)
    assert done == []  # refused before the first case


def test_compare_runs_a_format_input_or_rht_size_given_twice_once():
    """``compare ufp4 ufp4 --dist gaussian gaussian --rht 0,16,16`` printed every row four times."""
    once = run_compare(CompareConfig(formats=["ufp4", "nvfp4"], inputs=["gaussian", "laplace"], rht=[0, 16],
                                     shape=(4, 64)))
    twice = run_compare(CompareConfig(formats=["ufp4", "nvfp4", "ufp4"], inputs=["gaussian", "laplace", "gaussian"],
                                      rht=[0, 16, 16], shape=(4, 64)))
    assert twice["config"]["formats"] == ["ufp4", "nvfp4"] and twice["config"]["inputs"] == ["gaussian", "laplace"]
    assert twice["config"]["rht"] == [0, 16]
    key = lambda doc: [(r["format"], r["input"], r["rht"], r["sqnr_db"]) for r in doc["results"]]  # noqa: E731
    assert key(twice) == key(once) and len(key(once)) == 8


def test_compare_sr_uses_quantize_s_default_seed():
    from fp4lab.analysis import distributions, metrics

    doc = run_compare(CompareConfig(formats=["ufp4"], inputs=["gaussian"], rht=[0], shape=(8, 64), rounding="sr"))
    x = distributions.sample("gaussian", (8, 64), 0)
    for seed, same in ((0, True), (1, False)):
        m, _ = metrics.evaluate(x, "ufp4", rounding="sr", seed=seed)
        assert (doc["results"][0]["sqnr_db"] == m.sqnr_db) is same


def test_cli_json_only_and_plot(tmp_path, capsys):
    png = tmp_path / "grids.png"
    rc = _run_cli(["compare", "ufp4", "nvfp4", "--dist", "laplace", "--rht", "0,32", "--shape", "16x64",
                   "--json", "--plot", str(png)])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["rht"] == [0, 32] and doc["config"]["shape"] == [16, 64]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_table_and_tensor_file(tmp_path, capsys):
    np.save(tmp_path / "t.npy", np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32))
    assert _run_cli(["compare", "e2m1-b16-fp32", "--dist", str(tmp_path / "t.npy")]) == 0
    out = capsys.readouterr().out
    assert "e2m1-b16-fp32" in out and "SQNR" in out and "B_eff" in out


def test_compare_md_names_every_option_and_key():
    """docs/compare.md's synopsis names every option of ``fp4lab compare``, and its JSON sketch every key of the
    document: top level, ``config``, a ``formats`` entry, a ``results`` record and a ``verdicts`` entry."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "compare.md").read_text()
    synopsis, sketch = re.findall(r"^```\n(.*?)^```", text, flags=re.S | re.M)[:2]
    ap = argparse.ArgumentParser(prog="fp4lab")
    sub = ap.add_subparsers(dest="cmd")
    cli.register(sub)
    options = {o for a in sub.choices["compare"]._actions for o in a.option_strings} - {"-h", "--help"}
    assert set(re.findall(r"--[a-z][\w-]*", synopsis)) == options

    def quoted(start: str, end: str, pattern: str = r'"([\w.]+)"') -> set[str]:
        return set(re.findall(pattern, sketch.split(start, 1)[1].split(end, 1)[0]))

    doc = run_compare(CompareConfig(formats=["mxfp4"], inputs=["gaussian"], rht=[0], shape=(4, 64)))
    assert set(doc) == set(re.findall(r'^  "(\w+)"', sketch, flags=re.M))
    assert set(doc["config"]) == quoted('"config":', '"formats": {format', r'"(\w+)":')
    assert set(doc["formats"]["mxfp4"]) == quoted('"formats": {format', '"results":')
    assert set(doc["results"][0]) == quoted('"results":', '"verdicts":')
    assert set(doc["verdicts"]["gaussian"]) <= quoted('"verdicts":', '"elapsed_s"')
