"""Training recipes: each GEMM quantizes the right operands along the right axis with the right RHT/SR."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp4lab  # noqa: E402
from fp4lab.recipes import BUILTIN_RECIPES, QuantLinear, Recipe, get_recipe, quantize_model  # noqa: E402


def _data(m=32, k=64, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(m, n, generator=g)


def _fq(t, fmt, axis, rht=None, rounding=None, seed=0):
    qt = fp4lab.quantize(t, fmt, rounding=rounding, seed=seed, axis=axis, rht=rht)
    return fp4lab.dequantize(qt, rotated=True)


def _run(recipe, x, w, dy, seed=0):
    layer = QuantLinear(x.shape[1], w.shape[0], bias=False, recipe=recipe, seed=seed)
    with torch.no_grad():
        layer.weight.copy_(w)
    xr = x.clone().requires_grad_(True)
    y = layer(xr)
    y.backward(dy)
    return y.detach(), xr.grad, layer.weight.grad


def test_ufp4_gemms_bit_for_bit():
    """FPROP, DGRAD and WGRAD of the UFP4 recipe equal hand-built quantized GEMMs (RHT-16 on all three, SR on
    dY with seeds 0 then 1, in the order DGRAD, WGRAD)."""
    x, w, dy = _data()
    y, dx, dw = _run("ufp4", x, w, dy)
    assert torch.equal(y, _fq(x, "ufp4", -1, 16) @ _fq(w, "ufp4", -1, 16).T)
    assert torch.equal(dx, _fq(dy, "ufp4", -1, 16, "sr", 0) @ _fq(w, "ufp4", 0, 16))
    assert torch.equal(dw, _fq(dy, "ufp4", 0, 16, "sr", 1).T @ _fq(x, "ufp4", 0, 16))


def test_e2m1_reference_rotates_wgrad_only():
    x, w, dy = _data(seed=1)
    y, dx, dw = _run("e2m1-ref", x, w, dy)
    f = "e2m1-b16-fp32"
    assert torch.equal(y, _fq(x, f, -1) @ _fq(w, f, -1).T)
    assert torch.equal(dx, _fq(dy, f, -1, None, "sr", 0) @ _fq(w, f, 0))
    assert torch.equal(dw, _fq(dy, f, 0, 16, "sr", 1).T @ _fq(x, f, 0, 16))


def test_quantized_gemms_approximate_the_exact_ones():
    x, w, dy = _data(seed=2)
    for name in ("ufp4", "e2m1-ref", "nvfp4", "mxfp4"):
        y, dx, dw = _run(name, x, w, dy)
        for got, ref in ((y, x @ w.T), (dx, dy @ w), (dw, dy.T @ x)):
            rel = (torch.linalg.norm(got - ref) / torch.linalg.norm(ref)).item()
            assert rel < 0.25, (name, rel)  # 4-bit operands: ~10-20% relative GEMM error on gaussian data


def test_bf16_recipe_is_nn_linear_on_bf16_operands():
    x, w, dy = _data(seed=3)
    y, dx, dw = _run("bf16", x, w, dy)
    xb, wb, dyb = (t.to(torch.bfloat16).float() for t in (x, w, dy))
    assert torch.equal(y, xb @ wb.T) and torch.equal(dx, dyb @ wb) and torch.equal(dw, dyb.T @ xb)


def test_sr_only_on_dy_forward_is_deterministic_backward_depends_on_seed():
    x, w, dy = _data(seed=4)
    y0, dx0, _ = _run("ufp4", x, w, dy, seed=0)
    y1, dx1, _ = _run("ufp4", x, w, dy, seed=5)
    assert torch.equal(y0, y1)
    assert not torch.equal(dx0, dx1)
    assert torch.equal(_run("ufp4", x, w, dy, seed=5)[1], dx1)


def test_quantize_model_replaces_linears_and_keeps_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
    w0 = model[0].weight
    quantize_model(model, "ufp4", skip=("2",))
    assert isinstance(model[0], QuantLinear) and model[0].weight is w0
    assert type(model[2]) is torch.nn.Linear
    out = model(torch.randn(16, 64))
    out.sum().backward()
    assert model[0].weight.grad is not None and out.shape == (16, 16)


def test_recipe_validation_and_lookup():
    assert set(BUILTIN_RECIPES) == {"bf16", "e2m1-ref", "ufp4", "nvfp4", "mxfp4"}
    assert get_recipe("nvfp4").format_of("w") == "nvfp4-2d"
    with pytest.raises(ValueError, match="unknown recipe 'x'"):
        get_recipe("x")
    with pytest.raises(ValueError, match="unknown format"):
        Recipe(name="bad", format="no-such-format")


def test_shape_not_multiple_of_block_is_a_clear_error():
    layer = QuantLinear(64, 48, recipe="ufp4")
    with pytest.raises(fp4lab.InputError, match="block size 16"):
        layer(torch.randn(3, 40)).sum()
    layer = QuantLinear(64, 48, recipe="ufp4")
    y = layer(torch.randn(5, 64, requires_grad=True))  # M = 5: forward fine, WGRAD needs M % 16 == 0
    with pytest.raises(fp4lab.InputError, match="axis 0 has length 5"):
        y.sum().backward()
