"""What hidden communication costs the compute beside it. Collectives hidden behind compute still
occupy SMs on GPUs (NCCL channels are thread blocks): while one runs for c seconds, the compute
beside it loses `Device.comm_sm_share` · c of work.

An overlapped expert all-to-all keeps its SMs for the whole window it overlaps, not only while bytes
move: DualPipe partitions the SMs, 20 of the H800's 132 to communication while the paired chunk
computes (DeepSeek-V3 report, Sec. 3.2.1-3.2.2; ISCA'25 "Insights into DeepSeek-V3", Sec. 4.4.1).
Compute of t seconds on (1 - s) of the SMs takes t / (1 - s): it loses s · t / (1 - s), which is s
times the window stretched by 1 / (1 - s).
"""

from __future__ import annotations

import numpy as np

from bandwise.cost.terms.context import ContextComm
from bandwise.cost.terms.expert import ExpertComm, ExpertTerms
from bandwise.cost.terms.fsdp import FsdpTerms
from bandwise.cost.terms.tensor import TensorTerms
from bandwise.specs.hardware import Device
from bandwise.specs.model import ModelSpec


def contention(dev: Device, m: ModelSpec, layers_rank: np.ndarray, tensor: TensorTerms, context: ContextComm, ec: ExpertComm,
               expert: ExpertTerms, moe_fwd: np.ndarray, overlap_ep: np.ndarray) -> np.ndarray:
    """Seconds per micro-batch the fullest rank's compute loses to the tensor, context and expert
    communication hidden beside it (FSDP's: `fsdp_contention`)."""
    frac_moe = m.moe_layers / m.layers
    sm_left = 1.0 - dev.comm_sm_share
    window = expert.hidden_share * frac_moe * 3 * moe_fwd * (ec.one > 0) / sm_left
    moved = frac_moe * expert.layer - expert.exposed
    occupied = np.where(overlap_ep, np.maximum(moved, window), moved)
    hidden = layers_rank * (tensor.total - tensor.exposed + context.layer - context.exposed + occupied)
    return dev.comm_sm_share * np.maximum(hidden, 0.0)


def fsdp_contention(dev: Device, layers_rank: np.ndarray, fsdp: FsdpTerms, zero: np.ndarray, n_mb: np.ndarray,
                    whole_stage: np.ndarray) -> np.ndarray:
    """Seconds per step the fullest rank's compute loses beside FSDP's hidden gathers and reductions,
    counted as often as they run: each micro-batch (2 all-gathers and a reduce-scatter a layer), or
    once a step where a pipeline stage stays gathered (one of each a layer, `FsdpTerms.once`)."""
    per_mb = n_mb * (layers_rank * fsdp.layer_total - fsdp.exposed)
    per_step = layers_rank * fsdp.layer_once_total - fsdp.once
    hidden = np.where(zero == 3, np.where(whole_stage, per_step, per_mb), 0.0)
    return dev.comm_sm_share * np.maximum(hidden, 0.0)


def data_parallel_contention(dev: Device, total: np.ndarray, exposed: np.ndarray) -> np.ndarray:
    """Seconds per step lost beside the hidden share of the gradient synchronisation."""
    return dev.comm_sm_share * (total - exposed)
