"""Memory per device: model states under ZeRO/FSDP, activations under recomputation, buffers.

Model states (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1 and Fig. 1): mixed-precision Adam keeps
2 bytes of half-precision weights, 2 of gradients and K = 12 of fp32 master weights, momentum and
variance per parameter. Sharded over N data-parallel ranks:
    stage 0: 16 Ψ    stage 1: 4 Ψ + 12 Ψ/N    stage 2: 2 Ψ + 14 Ψ/N    stage 3: 16 Ψ/N
Frameworks that accumulate and reduce gradients in fp32 keep 4-byte gradients instead of 2:
Megatron-LM's table for bf16 parameters with fp32 gradients gives 18 bytes per parameter, and
6 + 12/d with its distributed optimizer (ZeRO-1) (Megatron-LM docs/source/api-guide/
dist_optimizer.md); FSDP2 with reduce_dtype=float32 keeps fp32 sharded parameters (the master copy),
fp32 sharded gradients and fp32 moments, 16/N. Korthikanti et al. 2022, Fig. 1, count 18 bytes per
parameter of 12·L·h² for their Megatron-LM runs. DeepSeek-V3 keeps the AdamW moments in bf16 (report
Sec. 3.3.3 "Low-Precision Optimizer States"): 2 + 2 instead of 4 + 4 bytes.

Activations per layer (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", Sec. 4): for GPT with dropout, no recomputation and no parallelism the saved
tensors of one layer take s·b·h·(34 + 5·a·s/h) bytes (Eq. 1). Tensor parallelism without sequence
parallelism divides all but 10·s·b·h of it by t: the two layer-norm inputs (4), the inputs of the
QKV and first MLP GEMMs (4) and the two dropout masks (2) stay whole on every rank (Eq. 2,
s·b·h·(10 + 24/t + 5·a·s/(h·t))); with sequence parallelism everything divides by t (Eq. 4).
Selective recomputation (Sec. 5) re-runs modules in the backward instead of keeping their outputs;
the modules follow Megatron-Core's `--recompute-modules` names (`RECOMPUTE_MODULES`): `core_attn`
is the paper's selective recomputation and removes the 5·a·s/h term, `mlp_act` the MLP's (or the
experts') activation function, `layernorm` the norms, whose outputs are the next GEMM's input, and
`mla_up_proj` MLA's query/key/value up-projections. Full recomputation keeps only the layer input,
2·s·b·h/t (2·s·b·h without sequence parallelism). `activation_bytes_per_token` itemizes the saved
tensors so that the same count covers SwiGLU, GQA, MLA, MoE and FlashAttention (which saves no score
matrix), and reproduces the 34 + 5as/h total for the paper's GPT.
"""

from __future__ import annotations

import numpy as np

from bandwise.cost.flops import BF16
from bandwise.specs.model import ModelSpec

MASTER_WEIGHT_BYTES = 4  # fp32 master copy of the weights (ZeRO Sec. 3.1)
ADAM_MOMENT_BYTES = 4  # each of momentum and variance in fp32 (ZeRO's K = 4 + 4 + 4 = 12)
GIB = 2**30
E5M6 = 1.5  # bytes of DeepSeek-V3's 12-bit activation format: 1 sign, 5 exponent, 6 mantissa bits
RECOMPUTE_MODULES = ("core_attn", "mlp_act", "moe_act", "layernorm", "mla_up_proj", "mlp")
"""What selective recomputation may re-run, named as Megatron-Core's `--recompute-modules`
(TransformerConfig.recompute_modules, megatron-core 0.16): "core_attn", "layernorm", "mla_up_proj";
"moe_act", the experts' activation function (MoE layers only); "mlp", the dense MLP submodule, re-run
whole from its input under normal checkpointing (dense layers only). `mlp_act` is bandwise's own: the
activation function of dense MLPs and experts alike. Megatron-Core's "moe" (the whole MoE layer) and
"shared_experts" are not priced."""


def model_state_bytes(
    params: np.ndarray, shard: np.ndarray, zero: np.ndarray, *, grad_bytes: float = BF16, moment_bytes: float = ADAM_MOMENT_BYTES
) -> np.ndarray:
    """Bytes of weights, gradients and optimizer state for `params` parameters on one device.

    bf16 weights, `grad_bytes` gradients, an fp32 master copy and two Adam moments of `moment_bytes`.
    ZeRO-1 shards the master copy and moments, ZeRO-2 the gradients too; ZeRO-3/FSDP shards
    everything (`_sharded_weight_bytes`). The defaults (2-byte gradients, fp32 moments) give the ZeRO
    paper's 16 bytes at every stage.
    """
    return StateBytes.of(zero, grad_bytes=grad_bytes, moment_bytes=moment_bytes).of_params(params, shard)


class StateBytes:
    """`model_state_bytes` per ZeRO stage, looked up once for columns of stages and applied to any
    number of parameter counts: bytes per parameter kept whole (`whole`) and kept sharded (`sharded`)."""

    __slots__ = ("whole", "sharded", "weight_whole", "weight_sharded")

    def __init__(self, stage: np.ndarray, grad_bytes: float, moment_bytes: float, master_bytes: float = MASTER_WEIGHT_BYTES) -> None:
        opt = master_bytes + 2 * moment_bytes
        self.whole = np.array([BF16 + grad_bytes + opt, BF16 + grad_bytes, BF16, 0.0])[stage]
        self.sharded = np.array([0.0, opt, grad_bytes + opt, _sharded_weight_bytes(grad_bytes, master_bytes) + grad_bytes + 2 * moment_bytes])[stage]
        # the weights alone: bf16 whole, or the shard under ZeRO-3/FSDP
        self.weight_whole = np.where(stage == 3, 0.0, float(BF16))
        self.weight_sharded = np.where(stage == 3, float(MASTER_WEIGHT_BYTES if master_bytes and grad_bytes >= MASTER_WEIGHT_BYTES else BF16), 0.0)

    @classmethod
    def of(cls, zero: np.ndarray, *, grad_bytes: float = BF16, moment_bytes: float = ADAM_MOMENT_BYTES,
           master_bytes: float = MASTER_WEIGHT_BYTES) -> StateBytes:
        """`master_bytes`: the master copy beside the bf16 weights (0 where the optimizer updates the bf16
        weights themselves, `CostParams.master_weight_bytes`)."""
        zero = np.asarray(zero)
        return cls(np.where((zero >= 0) & (zero <= 2), zero, 3), grad_bytes, moment_bytes, master_bytes)

    def of_params(self, params: np.ndarray, shard: np.ndarray) -> np.ndarray:
        """States of `params` parameters over `shard` ranks (at least 1)."""
        params = np.asarray(params, dtype=float)
        return self.whole * params + self.sharded * params / np.maximum(np.asarray(shard, dtype=float), 1.0)

    def weights_of(self, params: np.ndarray, shard: np.ndarray) -> np.ndarray:
        """The weights' part of `of_params`: bf16 weights, or the shard under ZeRO-3/FSDP (the fp32 shard
        where it is the master copy, else the bf16 one)."""
        params = np.asarray(params, dtype=float)
        return self.weight_whole * params + self.weight_sharded * params / np.maximum(np.asarray(shard, dtype=float), 1.0)


def _sharded_weight_bytes(grad_bytes: float, master_bytes: float = MASTER_WEIGHT_BYTES) -> float:
    """Bytes per parameter of a ZeRO-3/FSDP weight shard. With fp32 gradients, FSDP2 keeps the shard
    itself in fp32 and casts it to bf16 when it gathers (MixedPrecisionPolicy(param_dtype=bf16,
    reduce_dtype=fp32)): the shard is the master copy, 4 bytes. With 2-byte gradients (DeepSpeed
    ZeRO-3, the ZeRO paper) a bf16 shard sits beside the fp32 master: 2 + 4; without a master copy
    (`master_bytes` 0: the optimizer updates the bf16 shard), 2."""
    if not master_bytes:
        return BF16
    return MASTER_WEIGHT_BYTES if grad_bytes >= MASTER_WEIGHT_BYTES else BF16 + master_bytes


def activation_bytes_per_token(
    m: ModelSpec,
    *,
    moe_layer: bool,
    selective: bool = False,
    modules: tuple[str, ...] = ("core_attn", "mlp_act"),
    flash: bool = True,
    dropout: bool = False,
    fp8: bool = False,
    sequence_parallel: bool = True,
    fp8_act_cache: bool = False,
    gathered_gemm_inputs: bool = False,
    attention: bool = True,
    mlp: bool = True,
    mixer: float = 0.0,
) -> tuple[float, float]:
    """(bytes saved for backward per token of one layer, the part replicated across TP ranks).

    The layer's blocks are the model's kinds (`ModelSpec.attention_kind`; `ModelSpec.ffn_kind` where
    `moe_layer`, else `ModelSpec.dense_mlp`), each supplying what it keeps.

    The first number is for the whole hidden width; tensor parallelism divides it by t except for
    the second number: MLA's low-rank latents, computed on every TP rank, and, without sequence
    parallelism, the 10 bytes per hidden element outside the tensor-parallel regions (Korthikanti
    Eq. 2). `selective` re-runs `modules` in the backward (`RECOMPUTE_MODULES`; "mlp" drops a dense layer's
    MLP to its input, "moe_act" the experts' activation output in an MoE layer). With fp8 GEMMs the
    inputs of the linear layers are kept in their 1-byte quantized form for the weight gradient
    (DeepSeek-V3 report, Sec. 3.3.3; Transformer Engine keeps the fp8 copy likewise);
    `fp8_act_cache` also keeps the activation function's input in fp8 and the attention output in
    E5M6 (DeepSeek-V3 Sec. 3.3.3, "Low-Precision Storage": the SwiGLU input of the MoE is cached in
    FP8, the input of the linear after attention in E5M6). `gathered_gemm_inputs`:
    under sequence parallelism the two norm outputs are kept all-gathered, whole on every TP rank
    (torch's ColwiseParallel; `CostParams.tp_gathered_inputs`).

    A sliding window (`ModelSpec.sliding_window`) changes nothing here: FlashAttention keeps no
    score matrix, only its per-row softmax statistics, so what a layer saves does not depend on
    how many keys a query sees; eager attention materializes the whole s x s matrix and applies the
    window as a mask. The KV cache a window bounds is an inference cost, not a training one.

    A hybrid's layer may lack its attention or its MLP (`attention`, `mlp` false) or hold a mixer
    that keeps `mixer` bytes (`cost.mixers.mixer_activation_bytes_per_token`, split over TP by
    heads); each block present keeps its own norm's input and output (and dropout mask).
    """
    unknown = sorted(set(modules) - set(RECOMPUTE_MODULES))
    if unknown:
        raise ValueError(f"recompute modules {unknown}: not known; use some of {', '.join(RECOMPUTE_MODULES)}")
    re_run = set(modules) if selective else set()
    h, H, s = m.hidden, m.heads, m.seq_len
    g = 1.0 if fp8 else float(BF16)  # bytes per element of a linear layer's saved input
    # the dense MLP re-run whole from its input ("mlp"): it keeps that input alone. Megatron-Core's TE layer
    # fuses the pre-MLP norm into the first GEMM (TELayerNormColumnParallelLinear, pre_mlp_layernorm an
    # IdentityOp), so the checkpointed input is the norm's input, and the norm's output goes with the MLP's own
    whole_mlp = mlp and not moe_layer and "mlp" in re_run
    # outside the TP regions: two norm inputs, two GEMM inputs (the norms' outputs), two dropout masks
    norm_out = 0.0 if "layernorm" in re_run else g * h
    blocks = int(attention) + int(mlp) + int(mixer > 0)
    outside = blocks * (BF16 * h + norm_out) - (norm_out if whole_mlp else 0.0) + (blocks * h if dropout else 0.0)
    b = outside + mixer
    replicated = 0.0
    # attention: q/k/v as the kernel reads them, its output (kept by the kernel) = o-projection input;
    # MLA's q/k/v only where its up-projections are not re-run, and its latents on every TP rank
    if attention:
        kind = m.attention_kind
        b += BF16 * kind.saved_qkv_width("mla_up_proj" in re_run)
        b += BF16 * kind.gate_width  # the output gate's logits, for sigmoid's backward and the product's
        replicated += BF16 * kind.latent_width
    # DeepSeek-V3 keeps the attention output, which the attention backward and the o-projection's
    # weight gradient both read, in a 12-bit E5M6 format (report Sec. 3.3.3, "Low-Precision Storage":
    # "Inputs of the Linear after the attention operator"): 1.5 bytes
    b += (E5M6 if fp8 and fp8_act_cache else BF16) * H * m.d_value if attention else 0.0
    if attention and not flash and "core_attn" not in re_run:
        # softmax output (2 bytes) + dropout mask (1) + dropout output (2) per score: 5·a·s per token
        b += (5 if dropout else 2) * H * s
    # MLP: gated: w1 and w3 outputs + their product; else: fc1 output + GELU output, in bytes per
    # intermediate element. Recomputing the activation function drops the product / GELU output.
    act_in = (2 if m.gated_mlp else 1) * (1.0 if fp8 and fp8_act_cache else float(BF16))
    act_again = "mlp_act" in re_run or (moe_layer and "moe_act" in re_run)
    per_f = act_in + (0.0 if act_again else g)  # the down-projection's input, quantized under fp8
    if mlp and not whole_mlp:
        b += (m.ffn_kind if moe_layer else m.dense_mlp).saved_bytes_per_token(g, per_f)
    if not sequence_parallel:
        b, replicated = b - outside, replicated + outside
    elif gathered_gemm_inputs:
        gathered = (1 if whole_mlp else 2) * norm_out
        b, replicated = b - gathered, replicated + gathered
    return b, replicated


def layer_input_bytes_per_token(m: ModelSpec) -> float:
    """What full recomputation keeps per layer: the layer's input (Korthikanti Sec. 4.2.2, 2·s·b·h)."""
    return BF16 * m.hidden


def head_input_bytes_per_token(m: ModelSpec, tp, *, sequence_parallel: bool = True, gathered_gemm_inputs: bool = False):
    """What the output layer keeps besides the logits: the final norm's input and the output
    projection's input (the norm's output), 2·s·b·h each, split over TP under sequence
    parallelism (Korthikanti et al. 2022, Sec. 4.3: 4·s·b·h/t for these two with the 4·s·b·v/t of
    the logits). Under torch's tensor parallelism the projection reads its input all-gathered and
    keeps it so, whole on every TP rank (`gathered_gemm_inputs`, as for the layers' GEMMs); the
    dry run finds both tensors at the loss (Llama 3 8B at TP 8, 8,192 tokens: 64 MiB gathered, 8 MiB
    sharded; benchmarks/RESULTS.md)."""
    split = np.where(sequence_parallel, tp, 1.0)  # without sequence parallelism both are whole anyway
    return BF16 * m.hidden * (1.0 / split + (1.0 if gathered_gemm_inputs else 1.0 / split))


def weight_output_grad_bytes_per_token(m: ModelSpec, *, moe_layer: bool) -> tuple[float, float]:
    """(bytes per token of one layer, the part replicated across TP ranks) of the gradients at the
    outputs of its weight-bearing GEMMs, in bf16: what a split backward keeps for each micro-batch
    between its input-gradient pass and its weight-gradient pass, since dW = dY^T X needs dY (Qi et
    al. 2023, "Zero Bubble Pipeline Parallelism", Sec. 2). One element per output feature of each
    GEMM: the query, key, value and output projections (MLA: the two down-projections, whole on
    every TP rank, and the two up-projections), the MLP's two or three; in an MoE layer the top-k
    routed experts' and the shared experts', and the router's scores.""" 
    split, replicated = m.attention_kind.output_grad_widths()
    ffn_split, ffn_replicated = (m.ffn_kind if moe_layer else m.dense_mlp).output_grad_widths()
    return BF16 * (split + ffn_split), BF16 * (replicated + ffn_replicated)


def logits_bytes_per_token(m: ModelSpec, per_logit: float = 4.0) -> float:
    """The output layer's logits alive at the loss: fp32 kept for the cross-entropy backward (Korthikanti
    Sec. 4.3: 4·s·b·v), or `per_logit` bytes where the loss kernel holds less (`CostParams.loss_peak_bytes_per_logit`)."""
    return per_logit * m.vocab
