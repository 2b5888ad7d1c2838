"""``fp4lab.analysis.sr_bias``: the bias each stochastic-rounding random-bit width leaves, measured on data.

Statistical checks use fixed data and fixed SR seeds, so they are deterministic; the margins (in standard errors
across seeds) are chosen so that a real change of the SR arithmetic, not the draw, is what would break them."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

import fp4lab
from fp4lab.analysis import metrics
from fp4lab.analysis.distributions import sample
from fp4lab.analysis.sr_bias import block_amax, run_sr_bias, sr_width_bias
from fp4lab.cli import analysis as cli
from fp4lab.errors import InputError
from fp4lab.formats.registry import get_format

FMT = "e2m1-b16-fp32"  # FP32 block scales: nothing clips, so the SR error is the width deficit plus noise alone
SHAPE = dict(rows=128, cols=1024)


@pytest.fixture(scope="module")
def gaussian_rows():
    rows = sr_width_bias([FMT], widths=(24, 16, 8, 4), dists=("gaussian",), seeds=16, **SHAPE)
    return {r.rounding: r for r in rows}


def test_rows_cover_rtne_and_each_width_in_order(gaussian_rows):
    assert list(gaussian_rows) == ["rtne", "sr24", "sr16", "sr8", "sr4"]
    rtne = gaussian_rows["rtne"]
    assert rtne.width is None and rtne.n_seeds == 1 and rtne.signed_se == 0.0 and rtne.expected is None
    assert abs(rtne.clip_magnitude) < 1e-8  # FP32 scales: nothing saturates beyond float32 rounding
    assert all(gaussian_rows[k].n_seeds == 16 and gaussian_rows[k].signed_se > 0 for k in ("sr24", "sr4"))


def test_four_bit_sr_is_biased_low_and_24_bit_sr_is_not(gaussian_rows):
    r24, r8, r4 = gaussian_rows["sr24"], gaussian_rows["sr8"], gaussian_rows["sr4"]
    assert abs(r24.signed) < 4 * r24.signed_se
    se = np.hypot(r4.signed_se, r24.signed_se)
    assert r4.signed - r24.signed < -30 * se            # about -4e-3 of the block amax, ~80 SE
    assert r4.signed < -2e-3
    assert r8.signed < -4 * r8.signed_se                # about -2.7e-4, ~6 SE


@pytest.mark.parametrize("key", ["sr24", "sr16", "sr8", "sr4"])
def test_measured_bias_matches_the_exact_expectation(gaussian_rows, key):
    r = gaussian_rows[key]
    assert abs(r.signed - r.expected) < 4 * r.signed_se
    # the deficit cancels between signs in the magnitude error, and alpha stays at 1 (no shrinkage)
    assert abs(r.magnitude) < 4 * r.magnitude_se + 1e-5
    assert abs(r.alpha - 1.0) < 1e-3


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_clipping_formats_add_their_deterministic_part(fmt):
    """UE4M3 scales rounded down (nvfp4) and E8M0 floor scales (mxfp4) saturate some elements under SR too: that
    part shrinks magnitudes whatever the width, and the rest of the signed error is the width deficit."""
    rows = sr_width_bias([fmt], widths=(24, 4), dists=("gaussian",), seeds=16, **SHAPE)
    assert rows[0].clip_magnitude == rows[1].clip_magnitude == rows[2].clip_magnitude < -5e-4
    for r in rows[1:]:
        assert abs(r.signed - r.expected - r.clip_signed) < 4 * r.signed_se
        assert abs(r.magnitude - r.clip_magnitude) < 4 * r.magnitude_se + 1e-5
        assert r.alpha < 0.999
    assert rows[2].signed < -2e-3


def test_expectations_follow_the_width():
    r = {x.width: x for x in sr_width_bias([FMT], dists=("laplace",), seeds=2, rtne=False, rows=16, cols=256)}
    per_gap = {w: r[w].expected_uniform * 2.0 ** (w + 1) for w in r}  # -mean(gap / amax), the same for all widths
    assert all(v < 0 for v in per_gap.values())
    assert np.allclose(list(per_gap.values()), per_gap[24], rtol=1e-12)
    # the exact deficit lies in [-2^-w, 0] gaps and tracks the uniform-p value at 4 bits within 15%
    for w in (16, 8, 4):
        assert 2.0 * r[w].expected_uniform <= r[w].expected <= 0.0
    assert abs(r[4].expected / r[4].expected_uniform - 1) < 0.15
    # a scale choice that depends on the rounding (4-over-6 picks per block by error): no expectation is claimed
    (row,) = sr_width_bias(["nvfp4-4over6"], widths=(4,), dists=("gaussian",), seeds=2, rtne=False, rows=16, cols=64)
    assert row.expected is None and row.expected_uniform is None and row.clip_signed is None and row.signed < 0


def test_rtne_row_is_the_grid_shrinkage_in_amax_units(gaussian_rows):
    rtne = gaussian_rows["rtne"]
    g = get_format(FMT).element.amax
    assert rtne.magnitude < -1e-3 and rtne.alpha < 0.999 and rtne.grid_bias < 0
    # FP32 scales: block amax = g * s up to one rounding, so the two units differ by the factor g
    assert rtne.magnitude == pytest.approx(rtne.grid_bias / g, rel=1e-5)
    x = sample("gaussian", (SHAPE["rows"], SHAPE["cols"]), 0)
    y = fp4lab.dequantize(fp4lab.quantize(x, FMT, rounding="rtne"))
    assert rtne.alpha == metrics.alpha(x, y)


def test_deterministic_given_seeds_and_seed_sensitive():
    kw = dict(formats=["nvfp4"], widths=(8,), dists=("student-t:nu=3",), rows=16, cols=128)
    a = sr_width_bias(seeds=[3, 4], **kw)
    b = sr_width_bias(seeds=[3, 4], **kw)
    c = sr_width_bias(seeds=[5, 6], **kw)
    assert a == b
    assert a[0] == c[0]  # RTNE does not use the SR seeds
    assert a[1].signed != c[1].signed and a[1].expected == c[1].expected


def test_block_amax_for_1d_2d_and_element_only_formats():
    x = sample("laplace", (32, 64), 1)
    a = block_amax(x, get_format("mxfp4"), -1)
    assert a[3, 40] == np.abs(x[3, 32:64]).max()
    a = block_amax(x, get_format("nvfp4-2d"), -1)
    assert a[20, 5] == np.abs(x[16:32, 0:16]).max()
    a = block_amax(x, get_format("e2m1"), -1)
    assert np.all(a == np.abs(x).max())


def test_rht_measures_in_the_rotated_basis():
    rows = sr_width_bias(["ufp4"], widths=(4,), dists=("gaussian",), seeds=4, rht=16, rows=32, cols=256)
    assert rows[1].signed < -2e-3 and rows[1].expected < -2e-3


def _run_cli(argv):
    ap = argparse.ArgumentParser(prog="fp4lab")
    cli.register(ap.add_subparsers(dest="cmd"))
    args = ap.parse_args(argv)
    return args.func(args)


def test_cli_json(capsys):
    rc = _run_cli(["sr-bias", "ufp4", "mxfp4", "--widths", "16", "4", "--seeds", "3", "--dist", "gaussian",
                   "--shape", "16x128", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    json.dumps(doc, allow_nan=False)
    assert doc["config"]["widths"] == [16, 4] and doc["config"]["seeds"] == [0, 1, 2]
    assert [(r["format"], r["rounding"]) for r in doc["results"]] == [
        ("ufp4", "rtne"), ("ufp4", "sr16"), ("ufp4", "sr4"), ("mxfp4", "rtne"), ("mxfp4", "sr16"), ("mxfp4", "sr4")]
    assert doc == {**doc, "results": run_sr_bias(["ufp4", "mxfp4"], (16, 4), ("gaussian",), 16, 128, 3)["results"]}


def test_cli_table_and_errors(capsys):
    assert _run_cli(["sr-bias", "nvfp4", "--widths", "4", "--seeds", "2", "--dist", "laplace",
                     "--shape", "16x64"]) == 0
    out = capsys.readouterr().out
    assert "nvfp4" in out and "rtne" in out and "block amax" in out
    with pytest.raises(InputError, match="--seeds must be at least 1"):  # main prints it as one line, exit 2
        _run_cli(["sr-bias", "--seeds", "0"])
    with pytest.raises(SystemExit):
        _run_cli(["sr-bias", "--widths", "12"])
