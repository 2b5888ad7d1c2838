"""The Triton kernels of the block-scaled MMA models (fp4lab/kernels/mma_emulate.py, in the CPU interpreter:
TRITON_INTERPRET=1 from conftest.py) against the CPU model, bit for bit: every (spec, block-scaled kind, A format,
B format, scale option) of the shipped specs on the adversarial inputs of fp4lab.hwspec.validation.mma_verify, user spec
files with other parameters, the public ``emulate_gemm`` on quantized tensors, and mutants that must disagree."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
import pytest
import torch

import fp4lab
from fp4lab.errors import InputError
from fp4lab.hwspec import load_hw
from fp4lab.hwspec.mma_plan import lower_kind
from fp4lab.hwspec.validation.mma_verify import (
    STYLES,
    check_case,
    kernel_combos,
    make_inputs,
    plan_cases,
    reference,
)
from fp4lab.kernels.mma_emulate_launch import emulated_matmul


def _u8(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x).astype(np.uint8))


def _kernel(case, inp, plan=None) -> np.ndarray:
    plan = plan or lower_kind(case.hw, case.kind, case.a, case.b, case.scale)
    d = emulated_matmul(_u8(inp["a"]), _u8(inp["sa"]), _u8(inp["b"]), _u8(inp["sb"]), plan,
                        torch.from_numpy(inp["c"]))
    return d.numpy().view(np.uint32)


BY_KIND: dict[tuple[str, str], list] = defaultdict(list)
for _c in kernel_combos([h for h in fp4lab.list_hw() if h != "rubin"]):
    BY_KIND[(_c[0], _c[1])].append(_c)
BY_KIND[("rubin", "tcgen05.mxf4nvf4")] = [c for c in kernel_combos(["rubin"]) if c[1] == "tcgen05.mxf4nvf4"]


@pytest.mark.parametrize("hw,kind", sorted(BY_KIND), ids=[f"{h}:{k}" for h, k in sorted(BY_KIND)])
def test_kernels_equal_cpu_model_on_every_format_pair_and_input_style(hw, kind):
    """Kinds with a few format pairs: every style on every pair (16 x 16 outputs, 4 instructions chained);
    the 25-pair f8f6f4 kinds: every pair, two styles each in rotation (8 x 8, 2 instructions)."""
    combos = BY_KIND[(hw, kind)]
    many = len(combos) > 4
    n = bad = finite = 0
    for i, combo in enumerate(combos):
        styles = (STYLES[i % 4], STYLES[(i + 1) % 4]) if many else STYLES
        for case in plan_cases([combo], 64 if many else 256, instructions=2 if many else 4, seed=i,
                               styles=styles):
            r = check_case(case, _kernel)
            n, bad, finite = n + r["outputs"], bad + r["mismatches"], finite + r["finite"]
            assert r["mismatches"] == 0, r
    assert n >= 64 * len(combos) and finite > n // 4  # the finite path is exercised, not only NaN/Inf


def _mutated(plan, **params):
    return dataclasses.replace(plan, params=dataclasses.replace(plan.params, **params))


@pytest.mark.parametrize("hw,kind,fmt,scale", [
    ("blackwell-sm100", "tcgen05.mxf4nvf4", "e2m1", "ue8m0"),  # ue4m3 scales never align below e_zero
    ("blackwell-sm100", "tcgen05.mxf8f6f4", "e4m3", "ue8m0"),
    ("cdna4-mi350", "mfma_scale.f8f6f4", "e4m3", "e8m0"),
])
def test_kernels_with_a_parameter_off_by_one_disagree(hw, kind, fmt, scale):
    """The inputs pin the kernels' use of F, e_zero (GST/ST) and F2 (TR): the kernel run with any of them off by
    one disagrees with the CPU model somewhere."""
    blk = lower_kind(hw, kind, fmt, fmt, scale).scale.blocks[0]
    cases = plan_cases([(hw, kind, fmt, fmt, scale, blk)], 1024, instructions=2, seed=3)
    plan = lower_kind(hw, kind, fmt, fmt, scale)
    fields = ["frac_bits"] + (["join_frac_bits"] if plan.params.algorithm == "tr_fdpa" else ["e_zero"])
    data = [(case, make_inputs(case)) for case in cases]
    want = [reference(case, inp) for case, inp in data]
    for field in fields:
        for d in (-1, 1):
            m = _mutated(plan, **{field: getattr(plan.params, field) + d})
            diff = sum(int((_kernel(case, inp, m) != w).sum()) for (case, inp), w in zip(data, want))
            assert diff > 0, f"{field}{d:+d} went unnoticed"


USER_SPEC = """
name = "user-test"
vendor = "proposal"
arch = "test"
description = "test datapaths"
provenance = "assumed"
source = "tests"

[kinds."gst.g32.f16rne"]
instruction = "x"
shape = "m16n8k64"
k = 64
a_formats = ["e2m1"]
b_formats = ["e2m1"]
c_format = "f32"
accumulation = { algorithm = "gst_fdpa", fused_len = 128, frac_bits = 16, e_zero = -60, group = 32 }
output = { format = "f32", rounding = "rne", mantissa_bits = 23, nan_bits = 0x7FC00000, zero_sign = "keep_underflow_sign" }
scales = [{ format = "ue8m0", block = 32 }, { format = "ue4m3", block = 64 }]

[kinds."gst.g16.f24"]
extends = "gst.g32.f16rne"
accumulation = { fused_len = 32, frac_bits = 24, e_zero = -130, group = 16 }
output = { rounding = "rz", mantissa_bits = 13, zero_sign = "positive" }
scales = [{ format = "ue4m3", block = 16 }]

[kinds."gst.f16acc"]
extends = "gst.g32.f16rne"
c_format = "f16"
accumulation = { fused_len = 64, frac_bits = 20, e_zero = -24, group = 16 }
output = { format = "f16", rounding = "rne", mantissa_bits = 10, nan_bits = 0x7FFF, zero_sign = "positive" }
scales = [{ format = "ue8m0", block = 16 }]

[kinds."st.f20.f16acc"]
instruction = "y"
shape = "m16n8k32"
k = 32
a_formats = ["e4m3", "e2m1"]
b_formats = ["e4m3", "e2m1"]
c_format = "f16"
accumulation = { algorithm = "st_fdpa", fused_len = 16, frac_bits = 20, e_zero = -30 }
output = { format = "f16", rounding = "rne", mantissa_bits = 10, nan_bits = 0x7FFF }
scales = [{ format = "ue4m3", block = 16 }]

[kinds."st.sep"]
extends = "st.f20.f16acc"
c_format = "f32"
accumulation = { algorithm = "st_fdpa", fused_len = 32, frac_bits = 25, e_zero = -133, c_add = "separate_rn" }
output = { format = "f32", rounding = "rz", mantissa_bits = 23, nan_bits = 0x7FFFFFFF }
scales = [{ format = "ue8m0", block = 32 }]

[kinds."tr.f16"]
instruction = "z"
shape = "m16n8k64"
k = 64
a_formats = ["e2m3", "e4m3"]
b_formats = ["e2m3", "e4m3"]
c_format = "f32"
accumulation = { algorithm = "tr_fdpa", fused_len = 64, frac_bits = 16, join_frac_bits = 20 }
output = { format = "f32", rounding = "rne", mantissa_bits = 23, nan_bits = 0x7FFFFFFF, zero_sign = "keep_underflow_sign" }
scales = [{ format = "ue8m0", block = 32 }]
"""


def test_user_spec_parameters_group_fused_len_frac_bits_e_zero_rounding(tmp_path):
    """A spec file's own GST / ST / TR datapaths (group 32, fused_len 16..128, F 16..25, other e_zero, RNE / RZ to
    13 bits, f16 accumulators, separate C, keep_underflow_sign) run on the kernels with the CPU model's bits."""
    path = tmp_path / "user.toml"
    path.write_text(USER_SPEC)
    spec = load_hw(path)
    combos = kernel_combos([spec])
    assert {c[1] for c in combos} == set(spec.kinds)
    for i, combo in enumerate(combos):
        n = finite = 0
        for case in plan_cases([(str(path),) + combo[1:]], 64, instructions=2, seed=i):
            r = check_case(case, _kernel)
            assert r["mismatches"] == 0, case.label()
            n, finite = n + r["outputs"], finite + r["finite"]
        assert finite > n // 4, combo


def _quantized(x: np.ndarray, fmt: str):
    q = fp4lab.quantize(x, fmt)
    ts = None if q.tensor_scale is None else torch.tensor(np.float32(q.tensor_scale))
    qt = dataclasses.replace(q, codes=torch.from_numpy(q.codes), scales=torch.from_numpy(q.scales), tensor_scale=ts,
                             scale_codes=None)
    return q, qt


@pytest.mark.parametrize("fmt,hw,kind,promotion", [
    ("nvfp4", "blackwell-sm100", "tcgen05.mxf4nvf4", None),  # ue4m3 scales and an fp32 tensor scale
    ("mxfp4", "blackwell-sm100", "tcgen05.mxf4", 128),  # promotion to an fp32 accumulator every 128
    ("ufp4-e4m3", "proposal-ufp4", "bsmma.e1m2", None),
    ("nvfp4-2d", "rubin", "tcgen05.mxf4nvf4", None),  # 16 x 16 tiles: one scale row per tile
    ("int4-b32-e8m0", "proposal-ufp4", "bsmma.int4", None),
])
def test_emulate_gemm_runs_quantized_torch_operands_on_the_kernels(fmt, hw, kind, promotion):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((48, 256)) * np.exp2(rng.integers(-2, 3, (48, 1)))).astype(np.float32)
    w = rng.standard_normal((32, 256)).astype(np.float32)
    (qa, ta), (qb, tb) = _quantized(x, fmt), _quantized(w, fmt)
    want = fp4lab.emulate_gemm(qa, qb, hw=hw, kind=kind, promotion_interval=promotion)
    got = fp4lab.emulate_gemm(ta, tb, hw=hw, kind=kind, promotion_interval=promotion, impl="triton")
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and got.shape == (48, 32)
    assert np.array_equal(got.numpy().view(np.uint32), want.view(np.uint32))
    assert np.count_nonzero(want) > 1000


def test_scale_codes_and_scale_values_give_the_same_bits():
    case = plan_cases([("blackwell-sm100", "tcgen05.mxf4nvf4", "e2m1", "e2m1", "ue4m3", 16)], 256, seed=9,
                      styles=("random",))[0]
    inp = make_inputs(case)
    plan = lower_kind(case.hw, case.kind, "e2m1", scale_format="ue4m3")
    vals = [torch.from_numpy(plan.scale.values[np.asarray(inp[s], np.int64)]) for s in ("sa", "sb")]
    by_value = emulated_matmul(_u8(inp["a"]), vals[0], _u8(inp["b"]), vals[1], plan, torch.from_numpy(inp["c"]))
    assert np.array_equal(by_value.numpy().view(np.uint32), _kernel(case, inp, plan))


def test_kernel_refusals_are_one_line():
    plan = lower_kind("blackwell-sm100", "tcgen05.mxf4nvf4", "e2m1", scale_format="ue4m3")
    a, s = torch.zeros((8, 64), dtype=torch.uint8), torch.full((8, 4), 0x38, dtype=torch.uint8)
    cases = [
        (lambda: lower_kind("hopper-sm90", "wgmma.bf16", "bf16"), "no block scales"),
        (lambda: lower_kind("cdna3-mi300", "mfma.f16", "f16"), "no block scales"),
        (lambda: lower_kind("blackwell-sm100", "tcgen05.mxf4nvf4", "e2m1"), "name one"),
        (lambda: lower_kind("blackwell-sm100", "tcgen05.mxf4nvf4", "e3m2", scale_format="ue4m3"), "int8 grid"),
        (lambda: emulated_matmul(a[:, :32], s[:, :2], a[:, :32], s[:, :2], plan), "instruction K"),
        (lambda: emulated_matmul(a, s[:, :2], a, s[:, :2], plan), "per 16 K-elements, not 32"),
        (lambda: emulated_matmul(a + 16, s, a, s, plan), "a codes beyond"),
        (lambda: emulated_matmul(a, s.float() + 0.5, a, s, plan), "a_scales not in ue4m3"),
        (lambda: emulated_matmul(a, s, a.to(torch.int32), s, plan), "uint8"),
    ]
    for fn, words in cases:
        with pytest.raises(InputError) as e:
            fn()
        assert words in str(e.value) and "\n" not in str(e.value)
    q = dataclasses.replace(fp4lab.quantize(np.ones((8, 64), np.float32), "nvfp4"))
    with pytest.raises(InputError, match="block-scaled kinds"):
        qt = dataclasses.replace(q, codes=torch.from_numpy(q.codes), scales=torch.from_numpy(q.scales))
        fp4lab.emulate_gemm(qt, qt, hw="hopper-sm90", kind="wgmma.bf16", impl="triton")


def test_hw_verify_device_interpreter_reports_every_kind_of_a_spec(tmp_path, capsys):
    """``fp4lab hw verify --device interpreter``: the kernels against the CPU model, one row per kind, exit 0."""
    import argparse
    import json

    from fp4lab.cli.hw import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["hw", "verify", "--gpu", "off", "--device", "interpreter", "--hw", "proposal-ufp4",
                              "--outputs", "800", "--json-out", str(tmp_path / "v.json")])
    assert args.func(args) == 0
    data = json.loads((tmp_path / "v.json").read_text())["mma_kernels"]
    assert data["device"] == "interpreter"
    assert {r["kind"] for r in data["kinds"]} == {"bsmma.e1m2", "bsmma.int4", "bsmma.e2m1"}
    assert all(r["mismatches"] == 0 and r["cases"] == 12 and r["outputs"] >= 12 * 64 for r in data["kinds"])


def test_kernels_compile_for_sm90_without_register_spills():
    """The interpreter does not compile: this builds the kernels for sm_90 with Triton's bundled ptxas (no GPU) at
    the launcher's default tiles and checks they compile (int8 dots with K >= 32, every constexpr branch) and keep
    every value in registers."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from fp4lab.kernels.mma_emulate_launch import _GPU_TILES

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(root)}
    runs = [(["blackwell-sm100:tcgen05.mxf4nvf4:e2m1:ue4m3"], _GPU_TILES["gst"]),
            (["blackwell-sm100:tcgen05.mxf8f6f4:e4m3:ue8m0", "cdna4-mi350:mfma_scale.f8f6f4:e4m3:e8m0"],
             _GPU_TILES["fdpa"])]
    for cases, (bm, bn, warps, _) in runs:
        r = subprocess.run([sys.executable, str(root / "benchmarks" / "sass_count.py"), "mma", *cases, "--tile",
                            f"{bm}x{bn}x{warps}"], capture_output=True, text=True, env=env, timeout=600, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("mma ")]
        assert len(lines) == len(cases) and not any("spills" in ln for ln in lines), r.stdout
