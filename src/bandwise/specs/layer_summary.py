"""A model's layers counted by kind, what `bandwise models --show` prints (issue 37, point 3).

A ModelSpec prices each kind as a share of its layers (sliding windows, chunked attention, Mamba and
linear-attention mixers, MoE and dense feed-forwards): these are those counts, named as a reader
of the model's paper would name them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bandwise.specs.layer_order import LayerKind, layer_kinds
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
    """The kinds of `specs.layer_order.layer_kinds`, counted: the placement the trainer builds and the
    pipeline balance prices, named."""
    attention = attention_name(m)
    other = m.mamba if m.mamba is not None else m.linear_attention  # the one mixer kind beside attention
    other_name = {"Mamba1": "Mamba-1", "Mamba2": "Mamba-2", "GatedDeltaNet": "Gated DeltaNet"}.get(type(other).__name__, "")
    shared = f", {m.shared_experts} shared" if m.shared_experts else ""

    def mixer(k: LayerKind) -> str:
        if k.mixer == "none":
            return "no mixer"
        if k.mixer != "attention":
            return other_name
        return (f"{attention}, sliding window {k.window:,}" if k.window else f"{attention}, chunks of {k.chunk:,}" if k.chunk
                else f"{attention}, full")

    ffn = {"moe": f"MoE ({m.experts} experts, top-{m.top_k}{shared})", "dense": "dense MLP", "none": "no feed-forward"}
    kinds = layer_kinds(m)
    order = [f"{attention}, full", *sorted({mixer(k) for k in kinds} - {f"{attention}, full", other_name, "no mixer"}), other_name,
             "no mixer"]
    mixers, feed_forward = Counter(mixer(k) for k in kinds), Counter(ffn[k.mlp] for k in kinds)
    return LayerCounts(mixers={name: mixers[name] for name in order if mixers[name]},
                       feed_forward={name: feed_forward[name] for name in ffn.values() if feed_forward[name]})
