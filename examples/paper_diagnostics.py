"""Reproduce the diagnostics of "Rethinking Shrinkage Bias in LLM FP4 Pretraining" (arXiv 2606.20381, §3, §5.2)
with fp4lab: our numbers beside the paper's, and where and why they differ, as Markdown.

    python examples/paper_diagnostics.py                 # print the report
    python examples/paper_diagnostics.py --out FILE.md   # write it to FILE.md
    python examples/paper_diagnostics.py --update-docs   # rewrite the tracked docs/paper_reproduction.md

The paper's tensors were captured from a training run that is not public, so every tensor here is synthetic and
seeded (fp4lab.analysis.distributions); the formats are the paper's two recipes: ``e2m1-b16-fp32`` (E2M1, 1x16,
FP32 scale amax/6, RTNE) and ``ufp4`` (uniform E1M2, 1x16, FP32 scale amax/1.75, RTNE). RHT = 16-point random
Hadamard (seed 0) along the reduction dimension. Runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import fp4lab
from fp4lab.analysis import bias, distributions, gemm, rht_effects

E2M1, UFP4 = "e2m1-b16-fp32", "ufp4"
SHAPE = (512, 1024)


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def grid_bias_section() -> list[str]:
    e2 = bias.level_bias(fp4lab.get_format("e2m1"))
    e1 = bias.level_bias(fp4lab.get_format("e1m2"))
    out = ["## 1. Grid shrinkage bias (paper Eq. 1-2)", "",
           "Locally-uniform bias `(l_i - r_i)/2` per interior level, grid units "
           "(`fp4lab.analysis.bias.level_bias`).", "",
           _row("grid", "level q", "bin", "ours", "paper"), _row(*["---"] * 5)]
    paper = {2.0: "−0.125 (the paper's footnote 2)", 4.0: "−0.25 (\"same asymmetry at twice the scale\")"}
    for q, lw, r, b in zip(e2.levels[e2.interior], e2.left[e2.interior], e2.right[e2.interior], e2.bias[e2.interior]):
        out.append(_row("E2M1", f"{q:g}", f"({q - lw:g}, {q + r:g})", f"{b:+.4f}", paper.get(float(q), "0 (ℓ = r)")))
    out.append(_row("E1M2", "0.25 … 1.5 (all 6)", "symmetric", "all " + ", ".join(f"{v:+.0f}" for v in
                                                                              sorted(set(e1.bias[e1.interior]))),
                    "0 (uniform grid)"))
    uni = bias.bias_under_density(fp4lab.get_format("e2m1"), lambda t: np.ones_like(t))
    out += ["", f"Expectation over t ~ U(0, 6) including the edge bins: {uni:+.2e} (the top half-bin "
            "cancels the interior shrinkage exactly; quadrature error ~1e-5). **Agrees.**", ""]
    return out


def tensor_section() -> list[str]:
    cases = [("gaussian", "well-behaved (analogue of `linear_fc1/fwd_x`)"),
             ("outliers:k=20,every=97", "outlier channels ×20 every 97th (analogue of `linear_fc2/fwd_x`)"),
             ("outliers:k=100,every=97", "outlier channels ×100 every 97th"),
             ("swiglu", "SwiGLU activation silu(a)·b"),
             ("student-t:nu=3", "Student-t(3)")]
    out = ["## 2. Single-tensor SQNR, ΔSQNR, B_eff and α (paper §5.2, Figs. 4-5)", "",
           f"Tensor shape {SHAPE[0]}×{SHAPE[1]}, blocks and RHT along the last axis. SQNR = −10 log10 NMSE; "
           "ΔSQNR = SQNR(RHT16) − SQNR(none); α = ⟨Q(A), A⟩/‖A‖² (Eq. 3); B_eff over the 8 magnitude buckets, "
           "ε = 1e-12 (Eq. 6-7).", "",
           _row("input", "format", "SQNR none", "SQNR RHT16", "ΔSQNR", "B_eff none → RHT16", "α none", "α RHT16",
                "bias none", "bias RHT16"), _row(*["---"] * 10)]
    res = {}
    for spec, label in cases:
        x = distributions.sample(spec, SHAPE, seed=0)
        for fmt in (E2M1, UFP4):
            r0, r16 = rht_effects.rht_sweep(x, fmt, sizes=(16,))
            res[(spec, fmt)] = (r0, r16)
            out.append(_row(label if fmt == E2M1 else "", "E2M1" if fmt == E2M1 else "E1M2",
                            f"{r0['sqnr_db']:.2f}", f"{r16['sqnr_db']:.2f}", f"{r16['delta_sqnr_db']:+.2f}",
                            f"{r0['b_eff']:.3f} → {r16['b_eff']:.3f}", f"{r0['alpha']:.5f}", f"{r16['alpha']:.5f}",
                            f"{r0['bias']:+.4f}", f"{r16['bias']:+.4f}"))
    g2, g1 = res[("gaussian", E2M1)], res[("gaussian", UFP4)]
    o2, o1 = res[("outliers:k=20,every=97", E2M1)], res[("outliers:k=20,every=97", UFP4)]
    out += ["", "Paper's numbers beside ours (paper: captured tensors; ours: the synthetic analogue named above):", "",
            _row("quantity", "paper E2M1", "ours E2M1", "paper E1M2", "ours E1M2"), _row(*["---"] * 5),
            _row("fc1/fwd_x mean ΔSQNR (dB)", "+0.007", f"{g2[1]['delta_sqnr_db']:+.3f}", "−0.008",
                 f"{g1[1]['delta_sqnr_db']:+.3f}"),
            _row("fc1/fwd_x ΔB_eff", "+0.0001", f"{g2[1]['delta_b_eff']:+.4f}", "−0.0008",
                 f"{g1[1]['delta_b_eff']:+.4f}"),
            _row("fc2/fwd_x SQNR without RHT (dB)", "21.90", f"{o2[0]['sqnr_db']:.2f}", "19.94",
                 f"{o1[0]['sqnr_db']:.2f}"),
            _row("fc2/fwd_x SQNR with RHT (dB)", "20.00", f"{o2[1]['sqnr_db']:.2f}", "23.19",
                 f"{o1[1]['sqnr_db']:.2f}"),
            _row("fc2/fwd_x ΔSQNR (dB)", "−1.90", f"{o2[1]['delta_sqnr_db']:+.2f}", "+3.25",
                 f"{o1[1]['delta_sqnr_db']:+.2f}"),
            _row("fc2/fwd_x B_eff none → RHT", "0.56 → 0.97 (format not stated)",
                 f"{o2[0]['b_eff']:.2f} → {o2[1]['b_eff']:.2f}", "", f"{o1[0]['b_eff']:.2f} → {o1[1]['b_eff']:.2f}"),
            _row("α (shrinkage)", "< 1", f"{g2[0]['alpha']:.4f} (gaussian)", "≈ 1", f"{g1[0]['alpha']:.4f} (gaussian)"),
            ""]
    a_up = [lab for spec, lab in cases if res[(spec, E2M1)][1]["alpha"] > res[(spec, E2M1)][0]["alpha"]]
    a_dn = [lab for spec, lab in cases if res[(spec, E2M1)][1]["alpha"] < res[(spec, E2M1)][0]["alpha"]]
    e1_neg = [lab for spec, lab in cases if res[(spec, UFP4)][1]["delta_sqnr_db"] < 0]
    out += [f"Observations. E2M1's α falls with RHT on: {'; '.join(a_dn) or 'none'}; it *rises* on: "
            f"{'; '.join(a_up) or 'none'}. On outlier tensors the rotated outlier blocks put most elements near the "
            "block amax, where E2M1's top half-bin (5, 6] rounds *up*; α weights elements by magnitude², so it "
            "can exceed 1 while the mean normalized bias (which small elements dominate) stays negative. "
            f"E1M2's ΔSQNR is negative on: {'; '.join(e1_neg) or 'none'}: when one outlier dominates a 16-block, "
            "the 16-point rotation spreads it over the whole block and the step amax/7 becomes coarser than the "
            "noise it must resolve, so no rotation is better there.", ""]
    return out


def gemm_section() -> list[str]:
    m, k, n = 512, 1024, 256
    x = distributions.sample("outliers:k=20,every=97", (m, k), seed=1)
    w = distributions.sample("gaussian", (n, k), seed=2) * np.float32(0.03)
    dy = distributions.sample("student-t:nu=3", (m, n), seed=3)
    out = ["## 3. GEMM-output SQNR per training GEMM (paper §5.2, Figs. 6-7, 12)", "",
           f"X: {m}×{k} outlier channels (×20 every 97th input channel), W: {n}×{k} N(0, 0.03²), dY: {m}×{n} "
           "Student-t(3); SR on dY (both recipes), RTNE elsewhere; RHT16 along each GEMM's reduction dim on both "
           "operands; products in float64 against the float64 product of the unquantized operands "
           "(`fp4lab.analysis.gemm`). η = ⟨Z_q, Z⟩/‖Z‖².", "",
           _row("format", "GEMM", "SQNR no RHT", "SQNR RHT16", "ΔSQNR", "η no RHT", "η RHT16"), _row(*["---"] * 7)]
    deltas = {}
    for fmt in (E2M1, UFP4):
        none = gemm.training_gemms(x, w, dy, fmt, rht_scope=())
        full = gemm.training_gemms(x, w, dy, fmt, rht_scope=gemm.GEMMS)
        for g in gemm.GEMMS:
            d = full[g]["sqnr_db"] - none[g]["sqnr_db"]
            deltas[(fmt, g)] = d
            out.append(_row("E2M1" if fmt == E2M1 else "E1M2", g, f"{none[g]['sqnr_db']:.2f}",
                            f"{full[g]['sqnr_db']:.2f}", f"{d:+.2f}", f"{none[g]['eta']:.4f}", f"{full[g]['eta']:.4f}"))
    ref = gemm.training_gemms(x, w, dy, E2M1, rht_scope=("wgrad",))
    uf = gemm.training_gemms(x, w, dy, UFP4, rht_scope=gemm.GEMMS)
    out += ["", "The two recipes as the paper runs them (E2M1: RHT on WGRAD only; UFP4: RHT on all three):", "",
            _row("recipe", *gemm.GEMMS), _row(*["---"] * 4),
            _row("E2M1 reference", *(f"{ref[g]['sqnr_db']:.2f} dB" for g in gemm.GEMMS)),
            _row("UFP4", *(f"{uf[g]['sqnr_db']:.2f} dB" for g in gemm.GEMMS)), ""]
    e2_neg = all(deltas[(E2M1, g)] < 0 for g in gemm.GEMMS)
    e1_pos = all(deltas[(UFP4, g)] > 0 for g in gemm.GEMMS)
    out += [f"Paper (qualitative): RHT lowers E2M1 output SQNR on the rotation-sensitive paths and raises E1M2's. "
            f"Ours: E2M1 ΔSQNR {'negative on all three GEMMs' if e2_neg else 'not negative on every GEMM'}, "
            f"E1M2 ΔSQNR {'positive on all three' if e1_pos else 'not positive on every GEMM'}. "
            "The paper's heatmap also has cases where E2M1 *gains* slightly (fc1 and qkv FPROP); see the "
            "well-behaved rows of §2 for the synthetic counterpart (ΔSQNR ≈ 0).", ""]
    return out


def chain_section() -> list[str]:
    out = ["## 4. Multiplicative attenuation across a GEMM chain (paper Eq. 5)", "",
           "A chain of 12 linear maps h_{k+1} = Q(h_k) Q(W_k)ᵀ (256 tokens × 256, W_k ~ N(0, 1/256), no "
           "nonlinearity), against the float64 chain. η_k is measured per layer on its actual input; `measured` is "
           "⟨h_q, h_ref⟩/‖h_ref‖² of the final outputs (`gemm.attenuation_chain`).", "",
           _row("format", "RHT", "mean η_k", "∏ η_k", "exp(−Σ δ_k)", "measured end-to-end"), _row(*["---"] * 6)]
    chains = {}
    for fmt in (E2M1, UFP4):
        for r in (None, 16):
            c = chains[(fmt, r)] = gemm.attenuation_chain(fmt, depth=12, rht=r)
            out.append(_row("E2M1" if fmt == E2M1 else "E1M2", r or "none", f"{np.mean(c['eta']):.5f}",
                            f"{c['prod_eta']:.4f}", f"{c['exp_minus_sum_delta']:.4f}", f"{c['measured']:.4f}"))
    e2 = chains[(E2M1, None)]
    gap = max(abs(c["prod_eta"] - c["exp_minus_sum_delta"]) for c in chains.values())
    worst = max(chains, key=lambda key: abs(chains[key]["prod_eta"] - chains[key]["measured"]))
    miss = abs(chains[worst]["prod_eta"] - chains[worst]["measured"])
    worst_label = f"{'E2M1' if worst[0] == E2M1 else 'E1M2'} {'with RHT16' if worst[1] else 'without RHT'}"
    out += ["", f"E2M1 loses {100 * (1 - np.mean(e2['eta'])):.2f} % of the signal per GEMM on average and the loss "
            f"compounds to {100 * (1 - e2['measured']):.1f} % after 12 GEMMs. ∏η and exp(−Σδ) differ by at most "
            f"{gap:.1e} (Eq. 5's first-order approximation holds for |δ| < 1 %). ∏η predicts the end-to-end factor "
            f"to within {miss:.3f} (largest gap: {worst_label}); Eq. 4 "
            "assumes the residuals are incoherent with the signal, which a chain fed its own quantization noise "
            "only approximately satisfies.", ""]
    return out


def disagreements() -> list[str]:
    return ["## 5. Where we disagree with the paper, and why", "",
            "* **Magnitudes of ΔSQNR on the outlier tensor.** The paper's `linear_fc2/fwd_x` gives −1.90 dB (E2M1) "
            "and +3.25 dB (E1M2); our ×20-every-97th outlier analogue gives a larger swing. The captured tensors are "
            "not public, so the outlier pattern (how many channels, how large, how they align with 16-blocks) is our "
            "choice; the signs and the ranking reversal reproduce, the sizes depend on that choice (see the ×100 row).",
            "* **B_eff 0.56 → 0.97.** The paper does not say which format this average belongs to. Our synthetic "
            "outlier tensors start from a much higher bucket use before RHT, because only ~1 % of channels are "
            "outliers; the real fc2 input evidently has far more mass in the zero bucket. E1M2's B_eff rises with "
            "RHT on every heavy-tailed input (as the paper says); E2M1's log-spaced buckets are already well used "
            "on our outlier tensors and its B_eff falls slightly there.",
            "* **Well-behaved tensors.** The paper reports ΔSQNR of +0.007 / −0.008 dB; ours on a Gaussian are of "
            "the same order of magnitude (hundredths of a dB) with the opposite signs, which at this size is "
            "sampling noise (the paper's own values are that small too).",
            "* **RHT and E2M1 attenuation.** The paper says RHT worsens E2M1's attenuation by moving mass into the "
            "asymmetric bins. We see that on Gaussian, Student-t and SwiGLU inputs (α falls), but not on outlier "
            "tensors, where α rises above 1 (top-bin round-up, §2); the SQNR loss reproduces in both cases.",
            "* **GEMM outputs.** The paper gives only qualitative statements and a heatmap without cell values; "
            "we report numbers for one synthetic layer. Accumulation is float64 here (no tensor-core rounding).",
            "* **α for E1M2.** The paper says \"≈ 1\"; ours is slightly *above* 1 (≈1.0005) on Gaussian data: the "
            "top half-bin rounds up and the zero bin rounds down, and with amax scaling the top bin holds the "
            "exact amax element plus a few rounding-up neighbours. This is a second-order edge effect that Eq. 2's "
            "interior analysis leaves out.", ""]


DOC = Path(__file__).resolve().parents[1] / "docs" / "paper_reproduction.md"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="FILE.md", help="write the report to this file instead of printing it")
    where.add_argument("--update-docs", action="store_true", help=f"rewrite the tracked {DOC.parent.name}/{DOC.name}")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    lines = ["# Paper reproduction: shrinkage bias, RHT and UFP4 diagnostics", "",
             "Generated by `python examples/paper_diagnostics.py --update-docs`; do not edit by hand. Paper: "
             "*Rethinking Shrinkage Bias in LLM FP4 Pretraining* (arXiv 2606.20381), numbers from its "
             "sections 5-6. Formats: "
             f"`{E2M1}` (the paper's E2M1 reference) and `{UFP4}` (UFP4's uniform E1M2 grid). All inputs are "
             "synthetic and seeded (the paper's captured tensors are not public).", ""]
    lines += grid_bias_section() + tensor_section() + gemm_section() + chain_section() + disagreements()
    lines += [f"_Run time: {time.perf_counter() - start:.1f} s._", ""]
    out = DOC if args.update_docs else (Path(args.out) if args.out else None)
    if out is None:
        sys.stdout.write("\n".join(lines))
        return 0
    out.write_text("\n".join(lines))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
