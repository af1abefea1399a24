"""The terms a candidate's key fixes: its degrees, ZeRO stage, micro-batch and precision.

The search prices millions of rows that share far fewer keys (`Layouts.base_key`); what depends on the
key alone is computed once per key here and spread over the rows (`RowTerms.of`): each layer's
compute and the parameters a device holds (`layer_terms`), and each dim's collectives before overlap
(`comm_terms`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost.columns import take_rows
from bandwise.cost.params import DEFAULT_PARAMS, CostParams
from bandwise.cost.terms import pipeline as pipe
from bandwise.cost.terms.compute import (
    HeadCompute,
    LayerCompute,
    LayerPasses,
    Rates,
    head_compute,
    layer_compute,
)
from bandwise.cost.terms.context import ContextComm, context_comm
from bandwise.cost.terms.expert import ExpertComm, expert_comm
from bandwise.cost.terms.fsdp import FsdpComm, fsdp_comm
from bandwise.cost.terms.grad_norm import norm_latency
from bandwise.cost.terms.grad_sync import SyncGroups
from bandwise.cost.terms.placement import Groups, LocalParams
from bandwise.cost.terms.shape import Shape
from bandwise.cost.terms.tensor import TensorComm, tensor_comm
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Layouts


@dataclass(frozen=True, slots=True)
class LayerTerms:
    """What a layout's degrees, ZeRO stage, micro-batch and precision fix, per layer and micro-batch
    on one device: its compute and the parameters it holds."""

    compute: LayerCompute
    head: HeadCompute
    local: LocalParams


@dataclass(frozen=True, slots=True)
class RowTerms:
    """The layer terms each row reads, spread from its key."""

    layer: LayerPasses
    head: HeadCompute
    local: LocalParams

    @classmethod
    def of(cls, lt: LayerTerms, index: np.ndarray) -> RowTerms:
        return take_rows(cls(lt.compute.passes(), lt.head, lt.local), index)


@dataclass(frozen=True, slots=True)
class CommTerms:
    """The same key's collectives, per layer and micro-batch, before overlap."""

    tensor: TensorComm
    context: ContextComm
    expert: ExpertComm
    fsdp: FsdpComm
    sync: SyncGroups
    p2p: np.ndarray
    """One micro-batch's activations sent to the next pipeline stage."""
    p2p_gather: np.ndarray
    """A received activation's TP shards gathered whole (`terms.pipeline.partition_gather_time`)."""
    norm: np.ndarray
    """One gradient tensor's norm reduction: scalar all-reduces over its sharding groups (`terms.grad_norm`)."""
    tied: np.ndarray
    """A tied embedding's gradients summed between the first and last pipeline stage, once a step (`terms.pipeline.tied_embedding_sync`)."""


def layer_terms(m: ModelSpec, cluster: Cluster, c: Layouts, P: CostParams = DEFAULT_PARAMS) -> LayerTerms:
    s = Shape.of(m, c, P.cp_shards_weights)
    rates = Rates.of(cluster.device, s, P)
    layer = layer_compute(m, cluster.device, s, rates, P)
    return LayerTerms(compute=layer, head=head_compute(m, s, rates, layer, P), local=LocalParams.of(m, s, P.expert_tensor_parallel))


def comm_terms(m: ModelSpec, cluster: Cluster, c: Layouts, order: tuple[str, ...], lt: LayerTerms, P: CostParams = DEFAULT_PARAMS) -> CommTerms:
    s = Shape.of(m, c, P.cp_shards_weights)
    groups = Groups.of(order, c, s)
    return CommTerms(
        tensor=tensor_comm(m, cluster, s, groups, lt.compute, P), context=context_comm(m, cluster, s, groups, lt.compute, P),
        expert=expert_comm(m, cluster, s, groups, P), fsdp=fsdp_comm(cluster, s, groups, lt.local, P),
        sync=SyncGroups.of(cluster, s, groups, lt.local), p2p=pipe.p2p_time(m, cluster, s, groups.pp),
        p2p_gather=pipe.partition_gather_time(m, cluster, s, groups.tp) if P.pipeline_sends_blocking else np.zeros_like(s.tp),
        norm=norm_latency(cluster, s, groups) if P.norm_all_reduces_per_tensor > 0 else np.zeros_like(s.tp),
        tied=pipe.tied_embedding_sync(m, cluster, s, groups.pp, P.grad_reduce_bytes),
    )
