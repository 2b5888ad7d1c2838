"""The paper's RHT diagnostics on captured operands (fp4lab.study.captures): against the analysis functions they
are built from, the paper's reported signs on heavy-tailed activations, and bad capture folders."""

import csv
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

import fp4lab
from fp4lab.analysis import gemm
from fp4lab.errors import Fp4labError, InputError
from fp4lab.study import captures

FORMATS = ("e2m1-b16-fp32", "ufp4")


def _layer(folder, name, x, w, dy):
    for op, t in (("x", x), ("w", w), ("dy", dy)):
        np.save(folder / f"{name}.{op}.npy", t.astype(np.float32))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two layers: a SwiGLU down projection with Laplace activations (the outlier-heavy fc2 input of the paper)
    and a qkv projection with Gaussian ones."""
    d = tmp_path_factory.mktemp("step_0000100")
    rng = np.random.default_rng(7)
    _layer(d, "blocks.0.mlp.down", rng.laplace(size=(256, 512)), 0.02 * rng.standard_normal((128, 512)),
           1e-4 * rng.standard_normal((256, 128)))
    _layer(d, "blocks.0.attn.qkv", rng.standard_normal((256, 128)), 0.02 * rng.standard_normal((384, 128)),
           1e-4 * rng.standard_normal((256, 384)))
    np.save(d / "blocks.1.attn.qkv.x.npy", np.ones((4, 4), np.float32))  # incomplete layer: skipped
    return d


@pytest.fixture(scope="module")
def rows(folder):
    return captures.rht_effects(folder, FORMATS)


def test_rows_match_the_analysis_functions(folder, rows):
    assert len(rows) == 2 * len(FORMATS) * len(captures.QUANTITIES)
    by = {(r["layer"], r["format"], r["quantity"]): r for r in rows}
    x = np.load(folder / "blocks.0.mlp.down.x.npy")
    w = np.load(folder / "blocks.0.mlp.down.w.npy")
    dy = np.load(folder / "blocks.0.mlp.down.dy.npy")
    for name in FORMATS:
        r = by[("blocks.0.mlp.down", name, "fwd_x")]
        assert r["family"] == "linear_fc2"
        for got, rht in ((r["sqnr_i_db"], None), (r["sqnr_h_db"], 16)):  # SQNR of Q(T) against T in Q's basis
            qt = fp4lab.quantize(x, name, axis=1, rht=rht)
            ref = x if rht is None else fp4lab.rht(x, size=rht, axis=1)
            err = np.asarray(fp4lab.dequantize(qt, rotated=True), np.float64) - np.asarray(ref, np.float64)
            assert got == pytest.approx(10 * np.log10(np.sum(np.square(ref, dtype=np.float64)) / np.sum(err * err)),
                                        rel=1e-12)
        assert r["delta_sqnr_db"] == r["sqnr_h_db"] - r["sqnr_i_db"]
        g = by[("blocks.0.mlp.down", name, "bwd_dx")]
        assert g["sqnr_h_db"] == gemm.gemm_sqnr(x, w, dy, name, "dgrad", 16)["sqnr_db"]


def test_rotation_hurts_e2m1_and_helps_ufp4_on_laplace_activations(rows):
    """The paper's §5.2 reversal (its fc2/fwd_x: E2M1 -1.90 dB, E1M2 +3.25 dB): RHT moves mass into E2M1's
    asymmetric bins but flattens the distribution for the uniform grid."""
    d = {r["format"]: r["delta_sqnr_db"] for r in rows
         if r["layer"] == "blocks.0.mlp.down" and r["quantity"] == "fwd_x"}
    assert d["e2m1-b16-fp32"] < -0.2 and d["ufp4"] > 1.0
    # Gaussian activations: a rotation changes little for either grid
    g = [r["delta_sqnr_db"] for r in rows if r["layer"] == "blocks.0.attn.qkv" and r["quantity"] == "fwd_x"]
    assert max(abs(v) for v in g) < 0.2


def test_write_reports_family_means(tmp_path, rows):
    paths = captures.write(rows, tmp_path / "out", title="t", plot=False)
    assert [p.name for p in paths] == ["rht_effects.csv", "rht_effects.md"]
    with open(paths[0]) as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    text = paths[1].read_text()
    means = captures.family_means(rows)
    v, n = means[("ufp4", "linear_fc2", "fwd_x")]
    assert n == 1 and f"{v:+.2f}" in text
    assert text.index("linear_qkv") < text.index("linear_fc2")  # the paper's family order


def test_bad_capture_folders(tmp_path, folder):
    with pytest.raises(InputError, match="is not a folder"):
        captures.rht_effects(tmp_path / "missing")
    with pytest.raises(InputError, match="holds no complete layer"):
        captures.rht_effects(tmp_path)
    _layer(tmp_path, "blocks.0.mlp.down", np.ones((8, 16)), np.ones((4, 16)), np.ones((8, 5)))
    with pytest.raises(InputError, match=r"blocks.0.mlp.down: shapes X \(8, 16\), W \(4, 16\), dY \(8, 5\)"):
        captures.rht_effects(tmp_path)
    with pytest.raises(Fp4labError, match="unknown format .e9m9."):
        captures.rht_effects(folder, ("e9m9",))


def _cli(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["pretrain.py", *argv])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(Path(__file__).resolve().parent.parent / "examples" / "pretrain.py"), run_name="__main__")
    return exc.value.code


def test_cli(monkeypatch, tmp_path, folder, capsys):
    assert _cli(monkeypatch, "captures", str(folder), "--dest", str(tmp_path / "c"), "--formats", "ufp4",
                "--no-plots") == 0
    out = capsys.readouterr().out
    assert "## ufp4" in out and "2 layers" in out
    assert (tmp_path / "c" / "rht_effects.csv").is_file() and not (tmp_path / "c" / "rht_effects.png").exists()
    assert _cli(monkeypatch, "captures", str(tmp_path / "nowhere")) == 2
    assert capsys.readouterr().err.startswith("error: captures:")
