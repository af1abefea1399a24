"""FSDP (ZeRO-3): per layer an all-gather of the weights forward, another backward, and a
reduce-scatter of the gradients, each prefetched behind the neighbouring layer's compute; the first
gather and the last reduction, and the root unit's, have nothing to hide behind."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost import comm
from bandwise.cost.flops import BF16
from bandwise.cost.params import CostParams
from bandwise.cost.terms.placement import Groups, LocalParams
from bandwise.cost.terms.shape import Shape
from bandwise.specs.hardware import Cluster


def affine(time_fn, cluster: Cluster, stride: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A collective's time is latency + bytes x seconds-per-byte: return (seconds per byte, latency)."""
    lat = time_fn(cluster, 0.0, stride, size)
    return time_fn(cluster, 1.0, stride, size) - lat, lat


@dataclass(frozen=True, slots=True)
class FsdpComm:
    """Seconds of one layer's all-gather and reduce-scatter, and the affine cost of the FSDP group."""

    gather: np.ndarray
    reduce: np.ndarray
    per_byte: np.ndarray
    latency: np.ndarray
    expert_gather: np.ndarray | float = 0.0
    """The part of `gather` that is the routed experts' own all-gather (their FSDP group is not the dense
    weights'), which a layer needs only after its attention."""
    combined: np.ndarray | bool = False
    """A layer's gathers fit XLA's combine threshold (`CostParams.all_gather_combine_bytes`): one all-gather
    per replica group."""


def fsdp_comm(cluster: Cluster, s: Shape, groups: Groups, local: LocalParams, P: CostParams) -> FsdpComm:
    # the experts' FSDP group: EP's ranks form its inner dim
    exp_stride = groups.ep * s.ep
    g = P.grad_reduce_bytes
    has_experts = local.expert_layer > 0  # a dense model launches no expert collectives, not even their latency
    expert_gather = has_experts * comm.all_gather_time(cluster, local.expert_layer * BF16, exp_stride, local.expert_fsdp)
    gather = comm.all_gather_time(cluster, local.dense_layer * BF16, groups.fsdp, groups.fsdp_size) + expert_gather
    reduce = comm.reduce_scatter_time(cluster, local.dense_layer * g, groups.fsdp, groups.fsdp_size) + has_experts * comm.reduce_scatter_time(
        cluster, local.expert_layer * g, exp_stride, local.expert_fsdp
    )
    per_byte, latency = affine(comm.all_gather_time, cluster, groups.fsdp, groups.fsdp_size)
    combined = (local.dense_layer * BF16 <= P.all_gather_combine_bytes) & (local.expert_layer * BF16 <= P.all_gather_combine_bytes)
    return FsdpComm(gather=gather, reduce=reduce, per_byte=per_byte, latency=latency, expert_gather=expert_gather, combined=combined)


@dataclass(frozen=True, slots=True)
class FsdpTerms:
    """Seconds per micro-batch of a row, on the fullest pipeline rank."""

    exposed: np.ndarray
    layer_total: np.ndarray
    """One layer's gathers and reduction before overlap: 2 all-gathers and a reduce-scatter."""
    once: np.ndarray
    """Seconds per step, not per micro-batch, where a pipeline stage stays gathered across its micro-batches
    (`CostParams.fsdp_pp_unsharded`): one all-gather and one reduce-scatter per layer a step."""
    layer_once_total: np.ndarray
    """One layer's gathers and reduction before overlap where the stage stays gathered: 1 all-gather and a
    reduce-scatter a step."""


def fsdp_terms(fc: FsdpComm, zero: np.ndarray, layers_rank: np.ndarray, root: np.ndarray, fwd: np.ndarray, bwd: np.ndarray,
               recompute: np.ndarray, overlap: np.ndarray, P: CostParams, attention: np.ndarray | float = 0.0,
               attention_bwd: np.ndarray | float = 0.0, full: np.ndarray | bool = False) -> FsdpTerms:
    """FSDP's exposed time on the fullest rank; `root` the parameters outside any layer on it, `fwd`,
    `bwd` and `recompute` one layer's passes, behind which the neighbouring layer's collectives hide;
    `attention` and `attention_bwd` a layer's attention block's passes (its GEMMs and core), `full` where
    the layers are recomputed whole (`CostParams.fsdp_gather_waits`)."""
    ag, rs = fc.gather, fc.reduce
    # prefetched behind the previous layer's forward, and its backward
    layer_overlapped = np.maximum(0.0, ag - fwd) + np.maximum(0.0, ag + rs - bwd - recompute)
    waits = P.fsdp_gather_waits & np.asarray(fc.combined)
    if P.fsdp_gather_waits:
        layer_overlapped = np.where(waits, waiting_gathers(fc, bwd, recompute, attention, attention_bwd, full), layer_overlapped)
    layer_exposed = np.where(overlap, layer_overlapped, 2 * ag + rs)
    # the edges of an overlapped step: the first gather (already in every layer's own where the gathers wait)
    # and the last reduction
    edges = np.where(waits, rs, ag + rs)
    # Nothing runs before the first gather or after the last reduction: the first layer's weights
    # gather and the last layer's gradients reduce exposed, and so do the root unit's, the weights
    # outside any block (embedding, and the output layer where the same rank holds it), which are
    # gathered before the first layer and reduced after the embedding's backward (PyTorch FSDP2:
    # the root's reduce-scatter runs in the final backward callback)
    root_edge = root * (BF16 + P.grad_reduce_bytes) * fc.per_byte + 2 * fc.latency
    exposed = np.where(zero == 3, layers_rank * layer_exposed + root_edge + np.where(overlap, edges, 0.0), 0.0)
    # A stage that stays gathered over its micro-batches (TorchTitan: reshard_after_forward = not pp_enabled,
    # parallelize.py; bandwise's trainer likewise, runtime/parallel/apply.py) gathers each layer once, and
    # torch's PipelineStage turns the gradient sync off until the last micro-batch's backward
    # (set_requires_gradient_sync(False), torch/distributed/pipelining/stage.py, torch 2.13): one
    # reduce-scatter per layer a step. A CPU trace of FSDP2·PP2 with 2 micro-batches shows 2 gathers
    # and 2 reductions a step for its 2 layers (benchmarks/RESULTS.md, "Calibrate (third pass)").
    # (a stage gathered once a step is PyTorch's; `fsdp_gather_waits`, XLA's, prices only the per-micro-batch path)
    layer_once = np.where(overlap, np.maximum(0.0, ag - fwd) + np.maximum(0.0, rs - bwd - recompute), ag + rs)
    once = np.where(zero == 3, layers_rank * layer_once + root_edge + np.where(overlap, ag + rs, 0.0), 0.0)
    return FsdpTerms(exposed=exposed, layer_total=2 * ag + rs, once=once, layer_once_total=ag + rs)


def waiting_gathers(fc: FsdpComm, bwd: np.ndarray, recompute: np.ndarray, attention: np.ndarray | float,
                    attention_bwd: np.ndarray | float, full: np.ndarray | bool) -> np.ndarray:
    """One layer's exposed FSDP time per micro-batch where its gathers wait at its start (`CostParams.fsdp_gather_waits`).

    Forward: the dense weights' gather waits whole; the experts' arrives behind the attention. Backward, the
    loop's second pass over the layer: the gathers again, the experts' behind the recomputed attention where
    the layer is recomputed whole, otherwise behind the feed-forward's backward that runs first; the previous
    layer's reduce-scatter, pipelined into this iteration, shares the compute left with the gather that
    hides, one collective in flight at a time."""
    ag, rs, expert = fc.gather, fc.reduce, fc.expert_gather
    dense = ag - expert
    forward = dense + np.maximum(0.0, expert - attention)
    # the second gather's window: the recomputed attention, or the feed-forward's backward (all but the
    # attention's: backward runs the layer in reverse)
    first, second = np.where(full, dense, expert), np.where(full, expert, dense)
    window = np.where(full, attention, np.maximum(0.0, bwd - attention_bwd))
    backward = first + np.maximum(np.maximum(0.0, second - window), second + rs - bwd - recompute)
    return forward + np.maximum(0.0, backward)
