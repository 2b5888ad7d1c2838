"""The core CLI commands: formats, show, spec validate, schema."""

import json

import numpy as np

import fp4lab
from fp4lab.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_formats_json_lists_every_builtin(capsys):
    code, out, _ = run(capsys, "formats", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["name"] for r in rows] == fp4lab.list_formats()
    nv = next(r for r in rows if r["name"] == "nvfp4")
    assert (nv["element"], nv["block"], nv["scale"], nv["tensor_scale"]) == ("e2m1", "16", "ue4m3", "amax")
    assert nv["bits_per_element"] == 4.5


def test_formats_table_renders(capsys):
    code, out, _ = run(capsys, "formats")
    assert code == 0 and "mxfp4" in out and "ufp4" in out


def test_show_reports_paper_bias_of_e2m1(capsys):
    code, out, _ = run(capsys, "show", "nvfp4", "--json")
    rep = json.loads(out)
    levels, bias = np.array(rep["levels"]), np.array(rep["level_bias"])
    assert code == 0
    assert bias[levels == 2.0][0] == -0.125 and bias[levels == 4.0][0] == -0.25  # paper Eq. 2
    assert len(rep["bin_edges_rtne"]) == len(levels) - 1
    assert rep["codes"][list(levels).index(6.0)] == 7


def test_show_uniform_grid_has_no_interior_bias(capsys):
    code, out, _ = run(capsys, "show", "ufp4", "--json")
    rep = json.loads(out)
    levels, bias = np.abs(rep["levels"]), np.array(rep["level_bias"])
    interior = (levels > 0) & (levels < levels.max())
    assert code == 0 and interior.sum() == 12 and np.all(bias[interior] == 0.0)


def test_show_accepts_spec_file_path(capsys, tmp_path):
    spec = tmp_path / "g.toml"
    spec.write_text('name = "g"\nelement = "int4"\n')
    code, out, _ = run(capsys, "show", str(spec), "--json")
    assert code == 0 and json.loads(out)["levels"] == list(range(-7, 8))


def test_show_unknown_format_is_one_line_error(capsys):
    code, out, err = run(capsys, "show", "nope")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "unknown format 'nope'" in err


def test_spec_validate_good_and_bad(capsys, tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('name = "good"\nelement = "e1m2"\nblock = { shape = [32] }\nscale = "e8m0"\n'
                    '[scale_rule]\nmethod = "rceil"\n')
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\nelement = "e2m1"\nblock = { shape = [16] }\nscale = "fp32"\n'
                   '[scale_rule]\nmethod = "floor"\n')
    code, out, err = run(capsys, "spec", "validate", str(good), str(bad))
    assert code == 1
    assert "ok:" in out and "good" in out
    assert err.count("\n") == 1 and "bad.toml" in err and "pow2" in err


def test_schema_is_json_schema_of_quant_format(capsys):
    code, out, _ = run(capsys, "schema")
    schema = json.loads(out)
    assert code == 0 and schema["title"] == "QuantFormat" and "element" in schema["properties"]


def test_invalid_spec_toml_syntax(capsys, tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text("name = \n")
    code, _, err = run(capsys, "spec", "validate", str(bad))
    assert code == 1 and "broken.toml" in err and "TOML" in err


def test_console_script_entry_point_exists():
    import importlib.metadata as md

    eps = [e for e in md.entry_points(group="console_scripts") if e.name == "fp4lab"]
    assert eps and eps[0].value == "fp4lab.cli:main"


def test_verify_mma_runs_the_published_h200_vectors(capsys):
    code, out, _ = run(capsys, "verify", "--mma", "--device", "interpreter")
    assert code == 0
    assert out.count("5000/5000 bit-exact") == 6
