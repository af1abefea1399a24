"""The gradient norm's all-reduces: one scalar all-reduce per gradient tensor over each mesh dimension
that shards it, where the engine reduces each tensor's norm on its own.

bandwise's trainer does (`runtime.metrics.grad_norm_and_clip`): it takes each gradient's norm and calls
`DTensor.full_tensor()` on it, which all-reduces the partial norm over the FSDP mesh dimension (and, on a
2-D mesh, over TP after it: torch/distributed/tensor/_redistribute.py warns of "2 sequential all_reduce
operations", torch 2.13). A CPU trace of FSDP4 on `debug` shows 39 of them a step, one per parameter
tensor (benchmarks/RESULTS.md, "Calibrate (third pass)"). Each carries a scalar: its cost is the group's
latency, twice (reduce-scatter then all-gather, `comm.all_reduce_time`), 2 (g - 1) steps over g ranks. That is
gloo's count too: its ring all-reduce (gloo/allreduce.cc, which torch's ProcessGroupGloo runs for a CPU tensor)
cuts the input into 2g segments, of which a scalar fills one, and passes it g - 1 hops round the ring to be
reduced and g - 1 more to be gathered, each hop waiting for the one before. Engines that stack the norms and
reduce once (TorchTitan's `clip_grad_norm_`, torchtitan/distributed/utils.py) set no such collectives
(`CostParams.norm_all_reduces_per_tensor` 0), and the term is zero.
"""

from __future__ import annotations

import numpy as np

from bandwise.cost import comm
from bandwise.cost.terms.fsdp import affine
from bandwise.cost.terms.placement import Groups
from bandwise.cost.terms.shape import Shape
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec


def tensors_per_layer(m: ModelSpec) -> float:
    """Parameter tensors of one layer of bandwise's model (runtime/model.py): two RMSNorms; attention's
    projections (wq, wk, wv, wo; MLA's wq_a, q_norm, wq_b, wkv_a, kv_norm, wkv_b, wo); the MLP's two or
    three (gated) linears; a MoE layer's router, its three stacked expert weights and a shared expert's
    linears; averaged over the layers. Other mixers are counted as attention (the count sets a latency,
    not bytes)."""
    attention = ((3 if m.q_lora_rank else 1) + 4) if m.kv_lora_rank else 4
    mlp = 3 if m.gated_mlp else 2
    moe_layers = m.moe_layers if m.experts else 0
    moe = 1 + 3 + (mlp if m.shared_experts else 0)
    return 2 + attention + (mlp * (m.layers - moe_layers) + moe * moe_layers) / max(m.layers, 1)


def root_tensors(m: ModelSpec) -> int:
    """The embedding, the final norm and the output layer (none of its own where tied)."""
    return 2 + (0 if m.tied_embeddings else 1)


def norm_latency(cluster: Cluster, s: Shape, groups: Groups) -> np.ndarray:
    """Seconds of one tensor's norm reduction: a scalar all-reduce over the FSDP group, and over TP where
    it shards the tensors too (one after the other)."""
    fsdp = np.where(s.cp * s.dp_shard > 1, 2 * affine(comm.all_gather_time, cluster, groups.fsdp, groups.fsdp_size)[1], 0.0)
    tp = np.where(s.tp > 1, 2 * affine(comm.all_gather_time, cluster, groups.tp, s.tp)[1], 0.0)
    return fsdp + tp


def norm_time(m: ModelSpec, layers_rank: np.ndarray, latency: np.ndarray, per_tensor: float) -> np.ndarray:
    """Seconds a step spends in the norm's all-reduces on the rank with the most layers."""
    if per_tensor <= 0:
        return np.zeros_like(np.asarray(latency, dtype=float))
    return per_tensor * (layers_rank * tensors_per_layer(m) + root_tensors(m)) * latency
