"""The GEMMs of one transformer layer, and its memory-bound element-wise traffic.

The layer kinds state their GEMMs (`specs.attention`, `specs.ffn`, `specs.gemm.Gemm`): a forward
GEMM costs 2·m·n·k FLOPs for m tokens, its backward twice that (Narayanan et al. 2021, Sec. 3.3.1);
`Gemm.split` says how tensor and expert parallelism divide it.
"""

from __future__ import annotations

from bandwise.specs.gemm import BF16, Gemm
from bandwise.specs.model import ModelSpec

__all__ = ["BF16", "Gemm"]  # their home is specs.gemm; re-exported for the cost model's modules


def layer_flops_per_token(gemms: list[Gemm]) -> float:
    """Forward GEMM FLOPs per token of one layer (no tensor-parallel split)."""
    return sum(2.0 * g.n * g.k * g.rows_per_token for g in gemms)


def attention_core_flops_per_token(m: ModelSpec, causal: bool = True) -> float:
    """Forward FLOPs per token of one layer's scores (Q·K^T) and weighted values (P·V).

    2·s·H·d_qk + 2·s·H·d_v over the full s×s score matrix; causal masking skips half of it
    (FlashAttention-2 skips fully masked blocks; Dao 2023, Sec. 3.1.1). Sliding-window layers
    (Longformer, Beltagy et al. 2020; Mistral 7B, Jiang et al. 2023, Sec. 2) score a query against
    at most w keys, w - w(w - 1)/(2s) on average (`specs.model.causal_window_pairs`), and fused
    kernels skip the blocks outside the band as they skip the masked ones (FlashAttention-2's
    `window_size`); the figure is the mean over layers, windowed and full
    (`ModelSpec.attention_share`). Chunked layers (Llama 4) score a query against the keys of its
    own chunk (`specs.model.causal_chunk_pairs`); a block-sparse kernel (FlexAttention's block
    mask, which transformers builds from `create_chunked_causal_mask`) skips the other blocks.
    """
    flops = 2.0 * m.seq_len * m.heads * (m.d_head + m.d_value)
    if m.has_local_attention or m.attention_layers != m.layers:  # the mean counts layers without attention as none
        flops *= m.attention_share()
    return flops / 2 if causal else flops


def elementwise_bytes_per_token(m: ModelSpec, moe_layer: bool, eager: bool = False) -> float:
    """HBM bytes moved per token by the memory-bound kernels of one layer's forward pass.

    Fused kernels (Megatron/Transformer Engine, torch.compile, XLA) read and write each bf16
    tensor once: RMSNorm 2+2 bytes per element, residual add 2+2+2, RoPE 2+2 on q and k, SwiGLU
    reads the two projections and writes their product (4+2 per intermediate element), GELU 2+2.
    Eager PyTorch runs each op as its own kernel, in fp32 where the code upcasts:
      RMSNorm  x.float() 2+4, pow 4+4, mean 4, x·rsqrt 4+4, cast 4+2, ·weight 2+2 = 36 per element
      RoPE     x.float() 2+4, complex multiply 4+4, cast 4+2 = 20 per q/k element
      SwiGLU   silu 2+2, multiply 4+2 = 10 per intermediate element
    (torchtitan's Llama: nn.RMSNorm-style norm, complex-number RoPE, F.silu(w1(x)) * w3(x)).
    MoE layers add the token permutation before and after the experts (read and write top_k·h
    each way).
    """
    h, ffn = m.hidden, m.ffn_kind if moe_layer else m.dense_mlp
    f_total, permute = ffn.intermediate_per_token, ffn.permute_bytes_per_token
    rope = 20 if eager else 4
    return 2 * block_bytes_per_element(eager) * h + rope * rope_width(m) + activation_bytes_per_element(m, eager) * f_total + permute


def block_bytes_per_element(eager: bool = False) -> int:
    """A block's norm and residual add, bytes per hidden element (`elementwise_bytes_per_token`): fused 4 + 6, eager 36 + 6."""
    return (36 if eager else 4) + 6


def activation_bytes_per_element(m: ModelSpec, eager: bool = False) -> int:
    """The activation function's bytes per intermediate element (`elementwise_bytes_per_token`): SwiGLU fused 6,
    eager 10; GELU 4."""
    return (10 if eager else 6) if m.gated_mlp else 4


def outside_tp_bytes_per_token(m: ModelSpec, eager: bool = False) -> float:
    """The part of `elementwise_bytes_per_token` (or `hybrid_elementwise_bytes_per_token`) outside the
    tensor-parallel regions: each block's norm and residual add. Sequence parallelism splits them along
    the sequence over the TP ranks; without it every TP rank runs them on the whole micro-batch
    (Korthikanti et al. 2022, Sec. 4.2.2)."""
    blocks = 2 if not m.is_hybrid else (m.attention_layers + m.mamba_layers + m.linear_attention_layers
                                        + sum(count for _, count in m.ffn_layers)) / m.layers
    return blocks * block_bytes_per_element(eager) * m.hidden


def rope_width(m: ModelSpec) -> int:
    """q and k elements per token that the rotary pass reads and writes, counted on whole heads: H
    query heads and the key heads the core reads (`AttentionKind.key_value_heads`), d_head each."""
    a = m.attention_kind
    return a.heads * a.d_head + a.key_value_heads * a.d_head


def hybrid_elementwise_bytes_per_token(m: ModelSpec, mixer_bytes: float, eager: bool = False) -> float:
    """`elementwise_bytes_per_token` of the mean layer of a hybrid: each block (a mixer, attention or
    an MLP) has its own norm and residual add; attention adds RoPE (and the output gate's sigmoid
    and product, 2 + 2 + 2 per element), the MLPs their activation and MoE's permutation, the mixers
    `mixer_bytes` (the mean over layers of `cost.mixers.mixer_elementwise_bytes_per_token`)."""
    h, L = m.hidden, m.layers
    rope = 20 if eager else 4
    act = activation_bytes_per_element(m, eager)
    block = block_bytes_per_element(eager) * h
    gate = 6 * m.attention_kind.gate_width
    mixers = m.mamba_layers + m.linear_attention_layers
    attention = m.attention_layers * (block + rope * rope_width(m) + gate) + mixers * block + L * mixer_bytes
    mlps = sum(count * (block + act * ffn.intermediate_per_token + ffn.permute_bytes_per_token) for ffn, count in m.ffn_layers)
    return (attention + mlps) / L


def fp8_gemms(m: ModelSpec, moe_layer: bool) -> list[Gemm]:
    """The GEMMs of one layer that run in fp8: every linear layer but the MoE router, which fp8 recipes
    keep in higher precision (DeepSeek-V3 report, Sec. 3.3.1: "MoE gating modules"; Megatron-Core's
    router is a plain torch GEMM, not a Transformer Engine linear)."""
    ffn = m.ffn_kind if moe_layer else m.dense_mlp
    return [g for g in m.attention_kind.gemms() + ffn.gemms() if g.name != "router"]


def fp8_operand_elements_per_token(m: ModelSpec, moe_layer: bool) -> tuple[float, float]:
    """(elements of the fp8 GEMMs' inputs, elements of their outputs) per token of one layer: what the
    forward casts, and what the backward casts as the outputs' gradients."""
    gs = fp8_gemms(m, moe_layer)
    return sum(g.rows_per_token * g.k for g in gs), sum(g.rows_per_token * g.n for g in gs)


def fp8_cast_bytes_per_token(m: ModelSpec, moe_layer: bool, cast_bytes: float) -> float:
    """A third of one layer's fp8 cast traffic per token: the recipe's `cast_bytes` (`cost.fp8`) for
    every element of the GEMMs' inputs and of their outputs' gradients, forward and backward together.
    The layer's element-wise time counts its forward once and twice again in the backward
    (`LayerCompute.backward`), so the forward carries a third of the total."""
    inputs, outputs = fp8_operand_elements_per_token(m, moe_layer)
    return cast_bytes * (inputs + outputs) / 3
