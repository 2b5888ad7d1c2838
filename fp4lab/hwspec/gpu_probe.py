"""GPU probe of the hopper-sm90 model: Triton ``tl.dot`` K-loops on random bit patterns, compared bit for bit with
``emulate_gemm`` on the same bits. Needs torch and triton with a CUDA GPU (or TRITON_INTERPRET=1 for a smoke test).

Each config runs one Triton kernel (64 x 64 output tiles, 4 warps, accumulator loaded from C,
``for k0 in range(0, K, BLOCK_K): acc = tl.dot(a, b, acc)``). Inputs mix four classes by row block of A and
column block of B: raw random bit patterns (NaN, Inf, subnormals included), random finite patterns, a narrow
exponent window (cancellation, truncation) and tiny values (subnormals, products below e_zero), with 10% zeros
in the last two. C mixes four classes by column block: zero, a narrow window near the products, raw fp32 bit
patterns, and tiny/huge values. The PTX of each kernel is searched for the MMA instruction it issues.
"""

from __future__ import annotations

import platform
import re
import time

import numpy as np
import torch
import triton
import triton.language as tl

from ..emulator.mma import emulate_gemm
from .operands import decode_codes, operand_format

# (label, hopper kind, input bits, exp bits, man bits, torch dtype, BLOCK_K, acc dtype, imprecise-acc interval,
#  K multiplier)
CONFIGS = [
    ("bf16", "wgmma.bf16", 16, 8, 7, "bfloat16", 64, "f32", None, 1),
    ("bf16_bk32", "wgmma.bf16", 16, 8, 7, "bfloat16", 32, "f32", None, 1),
    ("fp16", "wgmma.f16", 16, 5, 10, "float16", 64, "f32", None, 1),
    ("fp16_f16acc", "wgmma.f16.f16acc", 16, 5, 10, "float16", 64, "f16", None, 1),
    ("tf32", "wgmma.tf32", 32, 8, 10, "float32", 32, "f32", None, 1),
    ("e4m3", "wgmma.e4m3", 8, 4, 3, "float8_e4m3fn", 64, "f32", None, 1),
    ("e5m2", "wgmma.e5m2", 8, 5, 2, "float8_e5m2", 128, "f32", None, 1),
    ("e4m3_promote32", "wgmma.e4m3", 8, 4, 3, "float8_e4m3fn", 64, "f32", 32, 1),
    ("e4m3_k8x", "wgmma.e4m3", 8, 4, 3, "float8_e4m3fn", 128, "f32", None, 8),
    ("bf16_k8x", "wgmma.bf16", 16, 8, 7, "bfloat16", 64, "f32", None, 8),
]


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


def _classes(rng, shape, nbits, ebits, mbits, blocks_axis):
    """Random bit patterns of an ExMy (or fp32) format, one input class per quarter along ``blocks_axis``."""
    bits = rng.integers(0, 1 << nbits, size=shape, dtype=np.uint64)
    n = shape[blocks_axis]
    cls = (np.arange(n) * 4 // n).reshape((-1, 1) if blocks_axis == 0 else (1, -1))
    cls = np.broadcast_to(cls, shape)
    bias = (1 << (ebits - 1)) - 1
    sign = bits >> (nbits - 1)
    man = bits & ((1 << mbits) - 1)
    ef = (bits >> mbits) & ((1 << ebits) - 1)
    allones = (1 << ebits) - 1
    # class 1: finite patterns (e4m3: only the all-ones exponent with all-ones mantissa is NaN)
    if ebits == 4 and mbits == 3:
        fin_e = np.where((ef == allones) & (man == 7), allones, ef)
        fin_m = np.where((ef == allones) & (man == 7), rng.integers(0, 7, size=shape, dtype=np.uint64), man)
    else:
        fin_e = np.where(ef == allones, rng.integers(0, allones, size=shape, dtype=np.uint64), ef)
        fin_m = man
    narrow_e = (bias + rng.integers(-6, 7, size=shape)).clip(1, allones - 1).astype(np.uint64)
    tiny_e = rng.integers(0, 5, size=shape, dtype=np.uint64)
    e = np.select([cls == 0, cls == 1, cls == 2], [ef, fin_e, narrow_e], tiny_e)
    m = np.where(cls == 1, fin_m, man)
    out = (sign << (nbits - 1)) | (e << mbits) | m
    zero = (cls >= 2) & (rng.random(shape) < 0.1)
    out = np.where(zero, sign << (nbits - 1), out)
    return out


def _c_bits(rng, shape):
    """fp32 C bit patterns; class per quarter of columns: zero, narrow window, raw bits, tiny/huge."""
    raw = rng.integers(0, 1 << 32, size=shape, dtype=np.uint64)
    n = shape[1]
    cls = np.broadcast_to((np.arange(n) * 4 // n)[None, :], shape)
    sign, man = raw >> 31, raw & 0x7FFFFF
    narrow = (127 + rng.integers(-8, 13, size=shape)).astype(np.uint64)
    extreme = np.where(rng.random(shape) < 0.5, rng.integers(0, 9, size=shape), rng.integers(200, 255, size=shape))
    e = np.where(cls == 1, narrow, extreme.astype(np.uint64))
    built = (sign << 31) | (e << 23) | man
    return np.select([cls == 0, cls == 2], [np.zeros_like(raw), raw], built).astype(np.uint32)


def _values(bits, label, nbits, ebits, mbits):
    """Exact float values (float32 for 16/32-bit inputs, float64 for fp8) of the input bit patterns."""
    if nbits == 16 and ebits == 8:
        return (bits.astype(np.uint32) << 16).view(np.float32)
    if nbits == 16:
        return bits.astype(np.uint16).view(np.float16).astype(np.float32)
    if nbits == 32:
        return bits.astype(np.uint32).view(np.float32)
    return decode_codes(bits, operand_format("e4m3" if ebits == 4 else "e5m2"))


def _torch_input(bits, nbits, dtype, device):
    np_int = {8: np.uint8, 16: np.int16, 32: np.int32}[nbits]
    t = torch.from_numpy(bits.astype({8: np.uint8, 16: np.uint16, 32: np.uint32}[nbits]).view(np_int))
    return t.to(device).view(getattr(torch, dtype))


def make_inputs(cfg, n: int, K: int, seed: int):
    """Bit patterns (uint64 arrays) of A [n, K], B [K, n] and C [n, n] for one config, from ``seed``."""
    label, kind, nbits, ebits, mbits, dtype, BK, acc, imprecise, kmul = cfg
    rng = np.random.default_rng(seed)
    if nbits == 32:  # tf32: exact tf32 words (low 13 bits zero) so that no input conversion is involved
        ab = _classes(rng, (n, K), 19, ebits, mbits, 0) << np.uint64(13)
        bb = _classes(rng, (K, n), 19, ebits, mbits, 1) << np.uint64(13)
    else:
        ab = _classes(rng, (n, K), nbits, ebits, mbits, 0)
        bb = _classes(rng, (K, n), nbits, ebits, mbits, 1)
    cb = _c_bits(rng, (n, n))
    if acc == "f16":  # fp16 accumulator: C as fp16 bit patterns
        cb = _classes(rng, (n, n), 16, 5, 10, 1).astype(np.uint16)
    return ab, bb, cb


def emulate_config(cfg, ab, bb, cb) -> np.ndarray:
    """The model's D (uint32 bits; fp16 accumulators widened) for one config's input bits."""
    label, kind, nbits, ebits, mbits, dtype, BK, acc, imprecise, kmul = cfg
    a_v, b_v = _values(ab, label, nbits, ebits, mbits), _values(bb, label, nbits, ebits, mbits)
    c = cb.view(np.float16) if acc == "f16" else cb.view(np.float32)
    with np.errstate(all="ignore"):
        d = emulate_gemm(a_v, np.ascontiguousarray(b_v.T), kind=kind, block_k=BK, promotion_interval=imprecise, c=c)
    return d.view(np.uint32)


def run_config(cfg, n: int, K: int, seed: int, device: str):
    label, kind, nbits, ebits, mbits, dtype, BK, acc, imprecise, kmul = cfg
    K = K * kmul
    ab, bb, cb = make_inputs(cfg, n, K, seed)
    if acc == "f16":
        c_t = torch.from_numpy(cb.view(np.int16)).to(device).view(torch.float16)
    else:
        c_t = torch.from_numpy(cb.view(np.int32)).to(device).view(torch.float32)
    a_t, b_t = _torch_input(ab, nbits, dtype, device), _torch_input(bb, nbits, dtype, device)
    d_t = torch.empty_like(c_t)
    grid = (n // 64, n // 64)
    t0 = time.time()
    ck = _dot_loop[grid](a_t, b_t, c_t, d_t, n, n, K, BM=64, BN=64, BK=BK, ACC16=acc == "f16", TF32=nbits == 32,
                         IMPRECISE=imprecise or 0, num_warps=4)
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
        "promotion_interval": imprecise,
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
