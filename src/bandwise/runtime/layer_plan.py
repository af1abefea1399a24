"""Which layer of a `ModelSpec` the trainer builds as which kind, and which kinds it cannot build.

A ModelSpec gives its layer kinds as counts (`sliding_layers`, `chunked_layers`, `mamba_layers`,
`mlp_free_layers`, `mixer_free_layers`, `dense_layers`), which is all the cost model reads: its
figures are means over layers. A network needs positions. Each minority kind is spread evenly over
the layers that can hold it (layer i of n holds the k-th of m when i = floor((k + 1/2)·n/m)): one
in two for gpt-oss's alternating windows, Nemotron-H's four attention layers among its 28 mixers
as its `hybrid_override_pattern` spreads them, mixers and MLPs alternating. The counts, and so
every parameter and every byte the planner prices, are exact whatever the positions; what the
spread decides is which pipeline stage holds which layer. MoE layers stay where the trainer put
them before: the MLP-bearing layers from the `dense_layers`-th on.

What the trainer builds: full, sliding-window and chunked attention (`runtime.local_attention`),
MLA, Mamba-2 mixers (`runtime.mamba`), layers with a mixer alone or an MLP alone, dense and MoE
MLPs. `unsupported` names what it does not, for the one-line refusal of `bandwise train`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bandwise.specs.kinds import GatedDeltaNet, Mamba1
from bandwise.specs.model import ModelSpec

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
    """The kind of every layer, in order (see the module docstring for the placement)."""
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
    for i in range(n):
        if has_mlp[i]:
            mlp = "moe" if m.is_moe and mlp_index >= m.dense_layers else "dense"
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


def unsupported(m: ModelSpec) -> str | None:
    """One line naming a kind of `m` the trainer does not build and what to do, or None."""
    name = m.name
    if isinstance(m.mamba, Mamba1):
        return (f"model {name}: the trainer does not build Mamba-1 mixers ({m.mamba_layers} layers); plan it with "
                "`bandwise plan`, or train a Mamba-2 hybrid (e.g. nemotron-h-8b)")
    if isinstance(m.linear_attention, GatedDeltaNet):
        return (f"model {name}: the trainer does not build Gated DeltaNet mixers ({m.linear_attention_layers} layers); "
                "plan it with `bandwise plan`, or train a Mamba-2 hybrid (e.g. nemotron-h-8b)")
    if m.attention_output_gate:
        return f"model {name}: the trainer does not build gated attention (attention_output_gate); plan it with `bandwise plan`"
    if m.mamba is not None and m.is_mla:
        return f"model {name}: the trainer does not build Mamba-2 beside latent attention (MLA); plan it with `bandwise plan`"
    return None
