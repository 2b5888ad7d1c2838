"""``CachedLaunch``'s direct path (GPU only, so checked here with the compiled kernel and the launcher stubbed):
which calls go back through the JIT, and the argument list the launcher gets."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import triton.language as tl
from triton.runtime.jit import JITFunction

import fp4lab.kernels.host as host


def _kernel(x_ptr, y_ptr, tab_ptr, scale, n, seed, BLOCK: tl.constexpr):  # (only its signature is used)
    pass


class _Compiled:
    function, packed_metadata = "function", "metadata"

    def __init__(self, log: list) -> None:
        self.log = log

    def _init_handles(self) -> None:
        pass

    def run(self, *args: Any) -> None:
        self.log.append(("direct", args))


class _Jit:
    """Stands in for ``JITFunction[grid]``: records the call, returns a compiled kernel whose launcher records."""

    def __init__(self, fn: JITFunction, log: list) -> None:
        self.params, self.arg_names, self.log = fn.params, fn.arg_names, log

    def __getitem__(self, grid: tuple) -> Any:
        def launch(*args: Any, **kwargs: Any) -> _Compiled:
            self.log.append(("jit", args))
            return _Compiled(self.log)
        return launch


@pytest.fixture
def launch(monkeypatch: pytest.MonkeyPatch) -> tuple[host.CachedLaunch, list, torch.Tensor]:
    monkeypatch.setattr(host, "interpreting", lambda: False)
    monkeypatch.setattr(host, "_current_raw_stream", lambda: 7)
    log: list = []
    table = torch.arange(8, dtype=torch.float32)
    cl = host.CachedLaunch(_Jit(JITFunction(_kernel, do_not_specialize=["seed"]), log), (3,), {"BLOCK": 64}, {},
                           fixed=(table, 1.5, 100), n_lead=2)
    return cl, log, table


def test_direct_launch_passes_pointers_as_ints_in_signature_order(launch: tuple) -> None:
    cl, log, table = launch
    x, y = torch.zeros(64), torch.zeros(64)
    cl(x, y, 5)
    cl(x, y, 6)
    assert [kind for kind, _ in log] == ["jit", "direct"]
    args = log[1][1]
    assert args[:4] == (3, 1, 1, 7)  # grid, then the current stream
    # after the function, its metadata and three hooks: every parameter in order, pointers as ints
    assert args[9:] == (x.data_ptr(), y.data_ptr(), table.data_ptr(), 1.5, 100, 6, 64)


def test_a_different_specialization_goes_back_through_the_jit(launch: tuple) -> None:
    cl, log, _ = launch
    x = torch.zeros(64)
    cl(x, x, 5)
    cl(x, x, 2**40)  # (``seed`` is do_not_specialize: only its integer width counts)
    cl(x, x[1:], 2**40)  # a pointer off its 16-byte alignment
    cl(x.to(torch.float16), x, 2**40)  # another pointer dtype
    cl(x.to(torch.float16), x, 2**41)
    assert [kind for kind, _ in log] == ["jit", "jit", "jit", "jit", "direct"]


def test_specialized_ints_are_part_of_the_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "interpreting", lambda: False)
    monkeypatch.setattr(host, "_current_raw_stream", lambda: 0)
    log: list = []
    cl = host.CachedLaunch(_Jit(JITFunction(_kernel), log), (1,), {"BLOCK": 64}, {}, fixed=(), n_lead=0)
    x = torch.zeros(64)
    for n in (16, 32, 1, 3, 5):  # multiple of 16 twice, == 1, then neither twice
        cl(x, x, x, 0.5, n, 9)
    assert [kind for kind, _ in log] == ["jit", "direct", "jit", "jit", "direct"]
