"""Format analysis: shrinkage bias, SQNR, attenuation, bucket use, RHT effects, GEMM diagnostics, comparison,
grid search and conformance vectors. Modules import numpy and fp4lab only; torch and matplotlib are imported
lazily where a function needs them.

Entry points: ``bias`` (grid geometry), ``metrics`` (one tensor), ``distributions`` / ``tensors_io`` (inputs),
``rht_effects``, ``gemm``, ``compare`` (the ``fp4lab compare`` engine), ``plot``, ``search``, ``conformance``,
``sr_bias`` (the ``fp4lab sr-bias`` engine) and ``outputs`` (checked output paths, atomic writes).
"""
