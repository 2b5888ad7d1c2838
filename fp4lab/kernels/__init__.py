"""Triton GPU kernels (CPU under TRITON_INTERPRET=1) giving the reference's bits: quantize (+RHT, +SR), dequantize,
RHT, fused fake quantization of training operands, block-scaled GEMM, E4M3 row conversion and the bf16 rows of
FP8 GEMMs, and the tensor-core emulation of block-scaled MMA kinds (docs/kernels.md lists the files). Import
submodules explicitly; importing this package loads no triton."""
