"""numba's thread count, read without changing the caller's threading.

numba starts its threading layer at the first ``numba.get_num_threads()`` or parallel kernel call. Its OpenMP
layer then calls ``omp_set_num_threads(NUMBA_NUM_THREADS)`` in the calling thread, and torch (OpenMP builds) reads
its intra-op thread count from that same setting: without care, fp4lab's first call would override
``OMP_NUM_THREADS`` and ``torch.set_num_threads`` (more threads, other reduction orders, other float results).
``launch()`` starts the layer once and puts torch's thread count back; fp4lab calls it before any numba threading.
"""

from __future__ import annotations

import sys
import threading

_LOCK = threading.Lock()
_DONE: list[bool] = []


def launch() -> None:
    """Start numba's threading layer (once per process); torch's thread count, if torch is loaded, is unchanged."""
    if _DONE:
        return
    with _LOCK:
        if _DONE:
            return
        from numba.np.ufunc import parallel

        torch = sys.modules.get("torch")
        before = torch.get_num_threads() if torch is not None and hasattr(torch, "get_num_threads") else None
        parallel._launch_threads()
        if before is not None and torch.get_num_threads() != before:
            torch.set_num_threads(before)
        _DONE.append(True)


def workers() -> int:
    """numba's thread count (``NUMBA_NUM_THREADS`` / ``numba.set_num_threads``), at least 1."""
    import numba

    launch()
    return max(1, int(numba.get_num_threads()))
