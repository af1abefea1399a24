"""Llama-style decoder built from a `ModelSpec`, dense or DeepSeek-style MoE.

RMSNorm (Zhang & Sennrich 2019), rotary position embedding (Su et al. 2021, "RoFormer", eq. 34),
grouped-query attention (Ainslie et al. 2023) or DeepSeek's multi-head latent attention, through
`scaled_dot_product_attention` (which takes the flash / memory-efficient kernel when the device
has one), SwiGLU (Shazeer 2020) or GPT's GELU MLP. A model with tied embeddings has one matrix
for the embedding and the output head (Press & Wolf 2017); under pipeline parallelism the first
and last stages each hold a copy, which start equal and take the sum of both gradients after
every backward, so they stay equal (`parallel/tied.py`, Megatron-LM's way).
DeepSeek-V3's multi-token-prediction module is not built. The layout
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

import contextlib
import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bandwise.errors import BandwiseError
from bandwise.runtime.init import init_parameters
from bandwise.runtime.layers import FeedForward, Linear, RMSNorm, plain, project, recompute_guard
from bandwise.runtime.local_attention import MaskCache, local_attention
from bandwise.runtime.mamba import Mamba2Mixer
from bandwise.runtime.moe import MoE, MoEConfig
from bandwise.runtime.ops import apply_rope, rope_heads
from bandwise.specs.layer_order import LayerKind, layer_kinds
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
    seed: int | None = None
    """Seed of the weight init; None takes `torch.initial_seed()` (the last `torch.manual_seed`)."""


def rope_tables(seq_len: int, head_dim: int, theta: float) -> torch.Tensor:
    """e^{i·position·θ^(-2i/Dh)} = cos + i·sin, as a complex (T, 1, Dh/2): the turn each pair of a
    head is multiplied by (RoFormer eq. 34), shaped to broadcast over the heads. Held complex, not as
    (cos, sin) pairs, so a call of `ops.apply_rope` slices and views nothing of it (three ops a call).
    cos and sin are computed in fp64 and stored in fp32 (fp64 under an fp64 default dtype)."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)  # (T, Dh/2)
    pairs = torch.stack((angles.cos(), angles.sin()), dim=-1).to(torch.promote_types(torch.get_default_dtype(), torch.float32))
    return torch.view_as_complex(pairs)[:, None].contiguous()


class Attention(nn.Module):
    """Causal GQA. Head counts are read from the weight shapes at run time, so the same code
    runs on a tensor-parallel shard that holds H/tp query heads and Hkv/tp key/value heads.
    With a window or a chunk the layer attends locally (`runtime.local_attention`)."""

    def __init__(self, spec: ModelSpec, *, window: int = 0, chunk: int = 0, masks: MaskCache | None = None) -> None:
        super().__init__()
        self.head_dim = spec.d_head
        self.window, self.chunk = window, chunk
        self.masks = masks if masks is not None else MaskCache()
        self.wq = Linear(spec.hidden, spec.heads * self.head_dim)
        self.wk = Linear(spec.hidden, spec.n_kv_heads * self.head_dim)
        self.wv = Linear(spec.hidden, spec.n_kv_heads * self.head_dim)
        self.wo = Linear(spec.heads * self.head_dim, spec.hidden)
        self.recompute_core = False
        """Selective recomputation: keep no SDPA activations, re-run it in backward."""

    def forward(self, x_BTD: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        B, T, D = x_BTD.shape
        x_ND = x_BTD.view(B * T, D)  # once for the three projections, each of which would flatten it again
        # (B, heads, T, Dh); q and k viewed, rotated and transposed in one node (`ops.rope_heads`)
        q, k, v = project(x_ND, self.wq, self.wk, self.wv)  # one node, the input's gradient summed inside
        q, k = rope_heads(q, rope, B, self.head_dim), rope_heads(k, rope, B, self.head_dim)
        v = v.view(B, T, -1, self.head_dim).transpose(1, 2)
        # GQA inside the kernel (`enable_gqa`): K/V are read at Hkv heads, not expanded to H heads
        # and saved so for backward (the dry run measured 3.5x the saved bytes of one Llama 3 8B
        # attention call with the expansion)
        gqa = k.shape[1] != q.shape[1]
        if self.window or self.chunk:
            core = functools.partial(local_attention, window=self.window, chunk=self.chunk, masks=self.masks)
        else:
            core = functools.partial(F.scaled_dot_product_attention, is_causal=True, enable_gqa=gqa)
        if self.recompute_core and torch.is_grad_enabled():
            out = checkpoint(core, q, k, v, use_reentrant=False)
        else:
            out = core(q, k, v)  # (B, H, T, Dh)
        if not plain(self.wo):  # a tensor-parallel plan lays out (B, T, ·) (`layers.plain`)
            return self.wo(out.transpose(1, 2).reshape(B, T, -1))
        return self.wo(out.transpose(1, 2).reshape(B * T, -1)).view(B, T, -1)  # rows: see FeedForward.forward


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, Liu et al. 2024, Sec. 2.1.2-2.1.3; DeepSeek-V3 Sec. 2.1.1).

    Queries through a low-rank latent (W_DQ, RMSNorm, W_UQ) or one matrix; keys and values
    through a shared latent c_KV (W_DKV, RMSNorm, W_UK/W_UV as one `wkv_b`); a decoupled RoPE key
    of qk_rope_head_dim shared by all heads (W_KR, computed with W_DKV as one `wkv_a`). Score
    width nope + rope, value width v_head_dim; SDPA's default scale 1/sqrt(nope + rope).

    Under tensor parallelism the latent projections run whole on every TP rank (as the planner's
    memory model counts them) and the up-projections are split by heads. The shared RoPE key feeds
    every rank's heads, so its gradient is summed over the TP group (`tp_group`), the f operator of
    Megatron-LM (Shoeybi et al. 2019, Sec. 3); the column-parallel up-projections already sum the
    latents' gradients.
    """

    def __init__(self, spec: ModelSpec, eps: float) -> None:
        super().__init__()
        H = spec.heads
        self.nope, self.rope_dim, self.v_dim, self.kv_lora = spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim, spec.kv_lora_rank
        qk = self.nope + self.rope_dim
        if spec.q_lora_rank:
            self.wq_a: nn.Module | None = nn.Linear(spec.hidden, spec.q_lora_rank, bias=False)
            self.q_norm: nn.Module | None = RMSNorm(spec.q_lora_rank, eps)
            self.wq_b: nn.Module | None = nn.Linear(spec.q_lora_rank, H * qk, bias=False)
            self.wq: nn.Module | None = None
        else:
            self.wq_a = self.q_norm = self.wq_b = None
            self.wq = nn.Linear(spec.hidden, H * qk, bias=False)
        self.wkv_a = nn.Linear(spec.hidden, self.kv_lora + self.rope_dim, bias=False)
        self.kv_norm = RMSNorm(self.kv_lora, eps)
        self.wkv_b = nn.Linear(self.kv_lora, H * (self.nope + self.v_dim), bias=False)
        self.wo = nn.Linear(H * self.v_dim, spec.hidden, bias=False)
        self.recompute_core = False
        self.tp_group = None
        """The tensor-parallel group, set by `apply_tensor_parallel`."""

    def forward(self, x_BTD: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        B, T, _ = x_BTD.shape
        q = self.wq(x_BTD) if self.wq is not None else self.wq_b(self.q_norm(self.wq_a(x_BTD)))
        q_nope, q_pe = q.view(B, T, -1, self.nope + self.rope_dim).split([self.nope, self.rope_dim], dim=-1)
        c_kv, k_pe = self.wkv_a(x_BTD).split([self.kv_lora, self.rope_dim], dim=-1)
        k_pe = apply_rope(k_pe.unsqueeze(2), rope)  # (B, T, 1, rope): one key for every head
        if self.tp_group is not None:
            k_pe = _SumGradOverGroup.apply(k_pe, self.tp_group)
        k_nope, v = self.wkv_b(self.kv_norm(c_kv)).view(B, T, -1, self.nope + self.v_dim).split([self.nope, self.v_dim], dim=-1)
        H = q_nope.shape[2]
        q = torch.cat([q_nope, apply_rope(q_pe, rope)], dim=-1).transpose(1, 2)  # (B, H, T, nope+rope)
        k = torch.cat([k_nope, k_pe.expand(B, T, H, self.rope_dim)], dim=-1).transpose(1, 2)
        v = v.transpose(1, 2)
        # SDPA's fused kernels take one head dim for q, k and v; with v narrower (128 against 192)
        # it falls back to the math kernel, which keeps the T×T scores in fp32 for backward (17 GB
        # a DeepSeek-V3 layer at 4k tokens, measured by the dry run). Zero-padding v keeps the
        # flash kernel; the padded columns of the output are zero and are cut off.
        pad = q.shape[-1] - v.shape[-1]
        v = F.pad(v, (0, pad)) if pad > 0 else v
        if self.recompute_core and torch.is_grad_enabled():
            out = checkpoint(F.scaled_dot_product_attention, q, k, v, is_causal=True, use_reentrant=False)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, q's head dim)
        out = out[..., : self.v_dim] if pad > 0 else out
        if not plain(self.wo):  # a tensor-parallel plan lays out (B, T, ·) (`layers.plain`)
            return self.wo(out.transpose(1, 2).reshape(B, T, -1))
        return self.wo(out.transpose(1, 2).reshape(B * T, -1)).view(B, T, -1)  # rows: see FeedForward.forward


class _SumGradOverGroup(torch.autograd.Function):
    """Identity forward; backward all-reduces the gradient over `group` (Megatron-LM's f operator)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:  # type: ignore[override]
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        import torch.distributed as dist

        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def _recompute_contexts() -> tuple[contextlib.AbstractContextManager, contextlib.AbstractContextManager]:
    """(forward, recompute) contexts for `checkpoint`: the re-run is marked for the MoE counters."""
    return contextlib.nullcontext(), recompute_guard()


class Block(nn.Module):
    """A pre-norm residual block of one `LayerKind`: attention or a Mamba-2 mixer, then a dense or
    MoE MLP; a hybrid's block may hold a mixer alone or an MLP alone (Nemotron-H's "M", "*" and "-"
    blocks), whose absent half is None."""

    def __init__(self, spec: ModelSpec, cfg: ModelConfig, layer: int, kind: LayerKind | None = None,
                 masks: MaskCache | None = None) -> None:
        super().__init__()
        kind = kind or LayerKind(mixer="attention", mlp="moe" if spec.is_moe and layer >= spec.dense_layers else "dense")
        self.kind = kind
        self.attention_norm: nn.Module | None = None
        self.attention: nn.Module | None = None
        self.mixer_norm: nn.Module | None = None
        self.mixer: nn.Module | None = None
        if kind.mixer == "attention":
            self.attention_norm = RMSNorm(spec.hidden, cfg.norm_eps)
            self.attention = LatentAttention(spec, cfg.norm_eps) if spec.is_mla else Attention(spec, window=kind.window, chunk=kind.chunk, masks=masks)
        elif kind.mixer == "mamba2":
            self.mixer_norm = RMSNorm(spec.hidden, cfg.norm_eps)
            self.mixer = Mamba2Mixer(spec.mamba, spec.hidden, cfg.norm_eps)
        self.moe_layer = kind.mlp == "moe"
        self.ffn_norm: nn.Module | None = None
        self.feed_forward: nn.Module | None = None
        if kind.mlp != "none":
            self.ffn_norm = RMSNorm(spec.hidden, cfg.norm_eps)
            self.feed_forward = (
                MoE(spec, cfg.moe or MoEConfig()) if self.moe_layer
                else FeedForward(spec.hidden, spec.ffn, spec.gated_mlp, squared_relu=spec.squared_relu_mlp)
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
        h = x_BTD
        if self.attention is not None:
            h = h + self.attention(self.attention_norm(h), rope)
        if self.mixer is not None:
            h = h + self.mixer(self.mixer_norm(h))
        if self.feed_forward is not None:
            h = h + self.feed_forward(self.ffn_norm(h))
        return h


TIED_EMBEDDING, TIED_HEAD = "tok_embeddings.weight", "output.weight"
"""The names of a tied model's one matrix in the embedding and in the output head."""


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec, cfg: ModelConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or ModelConfig()
        if self.rope_dim(spec) % 2:
            raise BandwiseError(f"model {spec.name!r}: rotary width {self.rope_dim(spec)} must be even for rotary embeddings")
        self.spec, self.cfg = spec, cfg
        self.tok_embeddings: nn.Module | None = nn.Embedding(spec.vocab, spec.hidden)
        masks = MaskCache()  # one window / chunk mask for all the layers that use it
        self.layers = nn.ModuleDict({str(i): Block(spec, cfg, i, kind, masks) for i, kind in enumerate(layer_kinds(spec))})
        self.norm: nn.Module | None = RMSNorm(spec.hidden, cfg.norm_eps)
        self.output: nn.Module | None = Linear(spec.hidden, spec.vocab)
        self.tie_head()
        # Not persistent: derived from the spec, and a pipeline stage may hold no block at all.
        self.register_buffer("rope", rope_tables(spec.seq_len, self.rope_dim(spec), cfg.rope_theta), persistent=False)
        if not self.rope.is_meta:  # built on `meta`, the trainer initialises after sharding
            self.init_weights()

    def tie_head(self) -> None:
        """Point the head at the embedding's matrix, where this part holds both ends of a tied model."""
        if self.spec.tied_embeddings and self.tok_embeddings is not None and self.output is not None:
            self.output.weight = self.tok_embeddings.weight

    def _apply(self, fn, recurse=True):  # nn.Module's signature
        # moving off `meta` (`to_empty`) gives each module a Parameter of its own: tie them again
        out = super()._apply(fn, recurse)
        self.tie_head()
        return out

    @staticmethod
    def rope_dim(spec: ModelSpec) -> int:
        """Width rotated by RoPE: the whole head, or MLA's decoupled rope part."""
        return spec.attention_kind.rope_dim

    def init_weights(self, seed: int | None = None) -> None:
        """N(0, init_std) for matrices, GPT-2's 1/sqrt(2·layers) scaling on the residual outputs,
        ones for the norms; then the buffers. Works on the whole model or on one parallelised part
        of it (DTensor shards, a pipeline stage, local experts) and gives every layout the same
        values (`runtime/init.py`)."""
        if seed is None:
            seed = self.cfg.seed if self.cfg.seed is not None else torch.initial_seed()
        std = self.cfg.init_std
        init_parameters(
            self, seed=seed, std=std, residual_std=std / (2 * self.spec.layers) ** 0.5,
            residual_names=("wo.weight", "w2.weight", "w2", "out_proj.weight"),
            aliases={TIED_HEAD: TIED_EMBEDDING} if self.spec.tied_embeddings else None,
        )
        for m in self.modules():
            if isinstance(m, Mamba2Mixer):
                m.init_ssm()
        self.init_buffers()

    @torch.no_grad()
    def init_buffers(self) -> None:
        """Buffers derived from the spec or starting at zero, on the device the model is on."""
        self.rope = rope_tables(self.spec.seq_len, self.rope_dim(self.spec), self.cfg.rope_theta).to(self.rope.device)
        for moe in self.moe_modules():
            moe.expert_bias.zero_()
            moe.tokens_per_expert.zero_()

    def forward(self, tokens_BT: torch.Tensor) -> torch.Tensor:
        h_BTD = self.tok_embeddings(tokens_BT) if self.tok_embeddings is not None else tokens_BT
        for block in self.layers.values():
            h_BTD = block(h_BTD, self.rope)
        if self.norm is not None:
            h_BTD = self.norm(h_BTD)
        return self.output(h_BTD) if self.output is not None else h_BTD  # (B, T, V) logits

    def moe_modules(self) -> list[MoE]:
        return [m for m in self.modules() if isinstance(m, MoE)]
