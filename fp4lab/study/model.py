"""A GPT-style byte-level decoder for recipe studies: RMSNorm, rotary position embeddings, causal attention
(``scaled_dot_product_attention``), SwiGLU feed-forward, untied embedding and head.

Linear layers of the blocks (``blocks.<i>.attn.qkv``, ``.attn.proj``, ``.mlp.gate_up``, ``.mlp.down``) are plain
``nn.Linear`` so ``fp4lab.recipes.quantize_model(model, recipe, skip=("head",))`` converts exactly them;
the embedding, the norms and the head stay in high precision.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    """Model shape. ``ffn`` is the SwiGLU hidden width; widths should be multiples of 32 (4-bit block sizes)."""

    vocab: int = 256
    d_model: int = 512
    layers: int = 8
    heads: int = 8
    ffn: int = 1536
    seq_len: int = 512
    rope_base: float = 10000.0

    @property
    def params(self) -> int:
        """Parameter count (weights of embedding, blocks, norms and head)."""
        d, f = self.d_model, self.ffn
        block = 3 * d * d + d * d + 2 * d * f + f * d + 2 * d
        return self.vocab * d * 2 + self.layers * block + d


SIZES: dict[str, GPTConfig] = {
    "small": GPTConfig(d_model=384, layers=6, heads=6, ffn=1024),      # 10.8M parameters
    "middle": GPTConfig(d_model=512, layers=12, heads=8, ffn=1536),    # 41.2M
    "large": GPTConfig(d_model=768, layers=16, heads=12, ffn=2048),    # 113.7M
}


class RMSNorm(torch.nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_tables(seq_len: int, head_dim: int, base: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [seq_len, head_dim / 2] (fp32) of the rotary embedding."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    ang = torch.arange(seq_len, dtype=torch.float32, device=device)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x [B, H, T, Dh] by the position's angles (computed in fp32)."""
    xf = x.float().unflatten(-1, (-1, 2))
    a, b = xf[..., 0], xf[..., 1]
    c, s = cos[: x.shape[-2]], sin[: x.shape[-2]]
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2).to(x.dtype)


class Attention(torch.nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = torch.nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = torch.nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class SwiGLU(torch.nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.gate_up = torch.nn.Linear(cfg.d_model, 2 * cfg.ffn, bias=False)
        self.down = torch.nn.Linear(cfg.ffn, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(torch.nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(cfg.d_model), RMSNorm(cfg.d_model)
        self.attn, self.mlp = Attention(cfg), SwiGLU(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class GPT(torch.nn.Module):
    """Decoder-only transformer: tokens [B, T] (T <= seq_len) -> logits [B, T, vocab] (fp32)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = torch.nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = torch.nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.d_model)
        self.head = torch.nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        cos, sin = rope_tables(cfg.seq_len, cfg.d_model // cfg.heads, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2 style: N(0, 0.02) weights, output projections scaled by 1 / sqrt(2 * layers), unit norms."""
        for name, p in self.named_parameters():
            if p.ndim == 1:
                torch.nn.init.ones_(p)
            else:
                std = 0.02 / (2 * self.cfg.layers) ** 0.5 if name.endswith(("proj.weight", "down.weight")) else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, self.rope_cos, self.rope_sin)
        return self.head(self.norm(x)).float()
