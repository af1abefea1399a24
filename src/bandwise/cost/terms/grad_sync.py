"""Data-parallel gradient synchronisation, once per step after the last backward: all-reduce =
reduce-scatter + all-gather (fp32 gradients); ZeRO-1/2 reduce-scatter the gradients and all-gather
the bf16 weights; HSDP all-reduces the FSDP shards across replicas. Overlapped with the backward
(bucketed, Li et al. 2020, "PyTorch Distributed", Sec. 3.2.3) except at its edges."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost import comm
from bandwise.cost.flops import BF16
from bandwise.cost.params import CostParams
from bandwise.cost.terms.fsdp import affine
from bandwise.cost.terms.placement import Groups, LocalParams
from bandwise.cost.terms.shape import Shape
from bandwise.specs.hardware import Cluster


@dataclass(frozen=True, slots=True)
class SyncGroups:
    """(seconds per byte, latency) of the data-parallel groups: the whole DP×CP group, the replicas of
    an FSDP shard, and the ranks holding the same experts."""

    k_ddp: np.ndarray
    l_ddp: np.ndarray
    k_rep: np.ndarray
    l_rep: np.ndarray
    k_edp: np.ndarray
    l_edp: np.ndarray

    @classmethod
    def of(cls, cluster: Cluster, s: Shape, groups: Groups, local: LocalParams) -> SyncGroups:
        k_ddp, l_ddp = affine(comm.all_gather_time, cluster, groups.ddp, groups.ddp_size)
        k_rep, l_rep = affine(comm.all_gather_time, cluster, groups.dp_replicate, s.dp_replicate)
        k_edp, l_edp = affine(comm.all_gather_time, cluster, groups.ep * s.ep, local.expert_dp)
        return cls(k_ddp, l_ddp, k_rep, l_rep, k_edp, l_edp)


@dataclass(frozen=True, slots=True)
class GradSync:
    """Seconds per step: the whole synchronisation, and what the backward leaves exposed."""

    total: np.ndarray
    exposed: np.ndarray


def bucket_count(params: np.ndarray, bucket: np.ndarray | float) -> np.ndarray:
    """Collectives one synchronisation of `params` runs as: one per bucket of `bucket` parameters,
    each paying the group's latency (0: the whole gradient in one collective)."""
    bucket = np.asarray(bucket, dtype=float)
    return np.where(bucket > 0, np.maximum(np.ceil(params / np.where(bucket > 0, bucket, 1.0)), 1.0), 1.0)


def sync_time(params: np.ndarray, k: np.ndarray, lat: np.ndarray, shard: np.ndarray, zero: np.ndarray, sg: SyncGroups,
              grad_bytes: float, bucket: np.ndarray | float = 0.0, zero_all_reduce: bool = False,
              units: np.ndarray | float = 1.0) -> np.ndarray:
    """Gradient synchronisation of `params` over a data-parallel group of affine cost (k, lat), in
    buckets of `bucket` parameters (`CostParams.grad_bucket_params`) without FSDP, whose collectives
    are its units' (`terms.fsdp`). ZeRO-1/2 reduce-scatter the gradients, or all-reduce them where
    `zero_all_reduce` (`CostParams.zero_grad_all_reduce`: a reduce-scatter and an all-gather of g
    bytes each), then all-gather the bf16 weights. Under HSDP the shards' all-reduce across the
    replicas pays the latency `units` times (`CostParams.hsdp_all_reduce_per_unit`)."""
    g = grad_bytes
    n = bucket_count(params, bucket)
    reduced = 2 if zero_all_reduce else 1  # ring passes of the gradients: all-reduce = reduce-scatter + all-gather
    return np.select(
        [zero == 0, zero <= 2],
        [2 * (params * g * k + n * lat), params * (reduced * g + BF16) * k + (reduced + 1) * n * lat],
        2 * (params * g / np.maximum(shard, 1) * sg.k_rep + units * sg.l_rep),
    )


def grad_sync(sg: SyncGroups, local: LocalParams, zero: np.ndarray, dense: np.ndarray, expert: np.ndarray, root: np.ndarray,
              last_backward: np.ndarray, overlap: np.ndarray, grad_bytes: float, bucket: np.ndarray | float = 0.0,
              zero_all_reduce: bool = False, units: np.ndarray | float = 1.0) -> GradSync:
    """Synchronisation of the rank with the most dense parameters (`dense`, `expert` its parameters;
    `root` those outside any layer, `last_backward` the backward it can hide behind; `overlap` whether
    it runs beside the backward, `sync_overlapped`; `bucket` the parameters per bucket, `bucket_params`;
    `zero_all_reduce`, `CostParams.zero_grad_all_reduce`; `units` the HSDP all-reduces a step, `sync_time`)."""
    # experts: the same collectives over the ranks holding the same experts (under FSDP, the
    # dp_replicate replicas of each shard), in buckets of the same size (Megatron-Core's expert buffers)
    expert_sync = sync_time(expert, sg.k_edp, sg.l_edp, local.shard_expert, zero, sg, grad_bytes, bucket, zero_all_reduce, units) * (expert > 0)
    total = sync_time(dense, sg.k_ddp, sg.l_ddp, local.shard_dense, zero, sg, grad_bytes, bucket, zero_all_reduce, units) + expert_sync
    # Overlap cannot hide the edges: the embedding's gradients, the last to be computed, reduce
    # after the backward ends (Li et al. 2020, Sec. 3.2.3: the last bucket's all-reduce;
    # Megatron-Core fills its buckets in reverse order, the embedding last), and under ZeRO-1/2 its
    # weights, the first the forward needs, gather before it starts; under HSDP the root unit's
    # shards all-reduce across the replicas last
    edge = sync_time(np.where(zero == 3, root, local.emb), sg.k_ddp, sg.l_ddp, local.shard_dense, zero, sg, grad_bytes,
                     zero_all_reduce=zero_all_reduce)
    return GradSync(total=total, exposed=np.where(overlap, np.maximum(total - last_backward, edge), total))


def bucket_params(P: CostParams, dp_cp: np.ndarray, overlap: np.ndarray) -> np.ndarray:
    """Parameters per gradient bucket: max(`grad_bucket_params`, `grad_bucket_params_per_dp_rank` x
    the DP x CP size), Megatron-Core's default; 0 (one collective) where the synchronisation is not
    overlapped, as Megatron-Core unsets its bucket size without `overlap_grad_reduce`."""
    size = np.maximum(P.grad_bucket_params, P.grad_bucket_params_per_dp_rank * np.asarray(dp_cp, dtype=float))
    return np.where(overlap, size, 0.0)


def sync_overlapped(P: CostParams, zero: np.ndarray, overlap: np.ndarray) -> np.ndarray:
    """Whether the synchronisation runs beside the backward: the layout's `overlap_dp`, except under
    ZeRO-1/2 where the engine runs it after the backward (`CostParams.zero_sync_overlapped` off)."""
    return np.asarray(overlap, dtype=bool) & (P.zero_sync_overlapped | ((zero != 1) & (zero != 2)))
