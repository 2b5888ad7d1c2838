"""Data-parallel token shards: under DDP or FSDP a ``TokenShard`` (``set_token_shard``) makes every rank's
``QuantLinear`` quantize X and dY as the rows of the global batch they are, so the bits equal those of one process
over the global batch (docs/distributed.md)."""

from __future__ import annotations

from typing import Any

import torch

from fp4lab.recipes.linear import QuantLinear
from fp4lab.recipes.runtime import LayerSpec, register_shard


class TokenShard:
    """This process's rows of a data-parallel batch: the global operand [world * m, C] of a layer is the ranks'
    [m, C] operands concatenated in rank order over the process group ``group`` (rank r holds global rows
    r*m .. r*m + m - 1; every rank the same m). A layer with a shard all-gathers an X or dY that rounds
    stochastically or has a tensor scale, quantizes the global operand and keeps its rows: each element draws
    the SR bits of its global position (Philox counter = element index in the global operand) and tensor scales
    are the global batch's. Other operands quantize locally with the same bits: W is whole on every rank, and the
    blocks and RHT blocks of X and dY along M (tokens) fit in one rank's rows when m is a multiple of their size
    (QuantLinear checks m). Cost: per such operand an all-gather and a quantization of the global operand."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        pg = group if group is not None else dist.group.WORLD
        self.group_name = str(getattr(pg, "group_name", None) or id(pg))  # names the shard in a layer's spec

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """The global operand: ``t`` [m, C] of every rank, in rank order."""
        import torch.distributed as dist

        t = t.contiguous()
        out = t.new_empty((self.world * t.shape[0], *t.shape[1:]))
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # (renamed in torch 2.13)
        gather(out, t, group=self.group)
        return out

    def rows(self, y: Any) -> Any:
        """A copy of this rank's rows of a global operand (None stays None): a saved operand holds no more."""
        if y is None:
            return None
        m = y.shape[0] // self.world
        return y[self.rank * m:(self.rank + 1) * m].clone()


def set_token_shard(model: torch.nn.Module, shard: TokenShard | None) -> None:
    """Give every ``QuantLinear`` of ``model`` the data-parallel shard ``shard`` (None: one process's batch)."""
    key = "" if shard is None else register_shard(shard)
    for m in model.modules():
        if isinstance(m, QuantLinear):
            spec = LayerSpec.decode(m.layer_spec)
            m._set_spec(LayerSpec(spec.recipe, spec.rht_seed, key))
