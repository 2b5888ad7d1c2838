"""Grid search: fast evaluator vs the real quantizer, Lloyd-Max, Pareto front, CLI."""

import argparse
import json
import re

import numpy as np
import pytest

from fp4lab.analysis import search
from fp4lab.cli import analysis as cli


@pytest.fixture(scope="module")
def data():
    return search.post_rht_data(("gaussian", "outliers:k=20,every=97"), shape=(16, 512))


def test_pareto_front_hand_points():
    sqnr = np.array([20.0, 21.0, 19.0, 21.0, 18.0])
    bias = np.array([0.01, 0.02, 0.005, 0.03, 0.001])
    assert search.pareto_front(sqnr, bias).tolist() == [1, 0, 2, 4]


@pytest.mark.parametrize("scheme,top", [("fp32", 1.0), ("e4m3", 1.0), ("e8m0", 1.5)])
def test_fast_evaluator_matches_quantizer(data, scheme, top):
    fam = search.family_grids()
    smp = search.Samples.from_data(data, scheme, top)
    for name in ("e2m1", "e1m2/int4", "normal:q=0.9"):
        fast = smp.evaluate(fam[name][None, :])["sqnr_db"][0]
        assert fast == pytest.approx(search.verify(fam[name], scheme, top, data), abs=1e-3)


def test_lloyd_max_on_uniform_density_is_uniform():
    t = (np.arange(70000) + 0.5) / 70000
    pre = lambda a: np.concatenate([[0.0], np.cumsum(a)])  # noqa: E731
    smp = search.Samples(t, np.arange(t.size + 1.0), pre(t), pre(np.ones_like(t)), pre(t), pre(t * t))
    assert np.allclose(search.lloyd_max(smp), np.arange(8) / 7, atol=1e-3)


def test_lattice_grids_shape_and_validation():
    g = search.lattice_grids(8)
    assert g.shape == (7, 8) and np.all(np.diff(g, axis=1) > 0) and np.all(g[:, -1] == 1)
    with pytest.raises(ValueError, match="power of two"):
        search.lattice_grids(24)


def test_run_search_structure(data):
    res = search.run_search(data, lattice=8, schemes=("fp32", "e8m0"))
    for sch in ("fp32", "e8m0"):
        r = res["schemes"][sch]
        named = {x["name"]: x for x in r["named"] if x["top"] in (None, 1.75)}
        assert named["e1m2/int4"]["sqnr_db"] == pytest.approx(named["power:gamma=1"]["sqnr_db"])
        lm = max(x["sqnr_db"] for x in r["named"] if x["name"] == "lloyd-max")
        assert lm >= max(x["sqnr_db"] for x in r["named"]) - 1e-9  # MSE-optimal grid is the best named one
        sq = [x["sqnr_db"] for x in r["front"]]
        assert sq == sorted(sq, reverse=True)
        assert all(abs(x["verified_sqnr_db"] - x["sqnr_db"]) < 1e-3 for x in r["front"])


SMALL_SEARCH = ["search-grids", "--lattice", "8", "--scheme", "fp32", "--dist", "gaussian", "--shape", "8x256"]


def _search(capsys, *extra):
    """stdout of the command-line search over a small lattice (with ``extra`` options)."""
    ap = argparse.ArgumentParser(prog="fp4lab")
    cli.register(ap.add_subparsers(dest="cmd"))
    args = ap.parse_args([*SMALL_SEARCH, *extra])
    assert args.func(args) == 0
    return capsys.readouterr().out


def test_cli_search_json(capsys):
    doc = json.loads(_search(capsys, "--json"))
    assert list(doc["schemes"]) == ["fp32"] and doc["n_samples"] == 2048


def test_cli_search_prints_the_re_measured_gap_in_significant_digits(capsys):
    """The gap between the search's SQNR and the quantizer's is a few 1e-6 dB: "within 0.0000 dB" said nothing."""
    doc = json.loads(_search(capsys, "--json"))
    gap = max(abs(r["verified_sqnr_db"] - r["sqnr_db"]) for r in doc["schemes"]["fp32"]["front"])
    printed = re.search(r"SQNR within (\S+) dB", _search(capsys)).group(1)
    assert float(printed) == pytest.approx(gap, rel=0.05, abs=1e-12)
