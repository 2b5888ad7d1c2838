"""Which backend a recipe's tensor takes: CUDA tensors run the Triton kernels, CPU tensors the numba emulator and
torch's CPU operations. Tests set ``TRITON_ON_CPU`` to send CPU tensors through the Triton kernels as well (Triton's
CPU interpreter, ``TRITON_INTERPRET=1``): the same bits, checked without a GPU."""

from __future__ import annotations

from typing import Any

TRITON_ON_CPU = False


def on_triton(t: Any) -> bool:
    """Whether tensor ``t`` takes the Triton kernels: CUDA tensors, and CPU tensors under ``TRITON_ON_CPU``."""
    return t.is_cuda or TRITON_ON_CPU
