"""Pipeline parallelism: the schedule's idle share of the busy time (`cost.pipeline`, simulated per
schedule) and the point-to-point sends on the critical path: those of the warm-up and cool-down where
sends are asynchronous, every step's where they block (`CostParams.pipeline_sends_blocking`)."""

from __future__ import annotations

import numpy as np

from bandwise.cost import comm
from bandwise.cost.flops import BF16
from bandwise.cost.terms.shape import Shape
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec


def p2p_time(m: ModelSpec, cluster: Cluster, s: Shape, pp_stride: np.ndarray) -> np.ndarray:
    """One micro-batch's activations (its sequence-parallel shard) sent to the next stage."""
    return comm.p2p_time(cluster, s.tokens * m.hidden * BF16 / s.tp, pp_stride)


def partition_gather_time(m: ModelSpec, cluster: Cluster, s: Shape, tp_stride: np.ndarray) -> np.ndarray:
    """A received activation's TP shards gathered whole before the stage computes (DeepSpeed's
    partitioned pipeline tensors, `CostParams.pipeline_sends_blocking`)."""
    return comm.all_gather_time(cluster, s.tokens * m.hidden * BF16, tp_stride, s.tp)


def tied_embedding_sync(m: ModelSpec, cluster: Cluster, s: Shape, pp_stride: np.ndarray, grad_bytes: float) -> np.ndarray:
    """Seconds a step of the all-reduce that keeps a tied embedding's two copies equal: the first stage's
    matrix and the last stage's copy for the output layer sum their gradients after the backward, the
    embedding's TP shard in the gradients' dtype between two ranks (pp - 1) pipeline strides apart, with
    nothing to hide behind (Megatron-Core `finalize_model_grads`, `_allreduce_word_embedding_grads`;
    nanotron `sync_tied_weights_gradients`; bandwise's `runtime.parallel.tied.sum_tied_grads`). Zero
    without a pipeline or without tied embeddings."""
    if not m.tied_embeddings:
        return np.zeros_like(s.pp, dtype=float)
    nbytes = m.vocab * m.hidden / s.tp * grad_bytes
    both = np.maximum(s.pp - 1, 1) * pp_stride
    return np.where(s.pp > 1, comm.all_reduce_time(cluster, nbytes, both, np.full_like(s.pp, 2.0, dtype=float)), 0.0)


def sends(p2p: np.ndarray, s: Shape, n_mb: np.ndarray, blocking: bool = False, gather: np.ndarray | float = 0.0) -> np.ndarray:
    """Seconds per step of pipeline sends on the critical path.

    Asynchronous sends: the (p-1) warm-up and cool-down hops of every virtual stage, twice (forward and
    backward); the steady state's hide behind compute. Blocking sends (DeepSpeed's TrainSchedule, one
    schedule, v = 1): a middle stage exchanges before each of its 2(m + p - 1) steps, two sends and one TP
    gather of what it received; with two stages they exchange on alternate steps, m + 1 times."""
    hops = 2.0 * (s.pp - 1) * s.virtual_stages * p2p
    if blocking:
        exchanges = np.where(s.pp >= 3, 2.0 * (n_mb + s.pp - 1), n_mb + 1.0)
        hops = exchanges * (2.0 * p2p + gather)
    return np.where(s.pp > 1, hops, 0.0)


def bubble(busy: np.ndarray, overhead: np.ndarray, chunk_ratio: np.ndarray | float) -> np.ndarray:
    """Idle seconds per step: the schedule's idle over busy time (`PipelineFactors.overhead`), where busy
    is the time of a rank the fill and drain pass through (`StageCompute.fill`), not the slowest rank's.

    A pipeline is a flow line: m alike micro-batches through stages of times t_i finish after
    sum_i t_i + (m - 1) max_i t_i, the first micro-batch's way in and the last one's way out plus the
    slowest stage's steady state. So a heavy head stage lengthens the steady state and not the fill
    and drain; the event simulation of each looped schedule (`cost/pipeline.py`, torch's action
    orders) gives exactly this with one slow stage (tests/unit/test_pipeline_sim.py)."""
    return busy * overhead * chunk_ratio
