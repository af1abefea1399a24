"""Activations each pipeline rank role holds at its peak (`cost.memory` counts them per token and
layer; `cost.pipeline` how many micro-batches each rank keeps in flight)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost.flops import BF16
from bandwise.cost.memory import (
    activation_bytes_per_token,
    head_input_bytes_per_token,
    layer_input_bytes_per_token,
    logits_bytes_per_token,
    weight_output_grad_bytes_per_token,
)
from bandwise.cost.mixers import (
    mixer_activation_bytes_per_token,
    mixer_kinds,
    mixer_output_grad_bytes_per_token,
)
from bandwise.cost.params import CostParams
from bandwise.cost.remat import MAXTEXT_POLICIES, odd_matmul_bytes_per_token, unsaved_matmul_bytes_per_token
from bandwise.cost.pipeline import PipelineFactors
from bandwise.cost.terms.roles import Roles
from bandwise.cost.terms.shape import Shape
from bandwise.cost.terms.stages import FULL, SELECTIVE, StageCompute
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import PRECISIONS


@dataclass(frozen=True, slots=True)
class Activations:
    """Bytes on one device: one micro-batch through one layer as kept (`stage_mb`), a layer
    re-materialised in its backward (`working`), the head's logits and inputs, what the loss keeps,
    and the three roles' totals at their peaks."""

    stage_mb: np.ndarray
    working: np.ndarray
    head_logits: np.ndarray
    head_in: np.ndarray
    kept_loss: np.ndarray
    other_losses: np.ndarray
    first: np.ndarray
    last: np.ndarray
    inner: np.ndarray


def kept_per_token(m: ModelSpec, s: Shape, selective: bool, P: CostParams) -> np.ndarray:
    """Bytes a token keeps in one layer (mean over dense and MoE layers), at the layout's precision."""
    frac_moe = m.moe_layers / m.layers
    per_precision = []
    for fp8 in (False, True):
        gathered = P.tp_gathered_inputs and not (selective and P.selective_regathers_inputs)
        kw = dict(selective=selective, modules=P.selective_modules, flash=P.flash_attention, dropout=m.dropout, fp8=fp8,
                  sequence_parallel=P.sequence_parallel, fp8_act_cache=P.fp8_activation_cache, gathered_gemm_inputs=gathered)
        if m.is_hybrid:
            a, r = hybrid_kept_per_token(m, kw)
            per_precision.append(a / s.tp + r)
            continue
        a_d, r_d = activation_bytes_per_token(m, moe_layer=False, **kw)
        a_m, r_m = activation_bytes_per_token(m, moe_layer=True, **kw)  # the main layers' (`ModelSpec.ffn_kind`)
        per_precision.append(((1 - frac_moe) * a_d + frac_moe * a_m) / s.tp + ((1 - frac_moe) * r_d + frac_moe * r_m))
    return np.where(s.fp8, per_precision[1], per_precision[0])


def hybrid_kept_per_token(m: ModelSpec, kw: dict) -> tuple[float, float]:
    """(bytes, the part replicated over TP) a token keeps in the mean layer of a hybrid: each block
    (attention, a mixer, a dense or an MoE MLP) as `activation_bytes_per_token` counts it alone,
    weighted by the share of layers that have it."""
    L = m.layers
    parts = [(m.attention_layers / L, {"attention": True, "mlp": False, "moe_layer": False}),
             (m.n_dense_mlp_layers / L, {"attention": False, "mlp": True, "moe_layer": False}),
             (m.moe_layers / L, {"attention": False, "mlp": True, "moe_layer": True})]
    parts += [(share, {"attention": False, "mlp": False, "moe_layer": False, "mixer": mixer_activation_bytes_per_token(kind)})
              for kind, share in mixer_kinds(m)]
    kept = [(share, activation_bytes_per_token(m, **kw, **part)) for share, part in parts if share]
    return sum(share * a for share, (a, _) in kept), sum(share * r for share, (_, r) in kept)


def hybrid_output_grads_per_token(m: ModelSpec) -> tuple[float, float]:
    """`weight_output_grad_bytes_per_token` of the mean layer of a hybrid: attention's share of an
    attention + dense layer less the MLP's, the MLPs' by their shares, the mixers' projections."""
    L, h = m.layers, m.hidden
    mlp = BF16 * ((2 if m.gated_mlp else 1) * m.ffn + h)
    og_d, og_dr = weight_output_grad_bytes_per_token(m, moe_layer=False)
    og_m, og_mr = weight_output_grad_bytes_per_token(m, moe_layer=True)
    split = (m.attention_layers / L) * (og_d - mlp) + (m.n_dense_mlp_layers / L) * mlp + (m.moe_layers / L) * (og_m - og_d + mlp)
    split += sum(share * mixer_output_grad_bytes_per_token(kind, h) for kind, share in mixer_kinds(m))
    replicated = (m.attention_layers / L) * og_dr + (m.moe_layers / L) * (og_mr - og_dr)
    return split, replicated


def activations(m: ModelSpec, s: Shape, rec: np.ndarray, pf: PipelineFactors, stages: StageCompute, r: Roles, P: CostParams) -> Activations:
    tokens, tp, frac_moe = s.tokens, s.tp, m.moe_layers / m.layers
    kept, kept_selective = kept_per_token(m, s, False, P), kept_per_token(m, s, True, P)
    if P.selective_keeps_dots:  # the engine's selective is MaxText's `minimal` (`CostParams.selective_keeps_dots`)
        minimal = MAXTEXT_POLICIES["minimal"]
        kept_selective = ((1 - frac_moe) * minimal.bytes_per_token(m, False, "device")
                          + frac_moe * minimal.bytes_per_token(m, True, "device")) / tp
    odd = odd_matmul_bytes_per_token(m, compiled=not P.eager_elementwise) if P.selective_keeps_odd_matmuls else None
    if odd is not None:  # TorchTitan's op-level SAC (`CostParams.selective_keeps_odd_matmuls`)
        # torchao's float8 / MXFP8 linears multiply subclasses with torch.mm, which SAC's mode sees and counts as
        # in bf16; the NVFP4 linear's GEMMs are not in the save set (`cost.remat.unsaved_matmul_bytes_per_token`)
        kept_selective = np.where(s.precision == PRECISIONS.index("fp4"), unsaved_matmul_bytes_per_token(m) / tp, odd / tp)
    # full recomputation keeps each layer's input: split over TP only with sequence parallelism
    kept_input = layer_input_bytes_per_token(m) / np.where(P.sequence_parallel, tp, 1.0)
    if P.remat_policy is not None:  # what the policy keeps in HBM: its device tensors (`cost.remat`); offloaded ones leave
        kept_input = ((1 - frac_moe) * P.remat_policy.bytes_per_token(m, False, "device")
                      + frac_moe * P.remat_policy.bytes_per_token(m, True, "device")) / tp
    stage_mb = tokens * np.select([rec == FULL, rec == SELECTIVE], [kept_input, kept_selective], kept)  # one micro-batch, one layer
    working = np.where(rec == FULL, tokens * kept, 0.0)  # one layer re-materialised during backward
    logits = tokens * logits_bytes_per_token(m, P.loss_peak_bytes_per_logit) / tp / P.vocab_tiles  # one tile alive (`CostParams.vocab_tiles`)
    head_logits = (1 + m.mtp_depth) * logits  # the MTP module's pass through the head keeps its own logits
    # the final norm's and the output projection's inputs: alive with the logits, until the head's
    # weight gradient (after the loss's backward has freed the logits)
    head_in = (1 + m.mtp_depth) * tokens * head_input_bytes_per_token(
        m, tp, sequence_parallel=P.sequence_parallel, gathered_gemm_inputs=P.tp_gathered_inputs)
    # Beside the loss in its backward (`head_logits`), the head's rank keeps what the loss keeps of the
    # logits, and the head's inputs, for every other micro-batch whose loss has run and whose backward
    # has not (`pipeline.losses_held`: all m - 1 under GPipe and looped BFS, none under 1F1B)
    kept_loss = (1 + m.mtp_depth) * tokens * P.loss_kept_bytes_per_logit * m.vocab / tp / P.vocab_tiles
    other_losses = np.maximum(pf.head_losses - 1.0, 0.0)
    held_heads = other_losses * (kept_loss + head_in)
    # The head and the MTP block belong to the last stage, on the last rank (a V-shaped schedule runs
    # it on the first), which holds the micro-batches in flight that the simulator counts there.
    # The recomputed layer's working set and the logits are never alive together: the backward
    # frees the logits and their gradient in the head before it reaches the last block, whose
    # forward torch.utils.checkpoint re-runs only then (measured: Llama 3 8B under full
    # recomputation peaks in the loss with 0.07 GiB of kept activations, benchmarks/RESULTS.md)
    # A split backward (zero-bubble schedules) keeps each waiting micro-batch's gradients at its GEMMs'
    # outputs for the weight pass (`pipeline.waiting_for_weights`); the output layer's is the logits'
    # gradient, bf16 as the logits are, beside the head's inputs that its weight gradient reads
    if m.is_hybrid:
        og, og_r = hybrid_output_grads_per_token(m)
        out_grads = tokens * (og / tp + og_r)
    else:
        og_d, og_dr = weight_output_grad_bytes_per_token(m, moe_layer=False)
        og_m, og_mr = weight_output_grad_bytes_per_token(m, moe_layer=True)
        out_grads = tokens * (((1 - frac_moe) * og_d + frac_moe * og_m) / tp + (1 - frac_moe) * og_dr + frac_moe * og_mr)
    head_waits = pf.head_waiting * ((1 + m.mtp_depth) * tokens * BF16 * m.vocab / tp + head_in)
    at_loss = np.maximum(working, head_logits + head_in)
    first_layers, head_layers, layers_rank = r.first.layers, stages.head_layers, stages.layers_rank
    # activations offloaded to the host (`CostParams.offloaded_layers`): (L - N) of L layers' are on the device at the peak
    on_device = max(m.layers - P.offloaded_layers, 0) / m.layers
    first_layers, head_layers, layers_rank = first_layers * on_device, head_layers * on_device, layers_rank * on_device
    first = (pf.inflight * first_layers * stage_mb + pf.waiting * first_layers * out_grads
             + np.where(stages.together, m.mtp_depth * stage_mb + head_waits + at_loss, working))
    last = (pf.head_inflight * (head_layers + m.mtp_depth) * stage_mb + pf.waiting * head_layers * out_grads + held_heads + head_waits
            + at_loss)
    inner = pf.inflight * layers_rank * stage_mb + pf.waiting * layers_rank * out_grads + working
    return Activations(stage_mb=stage_mb, working=working, head_logits=head_logits, head_in=head_in, kept_loss=kept_loss,
                       other_losses=other_losses, first=first, last=last, inner=inner)
