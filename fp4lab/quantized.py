"""``QuantizedTensor``: the encoded result of quantizing one tensor with a ``QuantFormat``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp4lab.errors import InputError
from fp4lab.formats.quant_format import QuantFormat


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """Codes and scales of a quantized tensor: numpy arrays for numpy inputs, torch tensors on the input's device
    for torch inputs.

    ``codes``        uint8 (uint16 for grids of more than 8 bits), one element code per input element, same shape
                     as the input (unpacked).
    ``scale_codes``  encoded block scales as stored (uint8 for 8-bit scale formats, bf16 bits as uint16, fp32 bits
                     as uint32 in numpy and int32 in torch, which views them back as uint32 to decode);
                     shape of the input with the blocked axis divided by the block size (2-D tiles: both of the
                     last two axes divided by the tile extents). Element-only formats: an empty array.
    ``scales``       float32 decoded block scales (without the tensor scale), same shape as ``scale_codes``.
    ``tensor_scale`` float32 second-level scale (a numpy float32; a 0-d tensor from the CUDA kernels), or None.
    ``axis``         the blocked axis (non-negative); ``rht``/``rht_seed`` the rotation applied before scaling.
    ``rounding``, ``seed``, ``axis``, ``rht``, ``rht_seed`` are the ``fp4lab.QuantizeOptions`` it was made with
    (rounding resolved, axis non-negative; ``sr_bits`` is not recorded). The record lives above this module in
    the package graph (``fp4lab.numerics.options``), so there is no ``options`` property here.

    Launch options of ``fp4lab.kernels.quantize_launch.quantize_triton`` (every other quantize leaves these None):

    ``packed_codes``          ``packed=True``: the kernel's bytes, two codes per byte along the last axis (element
                              2i in the low nibble). The kernel writes no unpacked codes, so ``codes`` is None
                              (never packed bytes in the unpacked field); ``shape`` comes from ``packed_codes`` (last
                              axis doubled), ``packed()`` returns them; ``fp4lab.unpack`` gives the codes back,
                              and ``fp4lab.dequantize`` / ``gemm`` unpack first (``fp4lab.pack`` makes this layout).
    ``scale_codes_swizzled``  ``swizzle=True``: the scale codes in the cuBLAS/CUTLASS 128x4 layout (flat, padded),
                              which ``swizzled_scale_codes()`` returns; ``scale_codes`` stay row-major.

    ``store_scales=False`` leaves ``scales`` None (the kernel stores no decoded scales). So every field holds what
    is documented above or is None. ``dataclasses.replace`` does not refresh the two derived fields: replace them
    too when replacing ``codes`` or ``scale_codes``.
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
    packed_codes: Any = None
    scale_codes_swizzled: Any = None

    @property
    def shape(self) -> tuple[int, ...]:
        if self.codes is None and self.packed_codes is not None:
            p = tuple(self.packed_codes.shape)
            return (*p[:-1], 2 * p[-1])
        return tuple(self.codes.shape)

    def packed(self) -> Any:
        """uint8, two codes per byte along the last axis: element 2i in the low nibble, 2i+1 in the high nibble
        (``packed_codes`` where the kernel wrote them, else packed from ``codes``)."""
        if self.fmt.element.bits > 4:
            raise InputError(f"packed(): format '{self.fmt.name}' has {self.fmt.element.bits}-bit codes; "
                             "only <= 4 pack")
        if self.packed_codes is not None:
            return self.packed_codes
        from fp4lab.layout import pack_nibbles_reference, pack_nibbles_torch

        if isinstance(self.codes, np.ndarray):
            return pack_nibbles_reference(self.codes)
        return pack_nibbles_torch(self.codes)

    def swizzled_scale_codes(self) -> Any:
        """Scale codes in the cuBLAS/CUTLASS 128x4 layout (flat), for a 2-D tensor blocked along its last axis
        (``scale_codes_swizzled`` where the launcher wrote them, else swizzled from ``scale_codes``)."""
        if len(self.shape) != 2 or self.axis != 1 or self.fmt.block is None or self.fmt.block.is_2d:
            raise InputError("swizzled_scale_codes(): needs a 2-D tensor with 1-D blocks along its last axis")
        if self.scale_codes_swizzled is not None:
            return self.scale_codes_swizzled
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
