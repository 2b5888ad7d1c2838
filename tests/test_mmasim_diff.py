"""Differential test against MMA-Sim 2.1.1 (PyPI mmasim): every kind both model, on random bit patterns of each
operand format (NaN, Inf, subnormals, signed zeros), C drawn to cancel the product sum, block scales over their
whole code range, chained K (2 and 8 instructions), and precision probes; plus mutation checks that the inputs
pin F, e_zero and CDNA3's F2 exactly (a model with any of them off by one disagrees with MMA-Sim somewhere).

Fast by default (a few thousand outputs per kind). FP4LAB_MMASIM_SWEEP=N multiplies every size by N (a larger
sweep); FP4LAB_MMASIM_REPORT=path writes the per-(spec, kind) counts as JSON (docs/hardware_validation.md)."""

from __future__ import annotations

import json
import math
import os
import re
from collections import defaultdict
from itertools import product

import numpy as np
import pytest

if os.environ.get("CI"):  # a test dependency: CI must have it (pyproject's test extra pins it)
    import mmasim  # noqa: F401 (fails loudly when missing)
else:
    pytest.importorskip("mmasim")

from fp4lab.hwspec import get_hw
from fp4lab.hwspec.schema import Num
from fp4lab.hwspec.validation.mmasim_oracle import (
    ARCH,
    mmasim_op,
    oracle_cases,
    run_dots,
    run_gemm,
)
from fp4lab.hwspec.validation.oracle_inputs import gemm_inputs, probe_dots

SWEEP = max(1, int(os.environ.get("FP4LAB_MMASIM_SWEEP", "1")))
BY_KIND: dict[tuple[str, str], list] = defaultdict(list)
for _hw in ARCH:
    for _c in oracle_cases(_hw):
        BY_KIND[(_c.hw, _c.kind)].append(_c)
COUNTS: dict[str, dict[str, int]] = {}


def _sizes(n_cases: int) -> tuple[int, int, int]:
    """(base tile M = N, chain tile, probes) per format pair: about 1.8-4 thousand outputs per kind."""
    if n_cases == 1:
        return 24 * SWEEP, 12 * SWEEP, 512 * SWEEP
    if n_cases <= 4:
        return 16 * SWEEP, 8 * SWEEP, 256 * SWEEP
    return 8 * SWEEP, 4 * SWEEP, 64 * SWEEP


def _explained(case, kind, c_bits: np.ndarray, mine: np.ndarray, ref: np.ndarray, chained: bool) -> np.ndarray:
    """Mismatches with a documented cause (docs/hardware_validation.md): on CDNA3 e5m2fnuz x e5m2fnuz, MMA-Sim's
    frexp of an Inf/NaN accumulator makes gtr_fdpa drop it (products reach 2**30 > 2**(e_c + 25)); fp4lab keeps
    IEEE propagation. Only where C (the given one, or a chained step's) is non-finite and fp4lab's D is too."""
    if not (kind.accumulation.algorithm == "gtr_fdpa" and case.a == case.b == "e5m2fnuz"):
        return np.zeros(mine.shape, bool)
    c_special = ((c_bits.astype(np.uint32) & 0x7F800000) == 0x7F800000).reshape(mine.shape)
    mine_special = (mine & 0x7F800000) == 0x7F800000
    ref_finite = (ref & 0x7F800000) != 0x7F800000
    return (c_special | chained) & mine_special & ref_finite


def _run_case(case, seed: int, kind=None, op=None, chain: bool = True):
    """[(fp4lab bits, MMA-Sim bits, explained mask)] for one case's input sets (base, chained unless ``chain`` is
    False, probes)."""
    k = get_hw(case.hw).kind(case.kind)  # inputs from the spec's kind; ``kind`` (a mutant) only runs them
    base, chain, probes = _sizes(len(BY_KIND[(case.hw, case.kind)]))
    rng = np.random.default_rng(seed)
    out = []
    for n_instr, m in ((2, base), (8, chain))[:2 if chain else 1]:
        inp = gemm_inputs(rng, k, case.a, case.b, case.scale, case.block, m, m, n_instr * int(k.k))
        mine, ref = run_gemm(case, inp["a"], inp["b"], inp["c"], inp["sa"], inp["sb"], kind=kind, op=op)
        out.append((mine, ref, _explained(case, k, inp["c"], mine, ref, chained=True)))
    pr = probe_dots(rng, k, case.a, case.b, probes, case.scale, case.block)
    if pr is not None:
        mine, ref = run_dots(case, pr["a"], pr["b"], pr["c"], pr["sa"], pr["sb"], kind=kind, op=op)
        out.append((mine, ref, _explained(case, k, pr["c"], mine, ref, chained=False)))
    return out


@pytest.mark.parametrize("hw,kind", sorted(BY_KIND), ids=[f"{h}:{k}" for h, k in sorted(BY_KIND)])
def test_bit_exact_against_mmasim(hw, kind):
    n = bad = explained = 0
    for i, case in enumerate(BY_KIND[(hw, kind)]):
        for mine, ref, expl in _run_case(case, seed=1000 * i + 7):
            diff = mine != ref
            n += mine.size
            explained += int((diff & expl).sum())
            unexplained = diff & ~expl
            bad += int(unexplained.sum())
            assert not unexplained.any(), (f"{case.label} ({case.api} {case.name}): "
                                           f"{int(unexplained.sum())} mismatches, e.g. fp4lab "
                                           f"{mine[unexplained][0]:#010x} vs MMA-Sim {ref[unexplained][0]:#010x}")
    COUNTS[f"{hw} {kind}"] = {"outputs": n, "mismatches": bad, "explained": explained,
                              "format_pairs": len(BY_KIND[(hw, kind)])}
    path = os.environ.get("FP4LAB_MMASIM_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(COUNTS, f, indent=1, sort_keys=True)


def _mutants(kind):
    """(label, kind with one model parameter off by one) for F, e_zero and F2."""
    acc = kind.accumulation
    for field in ("frac_bits", "e_zero", "join_frac_bits"):
        v = getattr(acc, field)
        if v is None:
            continue
        for d in (-1, 1):
            num = Num(value=int(v) + d, provenance="assumed", source="mutation test")
            yield f"{field}{d:+d}", kind.model_copy(update={"accumulation": acc.model_copy(update={field: num})})


def _irrelevant_e_zero(case, kind, d: int) -> str | None:
    """Why e_zero + d cannot change any output of this case (None if it can): e_zero only raises the largest
    exponent of a step when every term's alignment exponent is below it, and only matters if some product has
    bits below the quantum 2**(e_zero - F); products of A's and B's formats (times scales) may never get there."""
    from fp4lab.hwspec.operands import operand_format

    fa, fb = operand_format(case.a), operand_format(case.b)
    e_lo = fa.emin + fb.emin
    v_lo = (fa.emin - fa.man_bits) + (fb.emin - fb.man_bits)
    if case.scale is not None:
        s = operand_format(case.scale)
        e_lo, v_lo = e_lo + 2 * s.emin, v_lo + 2 * (s.emin - s.man_bits)
    ez, F = int(kind.accumulation.e_zero), int(kind.accumulation.frac_bits)
    if kind.accumulation.algorithm == "gst_fdpa":  # group terms align by their scale exponents only
        s = operand_format(case.scale)
        e_lo = 2 * s.emin
    if e_lo > ez + max(d, 0):
        return f"no term can align below e_zero {ez} (lowest alignment exponent {e_lo})"
    if v_lo >= ez + max(d, 0) - F and kind.accumulation.algorithm != "gst_fdpa":
        return f"every product is a multiple of 2**{v_lo}, above the quantum 2**({ez}{max(d, 0):+d}-{F})"
    return None


MUTATION_KINDS = sorted(BY_KIND)


@pytest.mark.parametrize("hw,kind", MUTATION_KINDS, ids=[f"{h}:{k}" for h, k in MUTATION_KINDS])
def test_inputs_pin_model_parameters(hw, kind):
    """Every off-by-one of F, e_zero and F2 that could change an output is caught by this test's inputs (over the
    kind's format pairs); the ones that cannot are justified from the formats' exponent ranges."""
    k = get_hw(hw).kind(kind)
    caught: dict[str, int] = defaultdict(int)
    reasons: dict[str, list[str]] = defaultdict(list)
    cases = BY_KIND[(hw, kind)]
    ops = {c: mmasim_op(c) for c in cases}
    for label, mk in _mutants(k):
        for i, case in enumerate(cases):
            if label.startswith("e_zero"):
                why = _irrelevant_e_zero(case, k, int(label[-2:]))
                if why:
                    reasons[label].append(why)
                    continue
            for mine, ref, expl in _run_case(case, seed=1000 * i + 7, kind=mk, op=ops[case], chain=False):
                caught[label] += int(((mine != ref) & ~expl).sum())
            if caught[label]:
                break
        assert caught[label] or len(reasons[label]) == len(cases), \
            f"{hw} {kind}: a model with {label} agrees with MMA-Sim on every input"


# ---- coverage: fp4lab's hwspec set is a superset of MMA-Sim's models ---------------------------------------------
def _normalise(api: str, name: str) -> str:
    """Shape dimensions that do not change the numerics (wgmma/tcgen05 M and N) folded to one name."""
    if api in ("WGMMA", "TCGen05MMA", "TCGen05MMABlockScale"):
        name = re.sub(r"^m\d+n\d+k", "m128n8k" if api != "WGMMA" else "m64n8k", name)
    m = re.fullmatch(r"f32_\d+x\d+x(\d+)(?:_\d+b)?_(f16|bf16|xf32|fp8_fp8|fp8_bf8|bf8_fp8|bf8_bf8)", name)
    if api == "MFMA" and m:  # CDNA3: fused steps of min(K, 8 f16/bf16, 4 xf32, 16 fp8) products; M, N do not matter
        step = min(int(m.group(1)), {"xf32": 4}.get(m.group(2), 16 if "8" in m.group(2) else 8))
        name = f"{m.group(2)} step {step}"
    return name


# MMA-Sim entries fp4lab does not model: (architecture pattern, name pattern, why) (docs/hardware_validation.md 5.2)
NOT_MODELLED = (
    (r".", r"\.f64\.|_f64$|^f64_", "f64 FMA chains: fp4lab's models output f32/f16 only"),
    (r"^CDNA[123]$", r"^f32_\d+x\d+x\d+(_\d+b)?_?f32$", ("f32 MFMA: a chain of IEEE fp32 FMAs (one exact product plus "
     "C, correctly rounded), not expressible as a truncated fused sum (test_unexpressible_mmasim_models)")),
    (r"^CDNA1$", r"^f32_\d+x\d+x\d+b?f16$", ("CDNA1 f16/bf16: E-FDPA, the exact sum of 4 f16 / 2 bf16 products "
     "and C rounded once, not expressible as a truncated fused sum (test_unexpressible_mmasim_models)")),
    (r"^CDNA2$", r"^f32_\d+x\d+x\d+b?f16(_1k)?$", ("CDNA2 f16/bf16: flush-to-zero fp32 multiplies and a tree "
     "of rounded fp32 adds, not a fused sum (test_unexpressible_mmasim_models)")),
    (r"^Volta$|^Turing$", r"^m8n8k4\.f32\.f16\.f16\.f16$", "Volta/Turing mixed f16-C / f32-D m8n8k4 variant"),
)


def _mmasim_entries():
    from mmasim.amd.isa_mfma import arch_mfma_suffix
    from mmasim.nv_ptx import isa_mma, isa_tcgen05mma, isa_wgmma

    for arch, names in isa_mma.mma_shape_and_type.items():
        yield arch, "MMA", names
    for arch, names in isa_mma.mma_block_scale_shape_and_type.items():
        yield arch, "MMABlockScale", names
    for arch, names in isa_wgmma.wgmma_shape_and_type.items():
        yield arch, "WGMMA", names
    for arch, names in isa_tcgen05mma.tcgen05mma_shape_and_type.items():
        yield arch, "TCGen05MMA", names
    for arch, names in isa_tcgen05mma.tcgen05mma_block_scale_shape_and_type.items():
        yield arch, "TCGen05MMABlockScale", names
    for arch, names in arch_mfma_suffix.items():
        yield arch, "MFMA", names


def test_hwspec_covers_every_mmasim_model():
    """Every instruction MMA-Sim 2.1.1 models (every architecture it lists) is an fp4lab kind checked above, except
    the listed exclusions; an architecture without an fp4lab spec (CDNA1, CDNA2) must be wholly excluded."""
    by_arch = {v: k for k, v in ARCH.items()}
    have = {(c.hw, c.api, _normalise(c.api, c.name)) for cs in BY_KIND.values() for c in cs}
    missing = []
    for arch, api, names in _mmasim_entries():
        for n in dict.fromkeys(_normalise(api, x) for x in names):
            excluded = any(re.search(pa, arch) and re.search(pn, n) for pa, pn, _ in NOT_MODELLED)
            if not excluded and (by_arch.get(arch), api, n) not in have:
                missing.append(f"{arch} {api} {n}")
    assert not missing, f"{len(missing)} MMA-Sim models without an fp4lab kind, e.g. {missing[:5]}"


# ---- MMA-Sim models that fp4lab's accumulation family cannot express (docs/hardware_validation.md 5.2) -------------
def _family(K: int):
    """fp4lab's accumulation models (t_fdpa with fused or separate C, tr_fdpa, gtr_fdpa) swept over fused lengths
    dividing K, F and F2 up to the widest the schema allows, e_zero, RNE/RZ fp32 output and both zero-sign rules."""
    from fp4lab.hwspec.mma_reference import ModelParams

    for alg, sep in (("t_fdpa", False), ("t_fdpa", True), ("tr_fdpa", False), ("gtr_fdpa", False)):
        for L in (x for x in (1, 2, 4, 8) if K % x == 0 and (alg != "gtr_fdpa" or x > 1)):  # gtr: even/odd
            f_max = 51 - math.ceil(math.log2(L + 1))
            for F, F2, ez, rne, keep in product((0, 10, 23, 24, 25, 31, f_max),
                                                (23, 24, 31, 50) if alg != "t_fdpa" else (0,),
                                                (-1000, -133, 0) if alg == "t_fdpa" else (0,), (True, False),
                                                (True, False)):
                yield ModelParams(alg, L, F, ez, 0, F2, sep, -126, rne, 23, -126, 127, keep)


# (MMA-Sim arch, instruction, operand format, operand emin, [(a, b, c)]): dot products whose MMA-Sim result no
# member of fp4lab's family reproduces (each family member fails at least one of the kind's witnesses)
WITNESSES = (
    # exact sum: 1024 + 2**-14 is a tie, the term 2**-48 (2**-100) 58 (110) bits below 1024 breaks it upwards;
    # every fp4lab model keeps at most 50 bits below the largest term, drops it and rounds the tie to even
    ("CDNA1", "f32_32x32x8f16", "f16", -14, [([2**-24, 2**-14], [2**-24, 1.0], 1024.0)]),
    ("CDNA1", "f32_32x32x4bf16", "bf16", -126, [([2**-100, 2**-14], [1.0, 1.0], 1024.0)]),
    # FTZ tree: a subnormal input is flushed to +0 (fp4lab's models with F >= 10 resp. 7 keep the product), a
    # product with 21 (15) significant bits is exact (F < 20 resp. 14 truncates it), and (1 + 2**-24) + 2**-24 is
    # two rounded adds (1.0) where a fused sum with F >= 24 gives 1 + 2**-23
    *((arch, name, fmt, emin, [([sub], [big], 0.0), ([1 + u], [1 + u], 0.0),
                               ([1.0, 2**-12, 2**-12], [1.0, 2**-12, 2**-12], 0.0)])
      for arch, name, fmt, emin, sub, big, u in (("CDNA2", "f32_32x32x8f16", "f16", -14, 2**-24, 2**14, 2**-10),
                                                 ("CDNA2", "f32_32x32x8bf16_1k", "bf16", -126, 2**-133, 2**126, 2**-7),
                                                 ("CDNA2", "f32_32x32x4bf16", "bf16", -126, 2**-133, 2**126, 2**-7))),
    # FMA: (1 + 2**-23)(1 - 2**-24) + 2**-47 (1 + 2**-23) = 1 + 2**-24 + 2**-70, just above a tie: an FMA rounds
    # up; the 2**-70 bit is 69 bits below the product, beyond every fp4lab model's truncation
    *((arch, name, "f32", -126, [([1 + 2**-23], [1 - 2**-24], 2**-47 * (1 + 2**-23))])
      for arch, name in (("CDNA1", "f32_16x16x4f32"), ("CDNA2", "f32_16x16x4f32"), ("CDNA3", "f32_16x16x4_f32"))),
)


@pytest.mark.parametrize("arch,name,fmt,emin,wit", WITNESSES, ids=[f"{w[0]}:{w[1]}" for w in WITNESSES])
def test_unexpressible_mmasim_models(arch, name, fmt, emin, wit):
    """The kinds excluded above for their arithmetic: MMA-Sim's result on the witnesses, checked against the rule
    the exclusion names, is reproduced by no member of fp4lab's accumulation family (so they are documented,
    not forced into a spec)."""
    import torch
    from mmasim.amd import MFMA

    from fp4lab.hwspec.mma_operands import align_exponents
    from fp4lab.hwspec.mma_reference import mma_reference

    op = MFMA(arch, name)
    K = op.k
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[fmt]
    cases, ref = [], []
    for a, b, c in wit:
        av, bv = np.zeros(K), np.zeros(K)
        av[:len(a)], bv[:len(b)] = a, b
        cases.append((av, bv, c))
        d = op.dpa(torch.tensor(av, dtype=tdt), torch.tensor(bv, dtype=tdt), torch.tensor(c, dtype=torch.float32))
        ref.append(int(d.view(torch.int32).item()) & 0xFFFFFFFF)
    expected = [0x3F800001] if fmt == "f32" else {"CDNA1": [0x44800001], "CDNA2": [
        0x00000000, 0x3F804008 if fmt == "f16" else 0x3F820200, 0x3F800000]}[arch]
    assert ref == expected, f"MMA-Sim {arch} {name}: {[hex(r) for r in ref]}"
    for p in _family(K):
        got = [int(np.float32(mma_reference(av[None, :], align_exponents(av, emin)[None, :], bv[:, None],
                                            align_exponents(bv, emin)[:, None], np.array([[c]]), p)[0, 0])
                   .view(np.uint32)) for av, bv, c in cases]
        assert got != ref, f"{arch} {name}: fp4lab model {p} reproduces MMA-Sim on every witness"


# ---- numerics decisions checked against MMA-Sim ----------------------------------------------------------------------
def _case(hw, kind, a, b=None, scale=None, block=None):
    return next(c for c in BY_KIND[(hw, kind)] if c.a == a and c.b == (b or a) and c.scale == scale
                and (block is None or c.block == block))


def test_cdna3_negative_underflow_keeps_its_sign_as_mmasim():
    """The minimal case: mfma f32_32x32x8_bf16, A = [0x8d80, 0...], B = [0x2180, 0...], C = +0. The product
    -2**-130 * 1.5 underflows under RNE; MMA-Sim's TR-FDPA (and fp4lab's zero_sign 'keep_underflow_sign') give -0,
    the NVIDIA kinds give +0."""
    a, b = np.zeros((1, 8), np.int64), np.zeros((1, 8), np.int64)
    a[0, 0], b[0, 0] = 0x8D80, 0x2180
    mine, ref = run_dots(_case("cdna3-mi300", "mfma.bf16", "bf16"), a, b, np.zeros(1, np.int64))
    assert mine[0] == ref[0] == 0x80000000
    k = get_hw("cdna3-mi300").kind("mfma.bf16")
    assert k.output.zero_sign.value == "keep_underflow_sign" and k.output.zero_sign.provenance == "published"
    assert k.output.nan_bits.provenance == "assumed"  # MMA-Sim's CDNA3 hardware test skips NaN outputs


def test_cdna3_e5m2fnuz_special_accumulator_fp4lab_propagates_mmasim_drops():
    """Documented difference: with e5m2fnuz x e5m2fnuz products near 2**30, MMA-Sim's gtr_fdpa drops an Inf C
    (its frexp of Inf gives exponent 0, below e_max - 25); fp4lab keeps IEEE propagation (Inf + finite = Inf)."""
    case = _case("cdna3-mi300", "mfma.fp8", "e5m2fnuz")
    a, b = np.zeros((1, 16), np.int64), np.zeros((1, 16), np.int64)
    a[0, 0] = b[0, 0] = 0x7B  # 2**15 * 1.75 in e5m2fnuz (bias 16)
    c = np.array([0x7F800000])  # +Inf
    mine, ref = run_dots(case, a, b, c)
    assert mine[0] == 0x7F800000
    assert (ref[0] & 0x7F800000) != 0x7F800000  # MMA-Sim: finite


def test_ue4m3_bit7_is_ignored_as_the_ptx_isa_and_mmasim_do():
    """ue4m3 scale codes c and c | 0x80 give the same bits, in fp4lab and in MMA-Sim (PTX ISA 5.2.3: ue4m3 is an
    unsigned 7-bit format; the byte's top bit is padding)."""
    case = _case("blackwell-sm100", "tcgen05.mxf4nvf4", "e2m1", scale="ue4m3", block=16)
    k = get_hw(case.hw).kind(case.kind)
    inp = gemm_inputs(np.random.default_rng(3), k, "e2m1", "e2m1", "ue4m3", 16, 8, 8, 64)
    sa, sb = inp["sa"] & 0x7F, inp["sb"] & 0x7F
    lo = run_gemm(case, inp["a"], inp["b"], inp["c"], sa, sb)
    hi = run_gemm(case, inp["a"], inp["b"], inp["c"], sa | 0x80, sb | 0x80)
    assert np.array_equal(lo[0], hi[0]) and np.array_equal(lo[1], hi[1]) and np.array_equal(lo[0], lo[1])


def test_legacy_fp8_mma_sync_rules_differ_between_sm100_and_sm120():
    """Item 6: fp4lab keeps each architecture's rule. sm_100: C added after the fused sum (fitted to published
    B200 vectors); sm_120: C inside the fused sum (MMA-Sim's model, which fp4lab matches bit for bit above). On
    the same random inputs the two rules disagree on a sizeable fraction of outputs."""
    case = _case("blackwell-sm120", "mma.sync.e4m3", "e4m3")
    k120 = get_hw("blackwell-sm120").kind("mma.sync.e4m3")
    k100 = get_hw("blackwell-sm100").kind("mma.sync.e4m3")
    inp = gemm_inputs(np.random.default_rng(5), k120, "e4m3", "e4m3", None, None, 32, 32, 32)
    m120, ref = run_gemm(case, inp["a"], inp["b"], inp["c"])
    m100, _ = run_gemm(case, inp["a"], inp["b"], inp["c"], kind=k100)
    assert np.array_equal(m120, ref)
    assert 0.02 < np.mean(m100 != ref) < 0.5


def _kernel_kinds() -> list[tuple[str, str]]:
    from fp4lab.hwspec.mma_plan import GPU_ALGORITHMS

    return sorted(key for key in BY_KIND if get_hw(key[0]).kind(key[1]).block_scaled
                  and get_hw(key[0]).kind(key[1]).accumulation.algorithm in GPU_ALGORITHMS)


@pytest.mark.parametrize("hw,kind", _kernel_kinds(), ids=[f"{h}:{k}" for h, k in _kernel_kinds()])
def test_triton_kernels_bit_exact_against_mmasim(hw, kind):
    """fp4lab's Triton MMA kernels (CPU interpreter) give MMA-Sim's bits on every format pair and scale option of
    the block-scaled kinds MMA-Sim models: random codes with NaN/Inf, whole-range scale codes, cancelling C, two
    chained instructions."""
    import torch

    from fp4lab.hwspec.mma_plan import lower_kind
    from fp4lab.hwspec.validation.mmasim_oracle import _mmasim_chain, c_array
    from fp4lab.kernels.mma_emulate_launch import emulated_matmul

    def u8(x):
        return torch.from_numpy(np.ascontiguousarray(x).astype(np.uint8))

    k = get_hw(hw).kind(kind)
    n = 0
    for i, case in enumerate(BY_KIND[(hw, kind)]):
        rng = np.random.default_rng(1000 * i + 11)
        inp = gemm_inputs(rng, k, case.a, case.b, case.scale, case.block, 8, 8, 2 * int(k.k))
        with np.errstate(all="ignore"):
            ref = _mmasim_chain(case, k, None, inp["a"], inp["b"], inp["c"], inp["sa"], inp["sb"], dots=False)
        plan = lower_kind(hw, kind, case.a, case.b, case.scale)
        got = emulated_matmul(u8(inp["a"]), u8(inp["sa"]), u8(inp["b"].T), u8(inp["sb"].T), plan,
                              torch.from_numpy(c_array(inp["c"], k.c_format).astype(np.float32)))
        bad = got.numpy().view(np.uint32) != ref
        assert not bad.any(), f"{case.label}: {int(bad.sum())} mismatches with MMA-Sim"
        n += bad.size
    assert n >= 64 * len(BY_KIND[(hw, kind)])
