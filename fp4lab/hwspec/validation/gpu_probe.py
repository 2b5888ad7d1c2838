"""GPU probe of the hopper-sm90 model: Triton ``tl.dot`` K-loops on random bit patterns, compared bit for bit with
``emulate_gemm`` on the same bits. Needs torch and triton with a CUDA GPU (or TRITON_INTERPRET=1 for a smoke test).

Each config runs one Triton kernel (64 x 64 output tiles, 4 warps, accumulator loaded from C,
``for k0 in range(0, K, BLOCK_K): acc = tl.dot(a, b, acc)``) on inputs from ``probe_inputs`` (random bit
patterns regenerated from a seed). The PTX of each kernel is searched for the MMA instruction it issues.
"""

from __future__ import annotations

import platform
import re
import time

import numpy as np
import torch
import triton
import triton.language as tl

from fp4lab.hwspec.validation.probe_inputs import CONFIGS, emulate_config, make_inputs


@triton.jit
def _dot_loop(a_ptr, b_ptr, c_ptr, d_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              ACC16: tl.constexpr, TF32: tl.constexpr, IMPRECISE: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.load(c_ptr + rm[:, None] * N + rn[None, :])
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        if TF32:
            acc = tl.dot(a, b, acc, input_precision="tf32")
        elif ACC16:
            acc = tl.dot(a, b, acc, out_dtype=tl.float16)
        elif IMPRECISE > 0:
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMPRECISE)
        else:
            acc = tl.dot(a, b, acc)
    tl.store(d_ptr + rm[:, None] * N + rn[None, :], acc)


def _torch_input(bits, nbits, dtype, device):
    np_int = {8: np.uint8, 16: np.int16, 32: np.int32}[nbits]
    t = torch.from_numpy(bits.astype({8: np.uint8, 16: np.uint16, 32: np.uint32}[nbits]).view(np_int))
    return t.to(device).view(getattr(torch, dtype))


def run_config(cfg, n: int, K: int, seed: int, device: str):
    label, kind, nbits, ebits, mbits, dtype, BK, acc, imprecise, kmul, tile, alts = cfg
    K = K * kmul
    ab, bb, cb = make_inputs(cfg, n, K, seed)
    if acc == "f16":
        c_t = torch.from_numpy(cb.view(np.int16)).to(device).view(torch.float16)
    else:
        c_t = torch.from_numpy(cb.view(np.int32)).to(device).view(torch.float32)
    a_t, b_t = _torch_input(ab, nbits, dtype, device), _torch_input(bb, nbits, dtype, device)
    d_t = torch.empty_like(c_t)
    grid = (n // tile, n // tile)
    t0 = time.time()
    ck = _dot_loop[grid](a_t, b_t, c_t, d_t, n, n, K, BM=tile, BN=tile, BK=BK, ACC16=acc == "f16",
                         TF32=nbits == 32, IMPRECISE=imprecise or 0, num_warps=4 if tile >= 64 else 1)
    if device == "cuda":
        torch.cuda.synchronize()
    gpu_s = time.time() - t0
    d_gpu = d_t.cpu().view(torch.int16 if acc == "f16" else torch.int32).numpy()
    d_gpu = d_gpu.view(np.float16).astype(np.float32) if acc == "f16" else d_gpu.view(np.float32)
    ptx = getattr(ck, "asm", {}).get("ptx", "") if device == "cuda" else ""
    instrs = sorted(set(re.findall(r"(wgmma\.mma_async\S*|mma\.sync\S*)", ptx)))
    t0 = time.time()
    want = emulate_config(cfg, ab, bb, cb)
    emu_s = time.time() - t0
    got = d_gpu.view(np.uint32)
    bad = np.argwhere(got != want)
    res = {
        "label": label, "kind": kind, "block_k": BK, "K": K, "outputs": int(got.size),
        "matches": int((got == want).sum()), "mismatches": int(len(bad)),
        "first_mismatches": [[int(i), int(j), hex(int(got[i, j])), hex(int(want[i, j]))] for i, j in bad[:20]],
        "nan_outputs": int(np.isnan(d_gpu).sum()), "inf_outputs": int(np.isinf(d_gpu).sum()),
        "zero_outputs": int((d_gpu == 0).sum()), "finite_outputs": int(np.isfinite(d_gpu).sum()),
        "finite_nonzero_matches": int(((got == want) & np.isfinite(d_gpu) & (d_gpu != 0)).sum()),
        "promotion_interval": imprecise, "tile": tile,
        "alternative_models": {f"{h}:{k}": int((got == emulate_config(cfg, ab, bb, cb, h, k)).sum()) for h, k in alts},
        "ptx_mma_instructions": instrs, "gpu_seconds_incl_compile": round(gpu_s, 3),
        "emulator_seconds": round(emu_s, 3),
    }
    sample = {f"{label}_a": ab[:64], f"{label}_b": bb[:, :64], f"{label}_c": np.asarray(cb)[:64, :64]}
    return res, sample, got


def run_probe(n: int = 1024, k: int = 128, seed: int = 20261129, only: str | None = None,
              out: str | None = None) -> dict:
    """Run the configs (``only``: comma-separated labels) and return {"info", "results"}; with ``out``, also write
    h200_mma_probe.json, the input corners (h200_mma_probe_samples.npz, to check that the inputs regenerate from
    the seed elsewhere) and every GPU output (h200_mma_probe_d*.npz, uint32 bits, two configs per file)."""
    import json
    import os

    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfgs = [c for c in CONFIGS if only is None or c[0] in only.split(",")]
    info = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (interpreter)",
            "torch": torch.__version__, "triton": triton.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "n": n, "k": k, "seed": seed}
    results, samples, outputs = [], {}, {}
    for i, cfg in enumerate(cfgs):
        try:
            res, sample, d = run_config(cfg, n, k, seed + CONFIGS.index(cfg), device)
            outputs[cfg[0]] = d
        except Exception as e:  # record and go on: one failing config must not hide the others
            res, sample = {"label": cfg[0], "kind": cfg[1], "error": f"{type(e).__name__}: {e}"[:2000]}, {}
        results.append(res)
        samples.update(sample)
        print(json.dumps({key: v for key, v in res.items() if key != "first_mismatches"}), flush=True)
        if out is not None:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "h200_mma_probe.json"), "w") as f:
                json.dump({"info": info, "results": results}, f, indent=1)
    if out is not None:
        np.savez_compressed(os.path.join(out, "h200_mma_probe_samples.npz"), **samples)
        labels = list(outputs)
        for j in range(0, len(labels), 2):
            np.savez_compressed(os.path.join(out, f"h200_mma_probe_d{j // 2}.npz"),
                                **{lab: outputs[lab] for lab in labels[j:j + 2]})
    return {"info": info, "results": results}
