"""Where ranks and parameters sit: each group's stride in the rank order, and the parameters a
device holds per layer, with the data-parallel groups that shard them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost.terms.shape import Shape
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Layouts


def rank_strides(order: tuple[str, ...], c: Layouts) -> dict[str, np.ndarray]:
    """Stride of each parallel dim in the global rank order, innermost dim first."""
    strides, acc = {}, np.ones_like(c.tp)
    for dim in order:
        strides[dim] = acc
        acc = acc * getattr(c, dim)
    return strides


@dataclass(frozen=True, slots=True)
class Groups:
    """Stride and size of each communicating group: a collective's cost depends on which levels of
    the topology its ranks span (`cost.comm`)."""

    tp: np.ndarray
    cp: np.ndarray
    pp: np.ndarray
    dp_replicate: np.ndarray
    fsdp: np.ndarray
    fsdp_size: np.ndarray
    ep: np.ndarray
    """Stride of the expert-parallel group, carved out of TP, CP and the FSDP shards."""
    ddp: np.ndarray
    ddp_size: np.ndarray

    @classmethod
    def of(cls, order: tuple[str, ...], c: Layouts, s: Shape) -> Groups:
        st = rank_strides(order, c)
        return cls(
            tp=st["tp"], cp=st["cp"], pp=st["pp"], dp_replicate=st["dp_replicate"],
            fsdp=np.minimum(st["cp"], st["dp_shard"]), fsdp_size=s.cp * s.dp_shard,
            ep=np.minimum(np.minimum(st["tp"], st["cp"]), st["dp_shard"]),
            ddp=np.minimum(st["cp"], st["dp_replicate"]), ddp_size=s.dp_replicate * s.cp,
        )


@dataclass(frozen=True, slots=True)
class LocalParams:
    """Parameters on one device per layer (experts averaged over the layers) and outside the layers,
    and the number of ranks each is sharded over by ZeRO/FSDP."""

    dense_layer: np.ndarray
    expert_layer: np.ndarray
    emb: np.ndarray
    out: np.ndarray
    expert_split: np.ndarray
    """Ranks the routed experts are split over: EP (times a stated expert tensor parallelism) where it
    is on, else TP."""
    expert_dp: np.ndarray
    """Ranks holding the same experts."""
    expert_fsdp: np.ndarray
    shard_dense: np.ndarray
    shard_expert: np.ndarray
    largest_weight: np.ndarray = 0.0
    """The largest single weight of a layer on one device, as an engine that keeps each projection a
    parameter of its own holds it (MaxText: query, key, value and output projections, each MLP matrix, the
    routed experts' stacked matrix of one projection): what an FSDP that gathers weight by weight holds
    (`CostParams.fsdp_gathers_per_weight`)."""

    @classmethod
    def of(cls, m: ModelSpec, s: Shape, expert_tp: int = 1) -> LocalParams:
        """`expert_tp`: ranks each routed expert is split over besides EP (`CostParams.expert_tensor_parallel`)."""
        tp, cp, dp, dps, dpr, zero = s.tp, s.cp, s.dp, s.dp_shard, s.dp_replicate, s.zero
        expert_split = np.where(s.ep > 1, s.ep * expert_tp, tp)
        expert_dp = np.maximum(dp * cp * tp / expert_split, 1.0)
        # Under FSDP the experts are sharded over what dp_shard·cp·tp leaves of the EP group and replicated
        # over dp_replicate. An EP group spanning replicas (Megatron, DeepSeek-V3) exists only without FSDP
        # (specs/strategy.py), where ZeRO-1/2 shard the experts' state over all expert_dp ranks.
        expert_fsdp = expert_dp / dpr
        return cls(
            dense_layer=m.non_expert_layer_params / m.layers / tp,
            expert_layer=m.routed_expert_params_total / m.layers / expert_split,
            emb=m.embedding_params / tp,
            # a tied head is the embedding's matrix, except on a pipeline's last stage, which holds a copy
            # of its own whose gradients are summed with the first stage's (Megatron-LM's
            # _allreduce_word_embedding_grads, megatron/core/distributed/finalize_model_grads.py;
            # bandwise's trainer, runtime/parallel/tied.py)
            out=np.where(m.tied_embeddings & (s.pp == 1), 0.0, float(m.output_params)) / tp,
            expert_split=expert_split, expert_dp=expert_dp, expert_fsdp=expert_fsdp,
            shard_dense=np.select([zero == 3, zero >= 1], [dps * cp, dpr * cp], 1.0),
            shard_expert=np.select([zero == 3, zero >= 1], [expert_fsdp, expert_dp], 1.0),
            largest_weight=_largest_weight(m, tp, expert_split),
        )


def _largest_weight(m: ModelSpec, tp: np.ndarray, expert_split: np.ndarray) -> np.ndarray:
    """`LocalParams.largest_weight`: the query or output projection (h x heads x head width), the dense or
    shared MLP's matrix (h x ffn), each split over TP, and the local routed experts' matrix of one projection
    (experts x h x expert ffn over the expert split)."""
    a, h = m.attention_kind, m.hidden
    attention = h * a.heads * max(a.d_head, a.d_value) if m.attention_layers else 0
    dense = h * m.ffn if m.n_dense_mlp_layers and m.ffn else 0
    shared = h * m.shared_ffn * m.shared_experts if m.moe_layers else 0
    routed = (m.experts * h * m.expert_ffn) / expert_split if m.moe_layers else 0.0
    return np.maximum(max(attention, dense, shared) / tp, routed)
