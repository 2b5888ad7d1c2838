"""Host side of ``fp4lab.kernels.sr_keys``: one launch computes a layer's six stochastic-rounding keys from its
(stream, step) state in device memory and optionally advances the step."""

from __future__ import annotations

from typing import Any

from fp4lab.kernels import sr_keys as sk

_LAUNCHES: dict[tuple, Any] = {}


def sr_keys_triton(state: Any, mixed_uses: Any, keys: Any, advance: bool) -> None:
    """Write the keys of ``state`` (int64 [2] (stream, step)) into ``keys[:, 0]`` (int64 [6, 2]); ``mixed_uses``
    is int64 [6] on the same device; ``advance``: then add 1 to the step. CUDA, or the CPU interpreter."""
    from fp4lab.kernels.host import CachedLaunch, interpreting

    key = (state.device, bool(advance))
    launch = _LAUNCHES.get(key)
    if launch is None:
        launch = _LAUNCHES[key] = CachedLaunch(sk._sr_keys_kernel, (1,), {"ADVANCE": bool(advance)},
                                               {} if interpreting() else {"num_warps": 1}, n_lead=3)
    launch(state, mixed_uses, keys)
