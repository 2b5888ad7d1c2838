"""Analysis metrics and grid bias against closed forms and hand-computed cases."""

import math

import numpy as np
import pytest

import fp4lab
from fp4lab.analysis import bias, metrics


# ---- grid geometry (paper Eq. 1-2) --------------------------------------------------------------------------------
def test_e2m1_level_bias_closed_form():
    lb = bias.level_bias(fp4lab.get_format("e2m1"))
    assert lb.levels.tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert lb.at(2.0) == -0.125 and lb.at(4.0) == -0.25
    for q in (0.5, 1.0, 1.5, 3.0):
        assert lb.at(q) == 0.0
    assert lb.interior.tolist() == [False] + [True] * 6 + [False]
    assert lb.at(0.0) == -0.125 and lb.at(6.0) == 0.5  # edge bins: zero bin rounds down, top half-bin up


@pytest.mark.parametrize("name", ["e1m2", "int4", "ufp4"])
def test_uniform_grids_have_zero_interior_bias(name):
    lb = bias.level_bias(fp4lab.get_format(name))
    assert np.all(lb.bias[lb.interior] == 0.0)
    assert lb.levels.size == 8


def test_bias_under_uniform_density():
    e2m1 = fp4lab.get_format("e2m1")
    # uniform density inside one bin gives Eq. 2 exactly (up to quadrature error)
    in_bin = lambda lo, hi: (lambda t: ((t > lo) & (t < hi)).astype(float))  # noqa: E731
    assert bias.bias_under_density(e2m1, in_bin(1.75, 2.5)) == pytest.approx(-0.125, abs=1e-4)
    assert bias.bias_under_density(e2m1, in_bin(3.5, 5.0)) == pytest.approx(-0.25, abs=1e-4)
    assert bias.bias_under_density(e2m1, in_bin(2.5, 3.5)) == pytest.approx(0.0, abs=1e-4)
    # U(0, 6): the top half-bin cancels the interior shrinkage exactly (paper digest §5.1 [D])
    assert bias.bias_under_density(e2m1, lambda t: np.ones_like(t)) == pytest.approx(0.0, abs=1e-4)
    # a density falling toward the top leaves the shrinkage visible
    assert bias.bias_under_density(e2m1, lambda t: np.exp(-t)) < -0.01


def test_empirical_bin_bias_matches_closed_form():
    t = np.linspace(1.75, 2.5, 20001)[1:-1]
    assert bias.expected_bias(fp4lab.get_format("e2m1"), t) == pytest.approx(-0.125, abs=1e-9)
    p, e = bias.bin_bias(fp4lab.get_format("e2m1"), t)
    assert p[4] == 1.0 and e[4] == pytest.approx(-0.125, abs=1e-9) and np.isnan(e[0])


def test_magnitude_levels_rejects_grids_without_zero():
    with pytest.raises(ValueError, match="need 0"):
        bias.magnitude_levels(np.array([1.0, 2.0]))


# ---- tensor metrics -----------------------------------------------------------------------------------------------
def test_sqnr_nmse_alpha_hand_computed():
    x = np.array([1.0, -2.0, 2.0, 0.0])
    xhat = np.array([1.0, -1.5, 2.0, 0.5])
    assert metrics.nmse(x, xhat) == pytest.approx(0.5 / 9.0, rel=1e-15)
    assert metrics.sqnr_db(x, xhat) == pytest.approx(10 * math.log10(18.0), rel=1e-15)
    assert metrics.alpha(x, xhat) == pytest.approx(8.0 / 9.0, rel=1e-15)
    assert metrics.sqnr_db(x, x) == math.inf
    # non-finite reference elements are left out
    assert metrics.alpha(np.append(x, np.nan), np.append(xhat, 3.0)) == pytest.approx(8.0 / 9.0, rel=1e-15)


def test_torch_sums_in_chunks_match_numpy(monkeypatch):
    """Two torch tensors are summed on their device a chunk at a time (bounded float64 copies: the training
    diagnostics of nine large study runs ran one H200 out of memory with whole-tensor copies); non-finite
    reference elements are left out in every chunk, as the numpy path leaves them out."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal(5003).astype(np.float32)
    xhat = (x + 0.1 * rng.standard_normal(5003)).astype(np.float32)
    x[[7, 2500, 5002]] = [np.nan, np.inf, -np.inf]
    monkeypatch.setattr(metrics, "_CHUNK", 1000)
    on_device = metrics._sums(torch.from_numpy(x), torch.from_numpy(xhat))
    assert on_device == pytest.approx(metrics._sums(x, xhat), rel=1e-13)
    assert metrics.alpha_sqnr_db(torch.from_numpy(x), torch.from_numpy(xhat)) == pytest.approx(
        metrics.alpha_sqnr_db(x, xhat), rel=1e-12)


def test_sqnr_of_known_error_power():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(4096)
    e = rng.standard_normal(4096)
    e *= np.sqrt(np.dot(x, x) / np.dot(e, e)) * 10 ** (-30 / 20)  # error energy exactly 30 dB below the signal
    assert metrics.sqnr_db(x, x + e) == pytest.approx(30.0, abs=1e-9)


def test_b_eff_extremes():
    levels = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
    _, qt = metrics.evaluate(np.concatenate([levels, -levels]), "e2m1")
    assert metrics.b_eff(qt) == pytest.approx(1.0, abs=1e-9)
    _, qt = metrics.evaluate(np.zeros(16, np.float32), "e2m1")
    assert metrics.b_eff(qt) == pytest.approx(1 / 8, abs=1e-9)
    _, qt = metrics.evaluate(np.array([0.5, -0.5, 6, 6], np.float32), "e2m1")
    assert metrics.b_eff(qt) == pytest.approx(2 / 8, abs=1e-9)


def test_normalized_bias_in_one_bin():
    t = np.linspace(1.75, 2.5, 1001)[1:-1].astype(np.float32)
    m, _ = metrics.evaluate(t, "e2m1")
    assert m.bias == pytest.approx(-0.125, abs=1e-6)
    m, _ = metrics.evaluate(np.linspace(0.875, 1.125, 1001)[1:-1].astype(np.float32), "e1m2")
    assert m.bias == pytest.approx(0.0, abs=1e-6)


def test_bias_uses_block_scale():
    # one 16-block: amax 6 maps to 6 (scale 1), other elements at 2.25 (in q=2's bin) -> bias (15*(2-2.25))/16
    x = np.full(16, 2.25, np.float32)
    x[0] = 6.0
    m, qt = metrics.evaluate(x, "e2m1-b16-fp32")
    assert float(qt.scales[0]) == 1.0
    assert m.bias == pytest.approx(15 * -0.25 / 16, abs=1e-12)
    assert m.clip_rate == 0.0


def test_clip_rate_mx_floor_vs_rceil():
    x = np.ones(32, np.float32)
    x[3] = 7.0  # FLOOR: scale 2^(2-2) = 1, 7 saturates to 6; RCEIL: scale 2, no clipping
    m, _ = metrics.evaluate(x, "mxfp4")
    assert m.clip_rate == 1 / 32
    m, _ = metrics.evaluate(x, "mxfp4-rceil")
    assert m.clip_rate == 0.0


def test_clip_rate_counts_the_short_side_of_an_asymmetric_grid():
    """Two's-complement INT4 (-8..7) maps a block's amax onto 8: a positive maximum lands on t = 8 and saturates to
    7, a negative one on the level -8."""
    fmt = fp4lab.QuantFormat.model_validate({
        "name": "int4-tc", "block": {"shape": [16]}, "scale": "fp32", "scale_rule": {"method": "amax"},
        "element": {"kind": "int", "bits": 4, "range": "twos_complement"}})
    x = np.ones((2, 16), np.float32)
    x[0, 3], x[1, 5] = 7.0, -7.0
    m, qt = metrics.evaluate(x, fmt)
    assert fp4lab.dequantize(qt)[0, 3] == np.float32(7 * 7 / 8) and fp4lab.dequantize(qt)[1, 5] == -7.0
    assert m.clip_rate == 1 / 32
    t, _ = metrics.normalized(x, qt)
    assert metrics.clip_rate(t, fmt) == 1 / 32


def test_zero_block_rate_nvfp4_underflow():
    x = np.full((1, 32), 1e-6, np.float32)
    x[0, :16] = 1000.0  # tensor scale from 1000: the second block's E4M3 scale underflows to zero
    m, qt = metrics.evaluate(x, "nvfp4")
    assert int(qt.scale_codes[0, 1]) == 0
    assert m.zero_block_rate == 0.5
    m, _ = metrics.evaluate(np.zeros((1, 32), np.float32), "nvfp4")
    assert m.zero_block_rate == 0.0  # all-zero input blocks are not counted


def test_scale_code_histogram_counts_blocks():
    x = np.concatenate([np.full(32, 6.0), np.full(32, 12.0), np.full(32, 12.0)]).astype(np.float32)
    _, qt = metrics.evaluate(x, "mxfp4")
    assert metrics.scale_code_histogram(qt) == {127: 1, 128: 2}


def test_rotated_basis_metrics_match_original_basis():
    x = np.random.default_rng(0).standard_normal((32, 256)).astype(np.float32)
    m, qt = metrics.evaluate(x, "ufp4", rht=16, rht_seed=3)
    back = fp4lab.dequantize(qt)  # un-rotated
    assert m.nmse == pytest.approx(metrics.nmse(x, back), rel=1e-4)
    assert m.alpha == pytest.approx(metrics.alpha(x, back), abs=1e-5)


def test_paper_sanity_simulation_gaussian():
    """Digest §6.3 [D]: Gaussian, 1x16 FP32 amax scales: E2M1 20.52 dB / alpha 0.9959, E1M2 21.39 dB / 1.0007."""
    x = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)
    e2, _ = metrics.evaluate(x, "e2m1-b16-fp32")
    e1, _ = metrics.evaluate(x, "ufp4")
    assert e2.sqnr_db == pytest.approx(20.52, abs=0.05) and e1.sqnr_db == pytest.approx(21.39, abs=0.05)
    assert e2.alpha < 0.998 and abs(e1.alpha - 1) < 0.002
    assert e2.bias < -0.01 and abs(e1.bias) < 0.005
