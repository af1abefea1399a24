"""Which layer of a `ModelSpec` is which kind, in order: one placement that the trainer builds and
the planner's pipeline balance prices (`cost.terms.stages`).

A ModelSpec gives its layer kinds as counts (`sliding_layers`, `chunked_layers`, `mamba_layers`,
`mlp_free_layers`, `mixer_free_layers`, `dense_layers`); its costs are means over layers. A network,
and a pipeline stage, needs positions. Each minority kind is spread evenly over the layers that can
hold it (layer i of n holds the k-th of m when i = floor((k + 1/2)·n/m)): one in two for gpt-oss's
alternating windows, Nemotron-H's four attention layers among its 28 mixers as its
`hybrid_override_pattern` spreads them, mixers and MLPs alternating. MoE layers are the MLP-bearing
layers from the `dense_layers`-th on (DeepSeek's `first_k_dense_replace`). The counts, and so every
parameter and byte, are exact whatever the positions; the positions decide which stage holds which
layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from bandwise.specs.ffn import DenseMLP
from bandwise.specs.model import ModelSpec, causal_chunk_pairs, causal_window_pairs

MIXERS = ("attention", "mamba2", "none")


@dataclass(frozen=True, slots=True)
class LayerKind:
    """One block of the trainer's network."""

    mixer: str
    """attention, mamba2 or none (an MLP alone)."""
    mlp: str
    """dense, moe or none (a mixer alone)."""
    window: int = 0
    """Keys a query sees in a sliding-window attention layer (0: no window)."""
    chunk: int = 0
    """Chunk length of a chunked attention layer (0: not chunked)."""


def spread(n: int, m: int) -> list[bool]:
    """m of n positions marked, evenly: position floor((k + 1/2)·n/m) for k = 0..m-1."""
    marked = [False] * n
    for k in range(m):
        marked[(2 * k + 1) * n // (2 * m)] = True
    return marked


def _take(flags: list[bool], chosen: list[bool]) -> list[bool]:
    """Of the positions where `flags` holds, mark those `chosen` marks (in order); the rest False."""
    it = iter(chosen)
    return [next(it) if f else False for f in flags]


def layer_kinds(m: ModelSpec) -> list[LayerKind]:
    """The kind of every layer, in order (see the module docstring for the placement); where the
    model states its `blocks`, theirs (a linear map in attention's or the MLP's place is named as
    that part absent: its FLOPs are `layer_flops`'s)."""
    if m.blocks:
        return [LayerKind(mixer="attention" if b.mixer == "attention" else "none", mlp="dense" if b.mlp == "mlp" else "none")
                for b in m.blocks]
    n = m.layers
    has_mixer = [not f for f in spread(n, m.mixer_free_layers)]
    mixers = n - m.mixer_free_layers
    both = n - m.mixer_free_layers - m.mlp_free_layers  # layers with a mixer and an MLP
    mixer_has_mlp = spread(mixers, both)
    has_mlp = [True] * n
    it = iter(mixer_has_mlp)
    for i in range(n):
        if has_mixer[i]:
            has_mlp[i] = next(it)
    attends = _take(has_mixer, spread(mixers, m.attention_layers))
    attending = [i for i in range(n) if attends[i]]
    local = spread(len(attending), m.windowed_layers + m.chunked_count)
    local_ids = [i for i, f in zip(attending, local) if f]
    windowed = {local_ids[i] for i, f in enumerate(spread(len(local_ids), m.windowed_layers)) if f}
    kinds: list[LayerKind] = []
    mlp_index = 0
    routed = spread(m.mlp_layers, m.moe_layers) if m.interleaved_dense else [i >= m.dense_layers for i in range(m.mlp_layers)]
    for i in range(n):
        if has_mlp[i]:
            mlp = "moe" if m.is_moe and routed[mlp_index] else "dense"
            mlp_index += 1
        else:
            mlp = "none"
        if not has_mixer[i]:
            kinds.append(LayerKind(mixer="none", mlp=mlp))
        elif not attends[i]:
            kinds.append(LayerKind(mixer="mamba2", mlp=mlp))
        elif i in windowed:
            kinds.append(LayerKind(mixer="attention", mlp=mlp, window=m.sliding_window))
        elif i in local_ids:
            kinds.append(LayerKind(mixer="attention", mlp=mlp, chunk=m.attention_chunk))
        else:
            kinds.append(LayerKind(mixer="attention", mlp=mlp))
    return kinds


def layer_flops(m: ModelSpec) -> np.ndarray:
    """Forward FLOPs per token of each layer, in order: its weights' GEMMs (2 per multiply-add), its
    attention core over the (query, key) pairs its window or chunk leaves (PaLM Appendix B's 4·H·Q·T,
    causal pairs over the model's sequence), its mixer's scan (`scan_flops_per_token`). A stage's
    compute is priced as the sum of its layers' shares of these (`stage_weights`)."""
    s = m.seq_len
    att = m.attention_kind
    full_pairs = causal_window_pairs(s, 0)
    core_per_key = 2.0 * m.heads * (m.d_head + m.d_value)  # QK^T and PV, per (query, key) pair

    def keys(kind: LayerKind) -> float:
        if kind.window:
            return causal_window_pairs(s, kind.window) / s
        if kind.chunk:
            return causal_chunk_pairs(s, kind.chunk) / s
        return full_pairs / s

    # a layer that mixes without attention holds the model's one other mixer kind (Mamba-1 or -2, or
    # Gated DeltaNet; `layer_kinds` names it "mamba2", the kind the trainer builds)
    other = m.mamba if m.mamba is not None else m.linear_attention
    mixers = {"attention": 2.0 * att.params, "mamba2": 2.0 * other.params(m.hidden) if other is not None else 0.0, "none": 0.0}
    scan = other.scan_flops_per_token(s) if other is not None else 0.0
    mlps = {"dense": 2.0 * m.dense_mlp.params, "none": 0.0}
    if m.experts:
        moe = m.ffn_kind
        mlps["moe"] = 2.0 * (moe.non_routed_params + moe.active_routed_params)
    if m.blocks:  # each layer its own widths: GQA of its KV heads, a linear map, an MLP of its width
        linear = 2.0 * m.hidden * m.hidden
        return np.asarray([
            (2.0 * m.block_attention(b.kv_heads).params + core_per_key * keys(LayerKind("attention", "dense")) if b.mixer == "attention"
             else linear if b.mixer == "linear" else 0.0)
            + (2.0 * DenseMLP(hidden=m.hidden, ffn=b.ffn, gated=m.gated_mlp).params if b.mlp == "mlp" else linear if b.mlp == "linear" else 0.0)
            for b in m.blocks], dtype=float)
    out = []
    for kind in layer_kinds(m):
        f = mixers[kind.mixer] + mlps[kind.mlp]
        if kind.mixer == "attention":
            f += core_per_key * keys(kind)
        elif kind.mixer == "mamba2":
            f += scan
        out.append(f)
    return np.asarray(out, dtype=float)


@lru_cache(maxsize=64)
def _normalized_flops(m: ModelSpec) -> np.ndarray | None:
    """`layer_flops` over the mean layer's; None where every layer is alike (read-only, cached:
    the search prices each chunk of its rows with the same model)."""
    w = layer_flops(m)
    if not w.size or np.ptp(w) == 0.0:
        return None
    w = w / w.mean()
    w.setflags(write=False)
    return w


def layers_alike(m: ModelSpec) -> bool:
    """Whether every layer of `m` computes alike, so that any cut of its layers weighs each rank by its layer count."""
    return _normalized_flops(m) is None


@lru_cache(maxsize=4096)
def stage_weights(m: ModelSpec, pp: int, v: int, v_shaped: bool) -> tuple[float, float]:
    """(heaviest rank's compute over its share by layer count, the output head's rank's likewise)
    when the layers are cut into pp·v stages as evenly as they go, earlier stages taking the
    remainder (`cost.terms.stages`), a rank holding stages r, r + pp, ... (looped schedules) or r and
    2pp - 1 - r (V-shaped ones). Each layer weighs its `layer_flops` over the mean layer's: 1.0 and
    1.0 where every layer is alike, as the cost model's mean layer prices it."""
    w = _normalized_flops(m)
    if pp <= 1 or w is None:
        return 1.0, 1.0
    n, L = pp * v, m.layers
    base, extra = divmod(L, n)
    bounds = np.concatenate([[0], np.cumsum([base + (j < extra) for j in range(n)])])
    sw = np.add.reduceat(np.append(w, 0.0), bounds[:-1])[:n] if L else np.zeros(n)
    sw = np.where(np.diff(bounds) > 0, sw, 0.0)  # reduceat of an empty stage reads the next layer
    sc = np.diff(bounds).astype(float)
    ranks = [[r, n - 1 - r] if v_shaped else list(range(r, n, pp)) for r in range(pp)]
    weight, count = [sw[s].sum() for s in ranks], [sc[s].sum() for s in ranks]
    head = 0 if v_shaped else pp - 1
    heavy = max(weight) / max(max(count), 1.0)
    return float(heavy) if heavy > 1.0 else 1.0, float(weight[head] / count[head]) if count[head] else 1.0


def layer_params(m: ModelSpec) -> np.ndarray | None:
    """Weights of each layer, in order, where the model states its `blocks` (each its own KV heads,
    MLP width or linear maps); None otherwise, where the placement prices the mean layer."""
    if not m.blocks:
        return None
    linear = m.hidden * m.hidden
    return np.asarray([
        (m.block_attention(b.kv_heads).params if b.mixer == "attention" else linear if b.mixer == "linear" else 0)
        + (DenseMLP(hidden=m.hidden, ffn=b.ffn, gated=m.gated_mlp).params if b.mlp == "mlp" else linear if b.mlp == "linear" else 0)
        for b in m.blocks], dtype=float)


@lru_cache(maxsize=4096)
def stage_param_weights(m: ModelSpec, pp: int, v: int, v_shaped: bool) -> tuple[float, float, float]:
    """(the first rank's, the output head's rank's, the heaviest rank's) layer weights over the mean
    layer's times their layer counts, cut as `stage_weights` cuts them; 1.0 each where the model
    prices its mean layer (`layer_params` None) or runs one stage."""
    w = layer_params(m)
    if pp <= 1 or w is None or not w.mean():
        return 1.0, 1.0, 1.0
    w = w / w.mean()
    n, L = pp * v, m.layers
    base, extra = divmod(L, n)
    bounds = np.concatenate([[0], np.cumsum([base + (j < extra) for j in range(n)])])
    sw = np.add.reduceat(np.append(w, 0.0), bounds[:-1])[:n]
    sw = np.where(np.diff(bounds) > 0, sw, 0.0)
    sc = np.diff(bounds).astype(float)
    ranks = [[r, n - 1 - r] if v_shaped else list(range(r, n, pp)) for r in range(pp)]
    weight, count = [sw[s].sum() for s in ranks], [sc[s].sum() for s in ranks]
    share = [wt / c if c else 1.0 for wt, c in zip(weight, count)]
    head = 0 if v_shaped else pp - 1
    return float(share[0]), float(share[head]), float(max(weight) / max(max(count), 1.0))
