"""``QuantizedTensor``: the encoded result of quantizing one tensor with a ``QuantFormat``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp4lab.formats.quant_format import QuantFormat
from fp4lab.errors import InputError


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """Codes and scales of a quantized tensor (numpy arrays on CPU, torch tensors on CUDA).

    ``codes``        uint8, one element code per input element, same shape as the input (unpacked).
    ``scale_codes``  encoded block scales as stored (uint8 for 8-bit scale formats, uint16 bf16, uint32 fp32 bits);
                     shape of the input with the blocked axis divided by the block size (2-D tiles: both of the
                     last two axes divided by the tile extents). Element-only formats: an empty array.
    ``scales``       float32 decoded block scales (without the tensor scale), same shape as ``scale_codes``.
    ``tensor_scale`` float32 second-level scale, or None.
    ``axis``         the blocked axis (non-negative); ``rht``/``rht_seed`` the rotation applied before scaling.
    """

    codes: Any
    scale_codes: Any
    scales: Any
    tensor_scale: Any
    fmt: QuantFormat
    axis: int
    rounding: str
    seed: int = 0
    rht: int | None = None
    rht_seed: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.codes.shape)

    def packed(self) -> Any:
        """uint8, two codes per byte along the last axis: element 2i in the low nibble, 2i+1 in the high nibble."""
        if self.fmt.element.bits > 4:
            raise InputError(f"packed(): format '{self.fmt.name}' has {self.fmt.element.bits}-bit codes; only <= 4 pack")
        from fp4lab.layout import pack_nibbles_reference, pack_nibbles_torch

        if isinstance(self.codes, np.ndarray):
            return pack_nibbles_reference(self.codes)
        return pack_nibbles_torch(self.codes)

    def swizzled_scale_codes(self) -> Any:
        """Scale codes in the cuBLAS/CUTLASS 128x4 layout (flat), for a 2-D tensor blocked along its last axis."""
        if self.codes.ndim != 2 or self.axis != 1 or self.fmt.block is None or self.fmt.block.is_2d:
            raise InputError("swizzled_scale_codes(): needs a 2-D tensor with 1-D blocks along its last axis")
        from fp4lab.layout import swizzle_scales

        if isinstance(self.scale_codes, np.ndarray):
            return swizzle_scales(self.scale_codes)
        import torch

        return torch.from_numpy(swizzle_scales(self.scale_codes.cpu().numpy())).to(self.scale_codes.device)

    def __repr__(self) -> str:
        ts = "" if self.tensor_scale is None else f", tensor_scale={float(self.tensor_scale):.6g}"
        rht = "" if self.rht is None else f", rht={self.rht}"
        return (f"QuantizedTensor(format='{self.fmt.name}', shape={self.shape}, axis={self.axis}, "
                f"rounding='{self.rounding}'{rht}{ts})")
