"""What FSDP holds beside the model states: the gathered layers and their unsharded gradients.

FSDP keeps two layers gathered (the one computing and the one prefetched) and one layer's unsharded
gradient before its reduce-scatter. Under pipeline parallelism the whole stage stays gathered and its
gradients accumulate unsharded across the micro-batches (`CostParams.fsdp_pp_unsharded`). Experts
with no data-parallel peer (shard degree 1) stay outside FSDP (runtime/parallel/fsdp.py): nothing of
theirs is gathered, nor reduced from an unsharded copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost.flops import BF16
from bandwise.cost.params import CostParams
from bandwise.cost.pipeline import PipelineFactors
from bandwise.cost.terms.activations import Activations
from bandwise.cost.terms.placement import LocalParams
from bandwise.cost.terms.roles import Role, Roles
from bandwise.cost.terms.shape import Shape


@dataclass(frozen=True, slots=True)
class FsdpBuffers:
    """Bytes per role, and the two figures the moment-by-moment peak (`terms.peak`) reads."""

    first: np.ndarray
    last: np.ndarray
    inner: np.ndarray
    layer: np.ndarray
    """One layer's: a gathered bf16 weight, its all-gather buffer, its fp32 gradient."""
    whole_stage: np.ndarray
    """The stage stays gathered, its gradients unsharded, across the micro-batches."""


def unit_bytes(P: CostParams) -> float:
    """Bytes per parameter of a unit FSDP holds unsharded: a gathered bf16 weight, its all-gather
    buffer, its gradient before the reduce-scatter (fp32 where gradients are reduced in fp32)."""
    return 2 * BF16 + P.grad_reduce_bytes


def in_fsdp(local: LocalParams, expert: np.ndarray) -> np.ndarray:
    """The expert bytes FSDP manages: none where the experts' shard degree is 1."""
    return np.where(local.shard_expert > 1, expert, 0.0)


def _reliefs(inflight_then: np.ndarray, head_then: np.ndarray, pf: PipelineFactors, r: Roles, a: Activations, v: np.ndarray,
             mtp_depth: int) -> list[np.ndarray]:
    """What each role's activations have fallen by when its stages' gradients stand (`pipeline.inflight_after_backward`)."""
    drop, head_drop = np.maximum(pf.inflight - inflight_then, 0.0), np.maximum(pf.head_inflight - head_then, 0.0)
    # a backward of the last stage also frees one micro-batch's loss, of those held
    losses_freed = np.minimum(head_drop * v, a.other_losses)
    return [drop * r.first.layers * a.stage_mb, head_drop * (r.head.layers + mtp_depth) * a.stage_mb + losses_freed * (a.kept_loss + a.head_in),
            drop * r.inner.layers * a.stage_mb]


def fsdp_buffers(s: Shape, n_mb: np.ndarray, local: LocalParams, r: Roles, a: Activations, pf: PipelineFactors, mtp_depth: int,
                 P: CostParams) -> FsdpBuffers:
    fsdp_xl = in_fsdp(local, local.expert_layer)
    layer = unit_bytes(P) * (local.dense_layer + fsdp_xl)
    if P.fsdp_gathers_per_weight:  # two weights gathered, two gradients unsharded (`CostParams.fsdp_gathers_per_weight`)
        layer = np.minimum(layer, (2 * BF16 + 2 * P.grad_reduce_bytes) * local.largest_weight)
    whole_stage = P.fsdp_pp_unsharded & (s.pp > 1) & (n_mb > 1)
    fsdp = s.zero == 3  # only FSDP holds these buffers
    if fsdp.any():
        held = _held(s.virtual_stages, fsdp_xl, layer, whole_stage, local, r, a, pf, mtp_depth, P)
        first, last, inner = (np.where(fsdp, x, 0.0) for x in held)
    else:
        first = last = inner = np.zeros_like(layer)
    return FsdpBuffers(first=first, last=last, inner=inner, layer=layer, whole_stage=whole_stage)


def _held(v: np.ndarray, fsdp_xl: np.ndarray, layer: np.ndarray, whole_stage: np.ndarray, local: LocalParams, r: Roles, a: Activations,
          pf: PipelineFactors, mtp_depth: int, P: CostParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each role's FSDP buffers, where the rows run FSDP."""
    el = local.dense_layer
    el_x = el + fsdp_xl
    # The output head is an FSDP unit of its own (TorchTitan's grouping, runtime/parallel/fsdp.py). In
    # its backward it holds the same per-parameter buffers as a layer (gathered bf16 weight, the
    # all-gather buffer, the fp32 gradient before its reduce-scatter) once the logits and their
    # gradient have been consumed: that moment's peak is the rest plus these buffers less the logits.
    # With a vocabulary of 150k and small MoE layer units it sets the peak (dry run: Qwen3, Kimi K2 and
    # DeepSeek-V3 measure exactly 8 bytes a head parameter of buffers there, benchmarks/RESULTS.md)
    head_phase = unit_bytes(P) * local.out - a.head_logits
    # The stage's unsharded gradients appear with its first backward, so they stand beside the
    # micro-batches in flight from then on, not beside the warm-up's peak: under 1F1B with as many
    # micro-batches as stages rank 0 holds p before its first backward and p - 1 after it. Under
    # interleaving (v > 1) a rank's stages hold their unsharded gradients in spans of their own, from
    # each one's first backward to its last (`pipeline.stages_with_gradients`): first the stage whose
    # backward comes first (on the head's rank the one with the output layer), at most
    # `graded_stages` of them at once. The peak is the larger of the two moments.
    reliefs = _reliefs(pf.inflight_graded, pf.head_graded, pf, r, a, v, mtp_depth)
    reliefs_most = _reliefs(pf.inflight_graded_most, pf.head_graded_most, pf, r, a, v, mtp_depth)
    stages = (pf.graded_stages, pf.head_graded_stages, pf.graded_stages)
    head_grads_of = in_fsdp(local, r.head_expert)
    interleaved = v > 1

    def of_role(role: Role, n_stages: np.ndarray, relief: np.ndarray, relief_most: np.ndarray) -> np.ndarray:
        # only what FSDP manages is gathered and accumulated unsharded: experts outside it keep their
        # fp32 weights in place and ordinary gradients, counted with the model states (dry run,
        # DeepSeek-V3 DualPipeV at EP = the data-parallel size: no gathered expert, 1.31 GiB of expert
        # gradients in `grads`)
        managed = role.dense + in_fsdp(local, role.expert)
        gathered, grads = BF16 * managed, P.grad_reduce_bytes * managed
        head_grads = np.where(role.holds_head, r.head_dense + head_grads_of, 0.0)
        stage = role.layers * el_x  # a stage's unsharded gradients: its layers' and the head's, k of v stages
        first_grads = np.where(interleaved, P.grad_reduce_bytes * (stage / v + head_grads), grads)
        most_grads = np.where(n_stages < v, P.grad_reduce_bytes * (stage * n_stages / v + head_grads), grads)
        held = np.maximum(np.maximum(first_grads - relief, most_grads - relief_most), 0.0)
        # A unit's weight gradients leave their matmuls in bf16 and are added into the stage's fp32
        # accumulator only in the unit's post-backward (FSDP2 casts a no-sync gradient to reduce_dtype
        # there): one unit's worth stands beside the activations during its backward. The output
        # layer's, with the vocabulary's rows, is often the largest (dry runs, benchmarks/peak_tensors.py:
        # Llama 3 8B PP 2's last stage peaks in the head's matmul beside its 0.98 GiB; GPT-3 175B PP 4's
        # first stage in a layer's backward beside the layer's 0.14 GiB a FFN matrix)
        unit_wgrad = BF16 * np.maximum(el_x, np.where(role.holds_head, local.out, 0.0))
        stage_unsharded = gathered + held + unit_wgrad
        per_unit = np.maximum(layer, np.where(role.holds_head, head_phase, layer))
        return np.where(whole_stage, np.maximum(stage_unsharded, layer), per_unit)

    first, last, inner = (of_role(role, k, rl, rm) for role, k, rl, rm in zip(r, stages, reliefs, reliefs_most))
    return first, last, inner
