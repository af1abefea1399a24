"""Llama-style decoder built from a `ModelSpec`, dense or DeepSeek-style MoE.

RMSNorm (Zhang & Sennrich 2019), rotary position embedding (Su et al. 2021, "RoFormer", eq. 34),
grouped-query attention (Ainslie et al. 2023) through `scaled_dot_product_attention` (which takes
the flash / memory-efficient kernel when the device has one), SwiGLU (Shazeer 2020). The layout
follows the Llama reference and torchtitan: blocks live in a `ModuleDict` keyed by their global
index, so a pipeline stage that deletes the other blocks keeps the same parameter names (and
checkpoints stay layout-independent). Every module is optional in `forward`, so a pipeline stage
without the embedding or the output head runs the same code.

Shapes: B batch, T sequence, D model width, H query heads, Hkv key/value heads, Dh head width,
V vocabulary, F MLP width.

The model needs no process group: tensor, expert and pipeline parallelism are applied afterwards
by `bandwise.runtime.parallel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import contextlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bandwise.errors import BandwiseError
from bandwise.runtime.moe import MoE, MoEConfig, recompute_guard
from bandwise.specs.model import ModelSpec


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    """What `ModelSpec` does not say about how to build the network."""

    rope_theta: float = 10000.0
    """RoPE base (RoFormer; Llama 2 uses 1e4)."""
    norm_eps: float = 1e-5
    init_std: float = 0.02
    """Normal init std of weights (GPT-2 / Llama reference)."""
    moe: MoEConfig | None = None
    """Router and balancing options; None means `MoEConfig()` defaults for an MoE spec."""


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) · w (Zhang & Sennrich 2019), computed in fp32."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).type_as(x)


def rope_tables(seq_len: int, head_dim: int, theta: float) -> torch.Tensor:
    """cos and sin of position·θ^(-2i/Dh), stacked: (T, Dh/2, 2). RoFormer eq. 34."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)  # (T, Dh/2)
    return torch.stack((angles.cos(), angles.sin()), dim=-1).float()


def apply_rope(x_BTHD: torch.Tensor, rope_TD2: torch.Tensor) -> torch.Tensor:
    """Rotate consecutive pairs (x0, x1) of each head by the position's angle."""
    B, T, H, Dh = x_BTHD.shape
    pairs = x_BTHD.float().reshape(B, T, H, Dh // 2, 2)
    cos = rope_TD2[:T, None, :, 0]  # (T, 1, Dh/2)
    sin = rope_TD2[:T, None, :, 1]
    x0, x1 = pairs[..., 0], pairs[..., 1]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.reshape(B, T, H, Dh).type_as(x_BTHD)


class Attention(nn.Module):
    """Causal GQA. Head counts are read from the weight shapes at run time, so the same code
    runs on a tensor-parallel shard that holds H/tp query heads and Hkv/tp key/value heads."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.head_dim = spec.d_head
        self.wq = nn.Linear(spec.hidden, spec.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(spec.hidden, spec.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(spec.hidden, spec.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(spec.heads * self.head_dim, spec.hidden, bias=False)
        self.recompute_core = False
        """Selective recomputation: keep no SDPA activations, re-run it in backward."""

    def forward(self, x_BTD: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        B, T, _ = x_BTD.shape
        q_BTHD = self.wq(x_BTD).view(B, T, -1, self.head_dim)
        k_BTKD = self.wk(x_BTD).view(B, T, -1, self.head_dim)
        v_BTKD = self.wv(x_BTD).view(B, T, -1, self.head_dim)
        q_BTHD, k_BTKD = apply_rope(q_BTHD, rope), apply_rope(k_BTKD, rope)
        q, k, v = (t.transpose(1, 2) for t in (q_BTHD, k_BTKD, v_BTKD))  # (B, heads, T, Dh)
        if k.shape[1] != q.shape[1]:
            # Expanding K/V instead of `enable_gqa=True` keeps every SDPA backend eligible.
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if self.recompute_core and torch.is_grad_enabled():
            out = checkpoint(F.scaled_dot_product_attention, q, k, v, is_causal=True, use_reentrant=False)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, Dh)
        return self.wo(out.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) · w3 x) (Shazeer 2020, "GLU Variants Improve Transformer")."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.recompute_core = False
        """Selective recomputation: re-run silu(a)·b in backward instead of storing it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.w1(x), self.w3(x)
        if self.recompute_core and torch.is_grad_enabled():
            return self.w2(checkpoint(_swiglu, a, b, use_reentrant=False))
        return self.w2(_swiglu(a, b))


def _swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def _recompute_contexts() -> tuple[contextlib.AbstractContextManager, contextlib.AbstractContextManager]:
    """(forward, recompute) contexts for `checkpoint`: the re-run is marked for the MoE counters."""
    return contextlib.nullcontext(), recompute_guard()


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(spec.hidden, cfg.norm_eps)
        self.attention = Attention(spec)
        self.ffn_norm = RMSNorm(spec.hidden, cfg.norm_eps)
        self.moe_layer = spec.is_moe and layer >= spec.dense_layers
        self.feed_forward: nn.Module = (
            MoE(spec, cfg.moe or MoEConfig()) if self.moe_layer else FeedForward(spec.hidden, spec.ffn)
        )
        if isinstance(self.feed_forward, MoE):
            self.feed_forward.layer_id = layer
        self.recompute_full = False
        """Full recomputation: keep only the block input, re-run the block in backward."""

    def forward(self, x_BTD: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        if self.recompute_full and torch.is_grad_enabled():
            return checkpoint(self._forward, x_BTD, rope, use_reentrant=False, context_fn=_recompute_contexts)
        return self._forward(x_BTD, rope)

    def _forward(self, x_BTD: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        h = x_BTD + self.attention(self.attention_norm(x_BTD), rope)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec, cfg: ModelConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or ModelConfig()
        if spec.is_mla:
            raise BandwiseError(f"model {spec.name!r} uses multi-head latent attention, which the trainer does not build; use a GQA model")
        if not spec.gated_mlp:
            raise BandwiseError(f"model {spec.name!r} has a non-gated MLP; the trainer builds SwiGLU models (gated_mlp: true)")
        if spec.d_head % 2:
            raise BandwiseError(f"model {spec.name!r}: head width {spec.d_head} must be even for rotary embeddings")
        self.spec, self.cfg = spec, cfg
        self.tok_embeddings: nn.Module | None = nn.Embedding(spec.vocab, spec.hidden)
        self.layers = nn.ModuleDict({str(i): Block(spec, cfg, i) for i in range(spec.layers)})
        self.norm: nn.Module | None = RMSNorm(spec.hidden, cfg.norm_eps)
        self.output: nn.Module | None = nn.Linear(spec.hidden, spec.vocab, bias=False)
        # Not persistent: derived from the spec, and a pipeline stage may hold no block at all.
        self.register_buffer("rope", rope_tables(spec.seq_len, spec.d_head, cfg.rope_theta), persistent=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """N(0, init_std) for matrices, GPT-2's 1/sqrt(2·layers) scaling on the residual outputs."""
        std = self.cfg.init_std
        out_std = std / (2 * self.spec.layers) ** 0.5
        for name, p in self.named_parameters():
            if p.ndim == 1:
                continue
            residual_out = name.endswith(("wo.weight", "w2.weight", "w2"))
            nn.init.normal_(p, std=out_std if residual_out else std)

    def forward(self, tokens_BT: torch.Tensor) -> torch.Tensor:
        h_BTD = self.tok_embeddings(tokens_BT) if self.tok_embeddings is not None else tokens_BT
        for block in self.layers.values():
            h_BTD = block(h_BTD, self.rope)
        if self.norm is not None:
            h_BTD = self.norm(h_BTD)
        return self.output(h_BTD) if self.output is not None else h_BTD  # (B, T, V) logits

    def moe_modules(self) -> list[MoE]:
        return [m for m in self.modules() if isinstance(m, MoE)]
