"""Checks of the hwspec models against other evidence, above the models in the package graph (nothing in
``fp4lab.hwspec`` imports them): the published H200 vectors (``vectors``), the ``tl.dot`` probe on a GPU
(``probe_inputs``, ``gpu_probe``), MMA-Sim as an oracle (``mmasim_oracle``, ``oracle_inputs``) and the Triton MMA
kernels against the CPU model (``mma_verify``)."""
