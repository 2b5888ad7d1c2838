"""Synthetic-language check of the recipes: do 4-bit recipes track bf16, and does UFP4 beat the E2M1 reference?

A tiny decoder-only transformer (every linear layer of its blocks a ``QuantLinear``) learns next-token prediction
on a synthetic language: sequences from a fixed random sparse Markov chain, so the optimal loss is known (the
chain's entropy rate). Each recipe trains from the same initialisation on the same batches; the metric is the
paper's: the BF16-relative loss error ``(L_recipe - L_bf16) / L_bf16`` on held-out data, averaged over seeds. This
is not the pretraining study of the recipes (``examples/pretrain.py``, docs/study.md).

    python examples/pretrain_study.py --steps 300 --seeds 2 --out docs/markov_check.md
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fp4lab.recipes import BUILTIN_RECIPES, quantize_model


class MarkovLanguage:
    """Token sequences from a random sparse Markov chain over ``vocab`` symbols."""

    def __init__(self, vocab: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(vocab, vocab, generator=g) * 3.0
        self.probs = torch.softmax(logits, dim=-1)
        self.vocab = vocab

    def entropy_rate(self) -> float:
        """Stationary entropy rate in nats: the best achievable next-token loss."""
        p = self.probs
        evals, evecs = torch.linalg.eig(p.T.double())
        pi = evecs[:, torch.argmin((evals - 1).abs())].real
        pi = pi / pi.sum()
        return float(-(pi[:, None] * p.double() * p.double().log()).sum())

    def batch(self, n: int, length: int, g: torch.Generator) -> torch.Tensor:
        tokens = torch.empty(n, length, dtype=torch.long)
        tokens[:, 0] = torch.randint(self.vocab, (n,), generator=g)
        for t in range(1, length):
            tokens[:, t] = torch.multinomial(self.probs[tokens[:, t - 1]], 1, generator=g).squeeze(-1)
        return tokens


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int, ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.ff1, self.ff2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int, d: int = 64, heads: int = 4, ff: int = 256, layers: int = 3, length: int = 32):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(length, d) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens) + self.pos[: tokens.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def train(recipe: str, seed: int, steps: int, lang: MarkovLanguage, batch: int, length: int,
          device: str) -> dict[str, float]:
    torch.manual_seed(seed)
    model = TinyLM(lang.vocab, length=length)
    quantize_model(model.blocks, recipe, seed=seed)  # embedding, head and norms stay high precision
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    data = torch.Generator().manual_seed(1000 + seed)
    t0 = time.perf_counter()
    for step in range(steps):
        tokens = lang.batch(batch, length + 1, data).to(device)
        lr = 3e-3 * min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, lang.vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    evalg = torch.Generator().manual_seed(999_999)
    with torch.no_grad():
        tokens = lang.batch(4 * batch, length + 1, evalg).to(device)
        logits = model(tokens[:, :-1])
        eval_loss = F.cross_entropy(logits.reshape(-1, lang.vocab), tokens[:, 1:].reshape(-1)).item()
    return {"eval_loss": eval_loss, "seconds": time.perf_counter() - t0}


def paired_statistics(results: dict[str, list[dict[str, float]]], a: str = "ufp4", b: str = "e2m1-ref") -> list[str]:
    """Markdown lines: per-seed BF16-relative loss errors (%) of every recipe with mean +- standard error over
    seeds (sample standard deviation / sqrt(n)), and the per-seed paired difference ``a - b`` in percentage points
    (mean +- standard error, number of seeds where ``a`` is lower). Empty without a bf16 run."""
    def mean_se(v: list[float]) -> tuple[float, float]:
        m = sum(v) / len(v)
        se = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v)) if len(v) > 1 else float("nan")
        return m, se

    base = [res["eval_loss"] for res in results.get("bf16", [])]
    if not base:
        return []
    rel = {r: [100 * (res["eval_loss"] - lb) / lb for res, lb in zip(runs, base)]
           for r, runs in results.items() if r != "bf16"}
    lines = ["", "Per-seed BF16-relative loss errors (%), mean ± standard error over seeds:", "",
             "| recipe | per seed | mean ± standard error |", "|---|---|---|"]
    for r, v in rel.items():
        m, se = mean_se(v)
        lines.append(f"| {r} | {', '.join(f'{x:.3f}' for x in v)} | {m:+.3f} ± {se:.3f} |")
    if a in rel and b in rel:
        d = [x - y for x, y in zip(rel[a], rel[b])]
        m, se = mean_se(d)
        lines += ["", f"Paired by seed, {a} minus {b}: {', '.join(f'{x:+.3f}' for x in d)} percentage points; "
                  f"mean {m:+.3f} ± {se:.3f} ({m / se if se else float('nan'):+.1f} standard errors); {a} lower in "
                  f"{sum(x < 0 for x in d)} of {len(d)} seeds."]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--recipes", default="bf16,e2m1-ref,ufp4,nvfp4,mxfp4")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None, help="write a markdown report here")
    args = ap.parse_args()
    length, vocab = 32, 64
    lang = MarkovLanguage(vocab, seed=0)
    recipes = args.recipes.split(",")
    for r in recipes:
        if r not in BUILTIN_RECIPES:
            raise SystemExit(f"unknown recipe '{r}'; choose from {', '.join(BUILTIN_RECIPES)}")
    results: dict[str, list[dict[str, float]]] = {r: [] for r in recipes}
    for seed in range(args.seeds):
        for r in recipes:
            res = train(r, seed, args.steps, lang, args.batch, length, args.device)
            results[r].append(res)
            print(f"seed {seed} {r:10s} eval loss {res['eval_loss']:.5f} ({res['seconds']:.1f} s)", flush=True)
    base = [res["eval_loss"] for res in results.get("bf16", [])]
    lines = [
        "# Synthetic-language check of the recipes",
        "",
        f"Generated by `python examples/pretrain_study.py --steps {args.steps} --seeds {args.seeds} "
        f"--batch {args.batch}` on device `{args.device}` ({time.strftime('%Y-%m-%d')}).",
        "",
        f"Tiny decoder-only transformer (3 blocks, d=64, 4 heads, ff=256; every block linear is a `QuantLinear`, "
        f"embedding/head/norms high precision), next-token prediction on a synthetic Markov language "
        f"(vocab {vocab}, sequence {length}, {args.batch} sequences per step = {args.batch * length} tokens), "
        f"AdamW, cosine schedule. Entropy rate (best possible loss): {lang.entropy_rate():.4f} nats.",
        "",
        "| recipe | eval loss (mean over seeds) | BF16-relative loss error | per seed |",
        "|---|---|---|---|",
    ]
    for r in recipes:
        losses = [res["eval_loss"] for res in results[r]]
        mean = sum(losses) / len(losses)
        rel = "-" if not base or r == "bf16" else \
            f"{100 * sum((lq - lb) / lb for lq, lb in zip(losses, base)) / len(losses):+.3f}%"
        lines.append(f"| {r} | {mean:.5f} | {rel} | {', '.join(f'{v:.5f}' for v in losses)} |")
    lines += paired_statistics(results)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
