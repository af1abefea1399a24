"""Peak memory per device: on the fullest pipeline rank role, its model states, activations and
buffers together (not the largest of each from different ranks: under a V-shaped schedule with its
layers balanced, DeepSeek-V3's rank 0 holds the embedding, head and MTP module, an inner rank the
most layers)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost.flops import BF16
from bandwise.cost.memory import StateBytes
from bandwise.cost.params import CostParams
from bandwise.cost.terms.activations import Activations
from bandwise.cost.terms.fsdp_buffers import FsdpBuffers, in_fsdp, unit_bytes
from bandwise.cost.terms.placement import LocalParams
from bandwise.cost.terms.roles import Roles, first_largest, of_each
from bandwise.cost.terms.shape import Shape


@dataclass(frozen=True, slots=True)
class PeakMemory:
    """Bytes on the fullest device at its peak, term by term; `grads_not_at_peak` is zero or negative
    (`CostParams.fsdp_grads_freed`)."""

    params: np.ndarray
    grads_optimizer: np.ndarray
    grads_not_at_peak: np.ndarray
    activations: np.ndarray
    buffers: np.ndarray
    total: np.ndarray
    charged: np.ndarray
    """What is set against the capacity, `total` less the headroom's share of the state an engine
    allocates once and keeps (`CostParams.persistent_state`): with `h` the headroom, persistent +
    the rest / (1 - h) <= HBM is total - h x persistent <= (1 - h) x HBM."""


@dataclass(frozen=True, slots=True)
class _Fullest:
    states: np.ndarray
    weights: np.ndarray
    activations: np.ndarray
    fsdp: np.ndarray
    holds_head: np.ndarray
    dense: np.ndarray
    expert: np.ndarray


def stored_grad_bytes(P: CostParams) -> float:
    """Bytes of a stored (sharded) gradient: `CostParams.sharded_grad_bytes`, else the reduction's."""
    return P.sharded_grad_bytes or P.grad_reduce_bytes


def _fullest(s: Shape, local: LocalParams, r: Roles, a: Activations, fb: FsdpBuffers, P: CostParams) -> _Fullest:
    """The role whose states, activations and FSDP buffers sum highest, and what it holds."""
    zero, shard_dense, shard_expert = s.zero, local.shard_dense, local.shard_expert
    per_stage = StateBytes.of(zero, grad_bytes=stored_grad_bytes(P), moment_bytes=P.adam_moment_bytes, master_bytes=P.master_weight_bytes)
    states = [per_stage.of_params(role.dense, shard_dense) + per_stage.of_params(role.expert, shard_expert) for role in r]
    weights = [per_stage.weights_of(role.dense, shard_dense) + per_stage.weights_of(role.expert, shard_expert) for role in r]
    acts, fsdp = [a.first, a.last, a.inner], [fb.first, fb.last, fb.inner]
    at = first_largest([st + act + f for st, act, f in zip(states, acts, fsdp)])
    return _Fullest(states=of_each(at, states), weights=of_each(at, weights), activations=of_each(at, acts), fsdp=of_each(at, fsdp),
                    holds_head=of_each(at, [role.holds_head for role in r]), dense=of_each(at, [role.dense for role in r]),
                    expert=of_each(at, [role.expert for role in r]))


def peak_memory(s: Shape, n_mb: np.ndarray, local: LocalParams, r: Roles, a: Activations, fb: FsdpBuffers, a2a_buffers: np.ndarray,
                P: CostParams) -> PeakMemory:
    zero, shard_dense, shard_expert = s.zero, local.shard_dense, local.shard_expert
    full = _fullest(s, local, r, a, fb, P)
    activations, fsdp = full.activations, full.fsdp
    # One micro-batch under FSDP2 and no pipeline (`fsdp_grads_freed`): no gradient exists until the
    # backward starts, and they grow as the kept activations shrink, linearly in the layers done, so
    # the peak is at one of four moments, each with what FSDP holds then:
    #   the loss: kept activations, the logits and the head's inputs, the head's unit gathered (it is
    #     not resharded after its forward, runtime/parallel/fsdp.py, as TorchTitan leaves its last
    #     unit; the dry run measures exactly its bf16 weight there, Llama 3 8B: 0.98 GiB);
    #   the head's backward: the logits consumed, the head's inputs and unit buffers (`head_phase`);
    #   the first layer's backward: the head's gradient, a layer's buffers, a recomputed layer's working set;
    #   the end of the backward: every gradient, a layer's buffers, the working set.
    # Elsewhere every moment is counted at once (the gradients of an earlier micro-batch stand
    # through the next one's forward; a stage runs several micro-batches).
    moment_rows = P.fsdp_grads_freed & (zero == 3) & (n_mb == 1) & (s.pp == 1)
    grads_rank = stored_grad_bytes(P) * (full.dense / shard_dense + full.expert / shard_expert)
    # Under FSDP with pipeline parallelism a stage accumulates unsharded gradients (`fsdp_pp_unsharded`)
    # and makes its sharded ones only in the last micro-batch's reduce-scatter, after every peak
    # counted above; the optimizer freed the last step's (set_to_none). Experts outside FSDP (shard
    # degree 1) keep ordinary gradients from their first backward.
    sharded_late = P.fsdp_grads_freed & fb.whole_stage & (zero == 3)
    grads_sharded = stored_grad_bytes(P) * (full.dense / shard_dense + in_fsdp(local, full.expert / shard_expert))
    freed = np.where(sharded_late, grads_sharded, 0.0)
    if np.any(moment_rows):
        head_out = np.where(full.holds_head, local.out, 0.0)
        head_grads = stored_grad_bytes(P) * head_out / shard_dense
        stored = np.maximum(activations - np.maximum(a.working, a.head_logits + a.head_in), 0.0)
        moments = [  # (activations, gradients present, FSDP buffers) at each moment
            (stored + a.head_logits + a.head_in, 0.0, BF16 * head_out),
            (stored + a.head_in, 0.0, unit_bytes(P) * head_out),
            (stored + a.working, head_grads, fb.layer),
            (a.working, grads_rank, fb.layer),
        ]
        at = first_largest([act + g + buf for act, g, buf in moments])
        activations = np.where(moment_rows, of_each(at, [mo[0] for mo in moments]), activations)
        freed = np.where(moment_rows, grads_rank - of_each(at, [mo[1] for mo in moments]), freed)
        fsdp = np.where(moment_rows, of_each(at, [mo[2] for mo in moments]), fsdp)
    buffers = fsdp + a2a_buffers + P.reserved_bytes
    total = full.states - freed + activations + buffers
    charged = total - P.headroom * (full.states - freed) if P.persistent_state else total
    if P.static_allocation:  # set against the whole capacity (`CostParams.static_allocation`)
        charged = total * (1 - P.headroom)
    return PeakMemory(params=full.weights, grads_optimizer=full.states - full.weights, grads_not_at_peak=-freed, activations=activations,
                      buffers=buffers, total=total, charged=charged)
