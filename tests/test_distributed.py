"""Data-parallel training (fp4lab.study.distributed, fp4lab.recipes.shard.TokenShard) on the CPU: 2 processes
over gloo, started with torchrun's environment variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); this file
is also the worker (``python tests/test_distributed.py OUT`` under those variables).

Against one process over the same global batch (a tiny GPT under ufp4, SR on dY), one training step:
* DDP and FSDP2 (fp32 parameters): logits and every quantized dY operand (DGRAD and WGRAD blockings, with SR)
  bit for bit; the loss within 1e-6 relative and every gradient within ``2^-14 * max |g|`` of its tensor.
* FSDP2 with bf16 parameters and fp32 reduction, against one process on a bf16 copy of the model: logits and dY
  operands bit for bit, gradients within ``2^-6 * max |g|`` (4 bf16 units: the one-process gradient is rounded to
  bf16 once, the two ranks' partial gradients each).
* SR streams: two ranks holding the same dY rows draw different bits, each rank those of its rows of the global
  operand; nvfp4's tensor scales are the global batch's; RHT signs are equal on both ranks.
* DDP and FSDP2 under ``torch.compile``: the same step within the same bounds.
* ``train`` under DDP and FSDP2, 4 steps: rows within 1e-3 relative of the one-process run's, a DDP run paused
  at step 2 and resumed gives the uninterrupted DDP rows bit for bit, checkpoints have the one-process format, and
  FSDP2 resumes a one-process run's checkpoint.

Why bounds: a gradient element is a sum over the 256 tokens of the global batch, which one process and the ranks'
partial sums (added afterwards) evaluate in two fp32 orders, each within ``256 * 2^-24 * sum |terms|`` of the exact
sum. Measured: at most ``2^-22 * max |g|`` (norm and embedding gradients; the block linears' weight gradients were
equal bit for bit). A wrong SR bit pattern or a missing rank-count factor moves gradients by 2^-8 of max |g| or
more. Over several steps, last-bit weight differences (also FSDP2's clip norm, summed from shard norms) flip some
4-bit roundings, so training rows agree within a loss bound, not bit for bit.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fp4lab.testing.bits import same_bits

torch = pytest.importorskip("torch") if __name__ != "__main__" else __import__("torch")

TINY = {"d_model": 64, "layers": 2, "heads": 2, "ffn": 128, "seq_len": 64}
GLOBAL_BATCH = 4  # sequences: 2 per rank, 128 tokens per rank (a multiple of ufp4's 16-row blocks along M)
GRAD_BOUND = 2.0 ** -14
BF16_GRAD_BOUND = 2.0 ** -6
LOSS_BOUND = 1e-6
TRAIN_LOSS_BOUND = 1e-3
ROW_KEYS = ("step", "tokens", "train_loss", "heldout_loss", "lr")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(out: Path, world: int = 2, timeout: float = 240.0) -> list[dict]:
    """Run this file's worker as ``world`` processes; their JSON results by rank."""
    out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
               "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        log = (out / f"rank{rank}.log").open("w")
        procs.append(subprocess.Popen([sys.executable, __file__, str(out)], env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    logs = [(out / f"rank{r}.log").read_text()[-3000:] for r in range(world)]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


# ---- the tests -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """One 2-rank launch of the worker (numerics, then training runs), and the one-process run of the training
    configuration (here); ((numerics by rank, training by rank), one-process rows, folder)."""
    from fp4lab.study.train import TrainConfig, train

    out = tmp_path_factory.mktemp("dist")
    _write_corpus(out / "corpus")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:  # a one-process run paused at step 2, for the ranks to resume under FSDP2
        assert train(TrainConfig(out=str(out / "mixed"), **_train_fields(out)), stop_at=2).status == "paused"
        ranks = _launch(out)
        single = train(TrainConfig(out=str(out / "single"), **_train_fields(out))).rows
    finally:
        torch.set_num_threads(threads)
    return ranks, [{k: r[k] for k in ROW_KEYS} for r in single], out


@pytest.fixture(scope="module")
def numerics(launched):
    return [r["numerics"] for r in launched[0]]


@pytest.mark.parametrize("mode", ["ddp", "fsdp-fp32"])
def test_data_parallel_equals_one_process(numerics, mode):
    for rank, res in enumerate(numerics):
        r = res[mode]
        assert r["logits_bits_equal"], (rank, mode)
        assert r["dy_operands"] == 16 and r["dy_operands_bits_equal"], (rank, mode)  # 8 layers x 2 blockings
        assert abs(r["loss"] - r["loss_1"]) <= LOSS_BOUND * abs(r["loss_1"])
        assert r["weight_dtype"] == "torch.float32"
        assert r["grads"] == 15  # every parameter tensor: embedding, 5 norms, 8 block linears, head
        assert r["grad_err"] <= GRAD_BOUND, r["grad_errs"]


@pytest.mark.parametrize("mode", ["ddp-compiled", "fsdp-compiled"])
def test_data_parallel_under_torch_compile(numerics, mode):
    """torch.compile of the DDP- or FSDP2-wrapped model: every layer runs its ops inside the compiled step (16 dY
    operands recorded, each layer's step advanced once), and the step equals the one-process eager step within the
    bounds of the eager data-parallel test (module docstring): Inductor rounds the model's other operations
    (RMSNorm, rotary embedding, softmax) in its own order, so logits differ in their last bits (measured: loss
    within 9e-8 relative, gradients within 3e-7 of their largest element; the dY operands were equal bit for bit,
    which the quantization does not promise)."""
    for rank, res in enumerate(numerics):
        r = res[mode]
        assert r["dy_operands"] == 16 and r["layer_steps"] == [1], (rank, mode, r["layer_steps"])
        assert abs(r["loss"] - r["loss_1"]) <= LOSS_BOUND * abs(r["loss_1"]), (rank, mode)
        assert r["grads"] == 15 and r["grad_err"] <= GRAD_BOUND, r["grad_errs"]


def test_fsdp_bf16_parameters_fp32_reduction(numerics):
    for rank, res in enumerate(numerics):
        r = res["fsdp-bf16"]
        assert r["weight_dtype"] == "torch.bfloat16" and r["grad_dtype"] == "torch.float32"  # sharded: fp32
        assert r["logits_bits_equal"] and r["dy_operands_bits_equal"], rank
        assert abs(r["loss"] - r["loss_1"]) <= 2 ** -8 * abs(r["loss_1"])
        assert r["grad_err"] <= BF16_GRAD_BOUND, r["grad_errs"]


def test_sr_streams_follow_global_token_positions(numerics):
    for rank, res in enumerate(numerics):
        s = res["streams"]
        assert s["rows_equal_global"] and s["nvfp4_rows_equal_global"] and s["rht_seeds_equal"], rank
    s = numerics[0]["streams"]
    # both ranks quantized identical dY rows: with per-rank streams repeating, the bits would be equal
    assert s["differ_across_ranks"] > 0.2 and s["rank0_equals_local"] and not s["rank1_equals_local"]


def test_train_under_ddp_and_fsdp(launched):
    ranks, ref, out = launched
    main, other = (r["train"] for r in ranks)
    assert other["rows"] == {}  # rank 0 reports (and writes) the run
    assert {"config.json", "metrics.csv", "metrics.json", "alpha.csv", "checkpoint.pt", "done.json",
            "captures"} <= set(main["run_folder"])
    assert main["rows"]["ddp-cut"] == main["rows"]["ddp"]  # paused at step 2 (checkpoint), resumed: bit for bit
    assert main["rows"]["mixed"][0] == ref[0]  # the row the one-process session wrote before FSDP2 resumed it
    one = torch.load(out / "single" / "checkpoint.pt", weights_only=True)
    for name in ("ddp", "ddp-cut", "fsdp-cut", "mixed"):
        rows = main["rows"][name]
        assert [r["step"] for r in rows] == [r["step"] for r in ref] == [2, 4]
        for a, b in zip(rows, ref):
            for key in ("train_loss", "heldout_loss"):
                assert abs(a[key] - b[key]) <= TRAIN_LOSS_BOUND * b[key], (name, a, b)
    for mode in ("ddp", "fsdp"):
        assert main["world_size"][mode] == 2
        got = torch.load(out / f"{mode}-cut" / "checkpoint.pt", weights_only=True)  # the one-process format
        assert set(one["model"]) == set(got["model"]) and one["layer_steps"] == got["layer_steps"]
        assert all(one["model"][k].shape == got["model"][k].shape for k in one["model"])
        assert set(one["optimizer"]["state"]) == set(got["optimizer"]["state"])
        assert [g["params"] for g in one["optimizer"]["param_groups"]] == \
            [g["params"] for g in got["optimizer"]["param_groups"]]


# ---- the worker (one rank) -------------------------------------------------------------------------------------


def _gpt(recipe: str = "ufp4") -> torch.nn.Module:
    from fp4lab.recipes import quantize_model
    from fp4lab.study.model import GPT, GPTConfig

    torch.manual_seed(0)
    return quantize_model(GPT(GPTConfig(**TINY)), recipe, skip=("head",))


def _record(store: dict) -> contextlib.AbstractContextManager:
    """Record every quantized dY operand the layers compute (along N, along M: ``store["dy"]``) and the dtypes of
    the weights they quantize (``store["w"]``)."""
    from fp4lab.recipes import runtime

    @contextlib.contextmanager
    def cm():
        original = runtime.LayerRuntime.operands

        def operands(self, t, operand, k_gemm, m_gemm, keys=None):
            out = original(self, t, operand, k_gemm, m_gemm, keys)
            if operand == "dy":
                store["dy"].extend(o for o in out[:2] if o is not None)
            if operand == "w":
                store["w"].add(str(t.dtype))
            return out
        runtime.LayerRuntime.operands = operands
        try:
            yield
        finally:
            runtime.LayerRuntime.operands = original
    return cm()


def _one_step(net, model, tokens, par) -> dict:
    import torch.nn.functional as F

    seen: dict = {"dy": [], "w": set()}
    with _record(seen):
        logits = net(tokens[:, :-1])
        if par is None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
            logged = loss.detach()
        else:
            loss, logged = par.loss(logits, tokens[:, 1:])
        loss.backward()
    grads = {}
    for n, p in model.named_parameters():
        g = p.grad
        grads[n] = g.full_tensor() if hasattr(g, "full_tensor") else g
    return {"logits": logits.detach(), "loss": float(logged), "grads": grads, "dys": seen["dy"],
            "weight_dtype": ",".join(sorted(seen["w"]))}


def _compare(dp: dict, ref: dict, rank: int, world: int) -> dict:
    b = dp["logits"].shape[0]
    m = dp["dys"][0].shape[0] if dp["dys"] else 0
    errs = {n: float((g.float() - ref["grads"][n].float()).abs().max() / ref["grads"][n].float().abs().max())
            for n, g in dp["grads"].items()}
    return {
        "logits_bits_equal": bool(same_bits(dp["logits"], ref["logits"][rank * b:(rank + 1) * b])),
        "dy_operands": len(dp["dys"]),
        "dy_operands_bits_equal": len(dp["dys"]) == len(ref["dys"]) and all(
            same_bits(a, r[rank * m:(rank + 1) * m]) for a, r in zip(dp["dys"], ref["dys"])),
        "loss": dp["loss"], "loss_1": ref["loss"], "grads": len(errs), "grad_errs": errs,
        "grad_err": max(errs.values()), "grad_dtype": str(next(iter(dp["grads"].values())).dtype),
        "weight_dtype": dp["weight_dtype"],
    }


def _streams(rank: int, world: int) -> dict:
    import torch.distributed as dist

    from fp4lab.recipes import QuantLinear, TokenShard, set_token_shard

    shard = TokenShard()
    layer = QuantLinear(64, 64, recipe="ufp4", name="probe")
    layer.step = 3
    dy = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))  # the same rows on every rank
    set_token_shard(layer, shard)
    dn, dm, _, _ = layer.operands(dy, "dy", "dgrad", "wgrad")
    set_token_shard(layer, None)
    gn, gm, _, _ = layer.operands(torch.cat([dy] * world), "dy", "dgrad", "wgrad")
    ln, _, _, _ = layer.operands(dy, "dy", "dgrad", None)
    rows = slice(rank * 32, (rank + 1) * 32)
    everyone = [torch.empty(dn.shape) for _ in range(world)]
    dist.all_gather(everyone, dn.float())
    # nvfp4: SR and tensor scales of X and dY from the global batch (different rows per rank)
    nv = QuantLinear(64, 64, recipe="nvfp4", name="probe")
    x = torch.randn(32 * world, 64, generator=torch.Generator().manual_seed(2))
    x = x * torch.linspace(0.1, 8, 32 * world)[:, None]  # rank 0's amax is not the global one
    set_token_shard(nv, shard)
    got = nv.operands(x[rows], "x", "fprop", "wgrad") + nv.operands(x[rows], "dy", "dgrad", "wgrad")
    set_token_shard(nv, None)
    want = nv.operands(x, "x", "fprop", "wgrad") + nv.operands(x, "dy", "dgrad", "wgrad")
    nv_equal = all(same_bits(g, w[rows] if w.numel() > 1 else w) for g, w in zip(got, want))
    seeds = [None] * world
    dist.all_gather_object(seeds, [layer.rht_seed, nv.rht_seed])
    return {
        "rows_equal_global": bool(same_bits(dn, gn[rows]) and same_bits(dm, gm[rows])),
        "nvfp4_rows_equal_global": bool(nv_equal),
        "differ_across_ranks": float((everyone[0] != everyone[1]).float().mean()),
        "rank0_equals_local": bool(same_bits(everyone[0], ln.float())),
        "rank1_equals_local": bool(same_bits(everyone[1], ln.float())),
        "rht_seeds_equal": all(s == seeds[0] for s in seeds),
    }


def _worker_numerics() -> dict:
    from fp4lab.study.distributed import setup

    res: dict = {}
    par0 = setup("ddp", torch.device("cpu"))
    rank, world = par0.rank, par0.world
    tokens = torch.randint(0, 256, (GLOBAL_BATCH, TINY["seq_len"] + 1), generator=torch.Generator().manual_seed(5))
    local = torch.from_numpy(par0.rows(tokens.numpy()))
    m1 = _gpt()
    ref = {"fp32": _one_step(m1, m1, tokens, None)}
    m2 = _gpt().to(torch.bfloat16)
    ref["bf16"] = _one_step(m2, m2, tokens, None)
    for mode, kind, params in (("ddp", "ddp", "bf16"), ("fsdp-fp32", "fsdp", "fp32"), ("fsdp-bf16", "fsdp", "bf16"),
                               ("ddp-compiled", "ddp", "fp32"), ("fsdp-compiled", "fsdp", "fp32")):
        par = setup(kind, torch.device("cpu"), params)
        model = _gpt()
        net = par.wrap(model)
        if mode.endswith("compiled"):
            torch._dynamo.reset()
            net = torch.compile(net)
        res[mode] = _compare(_one_step(net, model, local, par), ref["bf16" if mode == "fsdp-bf16" else "fp32"],
                             rank, world)
        res[mode]["layer_steps"] = sorted({m.step for m in model.modules() if hasattr(m, "sr_state")})
    res["streams"] = _streams(rank, world)
    return res


def _write_corpus(root: Path) -> None:
    rng = np.random.default_rng(0)
    words = ["def", "return", "self", "import", "for", "in", "if", "x", "(", ")", ":", "=", "+", "\n"]
    for i in range(12):
        (root / f"pkg{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"pkg{i % 3}" / f"mod{i}.py").write_text(" ".join(words[j] for j in rng.integers(0, 14, 400)))


def _train_fields(out: Path) -> dict:
    from fp4lab.study.model import GPTConfig

    return {"size": "tiny", "model": GPTConfig(**TINY), "recipe": "ufp4", "steps": 4, "batch": GLOBAL_BATCH,
            "lr": 3e-3, "warmup": 2, "eval_every": 2, "eval_tokens": 256, "ckpt_every": 0,
            "corpus": str(out / "corpus"), "corpus_glob": "*.py", "progress": False, "diag_every": 2,
            "capture_steps": (2,)}


def _worker_train(out: Path) -> dict:
    import torch.distributed as dist

    from fp4lab.study.train import TrainConfig, train

    res: dict = {"rows": {}, "world_size": {}}
    # DDP: uninterrupted, and paused at step 2 then resumed; FSDP2 (fp32 parameters, so without diagnostics on the
    # CPU: train refuses them there) paused and resumed across its checkpoint, and resuming a one-process run
    rows = train(TrainConfig(out=str(out / "ddp"), parallel="ddp", **_train_fields(out))).rows
    res["rows"]["ddp"] = [{k: r[k] for k in ROW_KEYS} for r in rows]
    for mode, fields in (("ddp", {}), ("fsdp", {"diag_every": 0, "capture_steps": (), "fsdp_params": "fp32"})):
        cut = TrainConfig(out=str(out / f"{mode}-cut"), parallel=mode, **{**_train_fields(out), **fields})
        assert train(cut, stop_at=2).status == "paused"
        res["rows"][f"{mode}-cut"] = [{k: r[k] for k in ROW_KEYS} for r in train(cut).rows]
        if dist.get_rank() == 0:
            res["world_size"][mode] = json.loads((out / f"{mode}-cut" / "config.json").read_text())["world_size"]
    mixed = TrainConfig(out=str(out / "mixed"), parallel="fsdp", fsdp_params="fp32",
                        **{**_train_fields(out), "diag_every": 0, "capture_steps": ()})
    res["rows"]["mixed"] = [{k: r[k] for k in ROW_KEYS} for r in train(mixed).rows]
    if dist.get_rank() != 0:
        return {"rows": {}}
    res["run_folder"] = sorted(p.name for p in (out / "ddp").iterdir())
    return res


if __name__ == "__main__":
    torch.set_num_threads(1)
    results = {"numerics": _worker_numerics(), "train": _worker_train(Path(sys.argv[1]))}
    import torch.distributed as dist

    (Path(sys.argv[1]) / f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    dist.destroy_process_group()
