"""Attention kinds: grouped-query (multi-head as its case kv_heads = heads) and multi-head latent
attention (MLA). Each supplies what the cost model reads of an attention block (`AttentionKind`):
its weights, its GEMMs and how tensor parallelism splits them, its q·k and value widths, what the
context-parallel ring passes, what it keeps for the backward. `ModelSpec.attention_kind` derives
the kind from the model's fields; a new kind is one class here and one line there.

Widths are per token; bytes are bf16 (`specs.gemm.BF16`) unless a caller passes its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bandwise.specs.gemm import Gemm


class AttentionKind(Protocol):
    """What the cost model reads of an attention block, whichever kind it is."""

    hidden: int
    heads: int

    @property
    def d_head(self) -> int:
        """Width of one head in the score (q·k) product."""
        ...

    @property
    def d_value(self) -> int:
        """Width of one head's value vector."""
        ...

    @property
    def key_value_heads(self) -> int:
        """Key/value heads the attention core reads, which tensor parallelism splits K and V by."""
        ...

    @property
    def rope_dim(self) -> int:
        """Channels of one query/key head that rotary embedding rotates."""
        ...

    @property
    def params(self) -> int: ...

    def gemms(self) -> list[Gemm]: ...

    def recomputed_gemms(self) -> list[Gemm]:
        """The GEMMs Megatron-Core's `mla_up_proj` recompute module runs again (none but MLA's)."""
        ...

    def saved_qkv_width(self, up_proj_recomputed: bool) -> int:
        """Query, key and value elements a token keeps as the attention kernel reads them."""
        ...

    @property
    def gate_width(self) -> int:
        """Output-gate logits a token keeps (0 without a gate)."""
        ...

    @property
    def latent_width(self) -> int:
        """Low-rank latents a token keeps whole on every TP rank (0 without latents)."""
        ...

    def output_grad_widths(self) -> tuple[int, int]:
        """(TP-split, replicated) output features of the GEMMs whose output gradients a split backward keeps."""
        ...


@dataclass(frozen=True, slots=True)
class GroupedQueryAttention:
    """Grouped-query attention (Ainslie et al. 2023, "GQA", Sec. 2): H query heads share kv key/value
    heads, kv = H being multi-head attention (Vaswani et al. 2017, Sec. 3.2.2). With `output_gate`
    the output is scaled by sigmoid(x·W_g), W_g projected beside the queries (Qiu et al. 2025, "Gated
    Attention for Large Language Models"; Qwen3-Next's q_proj is 2·H·d wide)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    output_gate: bool = False

    @property
    def d_head(self) -> int:
        return self.head_dim

    @property
    def d_value(self) -> int:
        return self.head_dim

    @property
    def key_value_heads(self) -> int:
        return self.kv_heads

    @property
    def rope_dim(self) -> int:
        return self.head_dim

    @property
    def params(self) -> int:
        """q h·H·d, k and v h·kv·d each, o H·d·h, and the gate's h·H·d."""
        h, H, d = self.hidden, self.heads, self.head_dim
        gate = h * H * d if self.output_gate else 0
        return h * H * d + 2 * h * self.kv_heads * d + H * d * h + gate

    def gemms(self) -> list[Gemm]:
        """One fused QKV(+gate) projection, column-parallel; the output projection, row-parallel."""
        H, d = self.heads, self.head_dim
        gate = H if self.output_gate else 0
        return [Gemm("qkv", (H + gate + 2 * self.kv_heads) * d, self.hidden), Gemm("o", self.hidden, H * d, split="row")]

    def recomputed_gemms(self) -> list[Gemm]:
        return []

    def saved_qkv_width(self, up_proj_recomputed: bool) -> int:
        return self.heads * self.d_head + self.kv_heads * (self.d_head + self.d_value)

    @property
    def gate_width(self) -> int:
        return self.heads * self.d_value if self.output_gate else 0

    @property
    def latent_width(self) -> int:
        return 0

    def output_grad_widths(self) -> tuple[int, int]:
        """q, k, v and o; the output gate's logits are left out (as they have been since the gate was added)."""
        return self.heads * self.d_head + self.kv_heads * (self.d_head + self.d_value) + self.hidden, 0


@dataclass(frozen=True, slots=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2, DeepSeek-AI 2024, Sec. 2.1): queries through a
    low-rank bottleneck c_Q (or projected directly when q_lora_rank = 0), keys and values
    up-projected per head from one compressed latent c_KV, and a decoupled rotary key k_R shared by
    all heads. The down-projections (W_DQ, W_DKV with W_KR) are replicated across TP ranks, the
    up-projections split by heads (Megatron-Core's `MLASelfAttention`)."""

    hidden: int
    heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def d_head(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def d_value(self) -> int:
        return self.v_head_dim

    @property
    def key_value_heads(self) -> int:
        """Keys and values are up-projected for every query head."""
        return self.heads

    @property
    def rope_dim(self) -> int:
        return self.qk_rope_head_dim

    @property
    def params(self) -> int:
        """W_DQ h·q_lora, W_UQ q_lora·H·(nope+rope) (or W_Q h·H·(nope+rope)), W_DKV+W_KR
        h·(kv_lora+rope), W_UK/W_UV kv_lora·H·(nope+v), W_O H·v·h (Sec. 2.1, Eqs. 9-19)."""
        h, H = self.hidden, self.heads
        q = h * self.q_lora_rank + self.q_lora_rank * H * self.d_head if self.q_lora_rank else h * H * self.d_head
        kv = h * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv += self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv + H * self.v_head_dim * h

    def gemms(self) -> list[Gemm]:
        h, H = self.hidden, self.heads
        if self.q_lora_rank:
            q = [Gemm("q_down", self.q_lora_rank, h, split="none"), Gemm("q_up", H * self.d_head, self.q_lora_rank)]
        else:
            q = [Gemm("q", H * self.d_head, h)]
        return q + [
            Gemm("kv_down", self.kv_lora_rank + self.qk_rope_head_dim, h, split="none"),
            Gemm("kv_up", H * (self.qk_nope_head_dim + self.v_head_dim), self.kv_lora_rank),
            Gemm("o", h, H * self.v_head_dim, split="row"),
        ]

    def recomputed_gemms(self) -> list[Gemm]:
        """The query and key/value up-projections (Megatron-Core `--recompute-modules mla_up_proj`)."""
        return [g for g in self.gemms() if g.name in ("q_up", "kv_up")]

    def saved_qkv_width(self, up_proj_recomputed: bool) -> int:
        """H query and H key heads of d_head and H value heads of d_value, or none when the
        up-projections that produce them run again in the backward."""
        return 0 if up_proj_recomputed else self.heads * (2 * self.d_head + self.d_value)

    @property
    def gate_width(self) -> int:
        return 0

    @property
    def latent_width(self) -> int:
        """c_Q, c_KV and the shared rotary key k_R, computed on every TP rank."""
        return self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim

    def output_grad_widths(self) -> tuple[int, int]:
        """The up-projections and o split over TP; the two down-projections whole on every rank."""
        H = self.heads
        return H * self.d_head + H * (self.qk_nope_head_dim + self.d_value) + self.hidden, self.latent_width
