"""Training recipes: each GEMM of QuantLinear runs on the reference fake-quantized operands (bit for bit on the
CPU), with the right blockings, RHT, SR streams, tensor-scale folding and saved tensors."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp4lab  # noqa: E402
from fp4lab.numerics.fakequant import fake_quantize_reference  # noqa: E402
from fp4lab.recipes import (  # noqa: E402
    BUILTIN_RECIPES,
    QuantLinear,
    Recipe,
    backend,  # noqa: E402
    get_recipe,
    layer_steps,
    quantize_model,
    set_layer_steps,
    streams,  # noqa: E402
)


def _data(m=32, k=64, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(m, n, generator=g)


def _ref_operand(t, recipe, operand, gemm, axis, stream, step):
    """(operand as float32 torch tensor, folded tensor scale or None) from the numpy reference."""
    r = get_recipe(recipe)
    name = r.format_of(operand)
    if name is None:
        return t.to(torch.bfloat16).float(), None
    fmt = fp4lab.get_format(name)
    sr = operand in r.sr
    seed = streams.sr_seed(stream, step, f"{operand}.{gemm}") if sr else 0
    fold = fmt.tensor_scale != "none"
    v, ts = fake_quantize_reference(t.float().numpy(), fmt, "sr" if sr else None, seed, axis,
                                    r.rht_size if gemm in r.rht else None, r.rht_seed, r.sr_bits, r.gemm_dtype,
                                    apply_tensor_scale=not fold)
    return torch.from_numpy(v), (torch.tensor([ts], dtype=torch.float32) if fold else None)


def _scaled(y, *ts):
    """y times the fp32 product of the folded tensor scales (one multiply, as the layer does)."""
    ts = [t for t in ts if t is not None]
    if not ts:
        return y
    s = ts[0] if len(ts) == 1 else ts[0] * ts[1]
    return y * s


def _run(recipe, x, w, dy, seed=0, bias=None, steps=1):
    layer = QuantLinear(x.shape[1], w.shape[0], bias=bias is not None, recipe=recipe, seed=seed)
    with torch.no_grad():
        layer.weight.copy_(w)
        if bias is not None:
            layer.bias.copy_(bias)
    for _ in range(steps - 1):
        layer(x).sum().backward()
    xr = x.clone().requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    y = layer(xr)
    y.backward(dy)
    return layer, y.detach(), xr.grad, layer.weight.grad


@pytest.mark.parametrize("name", ["bf16", "e2m1-ref", "ufp4", "nvfp4", "mxfp4"])
def test_gemms_equal_the_reference_operands_bit_for_bit(name):
    """FPROP, DGRAD and WGRAD equal fp32 products of fake_quantize_reference's operands (blocking axes, RHT per
    GEMM, SR seeds of the layer's stream at its step, folded tensor scales), bias and its gradient included."""
    x, w, dy = _data(seed=hash(name) % 100)
    bias = torch.randn(w.shape[0])
    layer, y, dx, dw = _run(name, x, w, dy, seed=7, bias=bias, steps=2)
    stream, step = layer.stream, 1
    xk, ts_xk = _ref_operand(x, name, "x", "fprop", -1, stream, step)
    wk, ts_wk = _ref_operand(w, name, "w", "fprop", -1, stream, step)
    assert torch.equal(y, _scaled(xk @ wk.T, ts_xk, ts_wk) + bias)
    dyn, ts_dyn = _ref_operand(dy, name, "dy", "dgrad", -1, stream, step)
    wn, ts_wn = _ref_operand(w, name, "w", "dgrad", 0, stream, step)
    assert torch.equal(dx, _scaled(dyn @ wn, ts_dyn, ts_wn))
    dym, ts_dym = _ref_operand(dy, name, "dy", "wgrad", 0, stream, step)
    xm, ts_xm = _ref_operand(x, name, "x", "wgrad", 0, stream, step)
    assert torch.equal(dw, _scaled(dym.T @ xm, ts_dym, ts_xm))
    assert torch.equal(layer.bias.grad, dy.sum(0))


def test_ufp4_operands_are_the_bf16_rounding_of_the_exact_ones():
    """gemm_dtype: bf16 (the built-in) adds one RTNE of each FP32-scaled value; "fp32" keeps them exact."""
    x, w, dy = _data(seed=5)
    exact = Recipe(**{**get_recipe("ufp4").model_dump(), "name": "ufp4-fp32", "gemm_dtype": "fp32"})
    layer, y, _, _ = _run(exact, x, w, dy)
    xk, _ = _ref_operand(x, exact, "x", "fprop", -1, layer.stream, 0)
    wk, _ = _ref_operand(w, exact, "w", "fprop", -1, layer.stream, 0)
    assert torch.equal(y, xk @ wk.T)
    xb, _ = _ref_operand(x, "ufp4", "x", "fprop", -1, 0, 0)
    assert torch.equal(xb, xk.to(torch.bfloat16).float()) and not torch.equal(xb, xk)


def test_quantized_gemms_approximate_the_exact_ones():
    x, w, dy = _data(seed=2)
    for name in ("ufp4", "e2m1-ref", "nvfp4", "mxfp4"):
        _, y, dx, dw = _run(name, x, w, dy)
        for got, ref in ((y, x @ w.T), (dx, dy @ w), (dw, dy.T @ x)):
            rel = (torch.linalg.norm(got - ref) / torch.linalg.norm(ref)).item()
            assert rel < 0.25, (name, rel)  # 4-bit operands: ~10-20% relative GEMM error on gaussian data


def test_forward_is_deterministic_backward_draws_fresh_bits_each_step():
    x, w, dy = _data(seed=4)
    layer = QuantLinear(64, 64, bias=False, recipe="ufp4", seed=0)
    outs = []
    for _ in range(2):
        xr = x.clone().requires_grad_(True)
        y = layer(xr)
        y.backward(dy)
        outs.append((y.detach(), xr.grad))
    assert layer.step == 2
    assert torch.equal(outs[0][0], outs[1][0])
    assert not torch.equal(outs[0][1], outs[1][1])
    layer2 = QuantLinear(64, 64, bias=False, recipe="ufp4", seed=0)
    layer2.load_state_dict(layer.state_dict())
    xr = x.clone().requires_grad_(True)
    layer2(xr).backward(dy)
    assert torch.equal(xr.grad, outs[0][1])  # same stream and step: same bits


def test_no_two_layers_steps_or_uses_share_a_stream():
    """quantize_model derives streams from qualified names: sibling blocks (whose n-th linear layers used the
    same seeds before) get distinct Philox keys for every (layer, step, use)."""
    blocks = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))
                                   for _ in range(4)])
    quantize_model(blocks, "ufp4")
    layers = [m for m in blocks.modules() if isinstance(m, QuantLinear)]
    assert len(layers) == 8 and len({m.stream for m in layers}) == 8
    keys = [streams.sr_seed(m.stream, step, use) for m in layers for step in range(50)
            for use in ("dy.dgrad", "dy.wgrad", "x.fprop")]
    assert len(set(keys)) == len(keys)
    assert all(2**62 <= k < 2**63 for k in keys)
    # and the draws differ: two sibling layers' DGRAD inputs on the same dY get different SR bits
    dy = torch.randn(16, 32)
    a = layers[0].operands(dy, "dy", "dgrad", None)[0]
    b = layers[2].operands(dy, "dy", "dgrad", None)[0]
    assert not torch.equal(a, b)


def test_rht_sign_policy_per_layer():
    r = Recipe(**{**get_recipe("ufp4").model_dump(), "name": "ufp4-per-layer", "rht_signs": "per_layer"})
    a = QuantLinear(32, 32, recipe=r, name="blocks.0.attn")
    b = QuantLinear(32, 32, recipe=r, name="blocks.1.attn")
    c = QuantLinear(32, 32, recipe="ufp4", name="blocks.1.attn")
    assert a.rht_seed != b.rht_seed and c.rht_seed == 0


def test_saves_no_more_activations_than_nn_linear():
    """QuantLinear saves its WGRAD operand (bf16, x's size) in place of x, and the weight, like nn.Linear."""
    x = torch.randn(64, 128, dtype=torch.bfloat16, requires_grad=True)

    def saved_bytes(layer):
        total = []

        def pack(t):
            if t.data_ptr() not in [p.data_ptr() for p in layer.parameters()]:
                total.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            layer(x).sum()
        return sum(total)

    ref = torch.nn.Linear(128, 64, bias=False, dtype=torch.bfloat16)
    for name in ("ufp4", "nvfp4", "mxfp4"):
        q = QuantLinear(128, 64, bias=False, recipe=name, dtype=torch.bfloat16)
        assert saved_bytes(q) <= saved_bytes(ref) + 64, name


def test_bf16_activations_give_bf16_outputs_and_fp32_master_weights_fp32_grads():
    layer = QuantLinear(64, 32, recipe="ufp4")  # fp32 parameters
    x = torch.randn(16, 64, dtype=torch.bfloat16, requires_grad=True)
    y = layer(x)
    y.float().sum().backward()
    assert y.dtype == torch.bfloat16 and x.grad.dtype == torch.bfloat16 and layer.weight.grad.dtype == torch.float32


@pytest.mark.parametrize("name", ["bf16", "nvfp4"])
def test_autocast_gives_the_output_dtype_of_nn_linear(name):
    """Under autocast an fp32 input gives a bf16 output, as nn.Linear does: the product of the same operands
    (quantized from the fp32 input and master weight) rounded to bf16; gradients keep the parameters' and the
    input's dtypes."""
    torch.manual_seed(3)
    layer = QuantLinear(64, 32, bias=True, recipe=name, seed=5)
    x = torch.randn(32, 64, requires_grad=True)
    with torch.no_grad():
        want = layer(x).to(torch.bfloat16)  # no autocast: fp32 output
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
        ref = torch.nn.Linear(64, 32)(x)
    assert y.dtype == ref.dtype == torch.bfloat16
    assert torch.equal(y.view(torch.int16), want.view(torch.int16))
    y.float().sum().backward()
    assert x.grad.dtype == layer.weight.grad.dtype == layer.bias.grad.dtype == torch.float32
    assert torch.equal(layer.bias.grad, torch.full((32,), 32.0))


def test_triton_path_equals_emulator_path(monkeypatch):
    """The fused kernels (interpreter) give QuantLinear the same operands as the emulator, hence equal outputs."""

    def run(flag, name):
        monkeypatch.setattr(backend, "TRITON_ON_CPU", flag)
        torch.manual_seed(0)
        layer = QuantLinear(64, 32, recipe=name, seed=3, dtype=torch.bfloat16)
        x = torch.randn(32, 64, dtype=torch.bfloat16, requires_grad=True)
        y = layer(x)
        y.backward(torch.randn_like(y))
        return y, x.grad, layer.weight.grad, layer.bias.grad

    for name in ("ufp4", "nvfp4"):
        for a, b in zip(run(False, name), run(True, name)):
            assert torch.equal(a, b), name


def test_quantize_model_patterns_and_unfit_layers():
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.GELU(), torch.nn.Linear(32, 32),
                                torch.nn.Linear(32, 10))
    w0 = model[0].weight
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantize_model(model, "ufp4", skip=("2",))
    assert isinstance(model[0], QuantLinear) and model[0].weight is w0
    assert type(model[2]) is torch.nn.Linear and type(model[3]) is torch.nn.Linear
    assert len(caught) == 1 and "3 (32 -> 10)" in str(caught[0].message)
    out = model(torch.randn(16, 64))
    out.sum().backward()
    assert model[0].weight.grad is not None and out.shape == (16, 10)
    r = Recipe(**{**get_recipe("mxfp4").model_dump(), "name": "mx-hp", "high_precision": ["blocks.0.*"]})
    m2 = torch.nn.Module()
    m2.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(64, 64)) for _ in range(2)])
    quantize_model(m2, r)
    assert type(m2.blocks[0][0]) is torch.nn.Linear and isinstance(m2.blocks[1][0], QuantLinear)
    assert m2.blocks[1][0].layer_name == "blocks.1.0"


def test_recipe_validation_and_lookup():
    assert set(BUILTIN_RECIPES) == {"bf16", "e2m1-ref", "ufp4", "nvfp4", "mxfp4", "mxfp4-fp8"}
    assert get_recipe("nvfp4").format_of("w") == "nvfp4-2d"
    with pytest.raises(ValueError, match="unknown recipe 'x'"):
        get_recipe("x")
    with pytest.raises(ValueError, match="unknown format"):
        Recipe(name="bad", format="no-such-format")
    with pytest.raises(ValueError, match="2-D tiles"):
        Recipe(name="bad", format="nvfp4", weight_format="nvfp4-2d", rht=["dgrad"])


def test_shapes_that_do_not_fit_the_blocks_are_clear_errors():
    with pytest.raises(fp4lab.InputError, match="out_features = 40 is not a multiple of 16"):
        QuantLinear(64, 40, recipe="ufp4")
    layer = QuantLinear(64, 48, recipe="ufp4")
    with pytest.raises(fp4lab.InputError, match=r"input of shape \(3, 40\); expected \[..., 64\]"):
        layer(torch.randn(3, 40))
    with pytest.raises(fp4lab.InputError, match=r"5 tokens.*without a weight gradient \(torch.no_grad\(\)"):
        layer.eval()(torch.randn(5, 64))  # WGRAD blocks run along the tokens; eval() alone keeps the gradient
    with torch.no_grad():
        assert layer(torch.randn(5, 64)).shape == (5, 48)  # inference needs no WGRAD operand


def test_fake_quantize_function_matches_reference():
    from fp4lab.recipes import fake_quantize

    x = torch.randn(32, 64)
    assert not fake_quantize(x.requires_grad_(), "e2m1-ref", "x", "fprop", -1).requires_grad  # detached
    x = x.detach()
    got = fake_quantize(x, "e2m1-ref", "dy", "wgrad", axis=0, seed=9)
    want, _ = fake_quantize_reference(x.numpy(), fp4lab.get_format("e2m1-b16-fp32"), "sr", 9, 0, 16, 0, 16, "bf16")
    assert np.array_equal(got.float().numpy().view(np.uint32), want.view(np.uint32))


def test_device_keys_equal_the_host_formula(monkeypatch):
    """The Triton key kernel (interpreter) computes streams.sr_seed of every use bit for bit at the layer's step,
    for streams with the top bit set or not, and advances the step only when asked."""
    from fp4lab.recipes import runtime

    monkeypatch.setattr(backend, "TRITON_ON_CPU", True)
    for stream, step in ((streams.stream_of_name("blocks.3.mlp.up"), 0), (2**64 - 1, 2**40 + 7), (5, 123)):
        state = torch.tensor([streams.signed64(stream), step], dtype=torch.int64)
        keys = runtime.sr_keys(state, advance=True)
        want = [streams.signed64(streams.sr_seed(stream, step, u)) for u in streams.USES]
        assert keys[:, 0].tolist() == want and int(state[1]) == step + 1
        assert runtime.sr_keys(state, advance=False)[:, 0].tolist() != want and int(state[1]) == step + 1
        monkeypatch.setattr(backend, "TRITON_ON_CPU", False)
        state[1] = step
        assert runtime.sr_keys(state, advance=False)[:, 0].tolist() == want
        monkeypatch.setattr(backend, "TRITON_ON_CPU", True)


def test_quantize_model_again_leaves_the_new_recipes_high_precision_layers_in_high_precision():
    """Converting an already converted model: layers that the new recipe's high_precision names, or whose widths
    its blocks do not fit, become plain nn.Linear layers sharing their parameters (not QuantLinear layers of the
    old recipe, which the unfit warning would call high precision); skip leaves a layer as it is, and a string is
    one skip pattern."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 48),
                                torch.nn.Linear(48, 64))
    quantize_model(model, "ufp4")
    assert all(isinstance(m, QuantLinear) for m in model)
    weights = [m.weight for m in model]
    r = Recipe(name="mx-hp", format="mxfp4", high_precision=["1"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantize_model(model, r, skip="3")
    assert isinstance(model[0], QuantLinear) and model[0].recipe == r
    assert type(model[1]) is torch.nn.Linear and type(model[2]) is torch.nn.Linear  # high_precision; unfit (48)
    assert isinstance(model[3], QuantLinear) and model[3].recipe.name == "ufp4"  # skipped: as it was
    assert [m.weight for m in model] == weights and model[2].bias is not None
    assert len(caught) == 1 and "2 (64 -> 48)" in str(caught[0].message)
    x = torch.randn(32, 64)
    with torch.no_grad():
        assert torch.equal(model[1](x), torch.nn.functional.linear(x, model[1].weight, model[1].bias))
    with pytest.raises(fp4lab.InputError, match="model must be a torch.nn.Module, got str"):
        quantize_model("model", "ufp4")


@pytest.mark.parametrize("call, match", [
    (lambda: QuantLinear(64, 64, name=5), "QuantLinear: name must be a string"),
    (lambda: QuantLinear(64, 64, seed="a"), "QuantLinear: seed must be an int, got 'a'"),
    (lambda: QuantLinear(64, 64, seed=1.5), "QuantLinear: seed must be an int, got 1.5"),
    (lambda: quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), "ufp4", skip=None), "skip must be a"),
    (lambda: quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), "ufp4", skip=[0]), r"got \[0\]"),
    (lambda: quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), "ufp4", seed="x"), "seed must be an int"),
])
def test_layer_and_conversion_arguments_are_checked(call, match):
    """A name or seed of the wrong type is a one-line InputError (not an AttributeError deep in the stream hash, nor
    a float seed truncated in silence); so is a skip that is not patterns."""
    with pytest.raises(fp4lab.InputError, match=match):
        call()


@pytest.mark.parametrize("args, match", [
    ((torch.randn(32, 64).numpy(), "ufp4", "x", "fprop", -1), "expected a torch.Tensor, got ndarray"),
    ((torch.randn(2, 32, 64), "ufp4", "x", "fprop", -1), r"2-D floating-point tensor, got shape \(2, 32, 64\)"),
    ((torch.randn(64), "ufp4", "x", "fprop", -1), r"2-D floating-point tensor, got shape \(64,\)"),
    ((torch.ones(32, 64, dtype=torch.int32), "ufp4", "x", "fprop", -1), "of torch.int32"),
    ((torch.randn(32, 64), "ufp4", "q", "fprop", -1), "operand must be 'x', 'w' or 'dy', got 'q'"),
    ((torch.randn(32, 64), "ufp4", "x", "dgrad", -1), "x is an operand of fprop and wgrad, not of 'dgrad'"),
    ((torch.randn(32, 64), "bf16", "dy", "fprop", -1), "dy is an operand of dgrad and wgrad, not of 'fprop'"),
    ((torch.randn(32, 64), "ufp4", "w", "wgard", 0), "not of 'wgard'"),
    ((torch.randn(32, 64), "ufp4", "x", "fprop", 2), "axis must be -1 .K. or 0 .M. of the 2-D tensor, got 2"),
])
def test_fake_quantize_refuses_what_it_would_otherwise_quantize_silently(args, match):
    """Arguments that fake_quantize used to take silently (an axis past the 2-D tensor's, an operand or GEMM that
    is none of the recipe's, a 3-D or integer tensor) are one-line InputErrors naming the argument."""
    from fp4lab.recipes import fake_quantize

    with pytest.raises(fp4lab.InputError, match=match):
        fake_quantize(*args)


def test_quant_linear_operands_refuses_bad_arguments():
    """QuantLinear.operands: unknown operand, a GEMM that does not take the operand, a tensor that is not 2-D and
    a negative step are one-line InputErrors naming the layer."""
    layer = QuantLinear(64, 32, recipe="ufp4", name="blocks.0.up")
    x = torch.randn(32, 64)
    for kwargs, match in (({"operand": "q"}, "blocks.0.up.operands: operand must be"),
                          ({"operand": "x", "k_gemm": "dgrad"}, "x is an operand of fprop and wgrad"),
                          ({"operand": "w", "m_gemm": "wgrad"}, "w is an operand of fprop and dgrad"),
                          ({"operand": "dy", "k_gemm": "dgrad", "step": -1}, r"step: expected an int in \[0")):
        with pytest.raises(fp4lab.InputError, match=match):
            layer.operands(x, **kwargs)
    with pytest.raises(fp4lab.InputError, match=r"got shape \(64,\)"):
        layer.operands(x[0], "x", "fprop")
    assert layer.operands(x, "x", "fprop", "wgrad", step=3)[0].shape == (32, 64)


def test_double_backward_through_a_layer_is_refused_not_silently_dropped():
    """A gradient penalty (create_graph=True, then backward through the gradient) cannot differentiate the
    layer's quantized GEMMs: backward through dX raises, instead of dX silently carrying no graph (a loss with a
    penalty term added would train without it)."""
    layer = QuantLinear(64, 32, recipe="ufp4")
    x = torch.randn(32, 64, requires_grad=True)
    (dx,) = torch.autograd.grad(layer(x).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        (x.sum() + dx.square().sum()).backward()
    (dx,) = torch.autograd.grad(layer(x).square().sum(), x)  # first-order gradients as before
    assert dx.shape == x.shape and not dx.requires_grad
    with pytest.raises(RuntimeError):  # torch.func transforms: refused by torch, as docs/recipes.md says
        torch.func.grad(lambda t: layer(t).sum())(x.detach())
    with pytest.raises(RuntimeError):
        torch.func.vmap(layer)(torch.randn(2, 32, 64))


def test_quantize_model_keeps_mode_and_hooks_and_refuses_layers_it_cannot_take_over():
    """A converted layer keeps the replaced layer's eval mode and hooks (whose handles still remove them); a lazy
    layer before its first run and a parametrized weight are one-line errors (not a 0-wide layer or a traceback);
    nn.MultiheadAttention's out_proj, whose forward attention never calls, stays nn.Linear with a warning instead
    of being reported converted while it runs in high precision."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    seen = []
    handle = model[0].register_forward_hook(lambda mod, args, out: seen.append(type(mod).__name__))
    model.eval()
    quantize_model(model, "ufp4")
    assert isinstance(model[0], QuantLinear) and not model[0].training and not model[1].training
    model(torch.randn(32, 64))
    assert seen == ["QuantLinear"]
    handle.remove()
    model(torch.randn(32, 64))
    assert seen == ["QuantLinear"]
    lazy = torch.nn.Sequential(torch.nn.LazyLinear(64))
    with pytest.raises(fp4lab.InputError, match="layer '0': a lazy linear layer .* run the model once"):
        quantize_model(lazy, "ufp4")
    normed = torch.nn.Sequential(torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(64, 64)))
    with pytest.raises(fp4lab.InputError, match="layer '0': the layer's weight is parametrized"):
        quantize_model(normed, "ufp4")
    attn = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantize_model(attn, "ufp4")
    assert type(attn.self_attn.out_proj) is torch.nn.modules.linear.NonDynamicallyQuantizableLinear
    assert isinstance(attn.linear1, QuantLinear) and isinstance(attn.linear2, QuantLinear)
    assert [str(w.message) for w in caught if "MultiheadAttention" in str(w.message)] == [
        "quantize_model: kept 1 linear layer(s) in high precision that nn.MultiheadAttention runs from their weights "
        "without calling them: self_attn.out_proj"]


def test_layers_built_without_name_or_seed_share_the_stream_of_seed_0():
    """docs/recipes.md, "Random streams and steps": layers built directly without name or seed draw the same bits;
    a name or seed each gives them their own."""
    a, b = QuantLinear(64, 64, recipe="ufp4"), QuantLinear(64, 64, recipe="ufp4")
    assert a.stream == b.stream == streams.stream_of_seed(0)
    x = torch.randn(32, 64)
    assert torch.equal(a.operands(x, "dy", "dgrad")[0], b.operands(x, "dy", "dgrad")[0])
    c, d = QuantLinear(64, 64, recipe="ufp4", name="c"), QuantLinear(64, 64, recipe="ufp4", seed=1)
    assert len({a.stream, c.stream, d.stream}) == 3
    assert not torch.equal(a.operands(x, "dy", "dgrad")[0], c.operands(x, "dy", "dgrad")[0])


def test_forward_sr_operands_draw_the_same_bits_until_backward_advances_the_step():
    """docs/recipes.md: an SR forward operand (here x) reads the step, which only backward advances, so two uses of
    a layer in one step (before its backward) draw the same bits; the next step draws fresh ones."""
    layer = QuantLinear(64, 64, recipe=Recipe(name="sr-x", format="mxfp4", sr=["x"]), name="shared")
    x = torch.randn(32, 64)
    first, second = layer(x), layer(x)
    assert torch.equal(first, second) and layer.step == 0
    (first + second).sum().backward()
    assert layer.step == 2 and not torch.equal(layer(x), first)


class _Scaled(torch.nn.Linear):
    """A linear layer whose forward is not nn.Linear's."""

    def forward(self, x):
        return 2 * super().forward(x)


class _WithAdapter(torch.nn.Linear):
    """A linear layer with parameters of its own (a LoRA-like adapter that nn.Linear's forward ignores)."""

    def __init__(self, d):
        super().__init__(d, d)
        self.lora = torch.nn.Parameter(torch.zeros(d, 8))


class _Renamed(torch.nn.Linear):
    """nn.Linear under another name: nothing of its own."""


def test_quantize_model_keeps_linear_subclasses_that_compute_something_else():
    """A subclass of nn.Linear with its own forward or parameters stays as it is, with a warning naming it,
    instead of silently losing them to a QuantLinear; one that adds nothing is converted."""
    model = torch.nn.Sequential(_Scaled(64, 64), _WithAdapter(64), _Renamed(64, 64))
    x = torch.randn(32, 64)
    with torch.no_grad():
        want = model[0](x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantize_model(model, "ufp4")
    assert type(model[0]) is _Scaled and type(model[1]) is _WithAdapter and isinstance(model[2], QuantLinear)
    with torch.no_grad():
        assert torch.equal(model[0](x), want)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "kept 2 linear layer(s) as they are" in messages[0]
    assert "0 (_Scaled), 1 (_WithAdapter)" in messages[0]


def test_quantize_model_warns_about_patterns_that_match_no_layer():
    """A skip or high_precision pattern that matches no linear layer (a typo such as "lm-head", or "blocks.0" for
    the layers "blocks.0.*") is named in a warning, instead of leaving the layer it meant quantized in silence."""
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(64, 64))])
    model.lm_head = torch.nn.Linear(64, 64)
    r = Recipe(name="hp-typo", format="mxfp4", high_precision=["lm-head", "lm_*"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantize_model(model, r, skip=("blocks.0",))
    assert [str(w.message) for w in caught] == [
        "quantize_model: pattern(s) matching no linear layer of the model: 'blocks.0' (skip), 'lm-head' "
        "(high_precision)"]
    assert isinstance(model.blocks[0][0], QuantLinear) and type(model.lm_head) is torch.nn.Linear
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quantize_model(model, r.model_copy(update={"high_precision": ["lm_head"]}), skip=("blocks.0.*",))


def _gpt_like(seed=0):
    torch.manual_seed(seed)
    blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                                     torch.nn.Linear(128, 64)) for _ in range(2))
    return torch.nn.Sequential(torch.nn.ModuleDict({"blocks": blocks}), torch.nn.Linear(64, 32))


def _train(model, steps, x):
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        h = x
        for b in model[0]["blocks"]:
            h = b(h)
        model[1](h).square().sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_layer_steps_resume_the_random_streams_where_a_checkpoint_left_them():
    """state_dict + layer_steps restore a run bit for bit: the resumed model's next step draws the bits the
    uninterrupted one draws; without set_layer_steps it would replay step 0's."""
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    run = quantize_model(_gpt_like(), "ufp4")
    _train(run, 2, x)
    steps, sd = layer_steps(run), {k: v.clone() for k, v in run.state_dict().items()}
    assert steps == {"0.blocks.0.0": 2, "0.blocks.0.2": 2, "0.blocks.1.0": 2, "0.blocks.1.2": 2, "1": 2}
    want = _train(run, 1, x)

    fresh = quantize_model(_gpt_like(seed=5), "ufp4")
    fresh.load_state_dict(sd)
    replayed = _train(fresh, 1, x)  # step 0's bits again
    assert not torch.equal(replayed["0.blocks.0.0.weight"], want["0.blocks.0.0.weight"])
    fresh.load_state_dict(sd)
    set_layer_steps(fresh, steps)
    got = _train(fresh, 1, x)
    assert all(torch.equal(got[n], want[n]) for n in want)
    assert layer_steps(fresh) == {n: 3 for n in steps}


def test_set_layer_steps_refuses_missing_unknown_and_bad_steps_and_sets_nothing():
    model = quantize_model(_gpt_like(), "ufp4")
    steps = layer_steps(model)
    for bad, match in (({k: v for k, v in steps.items() if k != "1"}, "no step for 1"),
                       ({**steps, "head": 3}, "no QuantLinear named head"),
                       ({**steps, "1": -1}, r"layer '1'.*\[0, 2\*\*63\)"),
                       ({**steps, "1": 2.5}, "layer '1'"),
                       ([1, 2], "must be a dict")):
        with pytest.raises(fp4lab.errors.InputError, match=match):
            set_layer_steps(model, {**bad, "0.blocks.0.0": 7} if isinstance(bad, dict) else bad)
        assert layer_steps(model) == steps
    with pytest.raises(fp4lab.errors.InputError, match="torch.nn.Module"):
        layer_steps("model")
    set_layer_steps(model, {**steps, "1": np.int64(4)})
    assert layer_steps(model)["1"] == 4
