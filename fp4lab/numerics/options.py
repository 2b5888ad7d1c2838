"""``QuantizeOptions``: the options of one quantize call, checked once and taken by every quantize backend;
``Blocking``: the options of one fake-quantized copy of a GEMM operand.

``fp4lab.quantize`` builds one record from its arguments; ``quantize_reference`` (``fp4lab.numerics``),
``quantize_emulated`` (``fp4lab.emulator``), ``quantize_cuda`` and ``quantize_triton`` (``fp4lab.kernels``) take it
instead of repeating the seven-argument signature, and each returns a ``QuantizedTensor`` (docs/numerics.md,
"Pipeline"). The training recipes ask for each fake-quantized operand with a ``Blocking``, on the CPU and the GPU.

Why this module: the records' checks speak the vocabulary of the bits (the stochastic-rounding widths, the
Philox seed range, the RHT sizes), so they belong to ``fp4lab.numerics``, below every backend and every user of
the records (``fp4lab.kernels``, ``fp4lab.recipes``, ``fp4lab.api`` and the facade) and above
``fp4lab.quantized``, which therefore holds no options (tests/test_package_graph.py). Those vocabularies and
their checks live here, and ``philox``, ``rht`` and the backends import them from here, so that this module
imports only ``fp4lab.errors``, ``fp4lab.formats.grids`` and numpy: ``import fp4lab`` (which exports
``QuantizeOptions``) stays light, and there is no import cycle inside ``fp4lab.numerics``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.grids import ROUNDING_MODES

SR_BITS = 24  # default random bits per element for stochastic rounding: word >> 8
SR_WIDTHS = (4, 8, 16, 24)  # allowed random-bit widths (``sr_bits``)
RHT_SIZES = (16, 32, 64, 128, 256)  # allowed randomized-Hadamard block sizes


def check_int(v: Any, what: str) -> int:
    """``int(v)``, or a one-line ``InputError`` naming ``what`` unless ``v`` is a (numpy) int and not a bool."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise InputError(f"{what} must be an int, got {type(v).__name__} {v!r}"[:200])
    return int(v)


def check_sr_bits(bits: int) -> int:
    """``bits`` if it is an allowed stochastic-rounding width (``SR_WIDTHS``), else an InputError."""
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or int(bits) not in SR_WIDTHS:
        raise InputError(f"sr_bits must be one of {', '.join(map(str, SR_WIDTHS))}, got {bits!r}")
    return int(bits)


def split_seed_checked(seed: Any, what: str) -> None:
    """``InputError`` naming ``what`` unless ``seed`` is an int in [-2**63, 2**64)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) \
            or not -(2**63) <= int(seed) < 2**64:
        raise InputError(f"{what} must be an int in [-2**63, 2**64), got {seed!r}")


@dataclass(frozen=True)
class QuantizeOptions:
    """How to quantize, apart from the input and its format (``fp4lab.quantize``'s arguments; docs/numerics.md).

    ``rounding``  element rounding: None (the format's default), "rtne", "rtna", "rtnz", "rtz", "rtp" (toward
                  +Inf), "rtm" (toward -Inf) or "sr" (stochastic: round up iff ``floor(p * 2^24) > c``, ``p`` the
                  position between the two neighbouring levels, ``c`` the element's Philox comparand).
    ``seed``      the 64-bit Philox key of "sr", an int in [-2**63, 2**64) (negative wraps as two's complement;
                  the element with flat row-major index ``i`` draws word ``i % 4`` of ``randint4x(seed, i // 4)``
                  at 24 bits). Unused by the other modes.
    ``axis``      the blocked axis (negative counts from the end; 2-D tiles take the last two axes).
    ``rht``       None, or the size n in 16..256 of the randomized Hadamard transform applied along ``axis`` (in
                  consecutive n-element chunks, float32 butterflies, then ``* fp32(1/sqrt(n))``) before scaling;
                  dequantize undoes it unless ``rotated=True``.
    ``rht_seed``  the Philox key of the RHT's random signs (``rht_signs(n, rht_seed)``), same range as ``seed``.
    ``sr_bits``   random bits per element of "sr": 24 (one Philox call per 4 elements), 16, 8 or 4 (per 8, 16 or
                  32 elements; the comparand ``r << (24 - w) | (2^(24 - w) - 1)`` rounds up with probability
                  ``floor(p 2^w) / 2^w``). Unused by the other modes.

    Checked when built, in the order above, with the one-line ``InputError`` of ``fp4lab.quantize``; the int fields
    are stored as Python ints. Frozen and hashable.
    """

    rounding: str | None = None
    seed: int = 0
    axis: int = -1
    rht: int | None = None
    rht_seed: int = 0
    sr_bits: int = SR_BITS

    def __post_init__(self) -> None:
        rounding, rht = self.rounding, self.rht
        if rounding is not None and not isinstance(rounding, str):
            raise InputError(f"quantize: rounding must be None or one of {', '.join(ROUNDING_MODES)}, got "
                             f"{type(rounding).__name__}")
        if rounding is not None and rounding not in ROUNDING_MODES:
            raise InputError(f"quantize: rounding '{rounding[:40]}' is unknown; use one of "
                             f"{', '.join(ROUNDING_MODES)}")
        split_seed_checked(self.seed, "quantize: seed")
        check_int(self.axis, "quantize: axis")
        if rht is not None and (isinstance(rht, (bool, np.bool_)) or not isinstance(rht, (int, np.integer))
                                or int(rht) not in RHT_SIZES):
            raise InputError(f"quantize: rht must be None or one of {', '.join(map(str, RHT_SIZES))}, "
                             f"got {rht!r}"[:200])
        split_seed_checked(self.rht_seed, "quantize: rht_seed")
        try:
            check_sr_bits(self.sr_bits)
        except InputError as exc:
            raise InputError(f"quantize: {exc}"[:200]) from None
        for name in ("seed", "axis", "rht_seed", "sr_bits"):
            object.__setattr__(self, name, int(getattr(self, name)))
        if rounding is not None:
            object.__setattr__(self, "rounding", str(rounding))
        if rht is not None:
            object.__setattr__(self, "rht", int(rht))


DEFAULT_OPTIONS = QuantizeOptions()


def as_options(options: Any, what: str = "quantize") -> QuantizeOptions:
    """``options`` if it is a ``QuantizeOptions``, else a one-line ``InputError`` (a backend's first check)."""
    if not isinstance(options, QuantizeOptions):
        raise InputError(f"{what}: options must be a QuantizeOptions (fp4lab.QuantizeOptions), got "
                         f"{type(options).__name__}")
    return options


@dataclass(frozen=True)
class Blocking:
    """One fake-quantized copy of a 2-D tensor: the RHT along the blocked axis first (``rht`` = size or None,
    signs from ``rht_seed``), stochastic rounding from ``seed`` (unused by deterministic roundings): an int, or a
    1-element int64 device tensor holding it, read by the kernel when it runs (CUDA-graph capture)."""

    rht: int | None = None
    rht_seed: int = 0
    seed: Any = 0
