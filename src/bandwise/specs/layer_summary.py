"""A model's layers counted by kind, what `bandwise models --show` prints (issue 37, point 3).

A ModelSpec prices each kind as a share of its layers (sliding windows, chunked attention, Mamba and
linear-attention mixers, MoE and dense feed-forwards): these are those counts, named as a reader
of the model's paper would name them.
"""

from __future__ import annotations

from dataclasses import dataclass

from bandwise.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class LayerCounts:
    """Layers by the kind of their sequence mixer and of their feed-forward; kinds with no layer left out."""

    mixers: dict[str, int]
    feed_forward: dict[str, int]

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {"mixers": dict(self.mixers), "feed_forward": dict(self.feed_forward)}

    def lines(self) -> tuple[str, str]:
        def text(counts: dict[str, int]) -> str:
            return ", ".join(f"{n} {kind}" for kind, n in counts.items())

        return text(self.mixers), text(self.feed_forward)


def attention_name(m: ModelSpec) -> str:
    if m.is_mla:
        return "MLA"
    if m.n_kv_heads == m.heads:
        return "multi-head attention"
    return "multi-query attention" if m.n_kv_heads == 1 else f"grouped-query attention ({m.n_kv_heads} KV heads)"


def layer_counts(m: ModelSpec) -> LayerCounts:
    attending = m.attention_layers
    windowed = (m.sliding_layers or attending) if m.sliding_window else 0
    chunked = (m.chunked_layers or attending) if m.attention_chunk else 0
    name = attention_name(m)
    mixers = {
        f"{name}, full": attending - windowed - chunked,
        f"{name}, sliding window {m.sliding_window:,}": windowed,
        f"{name}, chunks of {m.attention_chunk:,}": chunked,
        type(m.mamba).__name__.replace("Mamba", "Mamba-") if m.mamba is not None else "Mamba": m.mamba_layers,
        "Gated DeltaNet": m.linear_attention_layers,
        "no mixer": m.mixer_free_layers,
    }
    shared = f", {m.shared_experts} shared" if m.shared_experts else ""
    ffn = {
        f"MoE ({m.experts} experts, top-{m.top_k}{shared})": m.moe_layers,
        "dense MLP": m.n_dense_mlp_layers,
        "no feed-forward": m.mlp_free_layers,
    }
    return LayerCounts(mixers={k: v for k, v in mixers.items() if v}, feed_forward={k: v for k, v in ffn.items() if v})
