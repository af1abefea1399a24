"""Pipeline stages: how the layers are cut into stages, which rank holds the output head, and what
the slowest pipeline rank computes per micro-batch (its layers, the head, recomputation)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost.columns import unique_rows
from bandwise.cost.flops import BF16
from bandwise.cost.params import CostParams
from bandwise.cost.terms.compute import HeadCompute, LayerPasses
from bandwise.cost.terms.placement import LocalParams
from bandwise.cost.terms.shape import Shape
from bandwise.specs.hardware import Device
from bandwise.specs.layer_order import layers_alike, stage_weights
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import RECOMPUTE, SCHEDULES, V_SHAPED

SELECTIVE, FULL = (RECOMPUTE.index(r) for r in ("selective", "full"))
_V_SHAPED = [SCHEDULES.index(s) for s in V_SHAPED]


def first_and_last_on_one_rank(pp: np.ndarray, schedule: np.ndarray) -> np.ndarray:
    """True where one rank holds both the first and the last stage: no pipeline, or a V-shaped
    schedule (DualPipeV, ZB-V), whose rank 0 runs stage 0 and stage 2p-1."""
    return (pp == 1) | np.isin(schedule, _V_SHAPED)


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


def kind_weights(m: ModelSpec, pp: np.ndarray, v: np.ndarray, v_shaped: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, (the heaviest rank's compute over its layers' mean, the head's rank's likewise), where
    a model's layers differ in kind (`specs.layer_order.stage_weights`); 1.0 for a model of one kind."""
    pp, v, v_shaped = np.broadcast_arrays(np.asarray(pp), np.asarray(v), np.asarray(v_shaped))
    heavy, head = np.ones(pp.shape), np.ones(pp.shape)
    if m.layers <= 1 or layers_alike(m):
        return heavy, head
    combos, inverse = unique_rows([pp, v, v_shaped], (24, 16, 1))
    found = np.array([stage_weights(m, int(a), int(b), bool(c)) for a, b, c in combos.tolist()]).reshape(-1, 2)
    if np.all(found == 1.0):
        return heavy, head
    return found[inverse, 0].reshape(pp.shape), found[inverse, 1].reshape(pp.shape)


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


def weight_counts(m: ModelSpec, pp: int) -> tuple[list[int], int]:
    """(decoder layers on each of the pp ranks, the rank of the output head) where blocks are placed by
    cumulative weight count (`CostParams.stages_by_weights`): in model order each block goes to the
    current rank, which moves on once the running total passes (r + 1)/pp of the whole. A layer weighs
    4·heads·(hidden/heads)·hidden + 3·ffn·hidden, the head vocab·hidden, the embedding and the loss nothing
    (nanotron's build_model, src/nanotron/models/base.py, and LlamaModel.get_block_compute_costs at
    c2528430: it counts every head as a key/value head)."""
    layer = 4 * m.heads * (m.hidden // m.heads) * m.hidden + 3 * m.ffn * m.hidden  # d_qkv = hidden // heads, as nanotron
    head = m.vocab * m.hidden
    total = m.layers * layer + head
    counts, rank, cum = [0] * pp, 0, 0

    def place(cost: int) -> int:
        nonlocal rank, cum
        placed, cum = rank, cum + cost
        if rank < pp - 1 and cum > total * ((rank + 1) / pp):  # nanotron's float threshold, as it computes it
            rank += 1
        return placed

    for _ in range(m.layers):
        counts[place(layer)] += 1
    return counts, place(head)


def weight_split(m: ModelSpec, pp: np.ndarray, unit: np.ndarray, head: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(layers on the fullest rank, layers on the head's rank, the slowest rank's time, the mean time of
    the other ranks) per micro-batch, with the layers placed by weight (`weight_counts`). The placement is
    over the pp ranks: nanotron runs no virtual stages, and a rank's chunks are not told apart here."""
    pp = np.asarray(pp)
    shape = np.broadcast(pp, unit, head).shape
    fullest, on_head, slowest, rest = (np.zeros(shape) for _ in range(4))
    pp_b, unit_b, head_b = (np.broadcast_to(x, shape) for x in (pp, unit, head))
    for p in np.unique(pp_b):
        rows = pp_b == p
        counts, head_rank = weight_counts(m, int(p))
        times = np.array(counts, dtype=float)[:, None] * unit_b[rows][None, :]
        times[head_rank] += head_b[rows]
        slow = times.max(axis=0)
        fullest[rows], on_head[rows], slowest[rows] = max(counts), counts[head_rank], slow
        rest[rows] = (times.sum(axis=0) - slow) / max(int(p) - 1, 1)
    return fullest, on_head, slowest, rest


@dataclass(frozen=True, slots=True)
class StageCompute:
    """Seconds per micro-batch on the slowest pipeline rank, and where the layers sit."""

    layer_recompute: np.ndarray
    """One layer's recomputation (its forward again under full, less what a remat policy keeps; the
    re-run modules under selective)."""
    together: np.ndarray
    """One rank holds the first and the last stage (`first_and_last_on_one_rank`)."""
    layers_rank: np.ndarray
    """Layers on the fullest pipeline rank."""
    head_layers: np.ndarray
    """Layers on the rank that holds the output head."""
    total: np.ndarray
    compute: np.ndarray
    recompute: np.ndarray
    chunk_ratio: np.ndarray | float
    """The largest stage over the mean stage of a rank: the pipeline fills and drains at its pace."""
    fill: np.ndarray
    """Seconds per micro-batch of a rank without the head, its layers of the mean kind: the pipeline
    fills and drains through such ranks, while the slowest rank sets only the steady state."""


def fsdp_copy_bytes(P: CostParams, s: Shape, n_mb: np.ndarray) -> np.ndarray:
    """HBM bytes per unsharded parameter per micro-batch that FSDP copies on the compute stream
    (`CostParams.fsdp_copy_out`): each of the two gathers the model charges per unit (forward, and
    backward after resharding, `terms.fsdp`) copied out in bf16, read and written (2 + 2), and the
    bf16 gradients packed into the reduce-scatter buffer in the reduce dtype (2 + g). Where a stage
    keeps its units gathered over the step (`CostParams.fsdp_pp_unsharded`, `terms.fsdp`), one
    gather's copy and one pack a step, spread over its micro-batches."""
    if not P.fsdp_copy_out:
        return np.zeros(np.broadcast(s.zero, n_mb).shape)
    per_micro_batch = 2 * (BF16 + BF16) + BF16 + P.grad_reduce_bytes
    once_a_step = (BF16 + BF16) + BF16 + P.grad_reduce_bytes
    whole_stage = P.fsdp_pp_unsharded & (s.pp > 1) & (n_mb > 1)
    return np.where(s.zero == 3, np.where(whole_stage, once_a_step / np.maximum(n_mb, 1), per_micro_batch), 0.0)


def stage_compute(m: ModelSpec, dev: Device, s: Shape, schedule: np.ndarray, rec: np.ndarray, n_mb: np.ndarray, layer: LayerPasses,
                  head_c: HeadCompute, local: LocalParams, P: CostParams) -> StageCompute:
    pp, v = s.pp, s.virtual_stages
    layer_recompute = np.select([rec == FULL, rec == SELECTIVE], [layer.full, layer.selective], 0.0)
    # each micro-batch's backward folds its weight gradients into the step's accumulator outside
    # the GEMMs where the framework does so (`CostParams.grad_accumulation_bytes`): per layer, and on
    # the head's rank for the output layer's weights (a tied head's copy under a pipeline, `LocalParams`)
    # and, where the same rank holds it, the embedding's
    adds = np.where(P.grad_accumulation_skips_first, (n_mb - 1.0) / n_mb, 1.0)  # adds per micro-batch, on average
    accumulate = adds * P.grad_accumulation_bytes / (dev.hbm_bandwidth * P.hbm_efficiency)
    # FSDP2's copies out of the gather buffer and into the reduce-scatter buffer, on the compute stream,
    # per layer and for the root unit's weights on the head's rank
    accumulate = accumulate + fsdp_copy_bytes(P, s, n_mb) / (dev.hbm_bandwidth * P.hbm_efficiency)
    unit = layer.fwd + layer.bwd + layer.kernel_gaps + accumulate * (local.dense_layer + local.expert_layer) + layer_recompute
    # the rank of the last stage also runs the output head, the loss and any MTP modules
    together = first_and_last_on_one_rank(pp, schedule)
    head_weights = local.out + np.where(together, local.emb, 0.0)
    head = head_c.out_total + head_c.mtp_total + np.where(rec == FULL, head_c.mtp_recompute, 0.0) + accumulate * head_weights
    # even split: every stage holds ceil(L / (pp·v)) layers or fewer
    layers_rank = np.ceil(m.layers / (pp * v)) * v
    head_layers = last_stage_rank_layers(m.layers, pp, v, schedule)
    # where layers differ in kind (a hybrid's mixers, MoE beside dense MLPs, windows), the ranks'
    # layers are not alike: the heaviest rank and the head's rank compute their layers' share
    heavy, on_head = kind_weights(m, pp, v, together & (pp > 1))
    total = np.maximum(layers_rank * heavy * unit, head_layers * on_head * unit + head)
    fill = np.minimum(layers_rank * unit, total)
    chunk_ratio: np.ndarray | float = 1.0
    balanced = np.asarray(P.balanced_stages | (P.balanced_when_uneven & (m.layers % (pp * v) != 0)))
    if balanced.any():  # whole layers moved off the head's rank until it is no slower than the rest
        b_rank, b_head, b_total = balanced_split(m.layers, pp, unit, head)
        # a rank's v stages hold whole layers too: the pipeline fills and drains at the pace of its
        # largest stage, ceil(layers/v) layers, not of the mean layers/v
        b_ratio = np.ceil(b_rank / v) * v / np.maximum(b_rank, 1.0)
        layers_rank, head_layers = np.where(balanced, b_rank, layers_rank), np.where(balanced, b_head, head_layers)
        total, chunk_ratio = np.where(balanced, b_total, total), np.where(balanced, b_ratio, 1.0)
        fill = np.where(balanced, np.minimum(b_rank * unit, b_total), fill)
    if P.stages_by_weights:  # nanotron's placement: whole layers by weight, whatever the times
        w_rank, w_head, w_total, w_rest = weight_split(m, pp, unit, head)
        piped = pp > 1
        layers_rank, head_layers = np.where(piped, w_rank, layers_rank), np.where(piped, w_head, head_layers)
        total, fill = np.where(piped, w_total, total), np.where(piped, np.minimum(w_rest, w_total), fill)
    recompute = layers_rank * np.where(balanced, 1.0, heavy) * layer_recompute
    return StageCompute(layer_recompute=layer_recompute, together=together, layers_rank=layers_rank, head_layers=head_layers,
                        total=total, compute=total - recompute, recompute=recompute, chunk_ratio=chunk_ratio, fill=fill)
