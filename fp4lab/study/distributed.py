"""Data-parallel training of the study under torchrun: DDP or FSDP2 (``fully_shard``) over the ranks of the
default process group, with the numerics of one process over the same global batch where the mathematics allows.

    torchrun --nproc_per_node 2 examples/pretrain.py train --out runs/x --recipe ufp4 --ddp      # or --fsdp

``setup(mode, device)`` returns the ``Parallel`` of a run; mode "none" is the one-process run, unchanged.

* Data: every rank draws the step's global batch (``data.train_batch``: seed and step only) and keeps sequences
  ``r*b .. r*b + b - 1`` with ``b = batch / world`` (``Parallel.rows``), so the ranks' tokens in rank order are the
  global batch.
* Loss and gradients: each rank's loss is the sum of its token losses divided by the global token count, and
  gradients are summed over the ranks (DDP: a sum comm hook; FSDP2: divide factor 1 with sum reductions). The
  gradient of the logits is then ``1/N`` per token as in the one-process mean, bit for bit. The logged loss is the
  all-reduced sum. With one rank the one-process formula (the mean) is used.
* Quantization: every QuantLinear gets a ``TokenShard`` (``fp4lab.recipes.shard``): X and dY that round
  stochastically or have a tensor scale are quantized as the global operand, so each element draws the SR bits of
  its global token position and tensor scales are the global batch's; SR keys and RHT signs derive from layer
  names and steps, equal on every rank. FSDP2 quantizes the weights after its all-gather (the layer sees the whole
  weight).
* What can differ from one process: sums over tokens (weight, norm and embedding gradients, the logged loss) are
  per-rank fp32 partial sums that are then added, a reassociation of the one-process sum (each such element
  within ``2 * n * 2^-24 * sum |terms|`` of it for n tokens, and mostly far closer); kernels whose per-row result
  depends on the number of rows (GPU GEMM heuristics). FSDP2 with ``fsdp_params = "bf16"`` (the default) runs the
  forward and backward on bf16 copies of the weights (the one-process CUDA run quantizes the fp32 weights under
  autocast) and reduces the per-rank bf16 gradients in fp32; ``"fp32"`` keeps fp32 parameters (the one-process
  numerics).
* Evaluation: every rank evaluates all held-out windows in whole batches (no token shard), so held-out losses equal
  the one-process run's for equal weights.
* Checkpoints: full state dicts in the one-process format (``model.state_dict()``, ``optimizer.state_dict()``),
  gathered from FSDP2's shards, written by rank 0 and read by every rank: a run resumes under any mode and rank
  count. Rank 0 alone writes the run folder; the ranks agree on stopping at a deadline through a host-side
  all-reduce.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from fp4lab.errors import InputError
from fp4lab.recipes.shard import TokenShard, set_token_shard

MODES: tuple[str, ...] = ("none", "ddp", "fsdp")
FSDP_PARAMS: tuple[str, ...] = ("bf16", "fp32")
_GROUPS: dict[str, Any] = {}  # process groups made once per process: "control" (gloo), "tokens"


@dataclass
class Parallel:
    """How a run spreads over processes: ``mode`` (``MODES``), this process's ``rank`` of ``world``, its device."""

    mode: str = "none"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    rank: int = 0
    world: int = 1
    fsdp_params: str = "bf16"

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes the run folder."""
        return self.rank == 0

    def local_batch(self, batch: int) -> int:
        """Sequences per rank of a global batch of ``batch`` (an InputError unless the ranks split it evenly)."""
        if batch % self.world:
            raise InputError(f"train: batch = {batch} sequences do not split over {self.world} ranks; use a "
                             f"multiple of {self.world}")
        return batch // self.world

    def rows(self, batch: np.ndarray) -> np.ndarray:
        """This rank's sequences of the global batch [B, ...]: ``local_batch(B)`` rows from ``rank * B/world``."""
        if self.world == 1:
            return batch
        b = self.local_batch(batch.shape[0])
        return batch[self.rank * b:(self.rank + 1) * b]

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module to train: ``model`` (none; FSDP2 shards it in place) or its DDP wrapper. Build the optimizer
        on ``model``'s parameters after this call."""
        if self.mode == "none":
            return model
        set_token_shard(model, TokenShard(_group("tokens")) if self.world > 1 else None)
        if self.mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            # buffers (the rotary tables) are equal on every rank: no broadcast before each forward
            quiet = {"forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(
                DistributedDataParallel).parameters else "broadcast_buffers": False}  # (renamed in torch 2.13)
            net = DistributedDataParallel(model, device_ids=ids, **quiet)
            net.register_comm_hook(None, _sum_hook)
            return net
        return _fully_shard(model, self.device, self.world, self.fsdp_params)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss to differentiate, global mean loss, detached) of this rank's logits [b, T, V] and targets."""
        flat, t = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
        if self.world == 1:
            loss = F.cross_entropy(flat, t)
            return loss, loss.detach()
        loss = F.cross_entropy(flat, t, reduction="sum") / (t.numel() * self.world)
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        return loss, logged

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on some rank (a host-side all-reduce)."""
        return flag if self.world == 1 else any_rank(flag)

    def barrier(self) -> None:
        """Wait for every rank (host side): orders rank 0's writes before the others' reads."""
        if self.world > 1:
            dist.barrier(group=_group("control"))

    @contextmanager
    def whole_batches(self, model: torch.nn.Module) -> Iterator[None]:
        """Every rank runs whole (identical) batches through ``model`` inside: no token shard (evaluation)."""
        if self.mode == "none" or self.world == 1:
            yield
            return
        set_token_shard(model, None)
        try:
            yield
        finally:
            set_token_shard(model, TokenShard(_group("tokens")))

    def state_dicts(self, model: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple[dict, dict]:
        """(model, optimizer) state dicts in the one-process format; under FSDP2 gathered (a collective: every
        rank calls it) onto rank 0's CPU, empty on the other ranks."""
        if self.mode != "fsdp":
            return model.state_dict(), opt.state_dict()
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        msd = get_model_state_dict(model, options=options)
        osd = get_optimizer_state_dict(model, opt, options=options)
        if not self.is_main:
            return {}, {}
        index = {n: i for i, n in enumerate(_param_names(model, opt))}
        return msd, {"state": {index[n]: v for n, v in osd["state"].items()},
                     "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in osd["param_groups"]]}

    def load(self, model: torch.nn.Module, opt: torch.optim.Optimizer, msd: dict, osd: dict) -> None:
        """Load one-process-format state dicts (every rank holds them whole) into the model and optimizer."""
        if self.mode != "fsdp":
            model.load_state_dict(msd)
            opt.load_state_dict(osd)
            return
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        names = _param_names(model, opt)
        by_name = {"state": {names[i]: v for i, v in osd["state"].items()},
                   "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in osd["param_groups"]]}
        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(model, msd, options=options)
        set_optimizer_state_dict(model, opt, by_name, options=options)


def setup(mode: str, device: torch.device, fsdp_params: str = "bf16") -> Parallel:
    """The ``Parallel`` of a run in this process: "none" (one process), or "ddp" / "fsdp" over the process group
    of torchrun's environment (initialised here unless it is: NCCL on CUDA, gloo on the CPU). A CUDA device
    without an index becomes ``cuda:LOCAL_RANK``."""
    ranks = dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))
    if mode not in MODES:
        raise InputError(f"train: parallel = '{mode}'; expected one of {', '.join(MODES)}")
    if fsdp_params not in FSDP_PARAMS:
        raise InputError(f"train: fsdp_params = '{fsdp_params}'; expected one of {', '.join(FSDP_PARAMS)}")
    if mode == "none":
        if ranks > 1:
            raise InputError(f"train: started as {ranks} processes (torchrun) with parallel = 'none', which would "
                             f"train {ranks} copies into one folder; add --ddp or --fsdp")
        return Parallel(device=device)
    if not dist.is_initialized() and "RANK" not in os.environ:
        raise InputError(f"train: parallel = '{mode}' needs a process group; launch with torchrun "
                         f"(e.g. torchrun --nproc_per_node 2 examples/pretrain.py train ... --{mode})")
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Parallel(mode, device, dist.get_rank(), dist.get_world_size(), fsdp_params)


def any_rank(flag: bool) -> bool:
    """True on every process when ``flag`` is true on some process of the initialised process group (a host-side
    all-reduce over gloo); ``flag`` itself without a process group of several ranks."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return flag
    t = torch.tensor([int(flag)], dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=_group("control"))
    return bool(t.item())


def shutdown() -> None:
    """Destroy the process group (and the groups made here) if one was initialised."""
    if dist.is_initialized():
        _GROUPS.clear()
        dist.destroy_process_group()


def _group(name: str) -> Any:
    """A process group over all ranks, made once: "control" (gloo: host-side flags), "tokens" (the default
    backend: the token shards' all-gathers, apart from the gradient reductions)."""
    if name not in _GROUPS:
        _GROUPS[name] = dist.new_group(backend="gloo") if name == "control" else dist.new_group()
    return _GROUPS[name]


def _sum_hook(group, bucket):  # (no annotations: DDP checks that ``bucket`` has none or dist.GradBucket)
    """DDP comm hook: the bucket's gradients summed over the ranks (no division: each rank's loss already is its
    share of the global mean)."""
    fut = dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def _fully_shard(model: torch.nn.Module, device: torch.device, world: int, params: str) -> torch.nn.Module:
    """FSDP2 on each block and the root (embedding, final norm, head), summing gradients over the ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if params == "bf16" \
        else MixedPrecisionPolicy()
    for block in getattr(model, "blocks", ()):
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            if hasattr(m, "set_force_sum_reduction_for_comms"):  # plain SUM (else NCCL's PREMUL_SUM(1.0))
                m.set_force_sum_reduction_for_comms(True)
    return model


def _param_names(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[str]:
    """Qualified names of the optimizer's parameters, in its order (the indices of ``opt.state_dict()``)."""
    name = {id(p): n for n, p in model.named_parameters()}
    return [name[id(p)] for g in opt.param_groups for p in g["params"]]
