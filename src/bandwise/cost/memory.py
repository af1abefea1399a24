"""Memory per device: model states under ZeRO/FSDP, activations under recomputation, buffers.

Model states (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1 and Fig. 1): mixed-precision Adam keeps
2 bytes of half-precision weights, 2 of gradients and K = 12 of fp32 master weights, momentum and
variance per parameter. Sharded over N data-parallel ranks:
    stage 0: 16 Ψ    stage 1: 4 Ψ + 12 Ψ/N    stage 2: 2 Ψ + 14 Ψ/N    stage 3: 16 Ψ/N

Activations per layer (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", Sec. 4): for GPT with dropout, no recomputation and no parallelism the saved
tensors of one layer take s·b·h·(34 + 5·a·s/h) bytes; tensor + sequence parallelism divides all
of it by t; selective recomputation of the attention core removes the 5·a·s/h term; full
recomputation keeps only the layer input, 2·s·b·h/t. bandwise's `selective` also recomputes the
MLP activation function (Megatron-Core's "core_attn" + "mlp act"/"moe_act" recompute modules),
which drops its output (2 bytes per intermediate element) at the cost of one element-wise pass:
with FlashAttention there is no score matrix left to drop, and this is the cheap saving that remains. `activation_bytes_per_token` itemizes the
saved tensors so that the same count covers SwiGLU, GQA, MLA, MoE and FlashAttention (which saves
no score matrix), and reproduces the 34 + 5as/h total for the paper's GPT.
"""

from __future__ import annotations

import numpy as np

from bandwise.cost.flops import BF16
from bandwise.specs.model import ModelSpec

ADAM_STATE_BYTES = 12  # fp32 master weight + momentum + variance (ZeRO's K = 12)
GIB = 2**30


def model_state_bytes(params: np.ndarray, shard: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """Bytes of weights, gradients and optimizer state for `params` parameters on one device."""
    params = np.asarray(params, dtype=float)
    shard = np.maximum(np.asarray(shard, dtype=float), 1.0)
    zero = np.asarray(zero)
    return np.select(
        [zero == 0, zero == 1, zero == 2],
        [
            (2 * BF16 + ADAM_STATE_BYTES) * params,
            2 * BF16 * params + ADAM_STATE_BYTES * params / shard,
            BF16 * params + (BF16 + ADAM_STATE_BYTES) * params / shard,
        ],
        (2 * BF16 + ADAM_STATE_BYTES) * params / shard,
    )


def activation_bytes_per_token(
    m: ModelSpec, *, moe_layer: bool, selective: bool = False, flash: bool = True, dropout: bool = False, fp8: bool = False
) -> tuple[float, float]:
    """(bytes saved for backward per token of one layer, the part replicated across TP ranks).

    The first number is for the whole hidden width; tensor+sequence parallelism divides it by t
    except for the second number (MLA's low-rank latents, computed on every TP rank). With fp8
    GEMMs the inputs of the linear layers are kept in their 1-byte quantized form for the weight
    gradient (DeepSeek-V3 report, Sec. 3.3.3; Transformer Engine keeps the fp8 copy likewise).
    """
    h, H, s = m.hidden, m.heads, m.seq_len
    g = 1.0 if fp8 else float(BF16)  # bytes per element of a linear layer's saved input
    b = 0.0
    # attention block: RMSNorm input, the QKV GEMM input, q/k/v as the kernel reads them, its output
    b += BF16 * h + g * h
    replicated = 0.0
    if m.is_mla:
        b += BF16 * H * (2 * m.d_head + m.d_value)
        replicated = BF16 * ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim)
    else:
        b += BF16 * (H * m.d_head + m.n_kv_heads * (m.d_head + m.d_value))
    b += BF16 * H * m.d_value  # attention output (kept by the kernel) = o-projection input
    if not flash and not selective:
        # softmax output (2 bytes) + dropout mask (1) + dropout output (2) per score: 5·a·s per token
        b += (5 if dropout else 2) * H * s
    if dropout:
        b += h  # 1-byte mask after the attention output projection
    # MLP block: RMSNorm input and the GEMM input
    b += BF16 * h + g * h
    # gated: w1 and w3 outputs + their product; else: fc1 output + GELU output. Selective
    # recomputation drops the product / GELU output (the activation function is re-run).
    per_f = (6 if m.gated_mlp else 4) - (2 if selective else 0)  # bytes per intermediate element
    per_f -= (BF16 - g) if not selective else 0.0  # the down-projection's input, quantized
    if moe_layer:
        b += per_f * m.shared_experts * m.shared_ffn
        b += m.top_k * (g * h + per_f * m.expert_ffn)  # permuted token copies + expert intermediates
        b += 4 * m.experts  # fp32 router scores
    else:
        b += per_f * m.ffn
    if dropout:
        b += h  # 1-byte mask after the MLP
    return b, replicated


def layer_input_bytes_per_token(m: ModelSpec) -> float:
    """What full recomputation keeps per layer: the layer's input (Korthikanti Sec. 4.2)."""
    return BF16 * m.hidden


def logits_bytes_per_token(m: ModelSpec) -> float:
    """The output layer's fp32 logits kept for the cross-entropy backward (Korthikanti Sec. 4.3: 4·s·b·v)."""
    return 4.0 * m.vocab
