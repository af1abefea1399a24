"""Context parallelism: the ring passes K and V forward and K, V, dK, dV backward, one chunk per
hop, hidden behind the attention core (Liu et al. 2023, "Ring Attention"; Megatron-Core's CP)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost import comm
from bandwise.cost.flops import BF16
from bandwise.cost.terms.compute import LayerCompute
from bandwise.cost.terms.placement import Groups
from bandwise.cost.terms.shape import Shape
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class ContextComm:
    """Seconds per layer and micro-batch: the ring's whole time and what attention leaves exposed."""

    layer: np.ndarray
    exposed: np.ndarray


def context_comm(m: ModelSpec, cluster: Cluster, s: Shape, groups: Groups, layer: LayerCompute) -> ContextComm:
    kv_width = (m.heads * (m.d_head + m.d_value)) if m.is_mla else m.n_kv_heads * (m.d_head + m.d_value)
    kv_chunk = s.tokens * kv_width * BF16 / np.minimum(s.tp, m.heads if m.is_mla else m.n_kv_heads)
    # Sliding windows are not applied to the ring: with a window shorter than the sequence a rank
    # needs only the chunks within w tokens before its own, so the full ring overstates the traffic
    # of windowed layers (and their shorter attention hides less of it); kept whole as an
    # approximation.
    ring = 3.0 * (s.cp - 1) * comm.ring_p2p_time(cluster, kv_chunk, groups.cp, s.cp)
    return ContextComm(layer=ring, exposed=np.maximum(0.0, ring - (layer.attn + layer.attn_bwd)))
