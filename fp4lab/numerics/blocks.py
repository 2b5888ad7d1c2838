"""Block views: reshape a tensor so that each block's elements lie contiguous along a trailing axis."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.quant_format import QuantFormat


def normalize_axis(axis: int, ndim: int, what: str = "quantize") -> int:
    if not -ndim <= axis < ndim:
        raise InputError(f"{what}: axis {axis} is out of range for a {ndim}-D input")
    return axis % ndim


@dataclass(frozen=True)
class BlockView:
    """Maps an array of ``shape`` to ``[*outer, bs]`` blocks and back.

    1-D blocks of k run along ``axis``: ``[..., K, ...] -> [..., ..., K/k, k]`` (the blocked axis moved last).
    2-D tiles r x c cover the last two axes: ``[..., R, C] -> [..., R/r, C/c, r*c]`` (row-major within a tile).
    ``scale_shape`` is the input shape with the blocked axis (axes) divided by the block extent(s).
    """

    shape: tuple[int, ...]
    axis: int
    block: tuple[int, ...]

    @classmethod
    def for_format(cls, shape: tuple[int, ...], fmt: QuantFormat, axis: int) -> "BlockView":
        ndim = len(shape)
        if ndim == 0:
            raise InputError("quantize: input is a 0-d scalar; give an array with at least one axis")
        if fmt.block is None:
            return cls(shape, normalize_axis(axis, ndim), (1,))
        block = tuple(fmt.block.shape)
        if len(block) == 2:
            if ndim < 2:
                raise InputError(f"quantize: format '{fmt.name}' uses {block[0]}x{block[1]} tiles; input must be at "
                                 "least 2-D")
            for ax, b in zip((ndim - 2, ndim - 1), block):
                if shape[ax] % b:
                    raise InputError(f"quantize: axis {ax} has length {shape[ax]}, not a multiple of format "
                                     f"'{fmt.name}' tile extent {b}")
            return cls(shape, ndim - 1, block)
        ax = normalize_axis(axis, ndim)
        if shape[ax] % block[0]:
            raise InputError(f"quantize: axis {ax} has length {shape[ax]}, not a multiple of format "
                             f"'{fmt.name}' block size {block[0]}")
        return cls(shape, ax, block)

    @property
    def scale_shape(self) -> tuple[int, ...]:
        s = list(self.shape)
        if len(self.block) == 2:
            s[-2] //= self.block[0]
            s[-1] //= self.block[1]
        else:
            s[self.axis] //= self.block[0]
        return tuple(s)

    def to_blocks(self, a: np.ndarray) -> np.ndarray:
        """``[*outer, bs]`` view (a copy where a transpose is needed)."""
        if len(self.block) == 2:
            r, c = self.block
            R, C = self.shape[-2:]
            lead = self.shape[:-2]
            t = a.reshape(*lead, R // r, r, C // c, c)
            t = np.swapaxes(t, -3, -2)
            return t.reshape(*lead, R // r, C // c, r * c)
        moved = np.moveaxis(a, self.axis, -1)
        return moved.reshape(*moved.shape[:-1], moved.shape[-1] // self.block[0], self.block[0])

    def from_blocks(self, b: np.ndarray) -> np.ndarray:
        """Inverse of ``to_blocks``: an array of the original ``shape`` (C-contiguous)."""
        if len(self.block) == 2:
            r, c = self.block
            R, C = self.shape[-2:]
            lead = self.shape[:-2]
            t = b.reshape(*lead, R // r, C // c, r, c)
            t = np.swapaxes(t, -3, -2)
            return np.ascontiguousarray(t.reshape(self.shape))
        moved_shape = list(self.shape)
        moved_shape.append(moved_shape.pop(self.axis))
        return np.ascontiguousarray(np.moveaxis(b.reshape(moved_shape), -1, self.axis))

    def scales_from_blocks(self, s: np.ndarray) -> np.ndarray:
        """Per-block array ``[*outer]`` -> ``scale_shape``."""
        if len(self.block) == 2:
            return np.ascontiguousarray(s.reshape(self.scale_shape))
        moved_shape = list(self.scale_shape)
        moved_shape.append(moved_shape.pop(self.axis))
        return np.ascontiguousarray(np.moveaxis(s.reshape(moved_shape), -1, self.axis))

    def scales_to_blocks(self, s: np.ndarray) -> np.ndarray:
        """``scale_shape`` -> ``[*outer]`` aligned with ``to_blocks``."""
        if len(self.block) == 2:
            return s
        return np.moveaxis(s, self.axis, -1)
