"""What a Mamba-1, Mamba-2 or Gated DeltaNet layer costs: its GEMMs, element-wise bytes, saved activations.

Tensor parallelism splits both kinds by heads: the input projection is column-parallel and the
output projection row-parallel, so a mixer layer has one all-gather before and one reduce-scatter
after it, as attention has (Megatron-Core `MambaMixer`: "nheads must be evenly divisible by
tp_size", in_proj column-parallel, out_proj row-parallel; `GatedDeltaNet` likewise, per value head;
megatron-core 0.16.1 `ssm/mamba_mixer.py`, `ssm/gated_delta_net.py`). Context parallelism:
`MambaContextParallel` (0.16.1, `ssm/mamba_context_parallel.py`) swaps the sequence split for a
head split by an all-to-all before the convolution and back after the scan, so nheads must divide
by tp·cp. Gated DeltaNet had none in 0.16.1 (its context-parallel import is commented out); Megatron-LM
d98e8a6 gives it the same head split by its own all-to-alls (`megatron/core/ssm/gated_delta_net/common.py`,
`a2a_cp_to_hp`/`a2a_hp_to_cp`), priced in `cost.terms.context`, with tp·cp dividing the key heads
(`specs.strategy`). MaxText 0.2.5 keeps its sequence split instead and composes the shards' states in two
passes (`models/qwen3.py`, `gdn_context_axes`; `kernels/attention/gdn_cp.py`): not priced apart.

Mamba-1 (Jamba) has no Megatron-Core module; split by channels as vLLM's `MambaMixer` splits it
(vllm `model_executor/layers/mamba/mamba_mixer.py`: in_proj and dt_proj column-parallel, x_proj
and out_proj row-parallel), x_proj's row-parallel output (dt, B, C: R + 2N wide) is all-reduced,
forward and backward, beside the layer's pair of collectives (`cost.terms.tensor`). No engine has
context parallelism for it: cp > 1 is refused (`specs.strategy`).
"""

from __future__ import annotations

from bandwise.cost.flops import BF16, Gemm
from bandwise.specs.kinds import GatedDeltaNet, Mamba1, Mamba2
from bandwise.specs.model import ModelSpec

Mixer = Mamba1 | Mamba2 | GatedDeltaNet


def mixer_kinds(m: ModelSpec) -> list[tuple[Mixer, float]]:
    """The model's mixer kinds with their share of the layers."""
    kinds: list[tuple[Mixer, float]] = []
    if m.mamba:
        kinds.append((m.mamba, m.mamba_layers / m.layers))
    if m.linear_attention:
        kinds.append((m.linear_attention, m.linear_attention_layers / m.layers))
    return kinds


def mixer_gemms(kind: Mixer, hidden: int) -> tuple[list[Gemm], list[Gemm]]:
    """(input projections, output projection) of one mixer: column- then row-parallel. Mamba-1's
    input side also holds x_proj (d_inner -> R + 2N, row-parallel) and dt_proj (R -> d_inner,
    column-parallel), which run between its input projection and its scan."""
    gemms_in = [Gemm("mixer_in", kind.in_proj_width, hidden)]
    if isinstance(kind, Mamba1):
        gemms_in += [Gemm("mixer_x", kind.x_proj_width, kind.inner, split="row"), Gemm("mixer_dt", kind.inner, kind.dt_rank)]
    return gemms_in, [Gemm("mixer_out", hidden, kind.out_width, split="row")]


def scan_streamed_bytes_per_token(kind: Mixer) -> float:
    """Bytes per token of a scan that runs on the vector units and is timed by its memory traffic
    (Mamba-1's selective scan, `Mamba1.scan_bytes_per_token`); 0 for the chunked scans, whose matrix
    products are timed by their FLOPs (`cost.terms.compute.hybrid_layer_compute`)."""
    return kind.scan_bytes_per_token() if isinstance(kind, Mamba1) else 0.0


def mixer_elementwise_bytes_per_token(kind: Mixer) -> float:
    """HBM bytes per token of a mixer's memory-bound kernels, forward, fused: the causal
    convolution with its SiLU reads and writes each channel (2 + 2, `causal_conv1d`); the gated
    RMSNorm reads the scan output and the gate and writes the product (2 + 2 + 2 per element of
    d_inner or of the value width). Gated DeltaNet also L2-normalises q and k (2 + 2). Mamba-1 has
    no gated norm: its scan kernel applies the gate (`scan_streamed_bytes_per_token`); Jamba's
    norms over dt, B and C read and write R + 2N (2 + 2), and softplus(dt) d_inner (2 + 2)."""
    if isinstance(kind, Mamba1):
        return 4.0 * kind.conv_channels + 4.0 * (kind.x_proj_width if kind.dt_norms else 0) + 4.0 * kind.inner
    if isinstance(kind, Mamba2):
        return 4.0 * kind.conv_channels + 6.0 * kind.inner
    return 4.0 * kind.conv_channels + 4.0 * 2 * kind.key_width + 6.0 * kind.value_width


def mixer_activation_bytes_per_token(kind: Mixer) -> float:
    """Bytes a token keeps for the backward in one mixer (beside the block's norm input and output,
    which `memory.activation_bytes_per_token` counts for every block), all split over TP by heads.

    Mamba-2: mamba_ssm's `MambaSplitConv1dScanCombinedFn` saves the input projection's output
    zxbcdt and the scan output out_x in bf16 and the norm's fp32 rstd per group, and recomputes the
    convolution and the scan in its backward; Megatron-Core applies out_proj outside it, whose
    input (d_inner) the linear layer keeps. Gated DeltaNet: the projections' output, the
    convolution's output (q, k, v), what flash-linear-attention's chunked rule saves besides them
    (the chunk-local inverse A, C values per head and token in bf16, and the fp32 cumulative gate),
    the rule's output and the output projection's input. Mamba-1, as transformers'
    `JambaMambaMixer.cuda_kernels_forward` runs it module by module under autograd: the input
    projection's output xz (2·d_inner; the convolution reads x, the scan z), the convolution's
    output (d_inner, read by x_proj and the scan), x_proj's output (R + 2N) and, with Jamba's norms,
    their outputs (R + 2N again), dt_proj's output delta (d_inner) and the scan's output (d_inner,
    out_proj's input), in bf16; and what `selective_scan_fn` saves of its own, the fp32 state
    checkpointed every 2048 tokens (`selective_scan_fwd`'s x, 2·N values per channel and chunk),
    8·d_inner·N/2048 bytes a token.
    """
    if isinstance(kind, Mamba1):
        dbl = (2 if kind.dt_norms else 1) * kind.x_proj_width
        return BF16 * (kind.in_proj_width + 3 * kind.inner + dbl) + 8.0 * kind.inner * kind.state / 2048
    if isinstance(kind, Mamba2):
        return BF16 * (kind.in_proj_width + kind.inner + kind.inner) + 4.0 * kind.groups
    return (BF16 * (kind.in_proj_width + kind.conv_channels + kind.value_heads * kind.chunk + 2 * kind.value_width)
            + 4.0 * kind.value_heads)


def mixer_output_grad_bytes_per_token(kind: Mixer, hidden: int) -> float:
    """The gradients at a mixer's GEMM outputs that a split backward keeps (`memory.
    weight_output_grad_bytes_per_token`): the input projection's width and the output's h
    (Mamba-1 also x_proj's R + 2N and dt_proj's d_inner)."""
    extra = kind.x_proj_width + kind.inner if isinstance(kind, Mamba1) else 0
    return BF16 * (kind.in_proj_width + extra + hidden)
