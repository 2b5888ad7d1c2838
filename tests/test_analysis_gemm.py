"""GEMM-output diagnostics, RHT sweeps and the attenuation chain."""

import math

import numpy as np
import pytest

from fp4lab.analysis import distributions as D
from fp4lab.analysis import gemm, rht_effects


def _layer(m=64, k=128, n=32, seed=0):
    return (D.sample("outliers:k=20,every=97", (m, k), seed), D.sample("gaussian", (n, k), seed + 1),
            D.sample("student-t:nu=3", (m, n), seed + 2))


def test_exact_operands_give_exact_gemms():
    # values on the E2M1 grid with block amax 6 (FP32 amax/6 scale = 1) quantize exactly; every GEMM is exact
    rng = np.random.default_rng(0)
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -1, -6], np.float32)
    x, w, dy = (rng.choice(grid, s).astype(np.float32) for s in ((32, 64), (16, 64), (32, 16)))
    for t in (x, w, dy):  # every 16-block along both axes holds a 6
        t[::16, :] = 6.0
        t[:, ::16] = 6.0
    for g in gemm.GEMMS:
        r = gemm.gemm_sqnr(x, w, dy, "e2m1-b16-fp32", g)
        assert r["sqnr_db"] == math.inf and r["eta"] == 1.0 and r["alpha_a"] == 1.0


def test_gemm_products_and_rht_invariance():
    x, w, dy = _layer()
    for g in gemm.GEMMS:
        none = gemm.gemm_sqnr(x, w, dy, "ufp4", g)
        rot = gemm.gemm_sqnr(x, w, dy, "ufp4", g, rht=16, rht_seed=5)
        assert none["sqnr_db"] > 10 and rot["sqnr_db"] > 10
        # Eq. 4: eta ~ alpha_a * alpha_b when residuals are incoherent with the product
        assert rot["eta"] == pytest.approx(rot["alpha_a"] * rot["alpha_b"], abs=0.02)


def test_gemm_rejects_mismatched_shapes():
    x, w, dy = _layer()
    with pytest.raises(ValueError, match="do not form"):
        gemm.gemm_sqnr(x, w[:, :64], dy, "ufp4", "fprop")
    with pytest.raises(ValueError, match="unknown GEMM"):
        gemm.gemm_sqnr(x, w, dy, "ufp4", "bprop")


def test_rht_reverses_ranking_on_outlier_inputs():
    x, w, dy = _layer(m=128, k=256, n=64)
    e2 = gemm.training_gemms(x, w, dy, "e2m1-b16-fp32", rht_scope=())
    e2r = gemm.training_gemms(x, w, dy, "e2m1-b16-fp32", rht_scope=gemm.GEMMS)
    u = gemm.training_gemms(x, w, dy, "ufp4", rht_scope=())
    ur = gemm.training_gemms(x, w, dy, "ufp4", rht_scope=gemm.GEMMS)
    assert ur["fprop"]["sqnr_db"] > u["fprop"]["sqnr_db"] + 1.0
    assert e2r["fprop"]["sqnr_db"] < e2["fprop"]["sqnr_db"]


def test_rht_sweep_records():
    x = D.sample("outliers:k=20,every=97", (16, 512), 0)
    recs = rht_effects.rht_sweep(x, "ufp4", sizes=(16, 128))
    assert [r["rht"] for r in recs] == [0, 16, 128]
    assert recs[0]["delta_sqnr_db"] == 0.0
    assert recs[1]["delta_sqnr_db"] == pytest.approx(recs[1]["sqnr_db"] - recs[0]["sqnr_db"])
    assert recs[1]["delta_b_eff"] > 0 and recs[1]["delta_sqnr_db"] > 2


def test_attenuation_chain_eq5():
    c = gemm.attenuation_chain("e2m1-b16-fp32", depth=4, tokens=64, width=64)
    assert len(c["eta"]) == 4 and all(e < 1 for e in c["eta"])
    assert c["prod_eta"] == pytest.approx(float(np.prod(c["eta"])))
    assert c["exp_minus_sum_delta"] == pytest.approx(math.exp(-sum(1 - e for e in c["eta"])))
    assert abs(c["prod_eta"] - c["exp_minus_sum_delta"]) < 1e-3  # first-order approximation for small delta
    assert c["measured"] < 0.99
