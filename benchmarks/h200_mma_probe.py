"""H200 probe: Triton ``tl.dot`` K-loops on random bit patterns, compared bit for bit with the hopper-sm90 model.

Run on a Hopper GPU from the repository root (numba, torch, triton, pydantic needed there):

    PYTHONPATH=. python benchmarks/h200_mma_probe.py --out OUTDIR            # 1024 x 1024 outputs per kind

Each kind runs one Triton kernel (64 x 64 output tiles, 4 warps, fp32 accumulator loaded from C,
``for k0 in range(0, K, BLOCK_K): acc = tl.dot(a, b, acc)``) and the emulator's ``emulate_gemm`` on the same
bits. Inputs mix four classes by row block of A and column block of B: raw random bit patterns (NaN, Inf,
subnormals included), random finite patterns, a narrow exponent window (cancellation, truncation) and tiny
values (subnormals, products below e_zero), with 10% zeros in the last two. C mixes four classes by column
block: zero, a narrow window near the products, raw fp32 bit patterns, and tiny/huge values. The PTX of each
kernel is searched for the MMA instruction it issues. Writes OUTDIR/h200_mma_probe.json (counts, mismatching
positions), OUTDIR/h200_mma_probe_samples.npz (corners of the inputs per kind, so a
machine without a GPU can check that it regenerates the same inputs from the seed) and
OUTDIR/h200_mma_probe_d*.npz (every GPU output, uint32 bits, to re-run the comparison off the GPU).
``--interpret`` runs a tiny smoke test under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time

import numpy as np

if "--interpret" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from fp4lab.emulator.mma import emulate_gemm  # noqa: E402
from fp4lab.hwspec.operands import decode_codes, operand_format  # noqa: E402

# (label, hopper kind, input bits, exp bits, man bits, torch dtype, BLOCK_K, acc dtype, imprecise-acc interval)
CONFIGS = [
    ("bf16", "wgmma.bf16", 16, 8, 7, "bfloat16", 64, "f32", None),
    ("bf16_bk32", "wgmma.bf16", 16, 8, 7, "bfloat16", 32, "f32", None),
    ("fp16", "wgmma.f16", 16, 5, 10, "float16", 64, "f32", None),
    ("fp16_f16acc", "wgmma.f16.f16acc", 16, 5, 10, "float16", 64, "f16", None),
    ("tf32", "wgmma.tf32", 32, 8, 10, "float32", 32, "f32", None),
    ("e4m3", "wgmma.e4m3", 8, 4, 3, "float8_e4m3fn", 64, "f32", None),
    ("e5m2", "wgmma.e5m2", 8, 5, 2, "float8_e5m2", 128, "f32", None),
    ("e4m3_promote32", "wgmma.e4m3", 8, 4, 3, "float8_e4m3fn", 64, "f32", 32),
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


def run_config(cfg, n: int, K: int, seed: int, device: str):
    label, kind, nbits, ebits, mbits, dtype, BK, acc, imprecise = cfg
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
        c_np = cb.view(np.float16)
        c_t = torch.from_numpy(cb.view(np.int16)).to(device).view(torch.float16)
    else:
        c_np = cb.view(np.float32)
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
    a_v, b_v = _values(ab, label, nbits, ebits, mbits), _values(bb, label, nbits, ebits, mbits)
    t0 = time.time()
    emu = emulate_gemm(a_v, np.ascontiguousarray(b_v.T), kind=kind, block_k=BK, promotion_interval=imprecise,
                       c=c_np.astype(np.float32) if acc == "f32" else c_np)
    emu_s = time.time() - t0
    got, want = d_gpu.view(np.uint32), emu.view(np.uint32)
    bad = np.argwhere(got != want)
    res = {
        "label": label, "kind": kind, "block_k": BK, "K": K, "outputs": int(got.size),
        "matches": int((got == want).sum()), "mismatches": int(len(bad)),
        "first_mismatches": [[int(i), int(j), hex(int(got[i, j])), hex(int(want[i, j]))] for i, j in bad[:20]],
        "nan_outputs": int(np.isnan(d_gpu).sum()), "inf_outputs": int(np.isinf(d_gpu).sum()),
        "zero_outputs": int((d_gpu == 0).sum()), "promotion_interval": imprecise,
        "ptx_mma_instructions": instrs, "gpu_seconds_incl_compile": round(gpu_s, 3),
        "emulator_seconds": round(emu_s, 3),
    }
    sample = {f"{label}_a": ab[:64], f"{label}_b": bb[:, :64], f"{label}_c": np.asarray(cb)[:64, :64]}
    return res, sample, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--n", type=int, default=1024, help="M = N (multiple of 64); outputs per kind = n*n")
    ap.add_argument("--k", type=int, default=128)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--only", default=None, help="comma-separated labels")
    ap.add_argument("--interpret", action="store_true", help="smoke test under TRITON_INTERPRET=1 (CPU)")
    args = ap.parse_args()
    device = "cpu" if args.interpret else "cuda"
    cfgs = [c for c in CONFIGS if args.only is None or c[0] in args.only.split(",")]
    info = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (interpreter)",
            "torch": torch.__version__, "triton": triton.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "n": args.n, "k": args.k, "seed": args.seed}
    results, samples, outputs = [], {}, {}
    os.makedirs(args.out, exist_ok=True)
    for i, cfg in enumerate(cfgs):
        try:
            res, sample, d = run_config(cfg, args.n, args.k, args.seed + i, device)
            outputs[cfg[0]] = d
        except Exception as e:  # record and go on: one failing kind must not hide the others
            res, sample = {"label": cfg[0], "kind": cfg[1], "error": f"{type(e).__name__}: {e}"[:2000]}, {}
        results.append(res)
        samples.update(sample)
        print(json.dumps({k: v for k, v in res.items() if k != "first_mismatches"}), flush=True)
        with open(os.path.join(args.out, "h200_mma_probe.json"), "w") as f:
            json.dump({"info": info, "results": results}, f, indent=1)
    np.savez_compressed(os.path.join(args.out, "h200_mma_probe_samples.npz"), **samples)
    labels = list(outputs)
    for j in range(0, len(labels), 2):  # GPU outputs, two kinds per file (inputs regenerate from the seed)
        np.savez_compressed(os.path.join(args.out, f"h200_mma_probe_d{j // 2}.npz"),
                            **{lab: outputs[lab] for lab in labels[j:j + 2]})


if __name__ == "__main__":
    main()
