"""One training step: compute, exposed communication, bubble, optimizer; memory; MFU.

`evaluate` prices columns of candidates (`specs.strategy.Layouts`, one entry per Strategy) so the
planner scores millions at once; `estimate` wraps it for one Strategy. Each cost is a pure function
in a module of its own under `cost/terms/`, returning a small typed result; this module composes them:

    step = m · (compute_mb + exposed_mb + contention_mb) · (1 + bubble) + exposed_dp + contention_dp + exposed_pp + optimizer

m micro-batches per step; compute_mb the forward+backward (+recompute) time of one micro-batch
through the worst pipeline rank's layers (`terms.compute`, `terms.stages`); exposed_mb the
per-micro-batch communication (`terms.tensor`, `terms.context`, `terms.expert`, `terms.fsdp`) that
its overlap window does not hide, exposed = max(0, comm - window) (the scaling book's T_lower =
max(T_math, T_comms) per overlapped pair); contention what hidden communication takes from the
compute beside it (`terms.contention`); bubble the schedule's idle share (`terms.pipeline`);
exposed_dp the gradient synchronisation left after the last backward (`terms.grad_sync`) and the
gradient norm's all-reduces where the engine runs one per tensor (`terms.grad_norm`);
the optimizer step over the device's shard (`terms.optimizer`). Memory is the fullest pipeline
rank's peak (`terms.roles`, `terms.activations`, `terms.fsdp_buffers`, `terms.peak`); MFU and HFU
come from `terms.utilisation`.

Two stages: `terms.keyed` prices what depends only on the degrees, ZeRO stage, micro-batch and
precision, once per such key (`Layouts.base_key`); `_evaluate_block` adds each row's schedule,
virtual stages, recomputation and overlap: memory for every row, then the time of the rows that fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost.columns import join_rows, spread_rows, take_rows
from bandwise.cost.params import DEFAULT_PARAMS, CostParams
from bandwise.cost.pipeline import pipeline_factors
from bandwise.cost.results import (
    BREAKDOWN_TERMS,
    CommTotals,
    Estimate,
    StepResult,
    StepTime,
)
from bandwise.cost.terms import pipeline as pipe
from bandwise.cost.terms.activations import activations
from bandwise.cost.terms.contention import contention, data_parallel_contention, fsdp_contention
from bandwise.cost.terms.expert import (
    dispatch_buffers,
    expert_terms,
)
from bandwise.cost.terms.fsdp import fsdp_terms
from bandwise.cost.terms.fsdp_buffers import fsdp_buffers
from bandwise.cost.terms.grad_norm import norm_time
from bandwise.cost.terms.grad_sync import bucket_params, grad_sync, sync_overlapped
from bandwise.cost.terms.keyed import CommTerms, RowTerms, comm_terms, layer_terms
from bandwise.cost.terms.optimizer import optimizer_time
from bandwise.cost.terms.peak import peak_memory
from bandwise.cost.terms.roles import most_dense, roles
from bandwise.cost.terms.shape import Shape, microbatches
from bandwise.cost.terms.stages import FULL, StageCompute, stage_compute
from bandwise.cost.terms.tensor import tensor_terms
from bandwise.cost.terms.utilisation import utilisation
from bandwise.specs.hardware import Cluster, Device
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Layouts, Strategy

ROWS_AT_ONCE = 1 << 16
"""Rows priced in one pass. Every term is a few hundred array operations on arrays of this length:
512 KiB each here, against 2 MiB in the search's chunks of 2^18 rows, whose temporaries malloc handed
back to the kernel and faulted in again (the DeepSeek-V3 x 2048 plan: 223,087 page faults at 2^18,
82,629 at 2^16, 40,000 with `bandwise/heap.py`'s thresholds; benchmarks/RESULTS.md, "The planner's
speed"). Larger blocks gain little: 2^17 ran 3% faster at 35% more peak memory."""


@dataclass(frozen=True, slots=True)
class _Rows:
    """What a row's time reads beside its collectives: its layout and shape, its layer terms, where its
    layers sit, its schedule's bubble and the parameters of the rank with the most dense ones."""

    c: Layouts
    s: Shape
    global_batch: np.ndarray
    n_mb: np.ndarray
    lt: RowTerms
    stages: StageCompute
    overhead: np.ndarray
    dense: np.ndarray
    experts: np.ndarray


def _time(m: ModelSpec, dev: Device, rows: _Rows, ct: CommTerms, P: CostParams) -> _Timed:
    """The step's time, term by term: each dim's exposed communication, contention, bubble, optimizer."""
    c, s, n_mb, lt, stages = rows.c, rows.s, rows.n_mb, rows.lt, rows.stages
    full, local, layer, layers_rank = c.recompute == FULL, lt.local, lt.layer, stages.layers_rank
    tensor = tensor_terms(ct.tensor, full, c.overlap_tp, P)
    expert = expert_terms(m, ct.expert, layer.moe_fwd, full, c.schedule, s.pp, n_mb, c.overlap_ep)
    root = local.emb + np.where(stages.together, local.out, 0.0)  # the weights outside any layer
    fsdp = fsdp_terms(ct.fsdp, s.zero, layers_rank, root, layer.fwd, layer.bwd, stages.layer_recompute, c.overlap_fsdp, P,
                      layer.attention, layer.attention_bwd, full)
    exposed_mb = layers_rank * (tensor.exposed + ct.context.exposed + expert.exposed)
    contention_mb = contention(dev, m, layers_rank, tensor, ct.context, ct.expert, expert, layer.moe_fwd, c.overlap_ep)
    whole_stage = P.fsdp_pp_unsharded & (s.pp > 1) & (n_mb > 1)  # gathered once a step (`terms.fsdp`)
    fsdp_step = np.where(whole_stage, fsdp.once, n_mb * fsdp.exposed)
    fsdp_slowdown = fsdp_contention(dev, layers_rank, fsdp, s.zero, n_mb, whole_stage)
    busy = n_mb * (stages.total + contention_mb + exposed_mb) + fsdp_step + fsdp_slowdown
    bubble = pipe.bubble(busy - n_mb * (stages.total - stages.fill), rows.overhead, stages.chunk_ratio)
    last_backward = np.minimum(layers_rank * (layer.bwd + stages.layer_recompute), stages.total)
    overlap_dp = sync_overlapped(P, s.zero, c.overlap_dp)
    sync = grad_sync(ct.sync, local, s.zero, rows.dense, rows.experts, root, last_backward, overlap_dp, P.grad_reduce_bytes,
                     bucket_params(P, s.dp * s.cp, overlap_dp), P.zero_grad_all_reduce,
                     units=layers_rank + 1.0 if P.hsdp_all_reduce_per_unit else 1.0)  # the layers' units and the root's
    dp_contention = data_parallel_contention(dev, sync.total, sync.exposed)
    sends = pipe.sends(ct.p2p, s, n_mb, P.pipeline_sends_blocking, ct.p2p_gather)
    optimizer = optimizer_time(dev, local, s.zero, rows.dense, rows.experts, P)
    norm = norm_time(m, layers_rank, ct.norm, P.norm_all_reduces_per_tensor) + ct.tied  # the gradients' own reductions
    step = busy + bubble + dp_contention + sync.exposed + norm + sends + optimizer

    use = utilisation(m, dev, s, c.recompute, rows.global_batch, step, P)
    per_step = n_mb * layers_rank
    return _Timed(
        step_time_s=step, tokens_per_s_per_device=use.tokens_per_s_per_device, mfu=use.mfu, hfu=use.hfu,
        time=StepTime(compute=n_mb * stages.compute, recompute=n_mb * stages.recompute, contention=n_mb * contention_mb + fsdp_slowdown + dp_contention,
                      bubble=bubble, tp=per_step * tensor.exposed, cp=per_step * ct.context.exposed, ep=per_step * expert.exposed,
                      fsdp=fsdp_step, dp=sync.exposed + norm, pp=sends, optimizer=optimizer),
        comm_total=CommTotals(tp=per_step * tensor.total, ep=per_step * (m.moe_layers / m.layers) * expert.layer,
                              fsdp=np.where(s.zero == 3, per_step * fsdp.layer_total, 0.0), dp=sync.total + norm),
    )


@dataclass(frozen=True, slots=True)
class _Timed:
    step_time_s: np.ndarray
    tokens_per_s_per_device: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    time: StepTime
    comm_total: CommTotals


def _untimed() -> _Timed:
    """No row timed."""
    empty = np.empty(0)
    return _Timed(empty, empty, empty, empty, StepTime(**{k: empty for k in BREAKDOWN_TERMS}), CommTotals(empty, empty, empty, empty))


def _evaluate_block(m: ModelSpec, cluster: Cluster, c: Layouts, order: tuple[str, ...], P: CostParams, capacity: float | None) -> StepResult:
    """Memory for every row; time for the rows that fit `capacity` (every row without one)."""
    dev, key = cluster.device, c.base_key
    if key is not None and len(key) > 1:  # the per-layer terms once per key
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        keyed = c.take(first)
    else:
        keyed, inverse = c, np.arange(len(c))
    lt_key = layer_terms(m, cluster, keyed, P)
    s, lt = Shape.of(m, c, P.cp_shards_weights), RowTerms.of(lt_key, inverse)
    gb, n_mb = microbatches(c, s)
    stages = stage_compute(m, dev, s, c.schedule, c.recompute, n_mb, lt.layer, lt.head, lt.local, P)
    pf = pipeline_factors(c.schedule, s.pp, n_mb, s.virtual_stages)
    r = roles(m, s, lt.local, stages)
    acts = activations(m, s, c.recompute, pf, stages, r, P)
    buffers = fsdp_buffers(s, n_mb, lt.local, r, acts, pf, m.mtp_depth, P)
    memory = peak_memory(s, n_mb, lt.local, r, acts, buffers, dispatch_buffers(m, s), P)

    dense, experts = most_dense(r)
    rows = _Rows(c, s, gb, n_mb, lt, stages, pf.overhead, dense, experts)
    fit = None if capacity is None else np.flatnonzero(memory.charged <= capacity)
    if fit is None or len(fit) == len(c):
        t = _time(m, dev, rows, take_rows(comm_terms(m, cluster, keyed, order, lt_key, P), inverse), P)
    elif len(fit) == 0:  # a layout that does not fit has no step time
        t = spread_rows(_untimed(), fit, len(c))
    else:  # the collectives of the fitting rows' keys only
        used = np.unique(inverse[fit])
        ct = comm_terms(m, cluster, keyed.take(used), order, take_rows(lt_key, used), P)
        c_fit = c.take(fit)
        s_fit = Shape.of(m, c_fit, P.cp_shards_weights)
        fitting = _Rows(c_fit, s_fit, *microbatches(c_fit, s_fit), RowTerms.of(lt_key, inverse[fit]),
                        *(take_rows(x, fit) for x in (stages, pf.overhead, dense, experts)))
        t = spread_rows(_time(m, dev, fitting, take_rows(ct, np.searchsorted(used, inverse[fit])), P), fit, len(c))
    return StepResult(step_time_s=t.step_time_s, tokens_per_s_per_device=t.tokens_per_s_per_device, mfu=t.mfu, hfu=t.hfu,
                      microbatches=n_mb, time=t.time, memory=memory, comm_total=t.comm_total)


def evaluate(model: ModelSpec, cluster: Cluster, c: Layouts, order: tuple[str, ...], params: CostParams = DEFAULT_PARAMS, *,
             capacity: float | None = None) -> StepResult:
    """Step time, its breakdown, memory and throughput for columns of candidate strategies, priced
    `ROWS_AT_ONCE` rows at a time; the per-layer terms once per `base_key` in each block. With
    `capacity` (bytes), only the rows whose peak fits are timed: the others' time fields are NaN."""
    if not params.hierarchical_collectives:
        cluster = cluster.flat()
    n = len(c.tp)
    if n <= ROWS_AT_ONCE:
        return _evaluate_block(model, cluster, c, order, params, capacity)
    starts = range(0, n, ROWS_AT_ONCE)
    parts = [_evaluate_block(model, cluster, c.take(slice(i, i + ROWS_AT_ONCE)), order, params, capacity) for i in starts]
    return join_rows(parts, [min(ROWS_AT_ONCE, n - i) for i in starts])


def capacity_bytes(cluster: Cluster, params: CostParams = DEFAULT_PARAMS) -> float:
    return cluster.device.hbm_bytes * (1.0 - params.headroom)


def estimate(model: ModelSpec, cluster: Cluster, strategy: Strategy, params: CostParams = DEFAULT_PARAMS) -> Estimate:
    """Estimate one Strategy; raises BandwiseError if it is not valid for this model and cluster."""
    return estimates(model, cluster, [strategy], params)[0]


def estimates(model: ModelSpec, cluster: Cluster, strategies: list[Strategy], params: CostParams = DEFAULT_PARAMS) -> list[Estimate]:
    """`estimate` of each Strategy, priced as the columns of one evaluation: they must share the device count
    and the mesh order (the completions of one layout, `plan.validate`). Raises BandwiseError for the first
    that is not valid for this model and cluster."""
    if not strategies:
        return []
    world, order = strategies[0].world_size, strategies[0].order
    for s in strategies:
        if s.world_size != world or s.order != order:
            raise ValueError("estimates prices strategies of one device count and one mesh order; call estimate for each")
        s.check(world, model)
    cluster.check_devices(world)
    cluster = cluster.placed(world)
    for precision in dict.fromkeys(s.precision for s in strategies):
        cluster.device.peak(precision)
    result, capacity = evaluate(model, cluster, Layouts.of(strategies), order, params), capacity_bytes(cluster, params)
    return [result.estimate(i, capacity, cluster.device.hbm_bytes) for i in range(len(strategies))]
