"""The core CLI commands: formats, show, spec validate, schema."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

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


def _show_spec(capsys, tmp_path, text):
    """(exit code, JSON document) of ``fp4lab show --json`` on a spec file holding ``text``."""
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    code, out, _ = run(capsys, "show", str(spec), "--json")
    return code, json.loads(out)


def test_show_level_bias_of_an_asymmetric_grid_uses_each_side_s_own_neighbours(capsys, tmp_path):
    """Levels -6 -5 -3 -2 -1 -0.5 -0.25 0 0.125 0.25 0.625 1 1.5 2.5 4 8: (l - r)/2 with l the half-gap toward zero,
    r the half-gap away from zero (0 at either end); the zero bin [-0.125, 0.0625] gives -(a^2 + b^2) / (2 (a + b))."""
    code, rep = _show_spec(capsys, tmp_path,
                           'name = "asym"\nblock = { shape = [16] }\nscale = "fp32"\n[scale_rule]\nmethod = "amax"\n'
                           '[element]\nkind = "table"\nbits = 4\nvalues = [0.0, 0.125, 0.25, 0.625, 1.0, 1.5, 2.5, '
                           '4.0, 8.0, -0.25, -0.5, -1.0, -2.0, -3.0, -5.0, -6.0]\n')
    got = dict(zip(rep["levels"], rep["level_bias"]))
    assert code == 0
    assert got[-6.0] == 0.25 and got[-5.0] == 0.25 and got[-3.0] == -0.25  # -5: l = 1, r = 0.5
    assert got[-1.0] == -0.125 and got[-0.25] == 0.0  # not the +1 (-0.03125) and +0.25 (-0.0625) values
    assert got[0.25] == -0.0625 and got[1.0] == -0.03125 and got[8.0] == 1.0
    assert got[0.0] == pytest.approx(-(0.125**2 + 0.0625**2) / (2 * 0.1875))


@pytest.mark.parametrize("name", ["e2m1", "ufp4", "int4", "nf4-b64-fp32"])
def test_show_level_bias_equals_the_magnitude_bias_on_the_non_negative_side(capsys, name):
    from fp4lab.analysis.bias import level_bias

    code, out, _ = run(capsys, "show", name, "--json")
    rep = json.loads(out)
    lb = level_bias(fp4lab.get_format(name))
    by_level = dict(zip(rep["levels"], rep["level_bias"]))
    positive = lb.levels > 0
    assert code == 0 and [by_level[q] for q in lb.levels[positive].tolist()] == lb.bias[positive].tolist()
    if name != "nf4-b64-fp32":  # sign symmetric: each negative level mirrors its magnitude, zero's bin too
        assert all(by_level[-q] == by_level[q] for q in lb.levels.tolist())
        assert by_level[0.0] == lb.at(0.0)
    else:  # NF4's -1 neighbours -0.696, its +1 neighbours +0.723
        assert by_level[-1.0] == pytest.approx((1.0 - 0.6961928009986877) / 4) != by_level[1.0]


def test_show_accepts_spec_file_path(capsys, tmp_path):
    spec = tmp_path / "g.toml"
    spec.write_text('name = "g"\nelement = "int4"\n')
    code, out, _ = run(capsys, "show", str(spec), "--json")
    assert code == 0 and json.loads(out)["levels"] == list(range(-7, 8))


def test_show_names_an_unnamed_grid_and_scale_from_their_fields(capsys, tmp_path):
    code, rep = _show_spec(capsys, tmp_path,
                           'name = "g"\nblock = { shape = [16] }\ntensor_scale = "amax"\n[scale_rule]\n'
                           'method = "amax"\n[element]\nkind = "int"\nrange = "twos_complement"\n'
                           '[scale]\nkind = "float"\nexponent_bits = 3\nmantissa_bits = 2\n')
    assert code == 0 and (rep["element"], rep["scale"]) == ("int4", "ue3m2")  # not "int" and "float"


def test_show_prints_the_scale_rule_as_fields_not_a_python_dict(capsys):
    code, out, _ = run(capsys, "show", "mxfp4")
    rule = next(line for line in out.splitlines() if line.startswith("scale rule:"))
    assert code == 0 and "{" not in rule and "'" not in rule
    assert "method = floor" in rule and "scale_rounding = rtne" in rule
    assert "the tie goes to the level below" in " ".join(out.split())  # what 0.750000060 as an edge means
    code, out, _ = run(capsys, "show", "e2m1")  # element-only: no rule applies
    assert "scale rule: none" in out and "method" not in out


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
    assert code == 2  # bad input, as every command reports it
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
    assert code == 2 and "broken.toml" in err and "TOML" in err


def test_console_script_entry_point_exists():
    import importlib.metadata as md

    eps = [e for e in md.entry_points(group="console_scripts") if e.name == "fp4lab"]
    assert eps and eps[0].value == "fp4lab.cli:main"


def test_mma_verification_has_one_entry_point(capsys):
    """The published H200 vectors are checked by ``hw verify``; ``verify`` (the Triton kernels) has no ``--mma``."""
    code, out, _ = run(capsys, "hw", "verify", "--gpu", "off")
    assert code == 0
    assert out.count("5000/5000 bit-exact") == 6
    with pytest.raises(SystemExit) as exc:
        main(["verify", "--mma"])
    assert exc.value.code == 2


def test_spec_validate_prints_the_accepted_grid(capsys, tmp_path):
    spelled = tmp_path / "spelled.toml"  # E1M2 fields without a bias: bias 0, levels up to 3.5
    spelled.write_text('name = "spelled"\nblock = 16\nscale = "fp32"\n[element]\nkind = "float"\nexponent_bits = 1\n'
                       'mantissa_bits = 2\n[scale_rule]\nmethod = "amax"\n')
    named = tmp_path / "named.toml"
    named.write_text('name = "named"\nelement = "e1m2"\nblock = 16\nscale = "fp32"\n[scale_rule]\nmethod = "amax"\n')
    code, out, _ = run(capsys, "spec", "validate", str(spelled), str(named))
    assert code == 0
    first, second = out.split(f"ok: {named}")
    assert "float E1M2, exponent bias 0 (default 2^(e-1) - 1)" in first
    assert "magnitudes 0 0.5 1 1.5 2 2.5 3 3.5 (largest magnitude 3.5)" in first
    assert "note: not the built-in grid 'e1m2' (exponent bias 1, largest magnitude 1.75)" in first
    assert "float E1M2, exponent bias 1: 15 levels, magnitudes 0 0.25 0.5 0.75 1 1.25 1.5 1.75" in second
    assert "note" not in second


@pytest.mark.parametrize("fields, note", [
    ('exponent_bits = 4\nmantissa_bits = 3\nspecials = "fn"\n', None),  # OCP E4M3FN spelled out: the e4m3 grid
    ('exponent_bits = 4\nmantissa_bits = 3\nbias = 8\nspecials = "fnuz"\n', None),  # e4m3fnuz spelled out
    ('exponent_bits = 4\nmantissa_bits = 3\nbias = 6\nspecials = "fn"\n', "not the built-in grid 'e4m3'"),
])
def test_spec_validate_notes_a_twin_only_when_no_built_in_grid_matches(capsys, tmp_path, fields, note):
    spec = tmp_path / "f8.toml"
    spec.write_text(f'name = "f8"\n[element]\nkind = "float"\n{fields}')
    code, out, _ = run(capsys, "spec", "validate", str(spec))
    assert code == 0
    assert ("note:" in out) == (note is not None) and (note is None or note in out), out


def test_spec_validate_lists_asymmetric_levels(capsys, tmp_path):
    spec = tmp_path / "i4.toml"
    spec.write_text('name = "i4"\n[element]\nkind = "int"\nrange = "twos_complement"\n')
    code, out, _ = run(capsys, "spec", "validate", str(spec))
    assert code == 0 and "16 levels -8 -7 -6 -5 -4 -3 -2 -1 0 1 2 3 4 5 6 7 (largest magnitude 8)" in out


def test_spec_validate_notes_where_an_asymmetric_grid_saturates(capsys, tmp_path):
    """Two's-complement INT4 in blocks: the amax maps onto 8, so +7 is where positive values saturate; NF4 (ends
    -1 and 1) and the element-only INT4 get no such note."""
    spec = tmp_path / "i4b.toml"
    spec.write_text('name = "i4b"\nblock = { shape = [16] }\nscale = "fp32"\n[scale_rule]\nmethod = "amax"\n'
                    '[element]\nkind = "int"\nrange = "twos_complement"\n')
    bare = tmp_path / "i4.toml"
    bare.write_text('name = "i4"\n[element]\nkind = "int"\nrange = "twos_complement"\n')
    code, out, _ = run(capsys, "spec", "validate", str(spec), str(bare),
                       str(Path(fp4lab.__file__).parent / "formats" / "builtin" / "nf4-b64-fp32.toml"))
    assert code == 0
    assert out.count("note: a block's amax maps onto") == 1
    assert "note: a block's amax maps onto 8, the larger of the grid's extremes; values past 7 on the other side " \
           "saturate" in out


def test_paper_diagnostics_writes_the_tracked_doc_only_when_asked(tmp_path, monkeypatch, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "paper_diagnostics.py"
    spec = importlib.util.spec_from_file_location("paper_diagnostics", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.DOC == path.parents[1] / "docs" / "paper_reproduction.md"
    for section in ("grid_bias_section", "tensor_section", "gemm_section", "chain_section", "disagreements"):
        monkeypatch.setattr(mod, section, lambda name=section: [f"## {name}"])  # the report's frame, not its numbers
    doc = tmp_path / "docs" / "paper_reproduction.md"
    monkeypatch.setattr(mod, "DOC", doc)
    assert mod.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Paper reproduction") and "## chain_section" in out and not doc.exists()
    other = tmp_path / "report.md"
    assert mod.main(["--out", str(other)]) == 0 and other.read_text().startswith("# Paper reproduction")
    assert not doc.exists()
    doc.parent.mkdir()
    assert mod.main(["--update-docs"]) == 0 and "## tensor_section" in doc.read_text()


def test_float64_beyond_float32_casts_to_inf_without_a_warning():
    import warnings

    from fp4lab.numerics.ref_quantize import quantize_reference

    x64 = np.array([1e39, -1e300, 1.0, 3.0] * 8)
    with np.errstate(over="ignore"):
        x32 = x64.astype(np.float32)  # RTNE: +-Inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [fp4lab.quantize(x64, "mxfp4"), quantize_reference(x64, fp4lab.get_format("mxfp4"))]
    want = fp4lab.quantize(x32, "mxfp4")
    for qt in got:
        assert np.array_equal(np.asarray(qt.codes), np.asarray(want.codes))
        assert np.array_equal(np.asarray(qt.scale_codes), np.asarray(want.scale_codes))


def test_warnings_from_fp4lab_code_fail_the_suite():
    import tomllib
    import warnings
    from pathlib import Path

    import pytest

    ini = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "error:::fp4lab" in ini["tool"]["pytest"]["ini_options"]["filterwarnings"]
    with pytest.raises(RuntimeWarning):  # what pytest now makes of a warning attributed to an fp4lab module
        warnings.warn_explicit("overflow", RuntimeWarning, "fp4lab/emulator/x.py", 1, module="fp4lab.emulator.x")
    with warnings.catch_warnings(record=True) as seen:  # filters kept: a warning from elsewhere is no error
        warnings.warn_explicit("elsewhere", DeprecationWarning, "other/x.py", 1, module="other.x")
    assert len(seen) == 1


def _doc_commands() -> list[tuple[str, str]]:
    """(file, command) for every ``fp4lab ...`` code span and code-block line of README.md and docs/*.md."""
    root = Path(__file__).resolve().parents[1]
    found = []
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = path.read_text()
        spans = re.findall(r"`(fp4lab [^`\n]+)`", text)
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
            for line in block.splitlines():
                spans += [c.strip() for c in re.split(r"&&|;", line.split(" #")[0]) if c.strip().startswith("fp4lab ")]
        found += [(path.name, s) for s in spans]
    return found


def test_every_option_the_docs_give_a_command_is_an_option_of_that_command():
    """``fp4lab compare --formats X`` in a doc would fail for the reader: each ``--option`` written after a
    command must be one of that (sub)command's options."""
    import argparse

    from fp4lab.cli.app import build_parser

    def options_of(words: list[str]) -> tuple[str, set[str]]:
        parser, path = build_parser(), ["fp4lab"]
        for word in words:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if not subs or word not in subs[0].choices:
                break
            parser, path = subs[0].choices[word], path + [word]
        return " ".join(path), set(parser._option_string_actions)

    commands = _doc_commands()
    assert len(commands) > 30
    wrong = []
    for file, cmd in commands:
        words = [w.strip("[]") for w in cmd.split()[1:]]  # a synopsis writes [--option VALUE]
        where, known = options_of(words)
        wrong += [f"{file}: `{cmd}`: {where} has no {w.split('=')[0]}" for w in words
                  if w.startswith("--") and w.split("=")[0] not in known]
    assert not wrong, "\n".join(wrong)


def test_every_option_of_every_command_has_a_help_text():
    import argparse

    from fp4lab.cli.app import build_parser

    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif action.dest != "help" and not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "fp4lab")
    assert not missing, missing


@pytest.mark.parametrize("module", ["fp4lab", "fp4lab.cli"])
def test_python_dash_m_runs_the_command(module):
    """``python -m fp4lab`` and ``python -m fp4lab.cli`` are the ``fp4lab`` script: same output, same exit code."""
    import subprocess
    import sys

    ok = subprocess.run([sys.executable, "-m", module, "formats"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "ufp4" in ok.stdout and "nvfp4" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", module, "show", "no-such-format"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "no-such-format" in bad.stderr and "Traceback" not in bad.stderr
