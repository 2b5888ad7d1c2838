"""Device code: the stochastic-rounding Philox keys of a layer's six operand uses at its current step, computed
from the layer's stream state in device memory (``fp4lab.recipes.streams.sr_seed``, bit for bit), so that
compiled graphs and CUDA-graph replays draw each step's keys without the host.

``state`` is int64 [2]: (stream, step), the stream's 64 bits stored as a signed int64. ``mixed_uses`` is int64
[6]: ``mix(u)`` for use index u (host constants). Key of use u, in uint64 arithmetic modulo 2^64:

    key_u = 2^62 | (mix(stream ^ mix(step ^ mix(u))) & (2^62 - 1))

written to ``keys[u, 0]`` of an int64 [6, 2] tensor (one 16-byte slot per use, the alignment the fake-quant
kernels' seed pointers specialize on). With ``ADVANCE`` the step is then incremented in place.
"""

import triton
import triton.language as tl


@triton.jit
def _mix(z):
    """splitmix64 finalizer on uint64 values (wrapping arithmetic)."""
    z = z + 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    return z ^ (z >> 31)


@triton.jit
def _sr_keys_kernel(state_ptr, mixed_uses_ptr, keys_ptr, ADVANCE: tl.constexpr):
    u = tl.arange(0, 8)
    live = u < 6
    stream = tl.load(state_ptr).to(tl.uint64, bitcast=True)
    step_i = tl.load(state_ptr + 1)
    step = step_i.to(tl.uint64, bitcast=True)
    mixed = tl.load(mixed_uses_ptr + u, mask=live, other=0).to(tl.uint64, bitcast=True)
    k = _mix(stream ^ _mix(step ^ mixed))
    key = (k & 0x3FFFFFFFFFFFFFFF) | 0x4000000000000000
    tl.store(keys_ptr + 2 * u, key.to(tl.int64, bitcast=True), mask=live)
    if ADVANCE:
        tl.store(state_ptr + 1, step_i + 1)
