"""QuantLinear in the user's own loop: torch.compile(fullgraph=True) with no graph break and no recompile per step,
the same bits as eager steps (stochastic-rounding streams advancing inside the compiled graph), activation
checkpointing, a layer used twice, deepcopy, state_dict and torch.save with weights_only=True; the custom ops
pass torch.library.opcheck."""

import copy
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fp4lab.recipes import QuantLinear, get_recipe, quantize_model  # noqa: E402
from fp4lab.recipes.config import recipe_to_toml  # noqa: E402

RECIPES = ["bf16", "e2m1-ref", "ufp4", "nvfp4", "mxfp4", "mxfp4-fp8"]


def _model(recipe, seed=0, dtype=torch.float32):
    """Two quantized layers around a ReLU (whose forward and backward are exact, so eager and compiled steps
    feed the second layer the same bits) and a high-precision head without bias (a bias gradient is a sum that
    Inductor may order differently from eager: not fp4lab's bits)."""
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32),
                            torch.nn.Linear(32, 8, bias=False))
    quantize_model(m.to(dtype), recipe, skip=("3",))
    return m


def _steps(model, xs, gs):
    """(outputs, input grads, parameter grads) of one forward + backward per (x, upstream grad) pair."""
    out = []
    for x, g in zip(xs, gs):
        model.zero_grad(set_to_none=True)
        x = x.clone().requires_grad_(True)
        y = model(x)
        y.backward(g)
        out.append((y.detach(), x.grad, [p.grad.clone() for p in model.parameters()]))
    return out


def _data(n, m=32, k=64, seed=1, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return ([torch.randn(m, k, generator=g).to(dtype) for _ in range(n)],
            [torch.randn(m, 8, generator=g).to(dtype) for _ in range(n)])


def _assert_same(a, b, what):
    for i, ((ya, xa, pa), (yb, xb, pb)) in enumerate(zip(a, b)):
        assert torch.equal(ya, yb), (what, i, "y")
        assert torch.equal(xa, xb), (what, i, "dx")
        assert all(torch.equal(p, q) for p, q in zip(pa, pb)), (what, i, "parameter grads")


@pytest.mark.parametrize("recipe", RECIPES)
def test_compiled_steps_have_no_graph_break_and_equal_eager_bit_for_bit(recipe):
    """fullgraph compile of a converted model: explain() finds one graph and no break; three compiled steps give
    the eager steps' outputs and gradients bit for bit, with fresh stochastic-rounding bits each step and the
    layers' steps advanced by backward; later steps never recompile."""
    eager = _model(recipe)
    compiled_src = copy.deepcopy(eager)
    xs, gs = _data(3)
    explain = torch._dynamo.explain(compiled_src)(xs[0])
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(compiled_src, fullgraph=True)
    want = _steps(eager, xs, gs)
    got = _steps(compiled, xs[:1], gs[:1])
    with torch._dynamo.config.patch(error_on_recompile=True):
        got += _steps(compiled, xs[1:], gs[1:])
    _assert_same(want, got, recipe)
    layers = [m for m in compiled_src.modules() if isinstance(m, QuantLinear)]
    draws = bool(get_recipe(recipe).sr)
    assert [m.step for m in layers] == [3 if draws else 0] * 2
    if draws:  # the same data at two steps draws different bits (dW of the first layer sees SR'd dY)
        again = _steps(compiled, xs[:1], gs[:1])[0]
        assert not torch.equal(again[2][0], got[0][2][0])


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
@pytest.mark.parametrize("recipe", ["ufp4", "nvfp4"])
def test_other_compile_modes_equal_eager_bit_for_bit(recipe, mode):
    """torch.compile's "reduce-overhead" and "max-autotune" modes (fullgraph) give the eager steps' outputs and
    gradients bit for bit, stochastic rounding (ufp4) and two-level scales (nvfp4) included, without recompiling."""
    eager = _model(recipe)
    compiled = torch.compile(copy.deepcopy(eager), fullgraph=True, mode=mode)
    xs, gs = _data(3)
    want = _steps(eager, xs, gs)
    got = _steps(compiled, xs[:1], gs[:1])
    with torch._dynamo.config.patch(error_on_recompile=True):
        got += _steps(compiled, xs[1:], gs[1:])
    _assert_same(want, got, f"{recipe} {mode}")
    torch._dynamo.reset()

def test_recipe_file_compiles_like_its_builtin(tmp_path):
    """A recipe given as a TOML file compiles with no graph break and gives the built-in's bits."""
    path = tmp_path / "nvfp4-copy.toml"
    path.write_text(recipe_to_toml(get_recipe("nvfp4")).replace('name = "nvfp4"', 'name = "nvfp4-copy"'))
    xs, gs = _data(2)
    want = _steps(_model("nvfp4"), xs, gs)
    m = _model(str(path))
    assert torch._dynamo.explain(m)(xs[0]).graph_break_count == 0
    torch._dynamo.reset()
    _assert_same(want, _steps(torch.compile(m, fullgraph=True), xs, gs), "file")


def test_blocks_compiled_one_by_one_share_one_graph():
    """Compiling each block separately (as torchtitan does) compiles once: every layer of a recipe hands the ops
    the same spec string, and its stream and step as a tensor."""
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()) for _ in range(4)])
    quantize_model(blocks, "ufp4")
    torch._dynamo.reset()
    x = torch.randn(32, 64, requires_grad=True)
    compiled = [torch.compile(b, fullgraph=True) for b in blocks]
    compiled[0](x).sum().backward()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(2):
            h = x
            for b in compiled:
                h = b(h)
            h.sum().backward()
    assert len({b[0].stream for b in blocks}) == 4


class Checkpointed(torch.nn.Module):
    """``inner`` run under torch.utils.checkpoint (non-reentrant)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.inner, x, use_reentrant=False)


def test_activation_checkpointing_recomputes_the_same_operands():
    """torch.utils.checkpoint (non-reentrant) recomputes the forward with the step of the first forward: the
    gradients equal those without checkpointing and each layer's step advances once per backward."""
    xs, gs = _data(2)
    plain = _model("ufp4")
    ckpt = copy.deepcopy(plain)
    want = _steps(plain, xs, gs)
    _assert_same(want, _steps(Checkpointed(ckpt), xs, gs), "checkpoint")
    assert [m.step for m in ckpt.modules() if isinstance(m, QuantLinear)] == [2, 2]


def test_fp8_counts_under_activation_checkpointing_count_the_recomputed_fprop_again():
    """fp8_stats under checkpointing (docs/recipes.md): the recomputed forward converts FPROP's operand rows again,
    so they count twice; DGRAD and WGRAD run once."""
    xs, gs = _data(1)
    plain = _model("mxfp4-fp8")
    ckpt = copy.deepcopy(plain)
    _assert_same(_steps(plain, xs, gs), _steps(Checkpointed(ckpt), xs, gs), "checkpoint fp8")
    want, got = plain[2].fp8_stats, ckpt[2].fp8_stats
    assert want["fprop"]["rows"] > 0 and got["fprop"]["rows"] == 2 * want["fprop"]["rows"]
    assert got["dgrad"] == want["dgrad"] and got["wgrad"] == want["wgrad"] and want["wgrad"]["rows"] > 0


def test_activation_checkpointing_under_torch_compile():
    """A checkpointed model compiled with fullgraph=True gives the plain eager steps' bits (ufp4: its recomputed
    forward draws nothing, its backward draws with the step of the first forward) and advances each step once."""
    xs, gs = _data(2)
    plain = _model("ufp4")
    inner = copy.deepcopy(plain)
    want = _steps(plain, xs, gs)
    _assert_same(want, _steps(torch.compile(Checkpointed(inner), fullgraph=True), xs, gs), "compiled checkpoint")
    assert [m.step for m in inner.modules() if isinstance(m, QuantLinear)] == [2, 2]
    torch._dynamo.reset()


def test_a_layer_used_twice_is_converted_everywhere_and_runs():
    """One nn.Linear at two places becomes one QuantLinear at both; its two backward passes in a step each draw
    their own keys (eager and compiled alike)."""
    lin = torch.nn.Linear(64, 64)
    m = torch.nn.Sequential(lin, torch.nn.ReLU(), lin)
    quantize_model(m, "nvfp4")
    assert isinstance(m[0], QuantLinear) and m[0] is m[2]
    x = torch.randn(32, 64)
    twin = copy.deepcopy(m)
    m(x).sum().backward()
    torch._dynamo.reset()
    torch.compile(twin, fullgraph=True)(x).sum().backward()
    assert m[0].step == twin[0].step == 2
    assert torch.equal(m[0].weight.grad, twin[0].weight.grad)


def test_quantize_model_converts_again_with_another_recipe():
    m = torch.nn.Sequential(torch.nn.Linear(64, 64))
    quantize_model(m, "ufp4")
    m(torch.randn(32, 64)).sum().backward()
    w = m[0].weight
    quantize_model(m, "nvfp4")
    assert m[0].recipe.name == "nvfp4" and m[0].weight is w and m[0].step == 1 and m[0].layer_name == "0"


def test_deepcopy_state_dict_and_weights_only_load_round_trip():
    """deepcopy and torch.save/torch.load(weights_only=True) of a whole converted model keep recipe, stream, step
    and bits; state_dict is nn.Linear's (no fp4lab keys), so checkpoints load into either model."""
    xs, gs = _data(1)
    m = _model("nvfp4")
    _steps(m, xs, gs)
    plain = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32),
                                torch.nn.Linear(32, 8, bias=False))
    assert m.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(m.state_dict())
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    allowed = [QuantLinear, torch.nn.Sequential, torch.nn.ReLU, torch.nn.Linear, set]
    with torch.serialization.safe_globals(allowed):
        loaded = torch.load(buf, weights_only=True)
    for other in (copy.deepcopy(m), loaded):
        q = [m for m in other.modules() if isinstance(m, QuantLinear)]
        assert [m.step for m in q] == [1, 1] and q[0].recipe == get_recipe("nvfp4")
        assert q[0].stream == m[0].stream
        _assert_same(_steps(m, xs, gs), _steps(other, xs, gs), "copy")
        m[0].step = m[2].step = 1


def test_hostile_layer_inputs_are_clear_errors():
    import fp4lab

    layer = QuantLinear(64, 32, recipe="ufp4")
    with pytest.raises(fp4lab.InputError, match=r"input of shape \(\)"):
        layer(torch.tensor(1.0))
    for bad in ("x", True, 2.0, -1, 2**63, torch.tensor(3.0), torch.tensor(True), torch.tensor([1, 2])):
        with pytest.raises(fp4lab.InputError, match="step: expected an int"):
            layer.step = bad
    for good in (np.int64(5), torch.tensor(6), torch.tensor([7], dtype=torch.int32)):  # e.g. a checkpoint's value
        layer.step = good
        assert layer.step == int(good)
    with pytest.raises(fp4lab.InputError, match="dtype torch.int32"):
        layer(torch.zeros(32, 64, dtype=torch.int32))
    with pytest.raises(fp4lab.InputError, match="weight has dtype torch.float64; expected bfloat16"):
        QuantLinear(64, 32, recipe="ufp4", dtype=torch.float64)(torch.zeros(32, 64))
    meta = QuantLinear(64, 32, recipe="nvfp4", device="meta")
    y = meta(torch.empty(32, 64, device="meta"))
    assert y.shape == (32, 32) and y.device.type == "meta"


@pytest.mark.parametrize("recipe", ["ufp4", "nvfp4", "mxfp4-fp8", "bf16"])
def test_custom_ops_pass_opcheck(recipe):
    """Schemas, fake implementations (shapes, dtypes, strides), autograd registration and AOT dispatch of the
    layer ops agree with their real implementations."""
    layer = QuantLinear(64, 32, recipe=recipe)
    x = torch.randn(32, 64, requires_grad=True)
    args = (x, layer.weight, layer.bias, layer.sr_state, layer.fp8_counts, layer.layer_spec, True, torch.float32)
    torch.library.opcheck(torch.ops.fp4lab.quant_linear.default, args,
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    y, xm, ts, _ = torch.ops.fp4lab.quant_linear(*args)
    dy = torch.randn_like(y)
    saved = x.detach() if xm.numel() == 0 else xm
    bargs = (dy, saved, layer.weight.detach(), ts, layer.sr_state.clone(), layer.fp8_counts.clone(),
             layer.layer_spec, True, True, True, torch.float32)
    torch.library.opcheck(torch.ops.fp4lab.quant_linear_backward.default, bargs,
                          test_utils=("test_schema", "test_faketensor"))


def test_piece_ops_pass_opcheck_and_fake_quantize_compiles():
    """fake_quant (two-level format, both blockings, SR seeds from device memory), e4m3_rows, fp8_mm and
    scaled_mm: schemas and fake implementations agree with the real ones; fake_quantize under fullgraph compile
    gives its eager bits for a new seed without recompiling."""
    import fp4lab
    from fp4lab.recipes import fake_quantize
    from fp4lab.recipes.ops import OperandSpec
    from fp4lab.recipes.runtime import register_format

    x = torch.randn(32, 64)
    spec = OperandSpec(register_format(fp4lab.get_format("nvfp4")), "sr", 16, 3, 16, 3, 16, "bf16", True).encode()
    seeds = torch.tensor([[5, 0], [6, 0]], dtype=torch.int64)
    utils = ("test_schema", "test_faketensor")
    torch.library.opcheck(torch.ops.fp4lab.fake_quant.default, (x, seeds, spec), test_utils=utils)
    xb = x.to(torch.bfloat16)
    rows = torch.ops.fp4lab.e4m3_rows(xb, False)
    torch.library.opcheck(torch.ops.fp4lab.e4m3_rows.default, (xb, True), test_utils=utils)
    counts = torch.zeros(2, dtype=torch.int64)
    torch.library.opcheck(torch.ops.fp4lab.fp8_mm.default, (*rows, *rows, xb, xb, None, counts, torch.float32,
                                                             False), test_utils=utils)
    torch.library.opcheck(torch.ops.fp4lab.scaled_mm.default, (xb, xb.t(), torch.tensor([0.5]), torch.bfloat16,
                                                                torch.randn(32)), test_utils=utils)
    torch._dynamo.reset()
    f = torch.compile(lambda t, s: fake_quantize(t, "ufp4", "dy", "wgrad", 0, s), fullgraph=True)
    assert torch.equal(f(x, 11), fake_quantize(x, "ufp4", "dy", "wgrad", 0, 11))
    assert torch.equal(f(x, 12), fake_quantize(x, "ufp4", "dy", "wgrad", 0, 12))


def test_the_recipes_guide_example_runs(tmp_path):
    """docs/recipes.md's example (compile, checkpointing, weights_only load) runs as written in a fresh
    interpreter."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "recipes.md").read_text()
    code = re.findall(r"^```python\n(.*?)^```", text[text.index("## In your own training loop"):], re.S | re.M)[0]
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("[3, 3, 3, 3]")


def test_a_model_built_on_the_meta_device_gets_its_streams_back():
    """Meta-device initialization (build on meta, to_empty, reset_parameters): each layer's stream and step are
    written into the fresh buffers, so the bits equal those of a model built directly."""
    torch.manual_seed(0)
    direct = quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), "ufp4")
    with torch.device("meta"):
        lazy = quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), "ufp4")
    lazy.to_empty(device="cpu")
    lazy[0].reset_parameters()
    lazy.load_state_dict(direct.state_dict())
    assert lazy[0].step == 0 and lazy[0].stream == direct[0].stream
    assert torch.equal(lazy[0].sr_state, direct[0].sr_state)
    xs, gs = _data(1, k=64)
    gs = [torch.randn(32, 64)]
    _assert_same(_steps(direct, xs, gs), _steps(lazy, xs, gs), "meta")


def test_to_empty_alone_gives_a_meta_built_model_its_streams_and_zero_fp8_counts():
    """A model materialized with to_empty and initialized without reset_parameters (its own init, or a
    checkpoint, as torchtitan does): each layer's stream at step 0 and zero FP8 counts are written when the buffers
    leave the meta device, not left as uninitialized memory."""
    torch.manual_seed(0)
    direct = quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), "mxfp4-fp8")
    with torch.device("meta"):
        lazy = quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), "mxfp4-fp8")
    torch.full((1 << 16,), -1, dtype=torch.int64)  # (freed memory that to_empty may hand out again)
    lazy.to_empty(device="cpu")
    lazy.load_state_dict(direct.state_dict())
    assert lazy[0].sr_state.tolist() == direct[0].sr_state.tolist() and lazy[0].step == 0
    assert lazy[0].fp8_counts.tolist() == [[0, 0]] * 3
    xs, gs = _data(1, k=64)
    gs = [torch.randn(32, 64)]
    _assert_same(_steps(direct, xs, gs), _steps(lazy, xs, gs), "to_empty")
    assert lazy[0].fp8_stats == direct[0].fp8_stats and lazy[0].step == 1


def test_quantize_model_of_a_compiled_model_names_layers_as_the_model_does():
    """quantize_model of a model already wrapped by torch.compile (whole, or one block) names its layers as the
    plain model does (no "_orig_mod" step): high_precision patterns match, and the compiled model draws the
    plain eager model's stochastic-rounding bits. A linear layer compiled on its own (whose compiled forward is
    bound to the nn.Linear) is a one-line error, not a layer left silently in high precision."""
    import fp4lab

    r = get_recipe("ufp4").model_copy(update={"name": "ufp4-hp", "high_precision": ["1"]})
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                                    torch.nn.Linear(64, 32)), torch.nn.Linear(32, 8, bias=False))
    whole, part = copy.deepcopy(model), copy.deepcopy(model)
    quantize_model(model, r)
    whole = quantize_model(torch.compile(whole, fullgraph=True), r)
    part[0] = torch.compile(part[0], fullgraph=True)
    quantize_model(part, r)
    for m in (whole, part):
        names = [q.layer_name for q in m.modules() if isinstance(q, QuantLinear)]
        assert names == ["0.0", "0.2"] and type(m.get_submodule("_orig_mod.1" if m is whole else "1")) is \
            torch.nn.Linear
    xs, gs = _data(2)
    want = _steps(model, xs, gs)
    _assert_same(want, _steps(whole, xs, gs), "compiled, then converted")
    _assert_same(want, _steps(part, xs, gs), "block compiled, then converted")
    alone = torch.nn.Sequential(torch.compile(torch.nn.Linear(64, 64)))
    with pytest.raises(fp4lab.InputError, match="layer '0' is an nn.Linear compiled on its own"):
        quantize_model(alone, "ufp4")
    torch._dynamo.reset()


def test_input_errors_under_torch_compile():
    """docs/recipes.md: a layer's one-line input error is raised as is under torch.compile without fullgraph, and
    quoted inside Dynamo's Unsupported error with fullgraph=True."""
    import fp4lab

    m = quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), "ufp4")
    torch._dynamo.reset()
    with pytest.raises(fp4lab.InputError, match="0: 40 tokens"):
        torch.compile(m)(torch.randn(40, 64))
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match=r"(?s)Observed exception.*InputError\(.0: 40 tokens"):
        torch.compile(m, fullgraph=True)(torch.randn(40, 64))
    torch._dynamo.reset()
