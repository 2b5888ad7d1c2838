"""Outputs of Triton tl.dot kernels measured on an H200 in this project (a 96 x 96 subset of every probe config,
fp4lab/hwspec/data/README.md): the hopper-sm90 model must reproduce every bit. Inputs regenerate from the seed."""

from pathlib import Path

import numpy as np
import pytest

from fp4lab.hwspec.validation.probe_inputs import CONFIGS, emulate_config, make_inputs

DATA = np.load(Path(__file__).parents[1] / "fp4lab" / "hwspec" / "data" / "h200_tldot_outputs.npz")


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_h200_tldot_outputs_bit_exact(cfg):
    n, k, seed = int(DATA["n"]), int(DATA["k"]), int(DATA["seed"])
    rows, cols = DATA["rows"], DATA["cols"]
    ab, bb, cb = make_inputs(cfg, n, k * cfg[9], seed + CONFIGS.index(cfg))
    want = emulate_config(cfg, ab[rows], bb[:, cols], np.asarray(cb)[np.ix_(rows, cols)])
    got = DATA[cfg[0]]
    assert got.shape == want.shape == (96, 96)
    assert np.array_equal(got, want)
    assert np.isfinite(got.view(np.float32)).sum() > 2000  # the subset exercises the finite path, not only NaN/Inf
