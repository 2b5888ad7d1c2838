"""The definition of fp4lab's bits in plain numpy, shared by every backend (no numba, no triton, no torch).

``options`` (``QuantizeOptions``, ``Blocking`` and the checks of their values), ``checks`` (of a
``QuantizedTensor``), ``blocks`` (``BlockView``), ``ref_encode`` (element and scale encode / decode),
``scale_rule`` (a block's scale code), ``range_policy`` (tensors near float32's limits), ``ref_quantize`` (the
reference quantize / dequantize), ``rht`` and ``philox`` (the randomized Hadamard transform and the random bits),
``fakequant`` and ``gemm_reference`` (the GEMM operands and products), ``plan`` (the one lowering of a format into
the plans both fast backends translate) and ``fbits`` (the bit-arithmetic encoders a plan may choose for ExMy
grids). The numba twin is ``fp4lab.emulator``, the Triton kernels ``fp4lab.kernels``; both import this package and
neither imports the other.
"""
