"""Conformance vectors: file layout, reproducibility, and live library agreement."""

import argparse
import json
import re

import numpy as np
import pytest

import fp4lab
from fp4lab.analysis import conformance as C
from fp4lab.formats import ROUNDING_MODES
from fp4lab.testing.bits import same_bits


def test_vectors_round_trip(tmp_path):
    index = C.write_vectors(tmp_path, formats=("nvfp4", "e2m1"))
    assert set(index["formats"]) == {"nvfp4", "e2m1"}
    assert json.loads((tmp_path / "index.json").read_text())["roundings"] == list(C.ROUNDINGS)
    with np.load(tmp_path / "nvfp4.npz", allow_pickle=False) as z:
        for case in index["cases"]:
            x = z[f"{case}__input"].view(np.float32)
            for mode in C.ROUNDINGS:
                qt = fp4lab.quantize(x, "nvfp4", rounding=mode, seed=C.SR_SEED)
                assert np.array_equal(z[f"{case}__{mode}__codes"], qt.codes)
                assert np.array_equal(z[f"{case}__{mode}__scale_codes"], qt.scale_codes)
                assert same_bits(z[f"{case}__{mode}__dequantized"], np.asarray(fp4lab.dequantize(qt), np.float32))
    assert (tmp_path / "library_agreement.md").read_text().startswith("| fp4lab format")


def test_cases_cover_edge_values():
    cases = {k: np.asarray(v, np.float32) for k, (_, v) in C._cases(fp4lab.get_format("mxfp4")).items()}
    assert np.isnan(cases["nan"]).any() and np.isinf(cases["inf"]).any()
    sub = np.abs(cases["subnormal"])
    assert np.any((sub > 0) & (sub < np.finfo(np.float32).tiny))
    assert np.any(np.signbit(cases["zeros"]) & (cases["zeros"] == 0))
    t = cases["ties"]  # E2M1 midpoints times 2^k are present
    assert np.any(np.isin(np.abs(t), [0.25 * 2.0 ** k for k in range(-3, 4)]))


def test_live_agreement_rows():
    rows = {(r["format"], r["library"]): r for r in C.agreement_table()}
    assert rows[("e2m1", "ml_dtypes float4_e2m1fn cast")]["status"] == "agrees"
    mx = rows[("mxfp4", "torchao 0.18 to_mx FLOOR")]["cases"]
    for case in ("random", "ties", "pow2", "zeros", "subnormal", "huge"):
        assert mx[case] == "match"
    nv = rows[("nvfp4-torchao", "torchao 0.18 nvfp4_quantize")]["cases"]
    assert nv["random"] == "match" and nv["pow2"] == "match"
    assert rows[("nvfp4", "torchao 0.18 nvfp4_quantize")]["cases"]["subnormal"] != "match"  # 2^-6 clamp


def test_agreement_rows_cover_the_given_formats_only(tmp_path):
    """A run on spec files compares no library; one on a built-in keeps that built-in's rows; a
    spec file that takes a built-in's name with another definition gets none."""
    spec = tmp_path / "mine.toml"
    spec.write_text('name = "mine"\nelement = "e1m2"\nblock = { shape = [16] }\nscale = "fp32"\n'
                    '[scale_rule]\nmethod = "amax"\n')
    impostor = tmp_path / "impostor.toml"
    impostor.write_text('name = "e2m1"\nelement = "e1m2"\n')
    C.write_vectors(tmp_path / "a", formats=(str(spec), str(impostor)))
    assert json.loads((tmp_path / "a" / "library_agreement.json").read_text()) == []
    C.write_vectors(tmp_path / "b", formats=(str(spec), "e2m1"))
    rows = json.loads((tmp_path / "b" / "library_agreement.json").read_text())
    assert [(r["format"], r["status"]) for r in rows] == [("e2m1", "agrees")]
    copy = tmp_path / "copy.toml"  # the built-in's numerics under its name, in other words
    copy.write_text('name = "e2m1"\ndescription = "my E2M1"\nelement = "e2m1"\nnan_element = "neg_zero"\n')
    C.write_vectors(tmp_path / "c", formats=(str(copy),))
    rows = json.loads((tmp_path / "c" / "library_agreement.json").read_text())
    assert [(r["format"], r["status"]) for r in rows] == [("e2m1", "agrees")]


def test_mode_lists_are_rounding_modes():
    """The conformance vectors and the help of ``compare --rounding`` name every mode of ROUNDING_MODES, in order."""
    from fp4lab.cli import analysis as cli

    assert C.ROUNDINGS == ROUNDING_MODES
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers(dest="cmd"))
    compare = ap._subparsers._group_actions[0].choices["compare"]
    (rounding,) = [a for a in compare._actions if "--rounding" in a.option_strings]
    assert re.findall(r"\((.*)\)", rounding.help)[-1].split(", ") == list(ROUNDING_MODES)


def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path):
    from fp4lab.errors import OutputError

    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "vectors"
    with pytest.raises(OutputError) as info:
        C.write_vectors(out, formats=("e2m1",))
    assert str(info.value) == f"conformance: cannot create the output folder {out}: Not a directory"
