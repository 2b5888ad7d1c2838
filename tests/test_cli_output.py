"""What a person reads: every table fits 80 columns with its numbers whole; compare names formats by name, shows
bits per element, a block-amax bias and a verdict per input; the grid plot has a legend, one y-scale and the
measured bias of spec-file formats too."""

from __future__ import annotations

import json
import re

import pytest

import fp4lab
from fp4lab.cli import main
from fp4lab.formats.floats import float32_text

SPEC = ('name = "my-e1m2-b32"\nelement = "e1m2"\nblock = { shape = [32] }\nscale = "ue4m3"\ntensor_scale = "amax"\n'
        '[scale_rule]\nmethod = "amax"\nelement_scaling = "reciprocal"\n')
UNIT_FIRST = re.compile(r"\s*(dB|bits/element)\b")  # a line that starts with a unit lost its number
NUMBER_LAST = re.compile(r"(^|[\s(])[-+]?[\d.]+$")  # a line that ends in a bare number lost its unit
SMALL = ["--dist", "gaussian", "laplace", "--shape", "16x256", "--rht", "0,16"]


@pytest.fixture()
def spec(tmp_path):
    path = tmp_path / "a-rather-long-folder-name-for-the-spec" / "my_e1m2_b32_spec_file.toml"
    path.parent.mkdir()
    path.write_text(SPEC)
    return str(path)


def run(capsys, monkeypatch, *argv):
    monkeypatch.setenv("COLUMNS", "80")
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def assert_fits(out: str) -> None:
    lines = out.splitlines()
    assert lines and max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert "…" not in out  # rich's mark of a cut cell


@pytest.mark.parametrize("argv", [["formats"], ["hw", "list"], ["hw", "show", "blackwell-sm100", "--format", "ufp4"],
                                  ["show", "nvfp4"], ["show", "nf4-b64-fp32"]]
                         + [["hw", "show", name] for name in fp4lab.list_hw()])
def test_tables_fit_80_columns(capsys, monkeypatch, argv):
    assert_fits(run(capsys, monkeypatch, *argv))


def test_formats_table_prints_every_value_whole(capsys, monkeypatch):
    rows = json.loads(run(capsys, monkeypatch, "formats", "--json"))
    out = run(capsys, monkeypatch, "formats")
    assert_fits(out)
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    for r in rows:
        cells = lines[r["name"]]
        assert cells[1] == r["element"] and float(cells[2]) == r["element_max"]
        assert float(cells[-1]) == r["bits_per_element"]  # 4.03125 for nvfp4-2d, not 4.031


def test_hw_list_keeps_descriptions_whole(capsys, monkeypatch):
    out = run(capsys, monkeypatch, "hw", "list")
    flat = " ".join(out.split())
    for name in fp4lab.list_hw():
        assert f"{name}: {' '.join(fp4lab.get_hw(name).description.split())}" in flat


def test_compare_table_names_formats_and_keeps_digits(capsys, monkeypatch, spec):
    doc = json.loads(run(capsys, monkeypatch, "compare", "nvfp4", "ufp4", spec, *SMALL, "--json"))
    out = run(capsys, monkeypatch, "compare", "nvfp4", "ufp4", spec, *SMALL)
    assert_fits(out)
    assert spec not in out and "my-e1m2-b32" in out
    assert doc["formats"][spec]["name"] == "my-e1m2-b32"
    for rec in doc["results"]:  # every SQNR and block-amax bias of the document is printed whole
        assert f" {rec['sqnr_db']:.2f} " in out
        assert f" {100 * rec['bias_amax']:+.4f} " in out
    first_rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    assert first_rows["ufp4"][1] == "6" and first_rows["nvfp4"][1] == "4.5" and first_rows["my-e1m2-b32"][1] == "4.25"


def test_compare_bias_amax_is_the_sr_bias_magnitude_unit():
    from fp4lab.analysis.compare import CompareConfig, run_compare
    from fp4lab.analysis.sr_bias import sr_width_bias

    formats = ["ufp4", "nvfp4", "mxfp4", "e2m1", "nvfp4-2d"]
    doc = run_compare(CompareConfig(formats=formats, inputs=["laplace"], rht=[0], shape=(32, 256)))
    rows = sr_width_bias(formats, widths=[], dists=["laplace"], rows=32, cols=256, seeds=1)
    for f, row in zip(formats, rows):
        rec = next(r for r in doc["results"] if r["format"] == f)
        assert rec["bias_amax"] == pytest.approx(row.magnitude, rel=1e-12, abs=1e-15)
        assert rec["bias"] == pytest.approx(row.grid_bias, rel=1e-12)
    ufp4 = next(r for r in doc["results"] if r["format"] == "ufp4")  # FP32 scale amax / 1.75: grid bias / 1.75
    assert ufp4["bias_amax"] == pytest.approx(ufp4["bias"] / 1.75, rel=1e-5)


def test_compare_verdict_per_input(capsys, monkeypatch, spec):
    doc = json.loads(run(capsys, monkeypatch, "compare", "nvfp4", "ufp4", spec, *SMALL, "--json"))
    out = run(capsys, monkeypatch, "compare", "nvfp4", "ufp4", spec, *SMALL)
    flat = " ".join(out.split())
    names = {"nvfp4": "nvfp4", "ufp4": "ufp4", spec: "my-e1m2-b32"}
    for label in ("gaussian", "laplace"):
        recs = [r for r in doc["results"] if r["input"] == label]
        v = doc["verdicts"][label]
        best = max(r["sqnr_db"] for r in recs)
        assert v["best_sqnr"]["sqnr_db"] == best
        assert {(c["format"], c["rht"]) for c in v["best_sqnr"]["cases"]} == \
            {(r["format"], r["rht"]) for r in recs if r["sqnr_db"] == best}
        small = min(abs(r["bias_amax"]) for r in recs)
        assert abs(v["smallest_abs_bias"]["bias_amax"]) == small
        win = v["best_sqnr"]["cases"][0]
        line = re.search(rf"verdict for {re.escape(label)}: best SQNR (.*?): ([-\d.]+) dB; smallest \|bias\| "
                         r"(.*?): ([-+\d.]+)% of the block amax", flat)
        assert line, flat
        assert line.group(1).startswith(names[win["format"]]) and float(line.group(2)) == round(best, 2)
        assert float(line.group(4)) == round(100 * v["smallest_abs_bias"]["bias_amax"], 4)


def test_compare_verdicts_among_formats_of_equal_bits(capsys, monkeypatch):
    """The 6-bit ufp4 wins the overall verdict; ``by_bits`` judges each storage cost among its peers (4.25: mxfp4
    and int4-b32-e8m0; 4.5: nvfp4; 6: ufp4), in JSON and as one printed line per cost."""
    argv = ["compare", "mxfp4", "int4-b32-e8m0", "nvfp4", "ufp4", *SMALL]
    doc = json.loads(run(capsys, monkeypatch, *argv, "--json"))
    flat = " ".join(run(capsys, monkeypatch, *argv).split())
    bits = {f: doc["formats"][f]["bits_per_element"] for f in doc["config"]["formats"]}
    for label in ("gaussian", "laplace"):
        by_bits = doc["verdicts"][label]["by_bits"]
        assert list(by_bits) == ["4.25", "4.5", "6"]
        for key, group in by_bits.items():
            recs = [r for r in doc["results"] if r["input"] == label and float32_text(bits[r["format"]]) == key]
            best = max(r["sqnr_db"] for r in recs)
            assert group["best_sqnr"]["sqnr_db"] == best
            assert {c["format"] for c in group["best_sqnr"]["cases"]} == {r["format"] for r in recs
                                                                          if r["sqnr_db"] == best}
            assert abs(group["smallest_abs_bias"]["bias_amax"]) == min(abs(r["bias_amax"]) for r in recs)
            assert f"among {key}-bit formats: best SQNR" in flat
        assert doc["verdicts"][label]["best_sqnr"]["cases"][0]["format"] == "ufp4"
        assert by_bits["4.25"]["best_sqnr"]["cases"][0]["format"] in ("mxfp4", "int4-b32-e8m0")


def test_compare_verdict_lines_wrap_with_a_hanging_indent(capsys, monkeypatch):
    """A wrapped verdict reads as one block per verdict: its continuation lines are indented under it, and a
    hyphenated format name is never split across lines."""
    out = run(capsys, monkeypatch, "compare", "mxfp4", "int4-b32-e8m0", "ufp4-e8m0", "nvfp4", "ufp4", *SMALL)
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("verdict for gaussian:"))
    block = lines[start:lines.index("", start)]
    assert len(block) > 4 and max(len(line) for line in block) <= 80
    heads = [line for line in block if not line.startswith(" ")]
    among = [line for line in block if line.startswith("  among ")]
    assert heads == [block[0]] and len(among) == 3  # 4.25, 4.5 and 6 bits
    for line in block[1:]:
        assert line.startswith("    ") or line.startswith("  among ")
    assert "int4-b32-e8m0" in " ".join(block) and "ufp4-e8m0" in " ".join(block)  # never "int4-b32-" + "e8m0"
    for line in block:  # a number and its unit stay on one line
        assert not UNIT_FIRST.match(line) and not NUMBER_LAST.search(line), line


def test_compare_verdict_keeps_a_number_with_its_unit():
    """Wherever the wrap point falls, "21.97 dB" and "6 bits/element" move as one word."""
    import io

    from fp4lab.cli.analysis import _print_hanging
    from fp4lab.cli.tables import console

    for pad in range(1, 40):
        buf = io.StringIO()
        _print_hanging(console(width=60, file=buf), "v" * pad + " best SQNR ufp4 (6 bits/element, RHT 16): 21.97 dB; "
                       "smallest |bias| ufp4 (6 bits/element, no RHT): -0.0394% of the block amax", "    ")
        for line in buf.getvalue().splitlines():
            assert not UNIT_FIRST.match(line) and not NUMBER_LAST.search(line), (pad, line)


def test_plot_has_legend_shared_scale_and_measured_bias_for_spec_files(monkeypatch, tmp_path, spec):
    import matplotlib.pyplot as plt

    from fp4lab.analysis.compare import CompareConfig, run_compare
    from fp4lab.analysis.plot import plot_grids

    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    formats = ["nvfp4", spec, "int4-b16-fp32"]  # three grids; the spec file's e1m2 grid has a panel of its own
    doc = run_compare(CompareConfig(formats=formats, inputs=["gaussian"], rht=[0, 16], shape=(16, 256)))
    plot_grids(formats, tmp_path / "g.png", doc)
    (fig,) = figures
    try:
        axes = fig.axes
        assert len(axes) == 3 and len({ax.get_ylim() for ax in axes}) == 1
        assert fig.legends and len(fig.legends[0].get_texts()) >= 6
        for ax, given in zip(axes, formats):
            dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
            want = [100 * r["bias_amax"] for r in doc["results"] if r["format"] == given]
            assert sorted(float(ln.get_ydata()[0]) for ln in dashed) == pytest.approx(sorted(want))
    finally:
        real_close(fig)
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_titles_stay_inside_the_figure_with_every_rht_size(monkeypatch, tmp_path):
    """Six RHT sizes and a long spec-file list: every panel title wraps inside the figure's width."""
    import matplotlib.pyplot as plt

    from fp4lab.analysis.compare import CompareConfig, run_compare
    from fp4lab.analysis.plot import plot_grids

    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    formats = ["nvfp4", "nvfp4-4over6", "mxfp4", "mxfp4-rceil", "e2m1-b16-fp32", "ufp4"]
    doc = run_compare(CompareConfig(formats=formats, inputs=["gaussian"], rht=[0, 16, 32, 64, 128, 256],
                                    shape=(4, 256)))
    plot_grids(formats, tmp_path / "g.png", doc)
    (fig,) = figures
    try:
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            assert "RHT 256" in ax.get_title().replace("\xa0", " ")
            box = ax.title.get_window_extent(renderer)
            assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, ax.get_title()
    finally:
        real_close(fig)


def test_plot_level_labels_of_a_crowded_grid_do_not_overlap(monkeypatch, tmp_path):
    """Levels 0, 0.125, 0.25, 0.625, 1 ... 8 on one axis: neighbouring labels are staggered, none overlaps."""
    import matplotlib.pyplot as plt

    from fp4lab.analysis.plot import plot_grids

    spec = tmp_path / "crowded.toml"
    spec.write_text('name = "crowded"\nblock = { shape = [16] }\nscale = "fp32"\n[scale_rule]\nmethod = "amax"\n'
                    '[element]\nkind = "table"\nbits = 4\nvalues = [0.0, 0.125, 0.25, 0.625, 1.0, 1.5, 2.5, 4.0, 8.0, '
                    '-0.25, -0.5, -1.0, -2.0, -3.0, -5.0, -6.0]\n')
    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    plot_grids([str(spec), "nf4-b64-fp32"], tmp_path / "g.png")
    (fig,) = figures
    try:
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text().strip()]
            assert len(boxes) >= 8
            for i, a in enumerate(boxes):
                for b in boxes[i + 1:]:
                    assert not a.overlaps(b), (a, b)
    finally:
        real_close(fig)


def test_plot_names_a_format_given_twice_once(monkeypatch, tmp_path, capsys):
    import matplotlib.pyplot as plt

    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    run(capsys, monkeypatch, "compare", "ufp4", "ufp4", "--dist", "gaussian", "--shape", "4x64", "--plot",
        str(tmp_path / "g.png"))
    (fig,) = figures
    try:
        (ax,) = fig.axes
        assert ax.get_title().splitlines()[0] == "e1m2  (formats: ufp4)"
    finally:
        real_close(fig)
