"""numpy definition of the 4-bit GEMM's exact per-block path (what ``fp4lab.kernels.gemm``'s exact kernel and
``fp4lab.cpu_gemm``'s exact mode must give, bit for bit); numpy only, importable without triton."""

from __future__ import annotations

import numpy as np

from fp4lab.numerics.ref_encode import decode_elements as decode_ref


def gemm_reference(qa, qb) -> np.ndarray:
    """numpy definition of the per-block exact path: acc = acc + (P_b * Sa_b) * Sb_b over blocks b ascending, with
    P_b the exact block dot product; then (acc * ts_a) * ts_b. Also equals the fold path whenever every partial
    sum is exact in fp32."""
    fmt = qa.fmt
    va = decode_ref(np.asarray(qa.codes), fmt.element).astype(np.float64)
    vb = decode_ref(np.asarray(qb.codes), fmt.element).astype(np.float64)
    M, K = va.shape
    N = vb.shape[0]
    scaled = fmt.scale_rule.method != "none"
    bs = fmt.block.shape[-1] if scaled else K
    tr = fmt.block.shape[0] if scaled and fmt.block.is_2d else 1
    sa_all = np.repeat(np.asarray(qa.scales, np.float32), tr, axis=0) if scaled else None
    sb_all = np.repeat(np.asarray(qb.scales, np.float32), tr, axis=0) if scaled else None
    acc = np.zeros((M, N), np.float32)
    for b in range(K // bs):
        p = (va[:, b * bs:(b + 1) * bs] @ vb[:, b * bs:(b + 1) * bs].T).astype(np.float32)
        if fmt.scale_rule.method == "none":
            acc = (acc + p).astype(np.float32)
            continue
        sa = sa_all[:, b][:, None]
        sb = sb_all[:, b][None, :]
        acc = (acc + (p * sa).astype(np.float32) * sb).astype(np.float32)
    if qa.tensor_scale is not None:
        acc = ((acc * np.float32(qa.tensor_scale)).astype(np.float32) * np.float32(qb.tensor_scale)).astype(np.float32)
    return acc
