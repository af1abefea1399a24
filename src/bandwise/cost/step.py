"""One training step: compute, exposed communication, bubble, optimizer; memory; MFU.

`evaluate` works on columns of candidates (numpy arrays, one entry per Strategy) so the planner
scores millions at once; `estimate` wraps it for one Strategy. Every term is a function of the
shapes and the hardware figures, with its source in the module it comes from:

    step = m · (compute_mb + exposed_mb) · (1 + bubble) + exposed_dp + exposed_pp + optimizer

m micro-batches per step; compute_mb the forward+backward (+recompute) time of one micro-batch
through the worst pipeline rank's layers; exposed_mb the per-micro-batch communication (TP, EP,
CP, FSDP) that its overlap window does not hide, exposed = max(0, comm - window) (the scaling
book's T_lower = max(T_math, T_comms) per overlapped pair); bubble the schedule's idle share
(cost/pipeline.py); exposed_dp the gradient synchronisation left after the last backward.

MFU (DESIGN.md): model FLOPs per token × tokens/s ÷ (devices × dense peak of the training dtype),
model FLOPs per token = 6·(active non-embedding params + output projection) + 12·L·H·d·s (PaLM
Appendix B; `causal_mfu` halves the attention term). HFU also counts recomputation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from bandwise.cost import comm
from bandwise.cost.compute import gemm_time, memory_bound_time
from bandwise.cost.flops import (
    BF16,
    Gemm,
    attention_core_flops_per_token,
    dense_layer_gemms,
    elementwise_bytes_per_token,
    moe_layer_gemms,
)
from bandwise.cost.memory import (
    GIB,
    activation_bytes_per_token,
    layer_input_bytes_per_token,
    logits_bytes_per_token,
    model_state_bytes,
)
from bandwise.cost.pipeline import schedule_factors
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import PRECISIONS, RECOMPUTE, Strategy, _columns

_NONE, _SELECTIVE, _FULL = (RECOMPUTE.index(r) for r in ("none", "selective", "full"))
_FP8 = PRECISIONS.index("fp8")


@dataclass(kw_only=True, slots=True, frozen=True)
class CostParams:
    """The model's few non-hardware parameters: one set for every run, each with its reason."""

    attention_efficiency_ratio: float = 0.8
    """FlashAttention's share of the device's GEMM efficiency. FlashAttention-2 reaches 50-73% of
    A100 peak forward (Dao 2023, Fig. 5) where cuBLAS GEMMs reach ~80-90%; FlashAttention-3 75% of
    H100 peak (Shah et al. 2024) where GEMMs reach ~75-80%: about 0.8 of the GEMM figure."""
    attention_backward_ratio: float = 2.5
    """Backward/forward FLOPs of flash attention: 5 matmuls against 2, P is recomputed (Dao 2023, Sec. 3.1)."""
    hbm_efficiency: float = 0.8
    """Share of peak HBM bandwidth that streaming element-wise kernels reach (STREAM-like copies
    reach 80-90% on A100/H100; NVIDIA's memory-bound guide)."""
    optimizer_bytes_per_param: float = 32.0
    """AdamW step in fp32: read param, grad, m, v (16 B), write param, m, v (12 B), plus a bf16 copy
    of the weights and the gradient-norm read (4 B)."""
    grad_reduce_bytes: int = 4
    """Gradients are reduced in fp32 (Megatron-LM's default `accumulate_allreduce_grads_in_fp32`,
    torchtitan's default `mixed_precision_reduce = float32`)."""
    expert_imbalance: float = 1.0
    """Busiest expert rank's load over the mean. 1.0 = balanced (auxiliary-loss-free balancing keeps
    MaxVio near 0.04-0.1 in Wang et al. 2024, Table 2; NVIDIA's published MoE runs force balance)."""
    reserved_bytes: float = 1.0 * GIB
    """CUDA context, cuBLAS workspace and NCCL buffers kept outside the allocator's pools."""
    headroom: float = 0.1
    """Share of HBM left free for allocator fragmentation: a layout fits if it needs <= (1 - headroom)."""
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
    flash_attention: bool = True
    """Attention saves no score matrix (FlashAttention); off reproduces Korthikanti's 5as/h term."""


DEFAULT_PARAMS = CostParams()

BREAKDOWN_TERMS = ("compute", "recompute", "bubble", "tp", "cp", "ep", "fsdp", "dp", "pp", "optimizer")
MEMORY_TERMS = ("params", "grads_optimizer", "activations", "buffers")


def _strides(order: tuple[str, ...], c: SimpleNamespace) -> dict[str, np.ndarray]:
    """Stride of each parallel dim in the global rank order, innermost dim first."""
    strides, acc = {}, np.ones_like(c.tp)
    for dim in order:
        strides[dim] = acc
        acc = acc * getattr(c, dim)
    return strides


def _gemms_time(gemms: list[Gemm], c: SimpleNamespace, tokens: np.ndarray, m: ModelSpec, peak: np.ndarray, eff: float, bw: float) -> np.ndarray:
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
            total = total + gemm_time(rows_per_expert, n, k, peak, eff, bw, count=local_experts)
        elif g.split == "col":
            total = total + gemm_time(tokens * g.rows_per_token, g.n / tp, g.k, peak, eff, bw)
        elif g.split == "row":
            total = total + gemm_time(tokens * g.rows_per_token, g.n, g.k / tp, peak, eff, bw)
        else:  # replicated across TP ranks (MLA down-projections, router)
            total = total + gemm_time(tokens * g.rows_per_token, g.n, g.k, peak, eff, bw)
    return total


def evaluate(model: ModelSpec, cluster: Cluster, c: SimpleNamespace, order: tuple[str, ...], params: CostParams = DEFAULT_PARAMS) -> dict[str, np.ndarray]:
    """Step time, its breakdown, memory and throughput for columns of candidate strategies."""
    dev, P = cluster.device, params
    m_ = model
    f = lambda a: np.asarray(a, dtype=float)  # noqa: E731
    tp, cp, pp, ep, dps, dpr = (f(getattr(c, k)) for k in ("tp", "cp", "pp", "ep", "dp_shard", "dp_replicate"))
    mb, v = f(c.micro_batch), f(c.virtual_stages)
    dp = dps * dpr
    world = dp * cp * tp * pp
    gb = np.where(c.global_batch > 0, f(c.global_batch), dp * mb)
    n_mb = np.maximum(np.floor(gb / (dp * mb)), 1.0)
    zero = np.where(c.dp_shard > 1, 3, c.zero_stage)
    rec = c.recompute
    fp8 = c.precision == _FP8
    bf16_peak = dev.peak("bf16")
    linear_peak = np.where(fp8, dev.peak_flops.get("fp8", bf16_peak), bf16_peak)
    eff, bw, hbm_eff = dev.gemm_efficiency, dev.hbm_bandwidth, P.hbm_efficiency
    s = float(m_.seq_len)
    tokens = mb * s / cp  # tokens of this device's sequence shard in one micro-batch (full width)

    # ---- per-layer forward compute time (one micro-batch, one device) ----
    attn_flops = attention_core_flops_per_token(m_, causal=True) * tokens / tp
    attn_fwd = attn_flops / (bf16_peak * eff * P.attention_efficiency_ratio)
    elem_scale = np.where(fp8, 1.5, 1.0)  # fp8 adds cast/quantize kernels around each GEMM input
    dense_fwd = _gemms_time(dense_layer_gemms(m_), c, tokens, m_, linear_peak, eff, bw) + attn_fwd
    dense_fwd += memory_bound_time(elementwise_bytes_per_token(m_, False) * tokens / tp * elem_scale, bw, hbm_eff)
    if m_.is_moe:
        moe_fwd = _gemms_time(moe_layer_gemms(m_), c, tokens, m_, linear_peak, eff, bw) + attn_fwd
        moe_fwd += memory_bound_time(elementwise_bytes_per_token(m_, True) * tokens / tp * elem_scale, bw, hbm_eff)
        moe_fwd = moe_fwd + (P.expert_imbalance - 1.0) * _gemms_time(moe_layer_gemms(m_)[-2:], c, tokens, m_, linear_peak, eff, bw)
    else:
        moe_fwd = np.zeros_like(dense_fwd)
    L = m_.layers
    frac_moe = m_.moe_layers / L
    layer_fwd = (1 - frac_moe) * dense_fwd + frac_moe * moe_fwd  # mean over the model's layers
    layer_attn = attn_fwd
    layer_bwd = 2.0 * (layer_fwd - layer_attn) + P.attention_backward_ratio * layer_attn
    # selective: the activation function again (its element-wise pass), plus the attention core
    # when attention is not flash (flash already recomputes scores inside its backward)
    act_bytes = BF16 * 3 * ((1 - frac_moe) * m_.ffn + frac_moe * (m_.top_k * m_.expert_ffn + m_.shared_experts * m_.shared_ffn))
    selective_cost = memory_bound_time(act_bytes * tokens / tp, bw, hbm_eff) + (0.0 if P.flash_attention else layer_attn)
    layer_recompute = np.select([rec == _FULL, rec == _SELECTIVE], [layer_fwd, selective_cost], 0.0)

    # output projection + cross entropy on the last stage (vocab-parallel over TP)
    out_fwd = gemm_time(tokens, m_.vocab / tp, m_.hidden, bf16_peak, eff, bw)
    out_total = 3.0 * out_fwd + memory_bound_time(3 * 4.0 * tokens * m_.vocab / tp, bw, hbm_eff)

    layers_rank = np.ceil(L / (pp * v)) * v  # the fullest rank's layers
    kernel_gaps = P.kernel_gap_s * (P.kernels_per_layer + frac_moe * P.kernels_per_moe_layer)
    per_layer = layer_fwd + layer_bwd + kernel_gaps
    balanced = (L * (per_layer + layer_recompute) + out_total) / pp
    fullest = layers_rank * (per_layer + layer_recompute) + np.where(pp == 1, out_total, 0.0)
    compute_mb_total = np.maximum(fullest, balanced)
    recompute_mb = layers_rank * layer_recompute
    compute_mb = compute_mb_total - recompute_mb

    # ---- placement of groups on the topology ----
    st = _strides(order, c)
    fsdp_stride, fsdp_size = np.minimum(st["cp"], st["dp_shard"]), cp * dps
    ep_stride = np.minimum(np.minimum(st["tp"], st["cp"]), st["dp_shard"])
    ddp_stride, ddp_size = np.minimum(st["cp"], st["dp_replicate"]), dpr * cp

    # ---- tensor parallel: 4 collectives forward, 4 backward per layer (all-gather/reduce-scatter of
    # the sequence-parallel activations; Korthikanti et al. 2022, Sec. 4.2.2), 4 more to recompute ----
    tp_bytes = tokens * m_.hidden * BF16
    n_tp = 8.0 + np.where(rec == _FULL, 4.0, 0.0)
    tp_layer = n_tp * comm.all_gather_time(cluster, tp_bytes, st["tp"], tp)
    gemm_window = per_layer - (1 + P.attention_backward_ratio) * layer_attn
    tp_exposed = np.where(c.overlap_tp, np.maximum(0.0, tp_layer - gemm_window), tp_layer)

    # ---- context parallel: ring passes K,V forward and K,V + dK,dV backward, hidden behind attention ----
    kv_width = (m_.heads * (m_.d_head + m_.d_value)) if m_.is_mla else m_.n_kv_heads * (m_.d_head + m_.d_value)
    kv_chunk = tokens * kv_width * BF16 / np.minimum(tp, m_.heads if m_.is_mla else m_.n_kv_heads)
    cp_layer = 3.0 * (cp - 1) * comm.ring_p2p_time(cluster, kv_chunk, st["cp"], cp)
    cp_exposed = np.maximum(0.0, cp_layer - (1 + P.attention_backward_ratio) * layer_attn)

    # ---- expert parallel: dispatch + combine all-to-all, forward and backward ----
    if m_.is_moe:
        ep_bytes = tokens / tp * m_.top_k * m_.hidden * BF16 * P.expert_imbalance
        n_a2a = 4.0 + np.where(rec == _FULL, 2.0, 0.0)
        ep_layer = n_a2a * comm.all_to_all_time(cluster, ep_bytes, ep_stride, ep) * (ep > 1)
        ep_layer_exposed = np.where(c.overlap_ep, np.maximum(0.0, ep_layer - (moe_fwd + 2 * moe_fwd)), ep_layer)
        ep_exposed = frac_moe * ep_layer_exposed
    else:
        ep_layer = ep_exposed = np.zeros_like(tp_layer)

    # ---- parameters per device ----
    dense_layer_params = m_.non_expert_layer_params / L
    expert_layer_params = m_.routed_expert_params_total / L  # averaged over layers
    expert_split = np.where(ep > 1, ep, tp)
    layer_params_local = dense_layer_params / tp + expert_layer_params / expert_split
    emb_local = m_.embedding_params / tp
    out_local = 0.0 if m_.tied_embeddings else m_.output_params / tp
    first_params = layers_rank * layer_params_local + emb_local + np.where(pp == 1, out_local, 0.0)
    last_params = layers_rank * layer_params_local + np.where(pp == 1, emb_local, 0.0) + out_local
    params_dense_rank = np.maximum(first_params, last_params) - layers_rank * expert_layer_params / expert_split
    params_expert_rank = layers_rank * expert_layer_params / expert_split
    expert_dp = dp * cp * tp / expert_split  # ranks holding the same experts
    shard_dense = np.select([zero == 3, zero >= 1], [dps * cp, dpr * cp], 1.0)
    shard_expert = np.select([zero == 3, zero >= 1], [expert_dp / dpr, expert_dp], 1.0)

    # ---- FSDP (ZeRO-3): all-gather forward, all-gather backward, reduce-scatter grads, per micro-batch ----
    ag_layer = comm.all_gather_time(cluster, dense_layer_params / tp * BF16, fsdp_stride, fsdp_size)
    rs_layer = comm.reduce_scatter_time(cluster, dense_layer_params / tp * P.grad_reduce_bytes, fsdp_stride, fsdp_size)
    exp_group = expert_dp / dpr
    exp_stride = ep_stride * ep
    ag_layer = ag_layer + comm.all_gather_time(cluster, expert_layer_params / expert_split * BF16, exp_stride, exp_group)
    rs_layer = rs_layer + comm.reduce_scatter_time(cluster, expert_layer_params / expert_split * P.grad_reduce_bytes, exp_stride, exp_group)
    fsdp_layer_exposed = np.where(
        c.overlap_fsdp,
        np.maximum(0.0, ag_layer - layer_fwd) + np.maximum(0.0, ag_layer + rs_layer - layer_bwd - layer_recompute),
        2 * ag_layer + rs_layer,
    )
    fsdp_exposed = np.where(zero == 3, layers_rank * fsdp_layer_exposed + np.where(c.overlap_fsdp, ag_layer, 0.0), 0.0)

    exposed_mb = layers_rank * (tp_exposed + cp_exposed + ep_exposed)
    bubble_overhead, inflight = schedule_factors(c.schedule, pp, n_mb, v)
    busy = n_mb * (compute_mb_total + exposed_mb) + fsdp_exposed * n_mb
    bubble = busy * bubble_overhead

    # ---- data-parallel gradient synchronisation, once per step after the last backward ----
    g = P.grad_reduce_bytes
    dense_sync = np.select(
        [zero == 0, zero <= 2],
        [
            comm.all_reduce_time(cluster, params_dense_rank * g, ddp_stride, ddp_size),
            comm.reduce_scatter_time(cluster, params_dense_rank * g, ddp_stride, ddp_size)
            + comm.all_gather_time(cluster, params_dense_rank * BF16, ddp_stride, ddp_size),
        ],
        comm.all_reduce_time(cluster, params_dense_rank * g / np.maximum(shard_dense, 1), st["dp_replicate"], dpr),
    )
    exp_dp_group = np.where(zero == 3, dpr, expert_dp)
    exp_dp_stride = np.where(zero == 3, st["dp_replicate"], exp_stride)
    expert_sync = np.where(
        zero == 3,
        comm.all_reduce_time(cluster, params_expert_rank * g / np.maximum(shard_expert, 1), exp_dp_stride, exp_dp_group),
        comm.all_reduce_time(cluster, params_expert_rank * g, exp_dp_stride, exp_dp_group),
    )
    dp_sync = dense_sync + expert_sync
    last_backward = np.minimum(layers_rank * (layer_bwd + layer_recompute), compute_mb_total)
    dp_exposed = np.where(c.overlap_dp, np.maximum(0.0, dp_sync - last_backward), dp_sync)

    # ---- pipeline point-to-point: activations forward, gradients backward; the (p-1) warm-up and
    # cool-down hops sit on the critical path, steady-state ones overlap with compute ----
    p2p_bytes = tokens * m_.hidden * BF16 / tp
    pp_exposed = np.where(pp > 1, 2.0 * (pp - 1) * v * comm.p2p_time(cluster, p2p_bytes, st["pp"]), 0.0)

    # ---- optimizer step over this device's shard ----
    opt_params = params_dense_rank / np.where(zero >= 1, shard_dense, 1.0) + params_expert_rank / np.where(zero >= 1, shard_expert, 1.0)
    optimizer = memory_bound_time(opt_params * P.optimizer_bytes_per_param, bw, hbm_eff)

    step = busy + bubble + dp_exposed + pp_exposed + optimizer

    # ---- memory on the fullest rank ----
    states = model_state_bytes(params_dense_rank, shard_dense, zero) + model_state_bytes(params_expert_rank, shard_expert, zero)
    weights_only = (params_dense_rank / np.where(zero == 3, shard_dense, 1.0) + params_expert_rank / np.where(zero == 3, shard_expert, 1.0)) * BF16
    act = {}
    for sel in (False, True):
        a_d, r_d = activation_bytes_per_token(m_, moe_layer=False, selective=sel, flash=P.flash_attention)
        a_m, r_m = activation_bytes_per_token(m_, moe_layer=True, selective=sel, flash=P.flash_attention) if m_.is_moe else (0.0, 0.0)
        act[sel] = ((1 - frac_moe) * a_d + frac_moe * a_m) / tp + ((1 - frac_moe) * r_d + frac_moe * r_m)
    per_token_layer = np.select([rec == _FULL, rec == _SELECTIVE], [layer_input_bytes_per_token(m_) / tp, act[True]], act[False])
    act_mb_rank = tokens * layers_rank * per_token_layer
    working = np.where(rec == _FULL, tokens * act[False], 0.0)  # one layer re-materialised during backward
    logits = tokens * logits_bytes_per_token(m_) / tp
    last_inflight = np.where(np.isin(c.schedule, (0, 3)) & (pp > 1), inflight, 1.0)
    act_first = inflight * act_mb_rank + working + np.where(pp == 1, logits, 0.0)
    act_last = last_inflight * act_mb_rank + working + logits
    activations = np.maximum(act_first, act_last)
    fsdp_buffers = np.where(zero == 3, (2 * BF16 + P.grad_reduce_bytes) * layer_params_local, 0.0)
    a2a_buffers = 2.0 * tokens / tp * m_.top_k * m_.hidden * BF16 if m_.is_moe else 0.0
    buffers = fsdp_buffers + a2a_buffers + P.reserved_bytes
    memory = states + activations + buffers

    # ---- throughput and utilisation ----
    tokens_step = gb * s
    tokens_per_s_per_device = tokens_step / step / world
    mflops = m_.model_flops_per_token(causal=P.causal_mfu)
    peak_train = np.where(fp8, dev.peak_flops.get("fp8", bf16_peak), bf16_peak)
    mfu = mflops * tokens_per_s_per_device / peak_train
    recompute_flops = np.select([rec == _FULL, rec == _SELECTIVE], [mflops / 3.0, 0.0], 0.0)
    hfu = (mflops + recompute_flops) * tokens_per_s_per_device / peak_train

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
        "bubble": bubble,
        "tp": n_mb * layers_rank * tp_exposed,
        "cp": n_mb * layers_rank * cp_exposed,
        "ep": n_mb * layers_rank * ep_exposed,
        "fsdp": n_mb * fsdp_exposed,
        "dp": dp_exposed,
        "pp": pp_exposed,
        "optimizer": optimizer,
        # memory (bytes)
        "params": weights_only,
        "grads_optimizer": states - weights_only,
        "activations": activations,
        "buffers": buffers,
        # raw communication volumes before overlap (seconds per step), for explanations
        "tp_total": n_mb * layers_rank * tp_layer,
        "ep_total": n_mb * layers_rank * frac_moe * ep_layer,
        "fsdp_total": np.where(zero == 3, n_mb * layers_rank * (2 * ag_layer + rs_layer), 0.0),
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
    cluster.device.peak(strategy.precision)
    cols = _columns([strategy])
    result = evaluate(model, cluster, cols, strategy.order, params)
    return estimate_from_row(result, 0, capacity_bytes(cluster, params))

