"""Pipeline parallelism: the schedule's idle share of the busy time (`cost.pipeline`, simulated per
schedule) and the point-to-point sends of the warm-up and cool-down, which sit on the critical path."""

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


def sends(p2p: np.ndarray, s: Shape) -> np.ndarray:
    """The (p-1) warm-up and cool-down hops of every virtual stage, per step."""
    return np.where(s.pp > 1, 2.0 * (s.pp - 1) * s.virtual_stages * p2p, 0.0)


def bubble(busy: np.ndarray, overhead: np.ndarray, chunk_ratio: np.ndarray | float) -> np.ndarray:
    """Idle seconds per step: the schedule's idle over busy time (`PipelineFactors.overhead`), at the
    pace of the largest stage."""
    return busy * overhead * chunk_ratio
