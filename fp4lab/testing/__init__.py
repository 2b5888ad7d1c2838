"""Hypothesis strategies for testing your own formats and kernels against fp4lab (see ``strategies``)."""

from fp4lab.testing.strategies import (
    block_inputs,
    element_grids,
    float32_arrays,
    quant_formats,
    range_edge_inputs,
    rounding_modes,
    scale_formats,
)

__all__ = ["block_inputs", "element_grids", "float32_arrays", "quant_formats", "range_edge_inputs", "rounding_modes",
           "scale_formats"]
