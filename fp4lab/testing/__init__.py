"""Test tooling for your own formats and kernels against fp4lab.

* ``fp4lab.testing.inputs``: named adversarial inputs (``INPUT_KINDS``, ``make_inputs``), the one source of the
  tensors of ``fp4lab verify``, the conformance vectors and the strategies; numpy only.
* ``fp4lab.testing.bits``: the one bit-pattern comparison (``mismatches``, ``same_bits``); numpy only.
* ``fp4lab.testing.strategies``: hypothesis strategies (``block_inputs``, ``quant_formats``, ...); needs
  ``hypothesis``, a test dependency, and is imported only when one of its names is used.
"""

from typing import Any

from fp4lab.testing.bits import bit_patterns, mismatch_mask, mismatches, same_bits
from fp4lab.testing.inputs import ELEMENT_KINDS, INPUT_KINDS, make_inputs

_STRATEGIES = ("block_inputs", "element_grids", "float32_arrays", "quant_formats", "range_edge_inputs",
               "rounding_modes", "scale_formats")

__all__ = ["ELEMENT_KINDS", "INPUT_KINDS", "bit_patterns", "block_inputs", "element_grids", "float32_arrays",
           "make_inputs", "mismatch_mask", "mismatches", "quant_formats", "range_edge_inputs", "rounding_modes",
           "same_bits", "scale_formats"]


def __getattr__(name: str) -> Any:  # the strategies import hypothesis: only on first use
    if name in _STRATEGIES:
        from fp4lab.testing import strategies

        return getattr(strategies, name)
    raise AttributeError(f"module 'fp4lab.testing' has no attribute {name!r}")
