"""Expert parallelism: a dispatch and a combine all-to-all per MoE layer and pass, hidden behind the
layer's compute where a schedule pairs micro-batches (DualPipe(V), overlap on)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost import comm
from bandwise.cost.flops import BF16
from bandwise.cost.params import CostParams
from bandwise.cost.schedules import dualpipe_v_alone
from bandwise.cost.terms.placement import Groups
from bandwise.cost.terms.shape import Shape
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.schedules import PAIRED, SCHEDULES


@dataclass(frozen=True, slots=True)
class ExpertComm:
    """Per micro-batch and MoE layer: one dispatch or combine all-to-all (seconds)."""

    one: np.ndarray


def dispatch_buffers(m: ModelSpec, s: Shape) -> np.ndarray:
    """Bytes of one MoE layer's dispatched and combined tokens, held while the all-to-alls run (none
    without routed experts: `FfnKind.dispatch_copies`)."""
    return 2.0 * s.tokens / s.tp * m.ffn_kind.dispatch_copies * m.hidden * BF16


def expert_comm(m: ModelSpec, cluster: Cluster, s: Shape, groups: Groups, P: CostParams) -> ExpertComm:
    ffn = m.ffn_kind
    if not ffn.routed:
        return ExpertComm(one=np.zeros_like(s.tokens))
    # fp8 recipes dispatch the quantized activations and their gradients in 1 byte, and
    # combine in bf16 (DeepSeek-V3 report, Sec. 3.3.2): 1.5 bytes per element on average
    elem = np.where(s.fp8, 1.5, float(BF16))
    ep_bytes = s.tokens / s.tp * ffn.dispatch_copies * m.hidden * elem * P.expert_imbalance
    outer = min(1.0, m.groups_per_token / m.top_k) if m.groups_per_token else 1.0
    one = comm.all_to_all_time(cluster, ep_bytes, groups.ep, s.ep, outer_scale=outer) * (s.ep > 1)
    return ExpertComm(one=one)


@dataclass(frozen=True, slots=True)
class ExpertTerms:
    """Seconds per layer (averaged over all layers) and micro-batch of a row."""

    layer: np.ndarray
    """Every all-to-all of one MoE layer: dispatch and combine, forward and backward (+2 to recompute)."""
    exposed: np.ndarray
    hidden_share: np.ndarray
    """Share of the all-to-alls that run inside an overlapped (forward, backward) pair."""


_PAIRED = [SCHEDULES.index(name) for name in PAIRED]


def expert_terms(m: ModelSpec, ec: ExpertComm, moe_fwd: np.ndarray, full_recompute: np.ndarray, schedule: np.ndarray,
                 pp: np.ndarray, n_mb: np.ndarray, overlap: np.ndarray) -> ExpertTerms:
    frac_moe = m.moe_layers / m.layers
    layer = (4.0 + np.where(full_recompute, 2.0, 0.0)) * ec.one
    # A schedule that pairs micro-batches (`Schedule.pairs_microbatches`: DualPipe(V)) hides a
    # micro-batch's all-to-all only inside its overlapped (F, B) pairs; the warm-up forwards and
    # cool-down backwards run alone with theirs exposed: 3p-1 of each of the 2m chunk passes on rank 0
    # (`schedules.dualpipe_v_alone`; "Insights into DeepSeek-V3", ISCA 2025, Table 4 times these
    # phases apart from the overlapped 1F1B)
    alone = np.where(np.isin(schedule, _PAIRED) & (pp > 1), np.minimum(1.0, dualpipe_v_alone(pp) / (2.0 * n_mb)), 0.0)
    hidden_share = np.where(overlap, 1.0 - alone, 0.0)
    exposed = frac_moe * (hidden_share * np.maximum(0.0, layer - 3 * moe_fwd) + (1.0 - hidden_share) * layer)
    return ExpertTerms(layer=layer, exposed=exposed, hidden_share=hidden_share)
