"""Triton GPU kernels (CPU under TRITON_INTERPRET=1) giving the emulator's bits: quantize (+RHT, +SR),
dequantize, RHT, block-scaled GEMM. Import submodules explicitly; importing this package loads no triton."""
