"""The GEMMs of one transformer layer, and its memory-bound element-wise traffic.

Each GEMM is (name, n_out, k_in, tokens_per_token, split) for Y[m, n] = X[m, k] · W[k, n] with
m = tokens: a forward GEMM costs 2·m·n·k FLOPs, its backward twice that (input and weight
gradients; Narayanan et al. 2021, Sec. 3.3.1). `split` says how tensor parallelism divides it:
'col' splits n, 'row' splits k (Megatron-LM, Shoeybi et al. 2019, Sec. 3); 'expert' GEMMs are
not tensor-parallel (experts shard over EP), and `tokens_per_token` is how many rows each token
contributes (top_k for routed experts).
"""

from __future__ import annotations

from dataclasses import dataclass

from bandwise.specs.model import ModelSpec

BF16 = 2  # bytes per element of activations and communicated weights


@dataclass(frozen=True, slots=True)
class Gemm:
    name: str
    n: int
    k: int
    rows_per_token: float = 1.0
    split: str = "col"  # 'col', 'row', 'expert' or 'none'


def attention_gemms(m: ModelSpec) -> list[Gemm]:
    h, H = m.hidden, m.heads
    if m.is_mla:
        # DeepSeek-V2 Sec. 2.1: queries through a low-rank bottleneck, keys/values from the
        # compressed latent c_KV; the down-projections are replicated across TP ranks.
        q = [Gemm("q_down", m.q_lora_rank, h, split="none"), Gemm("q_up", H * m.d_head, m.q_lora_rank)] if m.q_lora_rank else [Gemm("q", H * m.d_head, h)]
        return q + [
            Gemm("kv_down", m.kv_lora_rank + m.qk_rope_head_dim, h, split="none"),
            Gemm("kv_up", H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
            Gemm("o", h, H * m.v_head_dim, split="row"),
        ]
    d, kv = m.d_head, m.n_kv_heads
    gate = H if m.attention_output_gate else 0  # the output gate is projected beside the queries
    return [Gemm("qkv", (H + gate + 2 * kv) * d, h), Gemm("o", h, H * d, split="row")]


def mlp_gemms(m: ModelSpec, ffn: int, rows_per_token: float = 1.0, split_in: str = "col", split_out: str = "row") -> list[Gemm]:
    up = Gemm("mlp_up", (2 if m.gated_mlp else 1) * ffn, m.hidden, rows_per_token, split_in)
    return [up, Gemm("mlp_down", m.hidden, ffn, rows_per_token, split_out)]


def moe_layer_gemms(m: ModelSpec) -> list[Gemm]:
    """Attention, router, shared experts (tensor-parallel like a dense MLP) and routed experts."""
    shared = mlp_gemms(m, m.shared_ffn * m.shared_experts) if m.shared_experts else []
    routed = mlp_gemms(m, m.expert_ffn, rows_per_token=m.top_k, split_in="expert", split_out="expert")
    return attention_gemms(m) + [Gemm("router", m.experts, m.hidden, split="none")] + shared + routed


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
    h = m.hidden
    qk = m.heads * m.d_head + (m.heads if m.is_mla else m.n_kv_heads) * m.d_head
    if moe_layer:
        f_total = m.top_k * m.expert_ffn + m.shared_experts * m.shared_ffn
        permute = BF16 * 2 * 2 * m.top_k * h
    else:
        f_total, permute = m.ffn, 0
    norm, rope = (36, 20) if eager else (4, 4)
    act = (10 if eager else 6) if m.gated_mlp else 4
    return 2 * norm * h + 2 * 6 * h + rope * qk + act * f_total + permute


def hybrid_elementwise_bytes_per_token(m: ModelSpec, mixer_bytes: float, eager: bool = False) -> float:
    """`elementwise_bytes_per_token` of the mean layer of a hybrid: each block (a mixer, attention or
    an MLP) has its own norm and residual add; attention adds RoPE (and the output gate's sigmoid
    and product, 2 + 2 + 2 per element), the MLPs their activation and MoE's permutation, the mixers
    `mixer_bytes` (the mean over layers of `cost.mixers.mixer_elementwise_bytes_per_token`)."""
    h, L = m.hidden, m.layers
    norm, rope = (36, 20) if eager else (4, 4)
    act = (10 if eager else 6) if m.gated_mlp else 4
    block = norm * h + 6 * h
    qk = m.heads * m.d_head + (m.heads if m.is_mla else m.n_kv_heads) * m.d_head
    gate = 6 * m.heads * m.d_value if m.attention_output_gate else 0
    mixers = m.mamba_layers + m.linear_attention_layers
    attention = m.attention_layers * (block + rope * qk + gate) + mixers * block + L * mixer_bytes
    mlps = m.n_dense_mlp_layers * (block + act * m.ffn)
    if m.is_moe:
        mlps += m.moe_layers * (block + act * (m.top_k * m.expert_ffn + m.shared_experts * m.shared_ffn) + BF16 * 2 * 2 * m.top_k * h)
    return (attention + mlps) / L


FP8_CAST_BYTES = 2 + 1 + 2
"""HBM bytes per element to quantize a GEMM input to fp8: read the bf16 tensor for its absolute
maximum (2), read it again and write the 1-byte copy (2 + 1) (Micikevicius et al. 2022, "FP8
Formats for Deep Learning", Sec. 4: per-tensor scaling from the amax; Transformer Engine's cast)."""


def fp8_cast_bytes_per_token(m: ModelSpec, moe_layer: bool) -> float:
    """Bytes per token of one layer's forward fp8 casts: the inputs of the QKV, output, MLP-up and
    MLP-down GEMMs (the backward casts the matching output gradients, twice the traffic in all)."""
    f_total = m.top_k * m.expert_ffn + m.shared_experts * m.shared_ffn if moe_layer else m.ffn
    up_inputs = m.hidden * (1 + (m.top_k + m.shared_experts if moe_layer else 1))
    return FP8_CAST_BYTES * (up_inputs + m.heads * m.d_value + f_total)
