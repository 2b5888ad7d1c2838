"""Synthetic distributions and safe tensor loading."""

import numpy as np
import pytest

from fp4lab.analysis import distributions as D
from fp4lab.analysis import tensors_io


def test_parse_defaults_and_labels():
    assert D.parse("student-t").params == {"nu": 3.0}
    assert D.parse("outliers:k=5").label == "outliers:k=5,every=97"
    assert D.parse("gaussian").label == "gaussian"


@pytest.mark.parametrize("spec,msg", [("cauchy", "unknown name"), ("student-t:mu=3", "bad parameter"),
                                      ("lognormal:sigma=x", "must be a number"), ("outliers:every=2.5", "integer"),
                                      ("student-t:nu=0", "nu must be")])
def test_parse_errors_name_the_problem(spec, msg):
    with pytest.raises(ValueError, match=msg):
        D.parse(spec)


def test_sampling_is_seeded_and_shaped():
    for spec in D.DEFAULT_DISTRIBUTIONS + ("swiglu",):
        a = D.sample(spec, (8, 194), seed=5)
        assert a.dtype == np.float32 and a.shape == (8, 194)
        assert np.array_equal(a, D.sample(spec, (8, 194), seed=5))
        assert not np.array_equal(a, D.sample(spec, (8, 194), seed=6))


def test_outlier_columns_are_scaled():
    draw = np.random.default_rng(1).standard_normal((4, 200))
    out = D.sample("outliers:k=20,every=97", (4, 200), seed=1)
    expect = draw.copy()
    expect[:, [96, 193]] *= 20
    assert np.array_equal(out, expect.astype(np.float32))


def test_unit_variance_laplace():
    assert np.var(D.sample("laplace", (1 << 18,), seed=0)) == pytest.approx(1.0, abs=0.02)


def test_load_npy_npz_pt_safetensors(tmp_path):
    import torch
    from safetensors.numpy import save_file

    x = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
    np.save(tmp_path / "a.npy", x)
    assert np.array_equal(tensors_io.load_tensor(tmp_path / "a.npy"), x.astype(np.float32))
    np.savez(tmp_path / "b.npz", w=x, v=x[0])
    assert tensors_io.load_tensor(f"{tmp_path / 'b.npz'}::v").shape == (4,)
    with pytest.raises(ValueError, match="holds 2 tensors"):
        tensors_io.load_tensor(tmp_path / "b.npz")
    torch.save({"w": torch.tensor(x, dtype=torch.bfloat16)}, tmp_path / "c.pt")
    got = tensors_io.load_tensor(tmp_path / "c.pt")
    assert np.array_equal(got, torch.tensor(x, dtype=torch.bfloat16).float().numpy())
    save_file({"w": x.astype(np.float32)}, str(tmp_path / "d.safetensors"))
    assert np.array_equal(tensors_io.load_tensor(tmp_path / "d.safetensors"), x.astype(np.float32))


def test_load_refuses_pickles_and_bad_input(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError):
        tensors_io.load_tensor(tmp_path / "obj.npy")
    import datetime

    import torch

    torch.save({"w": datetime.date(2020, 1, 1)}, tmp_path / "evil.pt")
    with pytest.raises(Exception):  # weights_only=True refuses arbitrary classes
        tensors_io.load_tensor(tmp_path / "evil.pt")
    np.save(tmp_path / "i.npy", np.arange(3))
    with pytest.raises(ValueError, match="floating-point"):
        tensors_io.load_tensor(tmp_path / "i.npy")
    with pytest.raises(ValueError, match="unsupported"):
        tensors_io.load_tensor(tmp_path / "x.csv")
