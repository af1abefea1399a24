"""Compute of one layer and of the output head, per micro-batch on one device.

A layer's forward is its GEMMs (`cost.flops`, timed by `cost.compute.gemm_time`), its attention
core and its element-wise passes (memory-bound); the backward runs the GEMMs twice and attention
its own ratio (`CostParams.attention_backward_ratio`). Compute runs at the clock the chip sustains
at its power limit, not the datasheet's boost (`Device.sustained_clock_ratio`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from bandwise.cost.compute import K_FIXED, gemm_time, memory_bound_time
from bandwise.cost.flops import (
    BF16,
    Gemm,
    activation_bytes_per_element,
    attention_core_flops_per_token,
    elementwise_bytes_per_token,
    fp8_cast_bytes_per_token,
    fp8_gemms,
    fp8_operand_elements_per_token,
    hybrid_elementwise_bytes_per_token,
    outside_tp_bytes_per_token,
)
from bandwise.cost.fp8 import Fp8Recipe, fp8_recipe
from bandwise.cost.mixers import (
    mixer_elementwise_bytes_per_token,
    mixer_gemms,
    mixer_kinds,
    scan_streamed_bytes_per_token,
)
from bandwise.cost.params import FA2_SLOWDOWN, CostParams, moe_host_syncs, padded_head_dim
from bandwise.cost.quantized import QUANTIZED_CASTS, check_precision
from bandwise.cost.remat import RematPolicy, exposed_transfer_s
from bandwise.cost.terms.shape import Shape
from bandwise.errors import BandwiseError
from bandwise.specs.hardware import Device
from bandwise.specs.kinds import GatedDeltaNet
from bandwise.specs.model import ModelSpec, causal_chunk_pairs, causal_window_pairs
from bandwise.specs.strategy import PRECISIONS

CROSS_ENTROPY_BYTES_EAGER = (2 + 4) + 4 + (4 + 4) + (4 + 4) + 4 + (4 + 4) + (4 + 4) + (4 + 2)
"""HBM bytes per logit of the loss run as eager PyTorch kernels, one per line of Megatron-LM's
vocab-parallel cross entropy (megatron/core/tensor_parallel/cross_entropy.py): forward: cast the
bf16 logits to fp32 (2+4), max (4), subtract the max in place (4+4), exp (4+4), sum (4), divide
to the softmax kept for backward (4+4); backward: scale by the output gradient (4+4) and cast the
gradient back to bf16 (4+2). 52 bytes; torch's F.cross_entropy on fp32 logits (TorchTitan) moves
48: cast, a three-pass log-softmax, a zero-filled NLL gradient, a two-pass backward, cast back."""
CROSS_ENTROPY_BYTES_FUSED = 2 + 2 + 2
"""HBM bytes per logit of a fused loss (XLA, Transformer Engine's or Liger's fused cross entropy):
one pass reads the bf16 logits for the running max and exp-sum (2); the backward reads them again
(2) and writes the bf16 gradient softmax - onehot (2)."""
SCORE_BYTES_FORWARD = 2 + (1 + 2) + (2 + 2 + 1) + 2
"""HBM bytes per attention score in a materialized (pre-FlashAttention) forward, kernel by kernel
as Megatron-LM runs it (megatron/model/transformer.py, CoreAttention, 2021-2022): the Q·K^T
baddbmm writes the scores (2); the fused causal softmax (scaled_upper_triang_masked_softmax)
reads each row only up to the diagonal, half the matrix on average (1), and writes the whole row
(2); the attention dropout reads it and writes its output and a 1-byte mask (2 + 2 + 1); the P·V
bmm reads that output (2). Korthikanti et al. 2022, Sec. 4.1, list the same tensors."""
SCORE_BYTES_BACKWARD = 2 + (2 + 1 + 2) + (1 + 1 + 2) + 2 + 2 + 2
"""The same backward: dP = dO·V^T writes the dropout output's gradient (2); dropout's backward reads
it and the mask and writes the softmax output's gradient (2 + 1 + 2); the softmax backward reads
that gradient and the saved softmax output up to the diagonal and writes the scores' gradient
(1 + 1 + 2); dV = P^T·dO reads the saved dropout output (2), dQ and dK read the scores' gradient
(2 + 2)."""

UNFUSED_SOFTMAX_BYTES = ((2 + 4) + (4 + 4) + (4 + 1 + 4) + (4 + 4) + (4 + 2) - (1 + 2),
                         (2 + 4) + (4 + 4 + 4) + (4 + 1 + 4) + (4 + 4) + (4 + 2) - (1 + 1 + 2))
"""HBM bytes per score, (forward, backward), that Megatron's unfused softmax moves beyond its fused
kernel's (`SCORE_BYTES_*`): `forward_torch_softmax` in fp32 (megatron/model/fused_softmax.py, 2021-2022)
casts the scores up (2 + 4), scales them (4 + 4), masks them in place reading the bool mask (4 + 1 + 4),
runs softmax (4 + 4) and casts back (4 + 2), where the fused causal kernel reads half a row and writes it
(1 + 2); autograd's backward through the same five ops: 2 + 4, 4 + 4 + 4, 4 + 1 + 4, 4 + 4, 4 + 2, where
the fused one reads the gradient and the output to the diagonal and writes (1 + 1 + 2)."""


def softmax_batches_per_block(key_len: np.ndarray) -> np.ndarray:
    """Rows a 128-thread block of Megatron's fused softmax takes for rows of `key_len`: warps of
    min(p, 32) threads, p the next power of two, each taking 2 rows up to p = 128, else 1
    (`get_batch_per_block`, megatron/fused_kernels/scaled_masked_softmax.h, 2021-2022)."""
    p = 2.0 ** np.ceil(np.log2(np.maximum(np.asarray(key_len, dtype=float), 1.0)))
    return 128.0 / np.minimum(p, 32.0) * np.where(p <= 128.0, 2.0, 1.0)


def softmax_unfused_on_heads(micro_batch: np.ndarray, heads_per_rank: np.ndarray) -> np.ndarray:
    """Where the BigScience fork's check (`CostParams.softmax_check_on_heads`) refuses its fused causal
    softmax: micro-batch x heads per rank not a multiple of 4 or of the batches per block it sizes
    from the heads per rank."""
    batches = np.asarray(micro_batch, dtype=float) * heads_per_rank
    return (np.mod(batches, 4.0) != 0) | (np.mod(batches, softmax_batches_per_block(heads_per_rank)) != 0)


def gemm_peak(dev: Device, s: Shape) -> np.ndarray:
    """The dense peak of each layout's GEMM precision (fp8 on a chip without an fp8 peak: bf16's); fp4 or
    int8 on a device without that peak is refused (`cost.quantized.check_precision`)."""
    codes = np.asarray(s.precision)
    peak = np.full(codes.shape, dev.peak("bf16"), dtype=float)
    for code in np.unique(codes):
        name = PRECISIONS[int(code)]
        check_precision(name, dev.name, dev.peak_flops)
        peak[codes == code] = dev.peak_flops.get(name, dev.peak("bf16"))
    return peak


def cast_bytes_of(s: Shape, fp8_cast_bytes: float) -> np.ndarray:
    """HBM bytes per element of each GEMM activation operand for each layout's precision: the fp8
    recipe's, NVFP4's or int8's (`cost.quantized.QUANTIZED_CASTS`), 0 under bf16."""
    codes = np.asarray(s.precision)
    out = np.where(s.fp8, fp8_cast_bytes, 0.0)
    for name, recipe in QUANTIZED_CASTS.items():
        out = np.where(codes == PRECISIONS.index(name), recipe.cast_bytes, out)
    return out


@dataclass(frozen=True, slots=True)
class Rates:
    """What one device sustains: FLOP/s of bf16 and of the layout's GEMM precision, their GEMM
    efficiencies, HBM bytes/s and the share of it streaming kernels reach."""

    bf16_peak: float
    linear_peak: np.ndarray
    eff: float
    linear_eff: np.ndarray
    bw: float
    hbm_eff: float
    sm_count: int

    @classmethod
    def of(cls, dev: Device, s: Shape, P: CostParams) -> Rates:
        bf16_peak = dev.peak("bf16") * dev.sustained_clock_ratio
        linear_peak = gemm_peak(dev, s) * dev.sustained_clock_ratio
        eff = dev.gemm_efficiency * P.gemm_scale  # a calibration's measured over modelled GEMM speed
        # quantized GEMMs reach less of their peak: fp8's measured fraction, reused for fp4 and int8 (none measured)
        linear_eff = np.where(s.fp8, (dev.fp8_gemm_efficiency or dev.gemm_efficiency) * P.gemm_scale, eff)
        return cls(bf16_peak, linear_peak, eff, linear_eff, dev.hbm_bandwidth, P.hbm_efficiency, dev.sm_count)

    def streamed(self, nbytes: np.ndarray) -> np.ndarray:
        return memory_bound_time(nbytes, self.bw, self.hbm_eff)


@dataclass(frozen=True, slots=True)
class LayerCompute:
    """Seconds of one layer, one micro-batch, on one device: the forward's parts, both passes, and
    what selective recomputation runs again. Model-wide figures are means over dense and MoE layers."""

    attn: np.ndarray
    """The attention core's forward."""
    attn_bwd: np.ndarray
    attn_in: np.ndarray
    """The GEMMs before the attention core (QKV; MLA's down- and up-projections)."""
    attn_out: np.ndarray
    mlp_up: np.ndarray
    mlp_down: np.ndarray
    moe_mlp: np.ndarray
    """An MoE layer's router, shared and routed experts."""
    dense_fwd: np.ndarray
    moe_fwd: np.ndarray
    fwd: np.ndarray
    bwd: np.ndarray
    selective: np.ndarray
    kernel_gaps: np.ndarray
    mixers: MixerTimes | None = None
    """A hybrid's mixer layers (`attn_in`, `attn_out` are then an attention layer's GEMMs, and `attn`
    the mean layer's cores: attention and scans)."""
    full: np.ndarray | None = None
    """What full recomputation adds: under a remat policy (`CostParams.remat_policy`) the forward less
    what the policy keeps, and its host copies' exposed time; None: the whole forward again."""

    @property
    def attn_total(self) -> np.ndarray:
        return self.attn + self.attn_bwd

    def passes(self) -> LayerPasses:
        return LayerPasses(fwd=self.fwd, bwd=self.bwd, kernel_gaps=self.kernel_gaps, selective=self.selective, moe_fwd=self.moe_fwd,
                           full=self.fwd if self.full is None else self.full, attention=self.attn + self.attn_in + self.attn_out,
                           attention_bwd=self.attn_bwd + 2.0 * (self.attn_in + self.attn_out))

    def backward(self, fwd: np.ndarray) -> np.ndarray:
        """GEMMs twice, attention its own ratio."""
        return 2.0 * (fwd - self.attn) + self.attn_bwd


@dataclass(frozen=True, slots=True)
class MixerTimes:
    """Forward seconds of one mixer layer's GEMMs on either side of its TP collectives, per kind
    (zero where the model has none of that kind)."""

    mamba_in: np.ndarray
    mamba_out: np.ndarray
    linear_in: np.ndarray
    linear_out: np.ndarray


SCAN_BACKWARD_RATIO = 2.0
"""Backward over forward time of a chunked scan (SSD, the chunked delta rule): each of its matrix
products has two of the same size in the backward (Narayanan et al. 2021, Sec. 3.3.1, for GEMMs),
as the chunk algorithms are written (Dao & Gu 2024, Sec. 6; Yang et al. 2024, Sec. 3.3); the
kernels also recompute the forward's chunk states, which this leaves out."""


@dataclass(frozen=True, slots=True)
class LayerPasses:
    """The part of `LayerCompute` a pipeline rank's step reads: both passes, the kernel gaps, what
    selective recomputation runs again, and an MoE layer's forward."""

    fwd: np.ndarray
    bwd: np.ndarray
    kernel_gaps: np.ndarray
    selective: np.ndarray
    moe_fwd: np.ndarray
    full: np.ndarray
    """What full recomputation re-runs (`LayerCompute.full`)."""
    attention: np.ndarray
    """The attention block's forward, its GEMMs and core: what runs before the feed-forward needs its weights."""
    attention_bwd: np.ndarray


def gemms_time(gemms: list[Gemm], m: ModelSpec, s: Shape, rates: Rates, sequence_local: bool = False) -> np.ndarray:
    """Forward time of a layer's GEMMs on one device, split as each GEMM is split over TP and EP. A GEMM replicated
    across TP ranks (split "none") reads the rank's sequence shard where `sequence_local` (`replicated_on_shard`),
    else every token of the micro-batch."""
    tokens, tp, ep = s.tokens, s.tp, s.ep
    peak, eff, bw, sms = rates.linear_peak, rates.linear_eff, rates.bw, rates.sm_count
    total = np.zeros_like(tokens, dtype=float)
    for g in gemms:
        if g.split == "expert":
            ep_on = ep > 1
            local_experts = np.where(ep_on, m.experts / ep, m.experts)
            rows = tokens * g.rows_per_token / np.where(ep_on, tp, 1.0)  # SP-split tokens, dispatched over EP
            rows_per_expert = rows * np.where(ep_on, ep, 1.0) / m.experts
            n = np.where(ep_on, g.n, g.n / tp) if g.name == "mlp_up" else g.n
            k = g.k if g.name == "mlp_up" else np.where(ep_on, g.k, g.k / tp)
            total = total + gemm_time(rows_per_expert, n, k, peak, eff, bw, count=local_experts, sm_count=sms)
        elif g.split == "col":
            total = total + gemm_time(tokens * g.rows_per_token, g.n / tp, g.k, peak, eff, bw, sm_count=sms)
        elif g.split == "row":
            total = total + gemm_time(tokens * g.rows_per_token, g.n, g.k / tp, peak, eff, bw, sm_count=sms)
        else:  # replicated across TP ranks (MLA down-projections, router, MaxText's one-hot dispatch: `capacity_gemms`)
            rows = tokens * g.rows_per_token / (tp if sequence_local else 1.0)
            total = total + gemm_time(rows, g.n, g.k, peak, eff, bw, sm_count=sms)
    return total


def replicated_on_shard(P: CostParams) -> bool:
    """A GEMM replicated across TP ranks runs on the rank's sequence shard: under sequence parallelism where the
    sequence is not gathered before the block. Megatron-Core's MLA down-projections are TELinear "duplicated" on the
    [s/TP, b, h] shard, or column-parallel over q_lora_rank (megatron/core/transformer/multi_latent_attention.py,
    `_qkv_down_projection`), and its router's gating reads the same shard; torch's ColwiseParallel gathers the
    sequence first (`CostParams.tp_gathered_inputs`), and without sequence parallelism every rank holds it whole."""
    return bool(P.sequence_parallel and not P.tp_gathered_inputs)


ALIBI_BIAS_BYTES = 2 + 2
"""HBM bytes per score, each materialized attention forward, of ALiBi's additive bias. Megatron-DeepSpeed
(BLOOM; megatron/model/transformer.py) runs Q·K^T as `torch.baddbmm(alibi, Q, K^T, beta=1.0)` with
the bias broadcast over the queries; cuBLAS accumulates into the output it reads (beta = 1), so the
broadcast bias is first written into the score buffer (2) and then read back (2). A fused kernel
(FlashAttention's ALiBi) adds it in registers: no bytes."""


def materialized_attention(
    m: ModelSpec, tokens: np.ndarray, tp: np.ndarray, peak: float, eff: float, bw: float, bias_bytes: float = 0.0,
    unfused_softmax: np.ndarray | bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of attention that materializes the s x s scores.

    The batched GEMMs compute the whole matrix (the causal mask is applied after), each paying the
    k-loop fill k/(k + 4·64) of its own reduction. Forward: S = Q·K^T reduces over the query/key
    width d, P·V over the sequence. Backward: dP = dO·V^T reduces over the value width d_v; dV =
    P^T·dO, dQ = dS·K and dK = dS^T·Q over the sequence. The score traffic is memory-bound:
    `SCORE_BYTES_FORWARD` (and `bias_bytes` of an additive bias, `ALIBI_BIAS_BYTES`) per
    score forward, `SCORE_BYTES_BACKWARD` backward, and `UNFUSED_SOFTMAX_BYTES` more where
    `unfused_softmax` (torch's softmax in place of the fused kernel).

    A sliding window does not shrink this: eager attention (Hugging Face's `eager_attention_forward`,
    plain `torch.matmul` + softmax) computes the whole s x s matrix and applies the window as part of
    the additive mask, as it applies the causal one, so every score is computed, stored and read.
    """
    s, d, dv = m.seq_len, m.d_head, m.d_value
    pairs = tokens * m.heads / tp * s  # (query, key) pairs: scores per layer on this device
    qk, pv = 2.0 * pairs * d, 2.0 * pairs * dv  # FLOPs of Q·K^T (and dQ, dK) and of P·V (and dP, dV)

    def at(flops: np.ndarray, k: float) -> np.ndarray:
        return flops / (peak * eff * (k / (k + K_FIXED)))

    extra_fwd, extra_bwd = (np.where(unfused_softmax, b, 0.0) for b in UNFUSED_SOFTMAX_BYTES)
    forward = at(qk, d) + at(pv, s) + pairs * (SCORE_BYTES_FORWARD + bias_bytes + extra_fwd) / bw
    backward = at(pv, dv) + at(pv, s) + 2.0 * at(qk, s) + pairs * (SCORE_BYTES_BACKWARD + extra_bwd) / bw
    return forward, backward


def attention_core(m: ModelSpec, dev: Device, s: Shape, rates: Rates, P: CostParams) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of the attention core: a fused kernel at its efficiency, or the
    materialized scores (`CostParams.flash_attention` off)."""
    if not P.flash_attention:
        unfused = softmax_unfused_on_heads(s.micro_batch, m.heads / s.tp) if P.softmax_check_on_heads else False
        return materialized_attention(m, s.tokens, s.tp, rates.bf16_peak, rates.eff, rates.bw * rates.hbm_eff,
                                      ALIBI_BIAS_BYTES if m.alibi else 0.0, unfused)
    fa_kernel = P.attention in FA2_SLOWDOWN
    if fa_kernel and dev.fa2_attention_efficiency is None and P.attention_efficiency is None:
        raise BandwiseError(f"--attention {P.attention}: bandwise has no FlashAttention-2 figure for {dev.name} (FlashAttention 1.x and "
                            "FlashAttention in Triton are priced from it); use --attention flash (the chip's own fused kernel) or give "
                            "fa2_attention_efficiency in a cluster file")
    attn_eff = P.attention_efficiency or (dev.fa2_attention_efficiency if fa_kernel else None) or dev.attention_efficiency
    if fa_kernel and P.attention_efficiency is None:
        attn_eff = attn_eff / FA2_SLOWDOWN[P.attention]
    attn_eff = attn_eff * P.attention_scale
    # short sequences leave each query tile's fixed cost less loop to hide behind; under context
    # parallelism each kernel call sees one chunk of seq_len / cp keys (`Device.attention_fill`)
    fill = dev.attention_fill(fa_kernel)
    # the FLOPs are the windowed and chunked mean over layers (`attention_core_flops_per_token`),
    # each kind of layer at the loop its query tiles run (`attention_calls`)
    # FlashAttention in Triton and FlashAttention-2 compute a padded head (`params.padded_head_dim`)
    padding = padded_head_dim(P.attention, m.d_head) / m.d_head if m.d_head else 1.0
    flops = attention_core_flops_per_token(m, causal=True) * padding * s.tokens / s.tp
    fwd = sum(share * flops / (rates.bf16_peak * attn_eff * keys / (keys + fill)) for share, keys in attention_calls(m, m.seq_len / s.cp))
    return fwd, P.attention_backward_ratio * fwd


def attention_calls(m: ModelSpec, keys: np.ndarray) -> list[tuple[float, np.ndarray]]:
    """(share of the attention core's FLOPs, keys its kernel's query tiles loop over) for each kind of
    attention layer, `keys` the whole sequence's (its chunk under context parallelism).

    A fused kernel loops each query tile over key tiles, and a causal mask or a window only shortens
    the loop (FlashAttention-2 skips blocks wholly outside the mask, Dao 2023, Sec. 3.1.1; flash-attn's
    `window_size` starts it at the window's first block); what the tile does outside it (load Q, write
    O and the log-sum-exp) stays. Priced by the device's fill, a causal call over k keys pays fill/2
    key-equivalents a query, so a layer whose queries attend to q keys on average runs like a causal
    call of 2q keys: full layers keep `keys`, windowed and chunked ones twice their mean keys
    (`causal_window_pairs`, `causal_chunk_pairs`), at most `keys`. The fill was fitted over 2k-32k
    keys; a window of 128 (gpt-oss) extrapolates it."""
    if not m.has_local_attention:
        return [(1.0, keys)]
    s = m.seq_len
    whole = causal_window_pairs(s, 0)
    kinds = [(m.attention_layers - m.windowed_layers - m.chunked_count, whole)]
    if m.windowed_layers:
        kinds.append((m.windowed_layers, causal_window_pairs(s, m.sliding_window)))
    if m.chunked_count:
        kinds.append((m.chunked_count, causal_chunk_pairs(s, m.attention_chunk)))
    total = sum(n * pairs for n, pairs in kinds)
    return [(n * pairs / total, keys if pairs == whole else np.minimum(keys, 2.0 * pairs / s)) for n, pairs in kinds if n]


def attention_gemm_times(m: ModelSpec, gemms: Callable[[list[Gemm]], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Forward seconds of the attention block's GEMMs before its output projection (column-parallel
    and replicated) and of that row-parallel projection (`AttentionKind.gemms`)."""
    attn_gemms = m.attention_kind.gemms()
    return gemms([g for g in attn_gemms if g.split != "row"]), gemms([g for g in attn_gemms if g.split == "row"])


def routed_ffn_times(m: ModelSpec, gemms: Callable[[list[Gemm]], np.ndarray], P: CostParams) -> tuple[np.ndarray, np.ndarray]:
    """(forward seconds of the main layers' feed-forward GEMMs, the extra seconds of the most loaded
    expert's share, `CostParams.expert_imbalance`, on its routed GEMMs). Under a capacity
    (`CostParams.moe_capacity_factor`) the routed GEMMs compute capacity_factor slots per routed token,
    and one-hot dispatch and combine (`moe_one_hot_dispatch`) are two GEMMs more (`capacity_gemms`)."""
    ffn = m.ffn_kind
    cf = P.moe_capacity_factor
    if cf <= 0:
        return gemms(ffn.gemms()), (P.expert_imbalance - 1.0) * gemms(ffn.routed_gemms())
    padded = [replace(g, rows_per_token=g.rows_per_token * cf) if g.split == "expert" else g for g in ffn.gemms()]
    routed = [replace(g, rows_per_token=g.rows_per_token * cf) for g in ffn.routed_gemms()]
    extra = capacity_gemms(m, cf) if P.moe_one_hot_dispatch else []
    return gemms(padded + extra), (P.expert_imbalance - 1.0) * gemms(routed)


def static_buffer_time(m: ModelSpec, s: Shape, rates: Rates, P: CostParams) -> np.ndarray:
    """Forward seconds an MoE layer spends on the empty rows of a static dropless buffer (`CostParams.
    moe_static_buffer`): JAX traces fixed shapes, so MaxText receives expert parallelism's all-to-all into
    min(ep, E/K) times the T·K rows a balanced rank fills (src/MaxText/layers/moe.py: `buffer_size` at bf6374972,
    `get_ragged_buffer_size` at e591f30c; the DeepEP path's `num_worst_tokens = num_tokens * ep_size`, ROCm blog
    "Dropless MoE Training in JAX with Primus-Turbo", 2026-06). Its argsort-gather permutation, the activation on
    the grouped GEMMs' outputs and the gather back run over every row ("the ragged buffer can be much larger than
    the actually-routed token count", moe.py's `use_ragged_sort`, a TPU kernel off by default); the grouped GEMMs
    read only their groups. Priced at the filled rows' own bytes (`MoEFFN.permute_bytes_per_token` and the
    activation's), f - 1 times over; the backward follows as the element-wise passes do. Zero without expert
    parallelism or under a capacity factor."""
    if not P.moe_static_buffer or P.moe_capacity_factor > 0:
        return np.zeros_like(s.tokens)
    ffn = m.ffn_kind
    per_row = ffn.permute_bytes_per_token + activation_bytes_per_element(m, P.eager_elementwise) * ffn.top_k * ffn.expert_ffn
    empty = np.minimum(s.ep, m.experts / m.top_k) - 1.0  # 0 at ep 1: E/K >= 1
    return rates.streamed(empty * per_row * s.tokens)


def capacity_gemms(m: ModelSpec, cf: float) -> list[Gemm]:
    """MaxText's one-hot dispatch and combine as GEMMs (src/maxtext/layers/moe.py, `dense_matmul`: "BSM,BSEC -> EBCM"
    and "EBCM,BSEC -> BSM", `generate_masks`): per token, its h-wide row against the E·C slots of its sequence,
    E·C = S·k·cf, each way. Expert parallelism does not divide them: the einsum's work over the job is 2·B·S·E·C·h
    whichever dimension is sharded (E over the EP ranks makes each hold the EP group's batch; B makes each hold
    every expert's slots), so a device does 2·(its tokens)·E·C·h. They carry no weights and are priced as GEMMs
    replicated across TP ranks (split "none"): the TP group shares their rows where it holds shards of its tokens
    (`replicated_on_shard`), the job's work spread over its devices."""
    slots = max(1, round(m.seq_len * m.top_k * cf))
    return [Gemm(name="moe_dispatch", n=slots, k=m.hidden, rows_per_token=1.0, split="none"),
            Gemm(name="moe_combine", n=slots, k=m.hidden, rows_per_token=1.0, split="none")]


def norm_split(s: Shape, P: CostParams) -> np.ndarray:
    """How many ways the norms and residual adds are split: over the TP ranks under sequence parallelism,
    not at all without it (Korthikanti et al. 2022, Sec. 4.2.2)."""
    return np.where(P.sequence_parallel, s.tp, 1.0)


def whole_on_tp_ranks(m: ModelSpec, s: Shape, P: CostParams) -> np.ndarray:
    """Bytes a device moves per micro-batch beyond its 1/t share of the norms and residual adds, which
    every TP rank runs whole without sequence parallelism (`cost.flops.outside_tp_bytes_per_token`);
    zero with it. Forward only: Korthikanti et al. 2022, Table 4, time a 22B layer at TP 8 without and
    with sequence parallelism at 7.7 and 7.2 ms forward (what these bytes price here: 0.54 ms) but 11.9
    and 11.8 ms backward, where sequence parallelism gathers the norm's output again for the weight
    gradients (Sec. 4.2.2); so the backward is priced alike either way."""
    return outside_tp_bytes_per_token(m, P.eager_elementwise) * s.tokens * (1.0 / norm_split(s, P) - 1.0 / s.tp)


def layer_compute(m: ModelSpec, dev: Device, s: Shape, rates: Rates, P: CostParams) -> LayerCompute:
    """One layer's compute; an MoE model's figures are the mean over its dense and MoE layers."""
    if m.is_hybrid:
        return hybrid_layer_compute(m, dev, s, rates, P)
    frac_moe = m.moe_layers / m.layers
    attn_fwd, attn_bwd = attention_core(m, dev, s, rates, P)
    # a quantized layout casts every GEMM input (and, backward, every output gradient), the bytes its precision's casts move
    recipe = fp8_recipe(P.fp8_recipe)
    cast_bytes = cast_bytes_of(s, recipe.cast_bytes)
    is_fp8 = np.where(np.asarray(s.precision) == PRECISIONS.index("fp8"), 1.0, 0.0)  # the fp8 recipe's backward extras
    gemms = lambda gs: gemms_time(gs, m, s, rates, replicated_on_shard(P))  # noqa: E731
    # the GEMMs on either side of each tensor-parallel collective: the attention block's input
    # projections and its output projection, the MLP's up and down projections
    attn_in, attn_out = attention_gemm_times(m, gemms)
    mlp_up, mlp_down = (gemms([g]) for g in m.dense_mlp.gemms())
    elementwise = lambda moe: rates.streamed(  # noqa: E731
        (elementwise_bytes_per_token(m, moe, P.eager_elementwise) + fp8_cast_bytes_per_token(m, moe, cast_bytes)) * s.tokens / s.tp
        + (weight_cast_bytes_per_microbatch(m, moe, s, recipe, P) + gathered_cast_bytes_per_microbatch(m, moe, s, recipe, P)) * is_fp8)
    replicated = rates.streamed(whole_on_tp_ranks(m, s, P))  # forward only (`whole_on_tp_ranks`)
    dense_fwd = attn_in + attn_out + mlp_up + mlp_down + attn_fwd + replicated
    dense_fwd += elementwise(False)
    if m.moe_layers:  # the main layers' feed-forward, where it is not the dense MLP
        moe_mlp, imbalance = routed_ffn_times(m, gemms, P)
        moe_fwd = attn_in + attn_out + moe_mlp + attn_fwd + replicated
        moe_fwd += elementwise(True) + static_buffer_time(m, s, rates, P)
        moe_fwd += imbalance
    else:
        moe_mlp = moe_fwd = np.zeros_like(dense_fwd)
    fwd = (1 - frac_moe) * dense_fwd + frac_moe * moe_fwd
    # selective: each re-run module's forward again. The activation function and the norms are
    # element-wise passes (read the input, write the output); the attention core only when it is
    # not flash (flash already recomputes scores inside its backward); MLA's up-projections their GEMMs
    mods = P.selective_modules
    norm_bytes = 2 * BF16 * 2 * m.hidden if "layernorm" in mods else 0.0
    up_proj = gemms(m.attention_kind.recomputed_gemms()) if "mla_up_proj" in mods else 0.0
    selective = (rates.streamed(norm_bytes * s.tokens / norm_split(s, P)) + up_proj + ffn_rerun(m, s, rates, mods, 1 - frac_moe, frac_moe, mlp_up + mlp_down)
                 + (0.0 if P.flash_attention or "core_attn" not in mods else attn_fwd)
                 + P.selective_forward_share * (fwd - attn_fwd))
    recipe_bwd = (1 - frac_moe) * fp8_backward_extra(m, False, s, rates, recipe, gemms) + frac_moe * fp8_backward_extra(m, True, s, rates, recipe, gemms)
    bwd = 2.0 * (fwd - attn_fwd - replicated) + attn_bwd + is_fp8 * recipe_bwd
    full = None if P.remat_policy is None else policy_recompute(m, dev, s, P.remat_policy, (attn_in, attn_fwd, attn_out, mlp_up), fwd, bwd)
    return LayerCompute(
        attn=attn_fwd, attn_bwd=attn_bwd, attn_in=attn_in, attn_out=attn_out, mlp_up=mlp_up, mlp_down=mlp_down, moe_mlp=moe_mlp,
        dense_fwd=dense_fwd, moe_fwd=moe_fwd, fwd=fwd, bwd=bwd, selective=selective,
        kernel_gaps=np.full_like(s.tokens, kernel_gaps(P, frac_moe)), full=full,
    )


def policy_recompute(m: ModelSpec, dev: Device, s: Shape, policy: RematPolicy, parts: tuple[np.ndarray, ...], fwd: np.ndarray,
                     bwd: np.ndarray) -> np.ndarray:
    """Seconds full recomputation adds to one layer under a remat policy (`cost.remat`): the forward
    less the work whose outputs it keeps (`parts`: the QKV projection, the attention core, the output
    projection, the MLP's input projections), and the time the offloaded tensors' copies outlast the
    pass each hides behind (device to host in the forward, back in the backward with its re-run)."""
    frac_moe = m.moe_layers / m.layers
    rerun = fwd - policy.skipped_forward(*parts, m, frac_moe)
    if not policy.offloads:
        return rerun
    if dev.host_link_bandwidth <= 0:
        raise BandwiseError(f"not priced: remat policy {policy.name} offloads {', '.join(sorted(policy.offload))} to the host, and device "
                            f"{dev.name} has no published host link (PCIe) bandwidth; give host_link_bandwidth_bytes_per_s in a cluster "
                            "file (--cluster PATH) or keep the tensors on the device")
    per_token = (1 - frac_moe) * policy.bytes_per_token(m, False, "offload") + frac_moe * policy.bytes_per_token(m, True, "offload")
    moved = per_token * s.tokens / s.tp
    return (rerun + exposed_transfer_s(moved, dev.host_link_bandwidth, fwd)
            + exposed_transfer_s(moved, dev.host_link_bandwidth, bwd + rerun))


def weight_cast_bytes_per_microbatch(m: ModelSpec, moe_layer: bool, s: Shape, recipe: Fp8Recipe, P: CostParams) -> np.ndarray:
    """A third of the HBM bytes one device moves to quantize one layer's fp8 weights in one micro-batch, where
    the engine recasts them every micro-batch (`CostParams.fp8_weight_cast_per_microbatch`): the recipe's
    `weight_cast_bytes` for each weight element it holds (`weight_elements`, split as the GEMMs are over TP and
    EP). A third, because the layer's element-wise time counts its forward once and twice again in the backward
    (`LayerCompute.backward`), as `fp8_cast_bytes_per_token` does."""
    if not P.fp8_weight_cast_per_microbatch:
        return np.zeros_like(s.tokens, dtype=float)
    return recipe.weight_cast_bytes * weight_elements(fp8_gemms(m, moe_layer), m, s) / 3


def gathered_cast_bytes_per_microbatch(m: ModelSpec, moe_layer: bool, s: Shape, recipe: Fp8Recipe, P: CostParams) -> np.ndarray:
    """A third of the HBM bytes one device adds, beyond its 1/TP share, casting the whole gathered sequence under
    plain tensor parallelism with an axis-wise recipe (`CostParams.rowwise_tp_in_bf16`): the h-wide operands TP
    gathers, the attention block's input and its output projection's output gradient, and the dense MLP's input and
    MLP-down's output gradient (an MoE layer's experts are reached by dispatch, not by the TP gather), each cast
    at the recipe's `cast_bytes` on (1 - 1/t) more of the tokens. A third, as `fp8_cast_bytes_per_token`."""
    if not (P.rowwise_tp_in_bf16 and recipe.axiswise):
        return np.zeros_like(s.tokens, dtype=float)
    h_wide = 2 * m.hidden + (0 if moe_layer else 2 * m.hidden)
    return recipe.cast_bytes * h_wide * s.tokens * (1.0 - 1.0 / s.tp) / 3


def fp8_backward_extra(m: ModelSpec, moe_layer: bool, s: Shape, rates: Rates, recipe: Fp8Recipe,
                       gemms: Callable[[list[Gemm]], np.ndarray]) -> np.ndarray:
    """Backward seconds a recipe adds to one fp8 layer beyond its casts (`cost.fp8.Fp8Recipe`): the
    rescale of each backward GEMM's output where the scales are applied after the GEMM (one read and
    one write of every input gradient, 2 + 2 bytes an element, and of every weight gradient), and the
    weight-gradient GEMM at the bf16 rate where the recipe keeps it in bf16 (its FLOPs are the forward's)."""
    extra = np.zeros_like(s.tokens, dtype=float)
    gs = fp8_gemms(m, moe_layer)
    if recipe.rescaled_backward:
        inputs, _ = fp8_operand_elements_per_token(m, moe_layer)
        extra = extra + rates.streamed((2 + 2) * (inputs * s.tokens / s.tp + weight_elements(gs, m, s)))
    if recipe.bf16_weight_grad:
        fp8_rate, bf16_rate = rates.linear_peak * rates.linear_eff, rates.bf16_peak * rates.eff
        extra = extra + gemms(gs) * (fp8_rate / bf16_rate - 1.0)
    return extra


def weight_elements(gemms: list[Gemm], m: ModelSpec, s: Shape) -> np.ndarray:
    """Weight elements of `gemms` on one device, split over TP and EP as `gemms_time` splits them."""
    total = np.zeros_like(s.tokens, dtype=float)
    for g in gemms:
        if g.split == "expert":
            ep_on = s.ep > 1
            total = total + np.where(ep_on, m.experts / s.ep, m.experts) * g.n * g.k / np.where(ep_on, 1.0, s.tp)
        elif g.split in ("col", "row"):
            total = total + g.n * g.k / s.tp
        else:
            total = total + g.n * g.k
    return total


def hybrid_layer_compute(m: ModelSpec, dev: Device, s: Shape, rates: Rates, P: CostParams) -> LayerCompute:
    """`layer_compute` of a model whose layers differ in kind: the mean over layers, each part
    weighted by the share of layers that have it. A mixer layer's time is its projections (split
    by heads over TP, `cost.mixers`) and its scan (`Mamba2.scan_flops_per_token`,
    `GatedDeltaNet.scan_flops_per_token`) at the chip's fused-attention efficiency, the closest
    measured figure for a fused kernel of chunked matrix products (an assumption: no published
    per-chip SSD or delta-rule efficiency). Mamba-1's selective scan runs on the vector units, not
    the matrix units: it is timed by the bytes its fused kernel streams (`cost.mixers.
    scan_streamed_bytes_per_token`), an assumption: at N = 16 its 9·N FLOPs over about 8 bytes per
    channel, 18 FLOP/byte, sit near an H100's fp32 vector rate over its HBM bandwidth (67 TFLOP/s
    over 3.35 TB/s, 20; NVIDIA H100 Tensor Core GPU datasheet, SXM). Under CP each rank scans its share of the heads over the whole
    sequence after the all-to-all, the same FLOPs as its share of the sequence."""
    L = m.layers
    att, dense, moe = m.attention_layers / L, m.n_dense_mlp_layers / L, m.moe_layers / L
    gemms = lambda gs: gemms_time(gs, m, s, rates, replicated_on_shard(P))  # noqa: E731
    attn_fwd, attn_bwd = attention_core(m, dev, s, rates, P)  # already the mean over all layers
    attn_in, attn_out = attention_gemm_times(m, gemms)
    mlp_up, mlp_down = (gemms([g]) for g in m.dense_mlp.gemms())
    scan_eff = (P.attention_efficiency or dev.attention_efficiency) * P.attention_scale
    zero = np.zeros_like(attn_in)
    times, scans, mixer_bytes, mixer_gemm_time = {}, zero, 0.0, zero
    for kind, share in mixer_kinds(m):
        g_in, g_out = mixer_gemms(kind, m.hidden)
        t_in, t_out = gemms(g_in), gemms(g_out)
        times["linear" if isinstance(kind, GatedDeltaNet) else "mamba"] = (t_in, t_out)
        streamed = scan_streamed_bytes_per_token(kind)
        if streamed:
            scans = scans + share * rates.streamed(streamed * s.tokens / s.tp)
        else:
            scans = scans + share * kind.scan_flops_per_token(m.seq_len) * s.tokens / s.tp / (rates.bf16_peak * scan_eff)
        mixer_gemm_time = mixer_gemm_time + share * (t_in + t_out)
        mixer_bytes += share * mixer_elementwise_bytes_per_token(kind)
    mamba_t, linear_t = times.get("mamba", (zero, zero)), times.get("linear", (zero, zero))
    mixers = MixerTimes(mamba_in=mamba_t[0], mamba_out=mamba_t[1], linear_in=linear_t[0], linear_out=linear_t[1])
    cast_bytes = cast_bytes_of(s, fp8_recipe(P.fp8_recipe).cast_bytes)  # the recipe's backward extras (`fp8_backward_extra`) are not priced on hybrids
    casts = dense * fp8_cast_bytes_per_token(m, False, cast_bytes) + moe * fp8_cast_bytes_per_token(m, True, cast_bytes)
    elementwise = rates.streamed((hybrid_elementwise_bytes_per_token(m, mixer_bytes, P.eager_elementwise) + casts) * s.tokens / s.tp)
    replicated = rates.streamed(whole_on_tp_ranks(m, s, P))  # forward only (`whole_on_tp_ranks`)
    mixing = att * (attn_in + attn_out) + attn_fwd + mixer_gemm_time + scans + elementwise + replicated
    if m.moe_layers:
        moe_mlp, imbalance = routed_ffn_times(m, gemms, P)
        moe_ffn = moe_mlp + imbalance + static_buffer_time(m, s, rates, P)
    else:
        moe_mlp = moe_ffn = np.zeros_like(attn_in)
    fwd = mixing + dense * (mlp_up + mlp_down) + moe * moe_ffn
    core, core_bwd = attn_fwd + scans, attn_bwd + SCAN_BACKWARD_RATIO * scans
    mods = P.selective_modules
    blocks = (L - m.mixer_free_layers + m.mlp_layers) / L  # norms per layer
    norm_bytes = BF16 * 2 * m.hidden * blocks if "layernorm" in mods else 0.0
    up_proj = att * gemms(m.attention_kind.recomputed_gemms()) if "mla_up_proj" in mods else 0.0
    selective = (rates.streamed(norm_bytes * s.tokens / norm_split(s, P)) + up_proj + ffn_rerun(m, s, rates, mods, dense, moe, mlp_up + mlp_down)
                 + (0.0 if P.flash_attention or "core_attn" not in mods else attn_fwd)
                 + P.selective_forward_share * (fwd - core))
    return LayerCompute(
        attn=core, attn_bwd=core_bwd, attn_in=attn_in, attn_out=attn_out, mlp_up=mlp_up, mlp_down=mlp_down, moe_mlp=moe_mlp,
        dense_fwd=fwd, moe_fwd=mixing + moe_ffn, fwd=fwd, bwd=2.0 * (fwd - core - replicated) + core_bwd, selective=selective,
        kernel_gaps=np.full_like(s.tokens, kernel_gaps(P, moe)), mixers=mixers,
    )


def ffn_rerun(m: ModelSpec, s: Shape, rates: Rates, mods: tuple[str, ...], dense: float, moe: float, dense_gemms: np.ndarray) -> np.ndarray:
    """Seconds a layer's selective recomputation spends on its feed-forward, `dense` and `moe` the shares of
    layers with a dense MLP and with experts (`memory.RECOMPUTE_MODULES`): each re-run activation function
    streams its input and output again ("mlp_act": dense MLPs and experts; "moe_act": experts only), and "mlp"
    runs a dense MLP's forward again from its input, its norm, its GEMMs (`dense_gemms` seconds) and, unless
    "mlp_act" has counted it, its activation."""
    dense_act, moe_act = m.dense_mlp.intermediate_per_token, m.ffn_kind.intermediate_per_token
    act_bytes = BF16 * 3 * (dense * dense_act * ("mlp_act" in mods) + moe * moe_act * ("mlp_act" in mods or "moe_act" in mods))
    whole_mlp = 0.0
    if "mlp" in mods:
        whole_mlp = dense * (dense_gemms + rates.streamed(BF16 * (3 * dense_act * ("mlp_act" not in mods) + 2 * m.hidden) * s.tokens / s.tp))
    return rates.streamed(act_bytes * s.tokens / s.tp) + whole_mlp


def kernel_gaps(P: CostParams, moe_share: float) -> float:
    """Idle seconds between a layer's dependent kernels (`CostParams.kernel_gap_s`), and after the host
    syncs of its MoE forward (`params.moe_host_syncs`, `CostParams.host_sync_s` each)."""
    return P.kernel_gap_s * (P.kernels_per_layer + moe_share * P.kernels_per_moe_layer) + moe_share * moe_host_syncs(P) * P.host_sync_s


@dataclass(frozen=True, slots=True)
class HeadCompute:
    """Seconds of the last stage's extra work per micro-batch: the output projection and the loss
    (forward and backward), the multi-token-prediction modules, and what full recomputation re-runs of them."""

    out_total: np.ndarray
    mtp_total: np.ndarray
    mtp_recompute: np.ndarray


def head_compute(m: ModelSpec, s: Shape, rates: Rates, layer: LayerCompute, P: CostParams) -> HeadCompute:
    # output projection + cross entropy on the last stage (vocab-parallel over TP)
    out_fwd = gemm_time(s.tokens, m.vocab / s.tp, m.hidden, rates.bf16_peak, rates.eff, rates.bw, sm_count=rates.sm_count)
    fused_loss = rates.sm_count == 0 if P.fused_cross_entropy is None else P.fused_cross_entropy
    ce_bytes = CROSS_ENTROPY_BYTES_FUSED if fused_loss else CROSS_ENTROPY_BYTES_EAGER
    out_total = 3.0 * out_fwd + rates.streamed(ce_bytes * s.tokens * m.vocab / s.tp)
    # multi-token prediction, beside the output head (DeepSeek-V3 Sec. 2.2): per module a 2h -> h
    # projection, one block of the model's last kind and a second pass through the head and loss
    routed = m.ffn_kind.routed
    block_fwd = layer.moe_fwd if routed else layer.dense_fwd
    proj_fwd = gemm_time(s.tokens, m.hidden / s.tp, 2 * m.hidden, rates.linear_peak, rates.linear_eff, rates.bw, sm_count=rates.sm_count)
    mtp_total = m.mtp_depth * (block_fwd + layer.backward(block_fwd) + kernel_gaps(P, float(routed)) + 3.0 * proj_fwd + out_total)
    return HeadCompute(out_total=out_total, mtp_total=mtp_total, mtp_recompute=m.mtp_depth * block_fwd)
