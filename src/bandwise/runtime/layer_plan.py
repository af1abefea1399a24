"""Which kinds of a `ModelSpec` the trainer cannot build, for the one-line refusal of `bandwise train`;
which layer is which kind is `specs.layer_order`'s, the same placement the planner's pipeline
balance prices.

What the trainer builds: full, sliding-window and chunked attention (`runtime.local_attention`),
MLA, Mamba-2 mixers (`runtime.mamba`), layers with a mixer alone or an MLP alone, dense and MoE
MLPs.
"""

from __future__ import annotations

from bandwise.specs.kinds import GatedDeltaNet, Mamba1
from bandwise.specs.model import ModelSpec


def unsupported(m: ModelSpec) -> str | None:
    """One line naming a kind of `m` the trainer does not build and what to do, or None."""
    name = m.name
    if isinstance(m.mamba, Mamba1):
        return (f"model {name}: the trainer does not build Mamba-1 mixers ({m.mamba_layers} layers); plan it with "
                "`bandwise plan`, or train a Mamba-2 hybrid (e.g. nemotron-h-8b)")
    if isinstance(m.linear_attention, GatedDeltaNet):
        return (f"model {name}: the trainer does not build Gated DeltaNet mixers ({m.linear_attention_layers} layers); "
                "plan it with `bandwise plan`, or train a Mamba-2 hybrid (e.g. nemotron-h-8b)")
    if m.blocks:
        return (f"model {name}: the trainer builds one width for every layer, not per-layer blocks (block_configs); "
                "plan it with `bandwise plan`")
    if m.attention_output_gate:
        return f"model {name}: the trainer does not build gated attention (attention_output_gate); plan it with `bandwise plan`"
    if m.mamba is not None and m.is_mla:
        return f"model {name}: the trainer does not build Mamba-2 beside latent attention (MLA); plan it with `bandwise plan`"
    return None
