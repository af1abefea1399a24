"""The optimizer step over this device's shard: memory-bound, `CostParams.optimizer_bytes_per_param`
bytes per parameter at the streaming share of HBM bandwidth."""

from __future__ import annotations

import numpy as np

from bandwise.cost.compute import memory_bound_time
from bandwise.cost.params import CostParams
from bandwise.cost.terms.placement import LocalParams
from bandwise.specs.hardware import Device


def optimizer_time(dev: Device, local: LocalParams, zero: np.ndarray, dense: np.ndarray, expert: np.ndarray, P: CostParams) -> np.ndarray:
    """Seconds of the step over `dense` and `expert` parameters, sharded where ZeRO shards the optimizer."""
    opt_params = dense / np.where(zero >= 1, local.shard_dense, 1.0) + expert / np.where(zero >= 1, local.shard_expert, 1.0)
    return memory_bound_time(opt_params * P.optimizer_bytes_per_param, dev.hbm_bandwidth, P.hbm_efficiency)
