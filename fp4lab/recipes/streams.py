"""Random streams of a training run: which Philox key each stochastic rounding and each RHT sign vector uses.

Every quantization of a training step that rounds stochastically draws its bits from its own Philox key
(``fp4lab.numerics.philox``: key = 64-bit seed, counter = element index), derived from a stable identity:

    stream(layer)         = mix(blake2b-64(qualified name)), or mix(seed) for a layer built without a name
    sr_seed(layer, step, use) = 2^62 | (mix(stream ^ mix(step ^ mix(use))) mod 2^62)

``use`` names the operand and the GEMM ("dy.dgrad", "dy.wgrad", "x.fprop", ...); ``step`` counts the layer's
backward passes (``fp4lab.recipes.linear.QuantLinear``: a layer's stream and step live in device memory, and
``fp4lab.kernels.sr_keys`` computes the same keys there). ``mix`` is the splitmix64 finalizer (a bijection of 64-bit
integers), so different
(stream, step, use) give different keys except with probability about 2^-62 per pair. The top bit pattern
``2^62 | ...`` keeps every key in [2^62, 2^63): one signed 64-bit kernel argument type for all of them.
RHT signs: ``rht_seed`` for every layer ("fixed"), or ``mix(stream ^ rht_seed) mod 2^62`` ("per_layer").
Keys and signs depend on names, steps and uses only, so they are the same on every rank of a data-parallel run;
there the element index of an X or dY element is its index in the global batch's operand (the ranks' rows
concatenated in rank order, ``fp4lab.recipes.shard.TokenShard``), so no two ranks draw the same bits and the
bits equal those of one process over the global batch.
"""

from __future__ import annotations

import hashlib

_M64 = (1 << 64) - 1
USES = ("x.fprop", "x.wgrad", "w.fprop", "w.dgrad", "dy.dgrad", "dy.wgrad")


def mix(v: int) -> int:
    """splitmix64 finalizer: a bijection of 64-bit integers that spreads every input bit over the output."""
    z = (v + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def stream_of_name(name: str) -> int:
    """Stream id of a layer from its qualified module name (stable across runs, processes and ranks)."""
    return mix(int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "little"))


def stream_of_seed(seed: int) -> int:
    """Stream id of a layer built from an integer seed (no name)."""
    return mix(int(seed) & _M64)


def sr_seed(stream: int, step: int, use: str) -> int:
    """Philox seed (in [2^62, 2^63)) of the stochastic rounding of operand use ``use`` at ``step``."""
    u = USES.index(use)
    return (1 << 62) | (mix(stream ^ mix((int(step) & _M64) ^ mix(u))) & ((1 << 62) - 1))


def signed64(v: int) -> int:
    """The 64-bit pattern of ``v`` as a signed int64 (how a stream id is stored in a tensor)."""
    v &= _M64
    return v - (1 << 64) if v >> 63 else v


def mixed_uses() -> list[int]:
    """``mix(u)`` of every use index, as signed int64 values (the device key kernel's constants)."""
    return [signed64(mix(u)) for u in range(len(USES))]


def rht_seed_for(stream: int, rht_seed: int, policy: str) -> int:
    """RHT sign seed of a layer under the recipe's ``rht_signs`` policy ("fixed" or "per_layer")."""
    if policy == "fixed":
        return int(rht_seed)
    return mix(stream ^ (int(rht_seed) & _M64)) & ((1 << 62) - 1)
