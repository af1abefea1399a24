"""Context parallelism: the ring passes K and V forward and K, V, dK, dV backward, one chunk per
hop, hidden behind the attention core (Liu et al. 2023, "Ring Attention"; Megatron-Core's CP); or,
where the engine gathers instead (`CostParams.cp_all_gather`, Llama 3), one all-gather of K and V
before attention and one reduce-scatter of their gradients after it, both exposed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost import comm
from bandwise.cost.flops import BF16
from bandwise.cost.params import CostParams
from bandwise.cost.terms.compute import LayerCompute
from bandwise.cost.terms.placement import Groups
from bandwise.cost.terms.shape import Shape
from bandwise.specs.hardware import Cluster
from bandwise.specs.kinds import Mamba2
from bandwise.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class ContextComm:
    """Seconds per layer and micro-batch: the ring's whole time and what attention leaves exposed."""

    layer: np.ndarray
    exposed: np.ndarray


def context_comm(m: ModelSpec, cluster: Cluster, s: Shape, groups: Groups, layer: LayerCompute, P: CostParams) -> ContextComm:
    # K and V of the heads the core reads (MLA's up-projected per query head), split over TP by those heads
    kv_heads = m.attention_kind.key_value_heads
    kv_chunk = s.tokens * (kv_heads * (m.d_head + m.d_value)) * BF16 / np.minimum(s.tp, kv_heads)
    # Sliding windows are not applied to the ring: with a window shorter than the sequence a rank
    # needs only the chunks within w tokens before its own, so the full ring overstates the traffic
    # of windowed layers (and their shorter attention hides less of it); kept whole as an
    # approximation. Chunked layers likewise: a rank needs only the chunks of its own attention
    # chunk, none at all when the attention chunk fits inside its share of the sequence.
    if P.cp_all_gather:
        # forward: every rank gathers all cp chunks; backward: the full-sequence dK, dV it computed are
        # reduce-scattered back to their owners (the same bytes). The minimum such a scheme moves: a
        # backward that gathers K and V again, or a full recomputation's second forward, adds one more.
        gather = 2.0 * comm.all_gather_time(cluster, kv_chunk * s.cp, groups.cp, s.cp)
        if m.is_hybrid:
            gather = gather * (m.attention_layers / m.layers)
        return ContextComm(layer=gather, exposed=gather)
    ring = 3.0 * (s.cp - 1) * comm.ring_p2p_time(cluster, kv_chunk, groups.cp, s.cp)
    if not m.is_hybrid:
        return ContextComm(layer=ring, exposed=np.maximum(0.0, ring - (layer.attn + layer.attn_bwd)))
    ring = ring * (m.attention_layers / m.layers)
    a2a = mixer_all_to_alls(m, cluster, s, groups)
    # the mixers' all-to-alls sit between their projections and their scans, with nothing to hide behind
    return ContextComm(layer=ring + a2a, exposed=np.maximum(0.0, ring - (layer.attn + layer.attn_bwd)) + a2a)


def mixer_all_to_alls(m: ModelSpec, cluster: Cluster, s: Shape, groups: Groups) -> np.ndarray:
    """Seconds per mean layer of a hybrid under CP in its mixer layers' all-to-alls: on
    each Mamba-2 layer Megatron-Core's all-to-alls (`MambaContextParallel`, megatron-core 0.16.1
    `ssm/mamba_context_parallel.py`): forward, the convolution's input (x, B, C) to a head split and
    the scan's output y back; backward, their gradients. Each Gated DeltaNet layer likewise: forward the
    in-projection's output (q, k, v, z, beta, alpha) to a head split before the convolution and the gated
    norm's output back (Megatron-LM d98e8a6, `megatron/core/ssm/gated_delta_net/common.py`: `a2a_cp_to_hp`,
    `a2a_hp_to_cp`); backward, their gradients."""
    L = m.layers
    mean = np.zeros_like(np.asarray(s.tokens, dtype=float))
    if isinstance(m.mamba, Mamba2) and m.mamba_layers:  # Mamba-1 has no CP (`specs.strategy`)
        width = m.mamba.conv_channels + m.mamba.inner
        a2a = comm.all_to_all_time(cluster, s.tokens * width * BF16 / s.tp, groups.cp, s.cp)
        mean = mean + (m.mamba_layers / L) * 2.0 * np.where(s.cp > 1, a2a, 0.0)
    if m.linear_attention and m.linear_attention_layers:
        width = m.linear_attention.in_proj_width + m.linear_attention.out_width
        a2a = comm.all_to_all_time(cluster, s.tokens * width * BF16 / s.tp, groups.cp, s.cp)
        mean = mean + (m.linear_attention_layers / L) * 2.0 * np.where(s.cp > 1, a2a, 0.0)
    return mean
