"""One training step: compute, exposed communication, bubble, optimizer; memory; MFU.

`evaluate` works on columns of candidates (numpy arrays, one entry per Strategy) so the planner
scores millions at once; `estimate` wraps it for one Strategy. Every term is a function of the
shapes and the hardware figures, with its source in the module it comes from:

    step = m · (compute_mb + exposed_mb) · (1 + bubble) + exposed_dp + exposed_pp + optimizer

m micro-batches per step; compute_mb the forward+backward (+recompute) time of one micro-batch
through the worst pipeline rank's layers; exposed_mb the per-micro-batch communication (TP, EP,
CP, FSDP) that its overlap window does not hide, exposed = max(0, comm - window) (the scaling
book's T_lower = max(T_math, T_comms) per overlapped pair); bubble the schedule's idle share
(cost/pipeline.py); exposed_dp the gradient synchronisation left after the last backward, never
less than the embedding's own, which nothing can hide (the same edges expose FSDP's first gather,
last reduction and root unit).
The expert all-to-all is hidden only where a schedule pairs micro-batches: under DualPipeV the
(3p-1)/(2m) of chunk passes rank 0 runs outside an overlapped (F, B) pair keep theirs exposed.

MFU (DESIGN.md): model FLOPs per token × tokens/s ÷ (devices × dense peak of the training dtype),
model FLOPs per token = 6·(active non-embedding params + output projection) + 12·L·H·d·s (PaLM
Appendix B; `causal_mfu` halves the attention term). HFU also counts recomputation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bandwise.cost import comm
from bandwise.cost.compute import gemm_time, memory_bound_time
from bandwise.cost.flops import (
    BF16,
    Gemm,
    attention_core_flops_per_token,
    attention_gemms,
    elementwise_bytes_per_token,
    fp8_cast_bytes_per_token,
    mlp_gemms,
    moe_layer_gemms,
)
from bandwise.cost.memory import (
    GIB,
    activation_bytes_per_token,
    head_input_bytes_per_token,
    layer_input_bytes_per_token,
    logits_bytes_per_token,
    weight_output_grad_bytes_per_token,
    model_state_bytes,
    weight_bytes,
)
from bandwise.cost.pipeline import pipeline_factors
from bandwise.cost.schedules import dualpipe_v_alone
from bandwise.errors import BandwiseError
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import PRECISIONS, RECOMPUTE, SCHEDULES, V_SHAPED, Layouts, Strategy

_NONE, _SELECTIVE, _FULL = (RECOMPUTE.index(r) for r in ("none", "selective", "full"))
_FP8 = PRECISIONS.index("fp8")
_DUALPIPE_V = SCHEDULES.index("DualPipeV")


@dataclass(kw_only=True, slots=True, frozen=True)
class CostParams:
    """The model's few non-hardware parameters: one set for every run, each with its reason."""

    attention_efficiency: float | None = None
    """Override of the device's fused-attention efficiency (`Device.attention_efficiency`)."""
    attention: str = "flash"
    """The fused attention kernel the job runs: "flash", the chip's current one
    (`Device.attention_efficiency`); "fa2", FlashAttention-2, what PyTorch's SDPA flash backend
    runs (`Device.fa2_attention_efficiency`, slower on Hopper). Attention without a fused kernel
    is `flash_attention` off. `ATTENTION_KERNELS` maps the CLI's `--attention` onto both."""
    attention_backward_ratio: float = 2.5
    """Backward/forward FLOPs of flash attention: 5 matmuls against 2, P is recomputed (Dao 2023, Sec. 3.1)."""
    hbm_efficiency: float = 0.8
    """Share of peak HBM bandwidth that streaming element-wise kernels reach (STREAM-like copies
    reach 80-90% on A100/H100; NVIDIA's memory-bound guide)."""
    optimizer_bytes_per_param: float = 32.0
    """AdamW step in fp32: read param, grad, m, v (16 B), write param, m, v (12 B), plus a bf16 copy
    of the weights and the gradient-norm read (4 B)."""
    grad_reduce_bytes: int = 4
    """Gradients are accumulated, kept and reduced in fp32 (Megatron-LM's default
    `accumulate_allreduce_grads_in_fp32`, its fp32 `main_grad` buffer: 18 bytes per parameter in its
    docs/source/api-guide/dist_optimizer.md; torchtitan's default `mixed_precision_reduce = float32`,
    which keeps FSDP2's sharded gradients in fp32; DeepSeek-V3 Sec. 3.3.3 keeps fp32 gradients)."""
    adam_moment_bytes: int = 4
    """Bytes of each AdamW moment: fp32 in Megatron-LM, DeepSpeed and torch.optim; 2 where a framework
    keeps them in bf16 (DeepSeek-V3 Sec. 3.3.3, "Low-Precision Optimizer States")."""
    selective_modules: tuple[str, ...] = ("core_attn", "mlp_act")
    """What selective recomputation re-runs (`memory.RECOMPUTE_MODULES`). The default adds the MLP's
    activation function to the attention core: with FlashAttention no score matrix is left to drop,
    and it is the cheap saving that remains (MaxText's `minimal` policy recomputes every element-wise
    op). Megatron-LM's `--recompute-granularity selective` re-runs only `core_attn` (Korthikanti et
    al. 2022 Sec. 5; Megatron-Core's `recompute_modules` default)."""
    sequence_parallel: bool = True
    """Tensor parallelism splits the norms and dropouts along the sequence (Korthikanti et al. 2022,
    Sec. 4.2.2). Off, the 10·s·b·h bytes outside the TP regions stay whole on every TP rank (their
    Eq. 2). An all-reduce moves what its reduce-scatter and all-gather move (Sec. 4.2.2), so the time
    model tells the two apart only where the backward runs asynchronously (`tp_backward_async`); the
    norms' element-wise time, t times larger without it, is not modelled."""
    tp_gathered_inputs: bool = False
    """Under sequence parallelism, the GEMMs after each norm keep their all-gathered input, whole on
    every TP rank: torch's ColwiseParallel (DTensor; TorchTitan) gathers the sequence before the GEMM
    and autograd saves what the GEMM read. Off (the default), Megatron-LM's way: only the sequence
    shard is kept and gathered again in backward (Korthikanti et al. 2022, Sec. 4.2.2). bandwise's
    own trainer runs torch TP, so its dry run and memory check turn this on."""
    score_bias_bytes: float = 0.0
    """HBM bytes per score, each materialized attention forward, of an additive bias put into the scores
    before the softmax. ALiBi in Megatron-DeepSpeed (BLOOM): `torch.baddbmm(alibi, Q, K^T, beta=1.0)`
    with the bias broadcast over the queries; cuBLAS accumulates into the output it reads (beta = 1),
    so the broadcast bias is first written into the score buffer (2) and then read back (2): 4."""
    grad_accumulation_bytes: float = 0.0
    """HBM bytes per local parameter that each micro-batch's backward spends adding its weight
    gradient into the step's gradient accumulator outside the GEMM. 0: the weight-gradient GEMM
    accumulates in place (Megatron-LM's gradient_accumulation_fusion, since 2022-02, and Transformer
    Engine's fuse_wgrad_accumulation write into the fp32 main_grad with beta = 1), or a step of one
    micro-batch. DeepSpeed's bf16 optimizer (runtime/bf16_optimizer.py, update_hp_grads after each
    backward) runs `hp_grad.add_(lp.grad.to(fp32))`: the cast reads 2 and writes 4 bytes, the add
    reads 4 + 4 and writes 4, 18 in all. Autograd's own accumulation into an fp16 or bf16
    `param.grad` adds in place: 2 + 2 read, 2 written, 6."""
    grad_accumulation_skips_first: bool = False
    """The accumulator starts as the first micro-batch's gradient, so the add runs on the other
    m - 1: autograd's AccumulateGrad keeps the first gradient it is given. Off: every micro-batch's
    gradient is added into a zeroed buffer (DeepSpeed's bf16 optimizer)."""
    tp_backward_async: bool = False
    """The backward's TP collectives of the column-parallel GEMMs (QKV, MLP-up) run beside a GEMM of
    the same layer, on NCCL's stream: Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication
    launches the input gradient's all-reduce and then computes the weight gradient (async all-reduce,
    Megatron-LM commit 16c9044, 2021-09); under sequence parallelism it re-gathers the saved sequence
    shard beside the input-gradient GEMM and reduce-scatters the input gradient beside the
    weight-gradient GEMM (commit cfd2e21, 2022-04, the code of Korthikanti et al. 2022, Sec. 4.2.2).
    The row-parallel GEMMs' gradient all-gathers (under SP) wait. Off: every collective waits
    (PyTorch's TP issues a GEMM's backward collective after the GEMM's whole backward), and the
    backward counts four collectives without Megatron's re-gathers, so with GEMMs too short to hide
    anything the async backward can expose more (6 against 4) than the synchronous one."""
    fsdp_pp_unsharded: bool = True
    """Under FSDP with pipeline parallelism a stage keeps its parameters gathered (bf16) from its first
    forward to its last backward and accumulates unsharded gradients in fp32 until the last
    micro-batch: TorchTitan shards with `reshard_after_forward = not pp_enabled` (parallelize.py,
    apply_fsdp, "to avoid per-microbatch all-gathers"); torch.distributed.pipelining's stage calls
    `set_requires_gradient_sync(last_backward)` (stage.py, backward_maybe_with_nosync), and FSDP2
    accumulates the unsynced gradients in reduce_dtype (FSDPParam.to_accumulated_grad_if_needed).
    FSDP x PP is a PyTorch-only combination (DeepSpeed refuses ZeRO-2/3 with its pipeline engine)."""
    fsdp_grads_freed: bool = True
    """Under FSDP2, a step of one micro-batch without a pipeline is counted at the moment of its peak
    rather than as the sum of every term's own maximum. No gradient exists at the loss: the optimizer
    frees them (`Optimizer.zero_grad(set_to_none=True)`, torch's default since 2.0; TorchTitan calls
    it every step), and each unit's sharded gradient is created by its reduce-scatter in the backward
    (FSDP2's post-backward), as that unit's activations are freed. `_combine` lists the four moments
    and what FSDP holds at each. With gradient accumulation the first micro-batch's gradients stand
    through the next one's forward; Megatron-LM's DDP keeps a persistent gradient buffer (its
    `grad_data`); neither is counted by moment."""
    fp8_activation_cache: bool = False
    """Under fp8 the activation function's input is kept in fp8, its output recomputed (DeepSeek-V3
    report, Sec. 3.3.3, "Low-Precision Storage and Communication")."""
    expert_imbalance: float = 1.0
    """Busiest expert rank's load over the mean. 1.0 = balanced (auxiliary-loss-free balancing keeps
    MaxVio near 0.04-0.1 in Wang et al. 2024, Table 2; NVIDIA's published MoE runs force balance)."""
    reserved_bytes: float = 1.0 * GIB
    """CUDA context, cuBLAS workspace and NCCL buffers kept outside the allocator's pools (with the
    ~470 MiB an H100 reports in nvidia-smi but not to cudaGetDeviceProperties; clusters.yaml)."""
    headroom: float = 0.1
    """Share of HBM left free: a layout fits if it needs <= (1 - headroom) of the device's capacity.
    The memory terms count tensors, what torch's allocator reports as allocated; the allocator holds
    more, reserved = allocated + cached blocks split or freed but not returned (fragmentation,
    rounding to 512-byte blocks and 2 MiB segments; PyTorch "CUDA semantics", memory management).
    Published peaks (TorchTitan's `max_reserved_gib`) are reserved figures: the headroom is the
    allowance for reserved over allocated, plus transient workspaces not itemized."""
    kernel_gap_s: float = 2.0e-6
    """Idle time between two dependent kernels on the device (launch latency not hidden by the
    queue, tail of the previous kernel): a few microseconds ("Accelerating PyTorch with CUDA
    Graphs", PyTorch blog 2021). Counted per kernel, so tiny micro-batches pay for it."""
    kernels_per_layer: int = 36
    """Kernels of one layer, forward + backward: about 12 forward (2 norms, 4 GEMMs, RoPE,
    attention, activation, 2 residual adds, a copy) and twice that backward."""
    kernels_per_moe_layer: int = 30
    """Extra kernels of an MoE layer: router, top-k, permutation, grouped GEMMs, un-permutation,
    forward and backward."""
    causal_mfu: bool = False
    """Count causal attention FLOPs at half in MFU (off: PaLM's convention counts the full matrix)."""
    selective_forward_share: float = 0.0
    """Share of a layer's forward outside attention that selective recomputation runs again. 0 for
    Megatron's selective recomputation (Korthikanti et al. 2022: only the attention core, and here
    the activation function); TorchTitan's selective AC re-runs half (its op policy saves every
    other matmul and no element-wise output; its layer policy checkpoints every other layer)."""
    balanced_stages: bool = False
    """Whole layers placed to balance the rank of the output head, loss and MTP modules (fewer layers
    there; Llama 3 Sec. 3.3.2, Megatron-LM's pipeline layouts, `balanced_split`). Off: the frameworks'
    even split, the last stage's rank pays for the head, the loss and MTP on top of its layers."""
    eager_elementwise: bool = False
    """Element-wise ops run as separate eager PyTorch kernels (no torch.compile, no fused norms)."""
    fused_cross_entropy: bool | None = None
    """The loss runs as one fused kernel rather than eager PyTorch ops. None: fused on TPUs (XLA
    compiles every step; TPUs are the devices with sm_count 0), eager on GPUs, where Megatron-LM,
    DeepSpeed and TorchTitan run it op by op unless a fused loss is switched on."""
    flash_attention: bool = True
    """Attention saves no score matrix (FlashAttention); off reproduces Korthikanti's 5as/h term."""
    loss_kept_bytes_per_logit: float = 4.0
    """Bytes a logit that the loss keeps from its forward to its backward. Megatron-LM's vocab-parallel
    cross-entropy keeps the fp32 softmax and writes the gradient into it (4; Korthikanti et al. 2022,
    Sec. 4.3, 4·s·b·v), so what it keeps is also its peak (`memory.logits_bytes_per_token`).
    bandwise's trainer keeps the bf16 logits and makes a bf16 gradient beside them only in the
    backward (2; `runtime.ops.cross_entropy`). It matters where a stage keeps several micro-batches'
    losses at once: all-forward-then-all-backward schedules (GPipe, looped BFS) run each micro-batch's
    loss right after its forward (torch.distributed.pipelining computes it in the last stage's forward)."""


ATTENTION_KERNELS: dict[str, dict[str, Any]] = {
    "flash": {},
    "fa2": {"attention": "fa2"},
    "materialized": {"flash_attention": False},
}
"""`--attention` of plan and estimate: the CostParams fields each kernel sets. flash: the chip's
current fused kernel (FlashAttention-3 or cuDNN on Hopper, FlashAttention-2 on Ampere); fa2:
FlashAttention-2, as PyTorch's `scaled_dot_product_attention` runs it; materialized: attention
that writes the s x s scores to memory (Megatron-LM's 2022 CoreAttention, eager PyTorch)."""
DEFAULT_PARAMS = CostParams()

BREAKDOWN_TERMS = ("compute", "recompute", "contention", "bubble", "tp", "cp", "ep", "fsdp", "dp", "pp", "optimizer")
MEMORY_TERMS = ("params", "grads_optimizer", "grads_not_at_peak", "activations", "buffers")
"""The per-rank peak, term by term; `grads_not_at_peak` is zero or negative (`CostParams.fsdp_grads_freed`)."""


def rank_strides(order: tuple[str, ...], c: Layouts) -> dict[str, np.ndarray]:
    """Stride of each parallel dim in the global rank order, innermost dim first."""
    strides, acc = {}, np.ones_like(c.tp)
    for dim in order:
        strides[dim] = acc
        acc = acc * getattr(c, dim)
    return strides


def _gemms_time(gemms: list[Gemm], c: Layouts, tokens: np.ndarray, m: ModelSpec, peak: np.ndarray, eff: float | np.ndarray, bw: float, sms: int = 0) -> np.ndarray:
    """Forward time of a layer's GEMMs on one device; `tokens` after the sequence-parallel all-gather."""
    total = np.zeros_like(tokens, dtype=float)
    tp, ep = c.tp.astype(float), c.ep.astype(float)
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
        else:  # replicated across TP ranks (MLA down-projections, router)
            total = total + gemm_time(tokens * g.rows_per_token, g.n, g.k, peak, eff, bw, sm_count=sms)
    return total


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


def _materialized_attention(
    m_: ModelSpec, tokens: np.ndarray, tp: np.ndarray, peak: float, eff: float, bw: float, bias_bytes: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of attention that materializes the s x s scores.

    The batched GEMMs compute the whole matrix (the causal mask is applied after), each paying the
    k-loop fill k/(k + 4·64) of its own reduction. Forward: S = Q·K^T reduces over the query/key
    width d, P·V over the sequence. Backward: dP = dO·V^T reduces over the value width d_v; dV =
    P^T·dO, dQ = dS·K and dK = dS^T·Q over the sequence. The score traffic is memory-bound:
    `SCORE_BYTES_FORWARD` (and `bias_bytes` of an additive bias, `CostParams.score_bias_bytes`) per
    score forward, `SCORE_BYTES_BACKWARD` backward.
    """
    from bandwise.cost.compute import K_FIXED

    s, d, dv = m_.seq_len, m_.d_head, m_.d_value
    pairs = tokens * m_.heads / tp * s  # (query, key) pairs: scores per layer on this device
    qk, pv = 2.0 * pairs * d, 2.0 * pairs * dv  # FLOPs of Q·K^T (and dQ, dK) and of P·V (and dP, dV)
    fill = lambda k: k / (k + K_FIXED)  # noqa: E731
    at = lambda flops, k: flops / (peak * eff * fill(k))  # noqa: E731
    forward = at(qk, d) + at(pv, s) + pairs * (SCORE_BYTES_FORWARD + bias_bytes) / bw
    backward = at(pv, dv) + at(pv, s) + 2.0 * at(qk, s) + pairs * SCORE_BYTES_BACKWARD / bw
    return forward, backward


def first_and_last_on_one_rank(pp: np.ndarray, schedule: np.ndarray) -> np.ndarray:
    """True where one rank holds both the first and the last stage: no pipeline, or a V-shaped
    schedule (DualPipeV, ZB-V), whose rank 0 runs stage 0 and stage 2p-1."""
    return (pp == 1) | np.isin(schedule, [SCHEDULES.index(s) for s in V_SHAPED])


def last_stage_rank_layers(layers: int, pp: np.ndarray, v: np.ndarray, schedule: np.ndarray) -> np.ndarray:
    """Layers on the pipeline rank that holds the last stage, when `layers` are cut into pp·v stages as
    evenly as they go, earlier stages taking the remainder (Megatron-LM's uniform split, torchtitan's
    generate_split_points, runtime/parallel/pipeline.py). The output layer and loss sit on the last
    stage (Megatron-LM's post_process stage, torchtitan's last split, our trainer's last stage): on
    rank pp-1 for single-stage and looped schedules, on rank 0, beside stage 0, for the V-shaped ones."""
    n = pp * v
    base = np.floor(layers / n)
    extra = layers - base * n
    v_shaped = first_and_last_on_one_rank(pp, schedule) & (pp > 1)
    # looped: stages pp-1, 2pp-1, ... of which those below `extra` carry one more layer
    looped = v * base + np.clip(np.ceil((extra - (pp - 1)) / pp), 0, v)
    return np.where(v_shaped, 2 * base + (extra > 0), looped)


def balanced_split(layers: int, pp: np.ndarray, unit: np.ndarray, head: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(layers on the fullest rank, layers on the head's rank, the slowest rank's time) when whole
    layers are placed to balance the rank that holds the output head.

    The rank holding the output head (`head` seconds: head, loss, MTP modules) takes k layers, the
    other pp-1 ranks at most R each, k = L - R·(pp-1) (Llama 3 Sec. 3.3.2; Megatron-LM's
    --decoder-first/last-pipeline-num-layers). The slowest rank takes max(R·unit, k·unit + head):
    rising in R, falling in R through k, so the best whole R is next to the crossing
    R* = (L + head/unit) / pp.
    """
    pp = np.asarray(pp, dtype=float)
    r_star = (layers + head / unit) / pp
    best_t = np.full(np.broadcast(pp, unit, head).shape, np.inf)
    best_r, best_k = np.zeros_like(best_t), np.zeros_like(best_t)
    for r in (np.floor(r_star), np.ceil(r_star)):
        r = np.clip(r, 1.0, layers)
        k = np.clip(layers - r * (pp - 1), 0.0, layers)
        t = np.maximum(r * unit, k * unit + head)
        better = t < best_t
        best_t, best_r, best_k = np.where(better, t, best_t), np.where(better, np.maximum(r, k), best_r), np.where(better, k, best_k)
    single = pp == 1
    return np.where(single, layers, best_r), np.where(single, layers, best_k), np.where(single, layers * unit + head, best_t)


def _affine(time_fn, cluster: Cluster, stride: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A collective's time is latency + bytes x seconds-per-byte: return (seconds per byte, latency)."""
    lat = time_fn(cluster, 0.0, stride, size)
    return time_fn(cluster, 1.0, stride, size) - lat, lat


def _base(m_: ModelSpec, cluster: Cluster, c: Layouts, order: tuple[str, ...], P: CostParams) -> dict[str, np.ndarray]:
    """Everything that depends only on the degrees, ZeRO stage, micro-batch and precision.

    Per layer and per micro-batch on one device; the schedule, virtual stages and recomputation
    are combined in `_combine`. The search evaluates this once per distinct such key.
    """
    dev = cluster.device
    f = lambda a: np.asarray(a, dtype=float)  # noqa: E731
    tp, cp, pp, ep, dps, dpr = (f(getattr(c, k)) for k in ("tp", "cp", "pp", "ep", "dp_shard", "dp_replicate"))
    mb = f(c.micro_batch)
    dp = dps * dpr
    zero = np.where(c.dp_shard > 1, 3, c.zero_stage)
    fp8 = c.precision == _FP8
    # compute runs at the clock the chip sustains at its power limit, not the datasheet's boost
    bf16_peak = dev.peak("bf16") * dev.sustained_clock_ratio
    linear_peak = np.where(fp8, dev.peak_flops.get("fp8", dev.peak("bf16")), dev.peak("bf16")) * dev.sustained_clock_ratio
    eff, bw, hbm_eff = dev.gemm_efficiency, dev.hbm_bandwidth, P.hbm_efficiency
    linear_eff = np.where(fp8, dev.fp8_gemm_efficiency or eff, eff)  # fp8 GEMMs reach less of their peak
    tokens = mb * m_.seq_len / cp  # tokens of this device's sequence shard in one micro-batch (full width)
    L, frac_moe = m_.layers, m_.moe_layers / m_.layers
    b: dict[str, np.ndarray] = {"tokens": tokens, "zero": zero, "fp8": fp8}

    # ---- compute, one layer, one micro-batch ----
    if P.flash_attention:
        if P.attention == "fa2" and dev.fa2_attention_efficiency is None and P.attention_efficiency is None:
            raise BandwiseError(f"--attention fa2: bandwise has no FlashAttention-2 figure for {dev.name}; "
                                "use --attention flash (the chip's own fused kernel) or give fa2_attention_efficiency in a cluster file")
        attn_eff = P.attention_efficiency or (dev.fa2_attention_efficiency if P.attention == "fa2" else None) or dev.attention_efficiency
        # short sequences leave each query tile's fixed cost less loop to hide behind; under context
        # parallelism each kernel call sees one chunk of seq_len / cp keys (`Device.attention_fill_tokens`)
        keys = m_.seq_len / cp
        attn_eff = attn_eff * keys / (keys + dev.attention_fill_tokens)
        attn_fwd = attention_core_flops_per_token(m_, causal=True) * tokens / tp / (bf16_peak * attn_eff)
        attn_bwd = P.attention_backward_ratio * attn_fwd
    else:
        attn_fwd, attn_bwd = _materialized_attention(m_, tokens, tp, bf16_peak, eff, bw * hbm_eff, P.score_bias_bytes)
    casts = np.where(fp8, 1.0, 0.0)  # fp8 quantizes every GEMM input (and, backward, every output gradient)
    gemms = lambda gs: _gemms_time(gs, c, tokens, m_, linear_peak, linear_eff, bw, dev.sm_count)  # noqa: E731
    # the GEMMs on either side of each tensor-parallel collective: the attention block's input
    # projections and its output projection, the MLP's up and down projections
    attn_gemms = attention_gemms(m_)
    attn_in, attn_out = gemms([g for g in attn_gemms if g.split != "row"]), gemms([g for g in attn_gemms if g.split == "row"])
    mlp_up, mlp_down = (gemms([g]) for g in mlp_gemms(m_, m_.ffn))
    dense_fwd = attn_in + attn_out + mlp_up + mlp_down + attn_fwd
    dense_fwd += memory_bound_time(
        (elementwise_bytes_per_token(m_, False, P.eager_elementwise) + casts * fp8_cast_bytes_per_token(m_, False)) * tokens / tp, bw, hbm_eff
    )
    if m_.is_moe:
        moe_gemms = moe_layer_gemms(m_)
        moe_mlp = gemms(moe_gemms[len(attn_gemms):])  # router, shared and routed experts
        moe_fwd = attn_in + attn_out + moe_mlp + attn_fwd
        moe_fwd += memory_bound_time(
            (elementwise_bytes_per_token(m_, True, P.eager_elementwise) + casts * fp8_cast_bytes_per_token(m_, True)) * tokens / tp, bw, hbm_eff
        )
        moe_fwd += (P.expert_imbalance - 1.0) * gemms(moe_gemms[-2:])
    else:
        moe_mlp = moe_fwd = np.zeros_like(dense_fwd)
    b["moe_fwd"] = moe_fwd
    b["layer_fwd"] = layer_fwd = (1 - frac_moe) * dense_fwd + frac_moe * moe_fwd  # mean over the model's layers
    b["layer_attn"] = attn_fwd
    b["layer_attn_total"] = attn_fwd + attn_bwd
    backward = lambda fwd: 2.0 * (fwd - attn_fwd) + attn_bwd  # noqa: E731  GEMMs twice, attention its own ratio
    b["layer_bwd"] = backward(layer_fwd)
    # selective: each re-run module's forward again. The activation function and the norms are
    # element-wise passes (read the input, write the output); the attention core only when it is
    # not flash (flash already recomputes scores inside its backward); MLA's up-projections their GEMMs
    mods = P.selective_modules
    act_elems = (1 - frac_moe) * m_.ffn + frac_moe * (m_.top_k * m_.expert_ffn + m_.shared_experts * m_.shared_ffn)
    act_bytes = BF16 * 3 * act_elems if "mlp_act" in mods else 0.0
    norm_bytes = 2 * BF16 * 2 * m_.hidden if "layernorm" in mods else 0.0
    up_proj = gemms([g for g in attn_gemms if g.name in ("q_up", "kv_up")]) if "mla_up_proj" in mods else 0.0
    b["selective_cost"] = (memory_bound_time((act_bytes + norm_bytes) * tokens / tp, bw, hbm_eff) + up_proj
                           + (0.0 if P.flash_attention or "core_attn" not in mods else attn_fwd)
                           + P.selective_forward_share * (layer_fwd - attn_fwd))
    # output projection + cross entropy on the last stage (vocab-parallel over TP)
    out_fwd = gemm_time(tokens, m_.vocab / tp, m_.hidden, bf16_peak, eff, bw, sm_count=dev.sm_count)
    fused_loss = dev.sm_count == 0 if P.fused_cross_entropy is None else P.fused_cross_entropy
    ce_bytes = CROSS_ENTROPY_BYTES_FUSED if fused_loss else CROSS_ENTROPY_BYTES_EAGER
    b["out_total"] = 3.0 * out_fwd + memory_bound_time(ce_bytes * tokens * m_.vocab / tp, bw, hbm_eff)
    gaps = lambda moe_share: P.kernel_gap_s * (P.kernels_per_layer + moe_share * P.kernels_per_moe_layer)  # noqa: E731
    b["kernel_gaps"] = np.full_like(tokens, gaps(frac_moe))
    # multi-token prediction, beside the output head (DeepSeek-V3 Sec. 2.2): per module a 2h -> h
    # projection, one block of the model's last kind and a second pass through the head and loss
    block_fwd = moe_fwd if m_.is_moe else dense_fwd
    proj_fwd = gemm_time(tokens, m_.hidden / tp, 2 * m_.hidden, linear_peak, linear_eff, bw, sm_count=dev.sm_count)
    b["mtp_total"] = m_.mtp_depth * (block_fwd + backward(block_fwd) + gaps(float(m_.is_moe)) + 3.0 * proj_fwd + b["out_total"])
    b["mtp_recompute"] = m_.mtp_depth * block_fwd

    # ---- placement of groups on the topology ----
    st = rank_strides(order, c)
    fsdp_stride, fsdp_size = np.minimum(st["cp"], st["dp_shard"]), cp * dps
    ep_stride = np.minimum(np.minimum(st["tp"], st["cp"]), st["dp_shard"])
    ddp_stride, ddp_size = np.minimum(st["cp"], st["dp_replicate"]), dpr * cp

    # tensor parallel: one all-gather or reduce-scatter of the sequence-parallel activations
    b["tp_one"] = comm.all_gather_time(cluster, tokens * m_.hidden * BF16, st["tp"], tp)
    # TP collectives overlap GEMMs only inside one NVLink domain: Transformer Engine's userbuffers
    # map the peers' buffers by CUDA IPC and multicast handles, which exist only over NVLink
    # (NVIDIA/TransformerEngine issue #1071, 2024: "comm+GEMM overlap is currently only possible
    # with single-node tensor-parallelism"; PR #1470, TE 2.2, 2025, registers them across a
    # multi-node NVLink domain such as NVL72). PyTorch's async TP maps its peers' memory the same
    # way (SymmetricMemory, pytorch/pytorch PR #128762). A TP group across domains waits on NCCL.
    b["tp_overlappable"] = comm.inside_first_level(cluster, st["tp"], tp)
    # Overlapped, each collective hides only behind the GEMM it feeds or is fed by: Transformer
    # Engine ring-exchanges the all-gathers into the QKV and MLP-up GEMMs and pipelines the
    # reduce-scatters out of the output and MLP-down projections ("ring_exchange" and "pipeline"
    # in its userbuffers defaults); PyTorch's async TP fuses the same pairs
    # (fused_all_gather_matmul, fused_matmul_reduce_scatter). Backward, each collective hides
    # behind one GEMM of the same shape (the ring exchanges behind the input-gradient GEMMs; TE's
    # "bulk" reduce-scatter of the QKV and MLP-up input gradients behind their weight-gradient
    # GEMMs), so a pass exposes sum over the 4 pairs of max(0, c - GEMM).
    # Approximations: MLA's replicated down-projections count as attention input (async TP
    # gathers once for several matmuls; Megatron-Core instead gathers the small latents, so the
    # window is overstated there); an MoE layer's router and experts stand on the MLP side, half
    # behind each collective, an assumption: no source pairs grouped expert GEMMs with them.
    pair = lambda gemm: np.maximum(0.0, b["tp_one"] - gemm)  # noqa: E731
    dense_pairs = pair(attn_in) + pair(attn_out) + pair(mlp_up) + pair(mlp_down)
    moe_pairs = pair(attn_in) + pair(attn_out) + 2.0 * pair(moe_mlp / 2.0)
    b["tp_pass_exposed"] = (1 - frac_moe) * dense_pairs + frac_moe * moe_pairs
    # Asynchronous backward (`CostParams.tp_backward_async`), per column-parallel GEMM g (QKV, MLP-up;
    # its input- and weight-gradient GEMMs each take as long as its forward): without SP its input
    # gradient's all-reduce (2 units) hides behind the weight gradient, max(0, 2c - g); under SP the
    # re-gather hides behind the input gradient and the reduce-scatter behind the weight gradient,
    # 2·max(0, c - g) (one max(0, c - g) where the gathered input was kept, `tp_gathered_inputs`), and
    # the two row-parallel gradients' all-gathers wait (2c). 4c, or 6c with the re-gathers, move.
    if P.tp_backward_async:
        one = b["tp_one"]
        if P.sequence_parallel and not P.tp_gathered_inputs:
            async_pass = lambda up: 2.0 * one + 2.0 * (pair(attn_in) + pair(up))  # noqa: E731
            b["tp_bwd_total"] = 6.0 * one
        elif P.sequence_parallel:  # the gathered input was kept: nothing to gather again
            async_pass = lambda up: 2.0 * one + pair(attn_in) + pair(up)  # noqa: E731
            b["tp_bwd_total"] = 4.0 * one
        else:
            async_pass = lambda up: np.maximum(0.0, 2.0 * one - attn_in) + np.maximum(0.0, 2.0 * one - up)  # noqa: E731
            b["tp_bwd_total"] = 4.0 * one
        b["tp_bwd_exposed"] = (1 - frac_moe) * async_pass(mlp_up) + frac_moe * async_pass(moe_mlp / 2.0)
    # context parallel: ring passes K,V forward and K,V + dK,dV backward, hidden behind attention
    kv_width = (m_.heads * (m_.d_head + m_.d_value)) if m_.is_mla else m_.n_kv_heads * (m_.d_head + m_.d_value)
    kv_chunk = tokens * kv_width * BF16 / np.minimum(tp, m_.heads if m_.is_mla else m_.n_kv_heads)
    b["cp_layer"] = cp_layer = 3.0 * (cp - 1) * comm.ring_p2p_time(cluster, kv_chunk, st["cp"], cp)
    b["cp_exposed"] = np.maximum(0.0, cp_layer - (attn_fwd + attn_bwd))
    # expert parallel: one dispatch or combine all-to-all
    if m_.is_moe:
        # fp8 recipes dispatch the quantized activations and their gradients in 1 byte, and
        # combine in bf16 (DeepSeek-V3 report, Sec. 3.3.2): 1.5 bytes per element on average
        elem = np.where(fp8, 1.5, float(BF16))
        ep_bytes = tokens / tp * m_.top_k * m_.hidden * elem * P.expert_imbalance
        outer = min(1.0, m_.groups_per_token / m_.top_k) if m_.groups_per_token else 1.0
        b["ep_one"] = comm.all_to_all_time(cluster, ep_bytes, ep_stride, ep, outer_scale=outer) * (ep > 1)
    else:
        b["ep_one"] = np.zeros_like(tokens)

    # ---- parameters per layer on a device, and their data-parallel groups ----
    b["expert_split"] = expert_split = np.where(ep > 1, ep, tp)
    b["dense_layer_local"] = m_.non_expert_layer_params / L / tp
    b["expert_layer_local"] = m_.routed_expert_params_total / L / expert_split  # averaged over layers
    b["emb_local"] = m_.embedding_params / tp
    b["out_local"] = np.full_like(tp, 0.0 if m_.tied_embeddings else m_.output_params) / tp
    expert_dp = dp * cp * tp / expert_split  # ranks holding the same experts
    # Under FSDP the experts are sharded over what dp_shard·cp·tp leaves of the EP group and replicated
    # over dp_replicate. An EP group spanning replicas (Megatron, DeepSeek-V3) exists only without FSDP
    # (specs/strategy.py), where ZeRO-1/2 shard the experts' state over all expert_dp ranks.
    expert_fsdp = expert_dp / dpr
    b["shard_dense"] = np.select([zero == 3, zero >= 1], [dps * cp, dpr * cp], 1.0)
    b["shard_expert"] = np.select([zero == 3, zero >= 1], [expert_fsdp, expert_dp], 1.0)

    # FSDP (ZeRO-3): all-gather forward, all-gather backward, reduce-scatter grads, per layer
    exp_stride = ep_stride * ep
    g = P.grad_reduce_bytes
    has_experts = b["expert_layer_local"] > 0  # a dense model launches no expert collectives, not even their latency
    b["ag_layer"] = comm.all_gather_time(cluster, b["dense_layer_local"] * BF16, fsdp_stride, fsdp_size) + has_experts * comm.all_gather_time(
        cluster, b["expert_layer_local"] * BF16, exp_stride, expert_fsdp
    )
    b["rs_layer"] = comm.reduce_scatter_time(cluster, b["dense_layer_local"] * g, fsdp_stride, fsdp_size) + has_experts * comm.reduce_scatter_time(
        cluster, b["expert_layer_local"] * g, exp_stride, expert_fsdp
    )
    # gradient synchronisation is affine in the bytes, which depend on the layers per rank
    b["k_ddp"], b["l_ddp"] = _affine(comm.all_gather_time, cluster, ddp_stride, ddp_size)
    b["k_fsdp"], b["l_fsdp"] = _affine(comm.all_gather_time, cluster, fsdp_stride, fsdp_size)
    b["k_rep"], b["l_rep"] = _affine(comm.all_gather_time, cluster, st["dp_replicate"], dpr)
    b["k_edp"], b["l_edp"] = _affine(comm.all_gather_time, cluster, exp_stride, expert_dp)
    # pipeline point-to-point of one micro-batch's activations (sequence-parallel shard)
    b["p2p_one"] = comm.p2p_time(cluster, tokens * m_.hidden * BF16 / tp, st["pp"])
    b["a2a_buffers"] = 2.0 * tokens / tp * m_.top_k * m_.hidden * BF16 if m_.is_moe else np.zeros_like(tokens)
    return b


def evaluate(model: ModelSpec, cluster: Cluster, c: Layouts, order: tuple[str, ...], params: CostParams = DEFAULT_PARAMS) -> dict[str, np.ndarray]:
    """Step time, its breakdown, memory and throughput for columns of candidate strategies.

    When the columns carry `base_key` (equal for rows that share degrees, ZeRO stage,
    micro-batch and precision), the per-layer terms are computed once per key.
    """
    key = c.base_key
    if key is not None and len(key) > 1:
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        sub = c.take(first)
        base = {k: v[inverse] for k, v in _base(model, cluster, sub, order, params).items()}
    else:
        base = _base(model, cluster, c, order, params)
    return _combine(model, cluster, c, base, params)


def _combine(m_: ModelSpec, cluster: Cluster, c: Layouts, b: dict[str, np.ndarray], P: CostParams) -> dict[str, np.ndarray]:
    """Add the schedule, virtual stages and recomputation to the per-layer terms; memory; MFU."""
    dev = cluster.device
    f = lambda a: np.asarray(a, dtype=float)  # noqa: E731
    tp, pp, dps, dpr, mb, v = (f(getattr(c, k)) for k in ("tp", "pp", "dp_shard", "dp_replicate", "micro_batch", "virtual_stages"))
    cp = f(c.cp)
    dp = dps * dpr
    world = dp * cp * tp * pp
    gb = np.where(c.global_batch > 0, f(c.global_batch), dp * mb)
    n_mb = np.maximum(np.floor(gb / (dp * mb)), 1.0)
    rec, zero, tokens = c.recompute, b["zero"], b["tokens"]
    L, frac_moe = m_.layers, m_.moe_layers / m_.layers
    layer_fwd, layer_bwd = b["layer_fwd"], b["layer_bwd"]

    # ---- compute per micro-batch on the fullest pipeline rank ----
    layer_recompute = np.select([rec == _FULL, rec == _SELECTIVE], [layer_fwd, b["selective_cost"]], 0.0)
    # each micro-batch's backward folds its weight gradients into the step's accumulator outside
    # the GEMMs where the framework does so (`CostParams.grad_accumulation_bytes`): per layer, and on
    # the head's rank for the output layer's weights and, where the same rank holds it, the embedding's
    # (a tied head's copy on a last stage of its own is not counted: its ModelSpec has no output_params)
    adds = np.where(P.grad_accumulation_skips_first, (n_mb - 1.0) / n_mb, 1.0)  # adds per micro-batch, on average
    accumulate = adds * P.grad_accumulation_bytes / (dev.hbm_bandwidth * P.hbm_efficiency)
    per_layer = layer_fwd + layer_bwd + b["kernel_gaps"] + accumulate * (b["dense_layer_local"] + b["expert_layer_local"])
    unit = per_layer + layer_recompute
    # the rank of the last stage also runs the output head, the loss and any MTP modules
    together = first_and_last_on_one_rank(pp, c.schedule)
    head_weights = b["out_local"] + np.where(together, b["emb_local"], 0.0)
    head = b["out_total"] + b["mtp_total"] + np.where(rec == _FULL, b["mtp_recompute"], 0.0) + accumulate * head_weights
    if P.balanced_stages:  # whole layers moved off the head's rank until it is no slower than the rest
        layers_rank, head_layers, compute_mb_total = balanced_split(L, pp, unit, head)
        # a rank's v stages hold whole layers too: the pipeline fills and drains at the pace of its
        # largest stage, ceil(layers/v) layers, not of the mean layers/v
        chunk_ratio = np.ceil(layers_rank / v) * v / np.maximum(layers_rank, 1.0)
    else:  # even split: every stage holds ceil(L / (pp·v)) layers or fewer
        layers_rank = np.ceil(L / (pp * v)) * v
        head_layers = last_stage_rank_layers(L, pp, v, c.schedule)
        compute_mb_total = np.maximum(layers_rank * unit, head_layers * unit + head)
        chunk_ratio = 1.0
    recompute_mb = layers_rank * layer_recompute
    compute_mb = compute_mb_total - recompute_mb

    # ---- tensor parallel: 4 collectives forward, 4 backward per layer (Korthikanti et al. 2022,
    # Sec. 4.2.2: all-gather / reduce-scatter around attention and MLP), 4 more to recompute; an
    # asynchronous backward (`tp_backward_async`) moves 4 or 6 and exposes what `_base` finds ----
    passes = 2.0 + np.where(rec == _FULL, 1.0, 0.0)
    tp_layer = 4.0 * passes * b["tp_one"]
    overlapped = c.overlap_tp & b["tp_overlappable"]
    tp_exposed = np.where(overlapped, passes * b["tp_pass_exposed"], tp_layer)
    if P.tp_backward_async:  # the forward passes wait; the backward runs its own way (`_base`)
        forwards = 4.0 * (passes - 1.0) * b["tp_one"]
        tp_exposed = np.where(overlapped, tp_exposed, forwards + b["tp_bwd_exposed"])
        tp_layer = np.where(overlapped, tp_layer, forwards + b["tp_bwd_total"])
    # ---- expert parallel: dispatch + combine, forward and backward (+2 to recompute) ----
    ep_layer = (4.0 + np.where(rec == _FULL, 2.0, 0.0)) * b["ep_one"]
    moe_fwd = b["moe_fwd"]
    # DualPipe(V) hides a micro-batch's all-to-all only inside its overlapped (F, B) pairs; the
    # warm-up forwards and cool-down backwards run alone with theirs exposed: 3p-1 of each of the
    # 2m chunk passes on rank 0 (`schedules.dualpipe_v_alone`; "Insights into DeepSeek-V3", ISCA
    # 2025, Table 4 times these phases apart from the overlapped 1F1B)
    alone = np.where((c.schedule == _DUALPIPE_V) & (pp > 1), np.minimum(1.0, dualpipe_v_alone(pp) / (2.0 * n_mb)), 0.0)
    ep_hidden_share = np.where(c.overlap_ep, 1.0 - alone, 0.0)
    ep_exposed = frac_moe * (ep_hidden_share * np.maximum(0.0, ep_layer - 3 * moe_fwd) + (1.0 - ep_hidden_share) * ep_layer)
    # ---- FSDP: prefetched behind the previous layer's forward, and its backward ----
    ag, rs = b["ag_layer"], b["rs_layer"]
    fsdp_layer_exposed = np.where(
        c.overlap_fsdp,
        np.maximum(0.0, ag - layer_fwd) + np.maximum(0.0, ag + rs - layer_bwd - layer_recompute),
        2 * ag + rs,
    )
    # Nothing runs before the first gather or after the last reduction: the first layer's weights
    # gather and the last layer's gradients reduce exposed, and so do the root unit's, the weights
    # outside any block (embedding, and the output layer where the same rank holds it), which are
    # gathered before the first layer and reduced after the embedding's backward (PyTorch FSDP2:
    # the root's reduce-scatter runs in the final backward callback)
    root = b["emb_local"] + np.where(together, b["out_local"], 0.0)
    root_edge = root * (BF16 + P.grad_reduce_bytes) * b["k_fsdp"] + 2 * b["l_fsdp"]
    fsdp_exposed = np.where(zero == 3, layers_rank * fsdp_layer_exposed + root_edge + np.where(c.overlap_fsdp, ag + rs, 0.0), 0.0)

    exposed_mb = layers_rank * (tp_exposed + b["cp_exposed"] + ep_exposed)
    # Collectives hidden behind compute still occupy SMs on GPUs (NCCL channels are thread blocks):
    # while one runs for c seconds, the compute beside it loses comm_sm_share · c of work.
    # An overlapped expert all-to-all keeps its SMs for the whole window it overlaps, not only while
    # bytes move: DualPipe partitions the SMs, 20 of the H800's 132 to communication while the paired
    # chunk computes (DeepSeek-V3 report, Sec. 3.2.1-3.2.2; ISCA'25 "Insights into DeepSeek-V3", Sec. 4.4.1).
    # Compute of t seconds on (1 - s) of the SMs takes t / (1 - s): it loses s · t / (1 - s), which
    # is s times the window stretched by 1 / (1 - s).
    sm_left = 1.0 - dev.comm_sm_share
    window = ep_hidden_share * frac_moe * 3 * moe_fwd * (b["ep_one"] > 0) / sm_left
    ep_occupied = np.where(c.overlap_ep, np.maximum(frac_moe * ep_layer - ep_exposed, window), frac_moe * ep_layer - ep_exposed)
    hidden_mb = layers_rank * (tp_layer - tp_exposed + b["cp_layer"] - b["cp_exposed"] + ep_occupied)
    hidden_mb = hidden_mb + np.where(zero == 3, layers_rank * (2 * ag + rs), 0.0) - fsdp_exposed
    contention_mb = dev.comm_sm_share * np.maximum(hidden_mb, 0.0)
    # graded: once the rank's first stage has gradients, graded_most while the most of its stages hold
    # them at once (stage by stage under interleaving); waiting: between a split backward's passes
    pf = pipeline_factors(c.schedule, pp, n_mb, v)
    bubble_overhead, inflight, inflight_graded = pf.overhead, pf.inflight, pf.inflight_graded
    waiting, head_waiting = pf.waiting, pf.head_waiting
    busy = n_mb * (compute_mb_total + contention_mb + exposed_mb + fsdp_exposed)
    bubble = busy * bubble_overhead * chunk_ratio

    # ---- parameters by pipeline rank, in three roles: the first rank holds the embedding, the head's
    # rank the output layer and any MTP modules, an inner rank neither. A V-shaped schedule puts the
    # first and the last stage on rank 0, which then holds the head's layers (`head_layers`), and
    # leaves the most layers to an inner rank (with the balanced split, to every other rank) ----
    el, xl = b["dense_layer_local"], b["expert_layer_local"]
    emb = b["emb_local"]
    head_dense = b["out_local"] + m_.mtp_depth * (m_.mtp_module_params - m_.mtp_expert_params) / tp
    head_expert = m_.mtp_depth * m_.mtp_expert_params / b["expert_split"]
    first_layers = np.where(together & (pp > 1), head_layers, layers_rank)
    roles = (  # (dense, expert parameters, holds the head) of: the first rank, the head's rank, an inner rank
        (first_layers * el + emb + np.where(together, head_dense, 0.0), first_layers * xl + np.where(together, head_expert, 0.0), together),
        (head_layers * el + np.where(together, emb, 0.0) + head_dense, head_layers * xl + head_expert, np.ones_like(together)),
        (layers_rank * el, layers_rank * xl, np.zeros_like(together)),
    )
    # communication and the optimizer step run at the pace of the rank with the most dense parameters
    by_dense = np.argmax(np.stack(np.broadcast_arrays(*(r[0] for r in roles))), axis=0)
    params_dense_rank = np.choose(by_dense, np.broadcast_arrays(*(r[0] for r in roles)))
    params_expert_rank = np.choose(by_dense, np.broadcast_arrays(*(r[1] for r in roles)))
    shard_dense, shard_expert = b["shard_dense"], b["shard_expert"]

    # ---- data-parallel gradient synchronisation, once per step after the last backward:
    # all-reduce = reduce-scatter + all-gather (fp32 gradients); ZeRO-1/2 reduce-scatter the
    # gradients and all-gather the bf16 weights; HSDP all-reduces the shards across replicas ----
    g = P.grad_reduce_bytes
    k_ddp, l_ddp, k_rep, l_rep, k_edp, l_edp = (b[k] for k in ("k_ddp", "l_ddp", "k_rep", "l_rep", "k_edp", "l_edp"))

    def sync(params: np.ndarray, k: np.ndarray, lat: np.ndarray, shard: np.ndarray) -> np.ndarray:
        """Gradient synchronisation of `params` over a data-parallel group of affine cost (k, lat)."""
        return np.select(
            [zero == 0, zero <= 2],
            [2 * (params * g * k + lat), params * (g + BF16) * k + 2 * lat],
            2 * (params * g / np.maximum(shard, 1) * k_rep + l_rep),
        )

    # experts: the same collectives over the ranks holding the same experts (under FSDP, the
    # dp_replicate replicas of each shard)
    expert_sync = sync(params_expert_rank, k_edp, l_edp, shard_expert) * (params_expert_rank > 0)
    dp_sync = sync(params_dense_rank, k_ddp, l_ddp, shard_dense) + expert_sync
    last_backward = np.minimum(layers_rank * (layer_bwd + layer_recompute), compute_mb_total)
    # Overlap cannot hide the edges: the embedding's gradients, the last to be computed, reduce
    # after the backward ends (Li et al. 2020, "PyTorch Distributed", Sec. 3.2.3: the last
    # bucket's all-reduce; Megatron-Core fills its buckets in reverse order, the embedding last),
    # and under ZeRO-1/2 its weights, the first the forward needs, gather before it starts; under
    # HSDP the root unit's shards all-reduce across the replicas last
    edge = sync(np.where(zero == 3, root, b["emb_local"]), k_ddp, l_ddp, shard_dense)
    dp_exposed = np.where(c.overlap_dp, np.maximum(dp_sync - last_backward, edge), dp_sync)
    dp_contention = dev.comm_sm_share * (dp_sync - dp_exposed)

    # ---- pipeline sends: the (p-1) warm-up and cool-down hops sit on the critical path ----
    pp_exposed = np.where(pp > 1, 2.0 * (pp - 1) * v * b["p2p_one"], 0.0)

    # ---- optimizer step over this device's shard ----
    opt_params = params_dense_rank / np.where(zero >= 1, shard_dense, 1.0) + params_expert_rank / np.where(zero >= 1, shard_expert, 1.0)
    optimizer = memory_bound_time(opt_params * P.optimizer_bytes_per_param, dev.hbm_bandwidth, P.hbm_efficiency)

    step = busy + bubble + dp_contention + dp_exposed + pp_exposed + optimizer

    # ---- memory on the fullest rank: each role's states, activations and FSDP buffers together ----
    state_kw = dict(grad_bytes=P.grad_reduce_bytes, moment_bytes=P.adam_moment_bytes)
    g_kw = dict(grad_bytes=P.grad_reduce_bytes)
    states_of = [model_state_bytes(d, shard_dense, zero, **state_kw) + model_state_bytes(x, shard_expert, zero, **state_kw) for d, x, _ in roles]
    weights_of = [weight_bytes(d, shard_dense, zero, **g_kw) + weight_bytes(x, shard_expert, zero, **g_kw) for d, x, _ in roles]
    act = {}
    for sel in (False, True):
        per_precision = []
        for fp8 in (False, True):
            kw = dict(selective=sel, modules=P.selective_modules, flash=P.flash_attention, dropout=m_.dropout, fp8=fp8,
                      sequence_parallel=P.sequence_parallel, fp8_act_cache=P.fp8_activation_cache,
                      gathered_gemm_inputs=P.tp_gathered_inputs)
            a_d, r_d = activation_bytes_per_token(m_, moe_layer=False, **kw)
            a_m, r_m = activation_bytes_per_token(m_, moe_layer=True, **kw) if m_.is_moe else (0.0, 0.0)
            per_precision.append(((1 - frac_moe) * a_d + frac_moe * a_m) / tp + ((1 - frac_moe) * r_d + frac_moe * r_m))
        act[sel] = np.where(b["fp8"], per_precision[1], per_precision[0])
    # full recomputation keeps each layer's input: split over TP only with sequence parallelism
    kept_input = layer_input_bytes_per_token(m_) / np.where(P.sequence_parallel, tp, 1.0)
    per_token_layer = np.select([rec == _FULL, rec == _SELECTIVE], [kept_input, act[True]], act[False])
    stage_mb = tokens * per_token_layer  # one micro-batch through one layer
    working = np.where(rec == _FULL, tokens * act[False], 0.0)  # one layer re-materialised during backward
    logits = tokens * logits_bytes_per_token(m_) / tp
    last_inflight = pf.head_inflight  # the head's rank: 1 under 1F1B, all m under GPipe, its own under interleaving
    head_logits = (1 + m_.mtp_depth) * logits  # the MTP module's pass through the head keeps its own logits
    # the final norm's and the output projection's inputs: alive with the logits, until the head's
    # weight gradient (after the loss's backward has freed the logits)
    head_in = (1 + m_.mtp_depth) * tokens * head_input_bytes_per_token(
        m_, tp, sequence_parallel=P.sequence_parallel, gathered_gemm_inputs=P.tp_gathered_inputs)
    # Beside the loss in its backward (`head_logits`), the head's rank keeps what the loss keeps of the
    # logits, and the head's inputs, for every other micro-batch whose loss has run and whose backward
    # has not (`pipeline.losses_held`: all m - 1 under GPipe and looped BFS, none under 1F1B)
    kept_loss = (1 + m_.mtp_depth) * tokens * P.loss_kept_bytes_per_logit * m_.vocab / tp
    other_losses = np.maximum(pf.head_losses - 1.0, 0.0)
    held_heads = other_losses * (kept_loss + head_in)
    # the head and the MTP block belong to the last stage, on the last rank (a V-shaped schedule runs
    # it on the first), which holds the micro-batches in flight that the simulator counts there
    # The recomputed layer's working set and the logits are never alive together: the backward
    # frees the logits and their gradient in the head before it reaches the last block, whose
    # forward torch.utils.checkpoint re-runs only then (measured: Llama 3 8B under full
    # recomputation peaks in the loss with 0.07 GiB of kept activations, benchmarks/RESULTS.md)
    # A split backward (zero-bubble schedules) keeps each waiting micro-batch's gradients at its GEMMs'
    # outputs for the weight pass (`pipeline.waiting_for_weights`); the output layer's is the logits'
    # gradient, bf16 as the logits are, beside the head's inputs that its weight gradient reads
    og_d, og_dr = weight_output_grad_bytes_per_token(m_, moe_layer=False)
    og_m, og_mr = weight_output_grad_bytes_per_token(m_, moe_layer=True) if m_.is_moe else (0.0, 0.0)
    out_grads = tokens * (((1 - frac_moe) * og_d + frac_moe * og_m) / tp + (1 - frac_moe) * og_dr + frac_moe * og_mr)
    head_waits = head_waiting * ((1 + m_.mtp_depth) * tokens * BF16 * m_.vocab / tp + head_in)
    act_first = (inflight * first_layers * stage_mb + waiting * first_layers * out_grads
                 + np.where(together, m_.mtp_depth * stage_mb + head_waits + np.maximum(working, head_logits + head_in), working))
    act_last = (last_inflight * (head_layers + m_.mtp_depth) * stage_mb + waiting * head_layers * out_grads + held_heads + head_waits
                + np.maximum(working, head_logits + head_in))
    act_inner = inflight * layers_rank * stage_mb + waiting * layers_rank * out_grads + working
    # FSDP keeps two layers gathered (the one computing and the one prefetched) and one layer's
    # unsharded gradient before its reduce-scatter. Under pipeline parallelism the whole stage stays
    # gathered and its gradients accumulate unsharded across the micro-batches (`fsdp_pp_unsharded`)
    # experts with no data-parallel peer (shard degree 1) stay outside FSDP (runtime/parallel/fsdp.py):
    # nothing of theirs is gathered, nor reduced from an unsharded copy
    in_fsdp = lambda expert: np.where(shard_expert > 1, expert, 0.0)  # noqa: E731  (expert bytes FSDP manages)
    fsdp_xl = in_fsdp(xl)
    unit = 2 * BF16 + P.grad_reduce_bytes  # a gathered bf16 weight, its all-gather buffer, its fp32 gradient
    layer_buffers = unit * (el + fsdp_xl)
    whole_stage = P.fsdp_pp_unsharded & (pp > 1) & (n_mb > 1)
    # The output head is an FSDP unit of its own (TorchTitan's grouping, runtime/parallel/fsdp.py). In
    # its backward it holds the same per-parameter buffers as a layer (gathered bf16 weight, the
    # all-gather buffer, the fp32 gradient before its reduce-scatter) once the logits and their
    # gradient have been consumed: that moment's peak is the rest plus these buffers less the logits.
    # With a vocabulary of 150k and small MoE layer units it sets the peak (dry run: Qwen3, Kimi K2 and
    # DeepSeek-V3 measure exactly 8 bytes a head parameter of buffers there, benchmarks/RESULTS.md)
    head_phase = unit * b["out_local"] - head_logits

    # The stage's unsharded gradients appear with its first backward, so they stand beside the
    # micro-batches in flight from then on (`pipeline.inflight_after_backward`), not beside the
    # warm-up's peak: under 1F1B with as many micro-batches as stages rank 0 holds p before its
    # first backward and p - 1 after it. `relief` is what the role's activations have fallen by.
    # Under interleaving (v > 1) a rank's stages hold their unsharded gradients in spans of their own,
    # from each one's first backward to its last (`pipeline.stages_with_gradients`): first the stage
    # whose backward comes first (on the head's rank the one with the output layer), at most
    # `graded_stages` of them at once. The peak is the larger of the two moments.
    def reliefs_at(inflight_then: np.ndarray, head_then: np.ndarray) -> list[np.ndarray]:
        drop, head_drop = np.maximum(inflight - inflight_then, 0.0), np.maximum(last_inflight - head_then, 0.0)
        # a backward of the last stage also frees one micro-batch's loss, of those held
        losses_freed = np.minimum(head_drop * v, other_losses)
        return [drop * first_layers * stage_mb, head_drop * (head_layers + m_.mtp_depth) * stage_mb + losses_freed * (kept_loss + head_in),
                drop * layers_rank * stage_mb]

    reliefs = reliefs_at(inflight_graded, pf.head_graded)
    reliefs_most = reliefs_at(pf.inflight_graded_most, pf.head_graded_most)
    role_layers = (first_layers, head_layers, layers_rank)
    role_stages = (pf.graded_stages, pf.head_graded_stages, pf.graded_stages)

    # A unit's weight gradients leave their matmuls in bf16 and are added into the stage's fp32
    # accumulator only in the unit's post-backward (FSDP2 casts a no-sync gradient to reduce_dtype
    # there): one unit's worth stands beside the activations during its backward. The output layer's,
    # with the vocabulary's rows, is often the largest (dry runs, benchmarks/peak_tensors.py: Llama 3
    # 8B PP 2's last stage peaks in the head's matmul beside its 0.98 GiB; GPT-3 175B PP 4's first
    # stage in a layer's backward beside the layer's 0.14 GiB a FFN matrix)
    unit_wgrad = lambda has_head: BF16 * np.maximum(el + fsdp_xl, np.where(has_head, b["out_local"], 0.0))  # noqa: E731

    def fsdp_of(dense: np.ndarray, expert: np.ndarray, has_head: np.ndarray, n_layers: np.ndarray, n_stages: np.ndarray,
                relief: np.ndarray, relief_most: np.ndarray) -> np.ndarray:
        # only what FSDP manages is gathered and accumulated unsharded: experts outside it keep their
        # fp32 weights in place and ordinary gradients, counted with the model states (dry run,
        # DeepSeek-V3 DualPipeV at EP = the data-parallel size: no gathered expert, 1.31 GiB of expert
        # gradients in `grads`)
        managed = dense + in_fsdp(expert)
        gathered, grads = BF16 * managed, P.grad_reduce_bytes * managed
        head_grads = np.where(has_head, head_dense + in_fsdp(head_expert), 0.0)
        stage_grads = lambda k: P.grad_reduce_bytes * (n_layers * (el + fsdp_xl) * k / v + head_grads)  # noqa: E731
        first_grads = np.where(v > 1, stage_grads(1.0), grads)
        most_grads = np.where(n_stages < v, stage_grads(n_stages), grads)
        held = np.maximum(np.maximum(first_grads - relief, most_grads - relief_most), 0.0)
        stage_unsharded = gathered + held + unit_wgrad(has_head)
        per_unit = np.maximum(layer_buffers, np.where(has_head, head_phase, layer_buffers))
        return np.where(zero == 3, np.where(whole_stage, np.maximum(stage_unsharded, layer_buffers), per_unit), 0.0)

    # the fullest rank is the role whose states, activations and buffers sum highest (not the largest
    # of each from different ranks: under a V-shaped schedule with its layers balanced, DeepSeek-V3's
    # rank 0 holds the embedding, head and MTP module, an inner rank the most layers)
    fsdp_of_role = [fsdp_of(d, x, h, n, k, r, rm) for (d, x, h), n, k, r, rm in zip(roles, role_layers, role_stages, reliefs, reliefs_most)]
    acts_of = [act_first, act_last, act_inner]
    role_totals = np.stack(np.broadcast_arrays(*(st + a + f for st, a, f in zip(states_of, acts_of, fsdp_of_role))))
    fullest = np.argmax(role_totals, axis=0)
    of_fullest = lambda xs: np.choose(fullest, np.broadcast_arrays(*xs))  # noqa: E731
    states, weights_only, activations = of_fullest(states_of), of_fullest(weights_of), of_fullest(acts_of)
    fsdp_buffers = of_fullest(fsdp_of_role)
    holds_head = of_fullest([r[2] for r in roles])
    role_dense, role_expert = of_fullest([r[0] for r in roles]), of_fullest([r[1] for r in roles])
    # One micro-batch under FSDP2 and no pipeline (`fsdp_grads_freed`): no gradient exists until the
    # backward starts, and they grow as the kept activations shrink, linearly in the layers done, so
    # the peak is at one of four moments, each with what FSDP holds then:
    #   the loss: kept activations, the logits and the head's inputs, the head's unit gathered (it is not resharded after its
    #     forward, runtime/parallel/fsdp.py, as TorchTitan leaves its last unit; the dry run measures
    #     exactly its bf16 weight there, Llama 3 8B: 0.98 GiB);
    #   the head's backward: the logits consumed, the head's inputs and unit buffers (`head_phase`);
    #   the first layer's backward: the head's gradient, a layer's buffers, a recomputed layer's working set;
    #   the end of the backward: every gradient, a layer's buffers, the working set.
    # Elsewhere every moment is counted at once (the gradients of an earlier micro-batch stand
    # through the next one's forward; a stage runs several micro-batches).
    moment_rows = P.fsdp_grads_freed & (zero == 3) & (n_mb == 1) & (pp == 1)
    grads_rank = P.grad_reduce_bytes * (role_dense / shard_dense + role_expert / shard_expert)
    head_out = np.where(holds_head, b["out_local"], 0.0)
    head_grads = P.grad_reduce_bytes * head_out / shard_dense
    stored = np.maximum(activations - np.maximum(working, head_logits + head_in), 0.0)
    # (activations, gradients present, FSDP buffers) at each moment
    moments = [
        (stored + head_logits + head_in, 0.0, BF16 * head_out),
        (stored + head_in, 0.0, unit * head_out),
        (stored + working, head_grads, layer_buffers),
        (working, grads_rank, layer_buffers),
    ]
    totals = np.stack(np.broadcast_arrays(*(act + g + buf for act, g, buf in moments)))
    at = np.argmax(totals, axis=0)
    pick = lambda k: np.choose(at, [np.broadcast_to(mo[k], at.shape) for mo in moments])  # noqa: E731
    activations = np.where(moment_rows, pick(0), activations)
    # Under FSDP with pipeline parallelism a stage accumulates unsharded gradients (`fsdp_pp_unsharded`)
    # and makes its sharded ones only in the last micro-batch's reduce-scatter, after every peak
    # counted above; the optimizer freed the last step's (set_to_none). Experts outside FSDP (shard
    # degree 1) keep ordinary gradients from their first backward.
    sharded_late = P.fsdp_grads_freed & whole_stage & (zero == 3)
    grads_sharded = P.grad_reduce_bytes * (role_dense / shard_dense + in_fsdp(role_expert / shard_expert))
    freed = np.where(moment_rows, grads_rank - pick(1), np.where(sharded_late, grads_sharded, 0.0))
    fsdp_buffers = np.where(moment_rows, pick(2), fsdp_buffers)
    buffers = fsdp_buffers + b["a2a_buffers"] + P.reserved_bytes
    memory = states - freed + activations + buffers

    # ---- throughput and utilisation ----
    tokens_per_s_per_device = gb * m_.seq_len / step / world
    mflops = m_.model_flops_per_token(causal=P.causal_mfu)
    bf16_peak = dev.peak("bf16")
    peak_train = np.where(b["fp8"], dev.peak_flops.get("fp8", bf16_peak), bf16_peak)
    mfu = mflops * tokens_per_s_per_device / peak_train
    # HFU adds what recomputation runs again: under full, the whole forward (a third of the model's
    # forward+backward FLOPs); under selective, the re-run modules' forward FLOPs: the attention core
    # (Korthikanti et al. 2022, Sec. 5: scores and values, 4·s·h a token a layer before masking) and the
    # share of the other forward GEMMs the policy re-runs (`selective_forward_share`); the activation
    # function and the norms are elementwise and add no FLOPs.
    core = m_.layers * attention_core_flops_per_token(m_, causal=P.causal_mfu) if "core_attn" in P.selective_modules else 0.0
    selective_flops = core + P.selective_forward_share * 2.0 * m_.active_nonembedding_params
    hfu = (mflops + np.select([rec == _FULL, rec == _SELECTIVE], [mflops / 3.0, selective_flops], 0.0)) * tokens_per_s_per_device / peak_train

    return {
        "step_time_s": step,
        "tokens_per_s_per_device": tokens_per_s_per_device,
        "mfu": mfu,
        "hfu": hfu,
        "memory_bytes": memory,
        "microbatches": n_mb,
        # breakdown (seconds per step)
        "compute": n_mb * compute_mb,
        "recompute": n_mb * recompute_mb,
        "contention": n_mb * contention_mb + dp_contention,
        "bubble": bubble,
        "tp": n_mb * layers_rank * tp_exposed,
        "cp": n_mb * layers_rank * b["cp_exposed"],
        "ep": n_mb * layers_rank * ep_exposed,
        "fsdp": n_mb * fsdp_exposed,
        "dp": dp_exposed,
        "pp": pp_exposed,
        "optimizer": optimizer,
        # memory (bytes)
        "params": weights_only,
        "grads_optimizer": states - weights_only,
        "grads_not_at_peak": -freed,
        "activations": activations,
        "buffers": buffers,
        # communication before overlap (seconds per step), for explanations
        "tp_total": n_mb * layers_rank * tp_layer,
        "ep_total": n_mb * layers_rank * frac_moe * ep_layer,
        "fsdp_total": np.where(zero == 3, n_mb * layers_rank * (2 * ag + rs), 0.0),
        "dp_total": dp_sync,
    }


@dataclass(kw_only=True, slots=True)
class Estimate:
    """The cost model's answer for one Strategy."""

    step_time_s: float
    tokens_per_s_per_device: float
    mfu: float
    hfu: float
    memory_gib_per_device: float
    fits: bool
    breakdown: dict[str, float] = field(default_factory=dict)
    """Seconds per step by term: compute, recompute, bubble and the exposed communication per dim."""
    memory_gib: dict[str, float] = field(default_factory=dict)
    microbatches: int = 1
    comm_total_s: dict[str, float] = field(default_factory=dict)
    """Communication time per dim before overlap, per step."""

    @property
    def exposed_comm_s(self) -> float:
        return sum(self.breakdown[k] for k in ("tp", "cp", "ep", "fsdp", "dp", "pp"))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["exposed_comm_share"] = self.exposed_comm_s / self.step_time_s if self.step_time_s else 0.0
        return d


def estimate_from_row(result: dict[str, np.ndarray], i: int, capacity: float) -> Estimate:
    r = {k: float(np.asarray(v).reshape(-1)[i]) if np.ndim(v) else float(v) for k, v in result.items()}
    return Estimate(
        step_time_s=r["step_time_s"],
        tokens_per_s_per_device=r["tokens_per_s_per_device"],
        mfu=r["mfu"],
        hfu=r["hfu"],
        memory_gib_per_device=r["memory_bytes"] / GIB,
        fits=r["memory_bytes"] <= capacity,
        breakdown={k: r[k] for k in BREAKDOWN_TERMS},
        memory_gib={k: r[k] / GIB for k in MEMORY_TERMS},
        microbatches=int(r["microbatches"]),
        comm_total_s={k: r[f"{k}_total"] for k in ("tp", "ep", "fsdp", "dp")},
    )


def capacity_bytes(cluster: Cluster, params: CostParams = DEFAULT_PARAMS) -> float:
    return cluster.device.hbm_bytes * (1.0 - params.headroom)


def estimate(model: ModelSpec, cluster: Cluster, strategy: Strategy, params: CostParams = DEFAULT_PARAMS) -> Estimate:
    """Estimate one Strategy; raises BandwiseError if it is not valid for this model and cluster."""
    strategy.check(strategy.world_size, model)
    cluster.check_devices(strategy.world_size)
    cluster = cluster.placed(strategy.world_size)
    cluster.device.peak(strategy.precision)
    cols = Layouts.of([strategy])
    result = evaluate(model, cluster, cols, strategy.order, params)
    return estimate_from_row(result, 0, capacity_bytes(cluster, params))

