"""ModelSpec: the shape of a decoder-only transformer, dense or mixture-of-experts, and of
hybrids whose layers mix attention with Mamba-1, Mamba-2 or linear-attention mixers (`specs.kinds`).

Covers Llama-style dense models (GQA, SwiGLU), GPT-style (MHA, GELU), DeepSeek-style MoE
(fine-grained routed experts + shared experts, leading dense layers, MLA attention) and
Mixtral/Qwen-MoE. Parameter counts follow the layer shapes directly, so a reader can check them
against a model card (e.g. Llama 3 8B = 8.03e9, DeepSeek-V3 = 671e9 without the MTP module).
"""

from __future__ import annotations

import reprlib
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.specs.attention import (
    AttentionKind,
    GroupedQueryAttention,
    LatentAttention,
)
from bandwise.specs.ffn import DenseMLP, FfnKind, MixtureOfExperts
from bandwise.specs.kinds import Block, GatedDeltaNet, Mamba1, Mamba2

MAX_DIMENSION = 2**31 - 1
"""The largest value any integer field may take: orders of magnitude past every real model (the
largest vocabularies hold ~10^6 tokens, the longest training sequences ~10^7), and small enough
that parameter and FLOP counts stay finite floats."""


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxlong = 3, 4, 4, 4, 60, 40


def brief(value: Any, width: int = 60) -> str:
    """repr(value) cut to `width` characters, for a one-line error that names a user's value.

    reprlib reads only the first items of the first levels, so a value that YAML aliases expand
    to billions of items costs no more than a small one."""
    try:
        return clip(_SHORT.repr(value), width)
    except ValueError:  # an int with more digits than Python converts
        return f"<{type(value).__name__} too long to print>"


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, ending in '...' when cut."""
    return text if len(text) <= width else text[: width - 3] + "..."


def causal_window_pairs(seq_len: int, window: int) -> int:
    """(query, key) pairs a causal sliding-window layer scores over a sequence of s tokens.

    The query at position p (0-based) attends to keys max(0, p - w + 1) .. p, so min(p + 1, w) of
    them (Longformer, Beltagy et al. 2020, Sec. 3.1, causal as in Mistral 7B, Jiang et al. 2023,
    Sec. 2: "each token can attend to at most W tokens from the previous layer"). Summed over
    p = 0 .. s - 1: for s <= w every query sees its whole prefix, s(s + 1)/2 pairs; for s >= w the
    first w queries give 1 + 2 + ... + w = w(w + 1)/2 and the other s - w give w each, so
    s·w - w(w - 1)/2 pairs, a mean of w - w(w - 1)/(2s) keys per query. w = 0 means no window.
    """
    s, w = seq_len, window
    if not w or s <= w:
        return s * (s + 1) // 2
    return s * w - w * (w - 1) // 2


def causal_chunk_pairs(seq_len: int, chunk: int) -> int:
    """(query, key) pairs a chunked-attention layer scores over a sequence of s tokens.

    The sequence is cut into chunks of c tokens and a query attends causally within its own chunk
    only (Llama 4's local layers: transformers `create_chunked_causal_mask`, key j visible to query
    i when j <= i and i // c == j // c; Meta's `attention_chunk_size` 8192). Each full chunk scores
    c(c + 1)/2 pairs, and the last, r = s mod c tokens long, r(r + 1)/2: in all
    (s // c)·c(c + 1)/2 + r(r + 1)/2, against a window's s·c - c(c - 1)/2. c = 0 means no chunking.
    """
    s, c = seq_len, chunk
    if not c or s <= c:
        return s * (s + 1) // 2
    r = s % c
    return (s // c) * c * (c + 1) // 2 + r * (r + 1) // 2


def window_share(seq_len: int, window: int) -> float:
    """A causal window-w layer's (query, key) pairs over full causal attention's, s(s + 1)/2:
    the factor by which its attention core FLOPs fall (`causal_window_pairs`). 1.0 for s <= w."""
    return causal_window_pairs(seq_len, window) / causal_window_pairs(seq_len, 0)


@dataclass(kw_only=True, slots=True, frozen=True)
class ModelSpec:
    name: str
    """Preset or config name, for reports."""
    layers: int
    """Number of transformer blocks."""
    hidden: int
    """Model (residual stream) width h."""
    ffn: int
    """Intermediate size of a dense MLP (also of the leading dense layers of an MoE)."""
    heads: int
    """Query heads H."""
    kv_heads: int = 0
    """Key/value heads (GQA); 0 means = heads (MHA)."""
    head_dim: int = 0
    """Per-head width; 0 means hidden // heads."""
    vocab: int
    """Vocabulary size V."""
    seq_len: int = 4096
    """Training sequence length s."""
    gated_mlp: bool = True
    """SwiGLU/GeGLU (three matrices) rather than GELU/ReLU (two)."""
    tied_embeddings: bool = False
    """Output projection shares the input embedding matrix."""
    dropout: bool = False
    """Trained with dropout after attention and after the MLP (and on the attention probabilities):
    GPT-2/GPT-3 style models under Megatron-LM's defaults (--hidden-dropout 0.1, --attention-dropout
    0.1). Each dropout keeps a 1-byte mask for its backward (Korthikanti et al. 2022, Sec. 4.1);
    Llama-style models train without."""
    alibi: bool = False
    """Positions as ALiBi's additive bias on the attention scores (Press et al. 2022; BLOOM) rather
    than rotary or learned embeddings: no parameters, but a kernel that materializes the scores
    writes and reads the bias (`cost.terms.compute.ALIBI_BIAS_BYTES`)."""
    # --- mixture of experts (experts == 0 means dense) ---
    experts: int = 0
    """Routed experts per MoE layer E."""
    top_k: int = 0
    """Routed experts chosen per token."""
    expert_ffn: int = 0
    """Intermediate size of one routed expert."""
    shared_experts: int = 0
    """Always-active shared experts per MoE layer (DeepSeekMoE)."""
    shared_expert_ffn: int = 0
    """Intermediate size of one shared expert; 0 means = expert_ffn."""
    dense_layers: int = 0
    """Layers that use the dense MLP instead of MoE: DeepSeek-V3's 3 and Kimi K2's 1 leading ones, or
    Llama 4 Maverick's 24 interleaved with 24 MoE layers (`interleave_moe_layer_step` 2, with
    `interleaved_dense`). A layer's figures are a mean over layers; where the dense layers sit
    decides which pipeline stage holds them (`specs.layer_order`, `cost.terms.stages`)."""
    interleaved_dense: bool = False
    """The `dense_layers` alternate with the MoE layers, spread evenly (Llama 4 Maverick's
    `interleave_moe_layer_step`, Jamba's `expert_layer_period`), instead of leading them
    (DeepSeek's `first_k_dense_replace`)."""
    expert_groups: int = 0
    """Group-limited routing (DeepSeek-V2 Sec. 2.2.2, V3 Sec. 3.2.2): experts split into this many
    groups, placed on separate nodes under expert parallelism; 0 = no grouping."""
    groups_per_token: int = 0
    """Groups (so nodes) a token's experts may come from; its dispatch crosses at most this many."""
    # --- multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank == 0 means standard attention ---
    q_lora_rank: int = 0
    """Rank of the query down-projection (0: queries projected directly from h)."""
    kv_lora_rank: int = 0
    """Rank of the joint key/value compression c_KV."""
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # --- multi-token prediction (DeepSeek-V3 Sec. 2.2) ---
    mtp_depth: int = 0
    """Multi-token-prediction modules trained beside the model. Each predicts one token further: it
    projects [norm(h); norm(embedding of the next token)] from 2h to h, runs one transformer block
    (an MoE block in an MoE model) and a second pass through the shared output head and loss."""
    # --- sliding-window attention (sliding_window == 0 means every layer attends to the whole sequence) ---
    sliding_window: int = 0
    """Keys a query attends to in a windowed layer: itself and the w - 1 tokens before it (Beltagy
    et al. 2020, "Longformer", Sec. 3.1; Jiang et al. 2023, "Mistral 7B", Sec. 2 "Sliding Window
    Attention", W = 4096). Hugging Face config key `sliding_window`."""
    sliding_layers: int = 0
    """How many layers are windowed, the rest attending to the whole sequence; 0 with a window set
    means every layer (Mistral 7B v0.1). An interleave (gpt-oss: every other layer, Hugging Face
    `layer_types`) is priced by its count: the cost is a mean over layers, so which layers are
    windowed does not change it."""
    # --- chunked attention (attention_chunk == 0 means no layer is chunked) ---
    attention_chunk: int = 0
    """Chunk length c of chunked attention: a query attends causally to the keys of its own
    c-token chunk only (Meta 2025, Llama 4 model card and transformers' `Llama4TextConfig.
    attention_chunk_size`, 8192; the local layers of Llama 4's interleaved attention)."""
    chunked_layers: int = 0
    """How many attention layers are chunked; 0 with a chunk set means every attention layer. Llama 4
    chunks the layers that use RoPE and leaves every `no_rope_layer_interval`-th (4th) layer, which
    uses no position encoding, global: 36 of 48. Priced by count, as `sliding_layers`."""
    # --- parameters outside the GEMMs above (0 in the presets, which count weight matrices only) ---
    position_embeddings: int = 0
    """Rows of a learned absolute position-embedding table, each of width h (GPT-2's `wpe`,
    `n_positions` rows; Radford et al. 2019). A lookup like the token embedding: parameters and
    memory, no FLOPs. 0 = rotary or no position embedding."""
    vector_params: int = 0
    """Parameters of the whole model that no weight-matrix term counts: norm scales and shifts,
    biases, attention sinks, one-output gates (Qwen2-MoE's shared-expert gate). Counted in
    `total_params` so a checkpoint's count is matched exactly; left out of FLOPs (a norm or a bias
    is O(h) per token, not O(h^2)) and of memory placement (under 0.2% of every model read)."""
    # --- layer kinds besides attention + MLP (all 0 / None: every layer is attention + MLP) ---
    mamba: Mamba1 | Mamba2 | None = None
    """The Mamba-1 (Jamba) or Mamba-2 (Nemotron-H) mixer of the `mamba_layers` layers that have one
    instead of attention."""
    mamba_layers: int = 0
    linear_attention: GatedDeltaNet | None = None
    """The Gated DeltaNet mixer of the `linear_attention_layers` layers that have one instead of attention."""
    linear_attention_layers: int = 0
    mlp_free_layers: int = 0
    """Layers that are a mixer alone, without an MLP (Nemotron-H's "M" and "*" blocks)."""
    mixer_free_layers: int = 0
    """Layers that are an MLP alone, without attention or a mixer (Nemotron-H's "-" blocks). The rest
    of the layers attend: layers - mamba_layers - linear_attention_layers - mixer_free_layers. Which
    layers are which does not change the cost: it is a mean over layers, weighted by these counts."""
    blocks: tuple[Block, ...] = ()
    """Each layer's own attention and MLP, in order, where layers differ in width (Nemotron-NAS's
    `block_configs`, `specs.kinds.Block`); empty: every layer as the fields above. Where given, its
    counts must agree with `mixer_free_layers` (layers whose mixer is not attention: a linear map or
    none) and `mlp_free_layers` (layers whose MLP is a linear map or none); parameters and FLOPs sum
    the layers' own widths, `ffn` and `kv_heads` stand for the mean layer in the per-GEMM time terms,
    and pipeline stages weigh each layer by its own FLOPs (`specs.layer_order.layer_flops`)."""
    attention_output_gate: bool = False
    """Attention output scaled by sigmoid(x·W_g), W_g projected beside the queries (Qiu et al. 2025,
    "Gated Attention for Large Language Models"; Qwen3-Next's q_proj is 2·H·d wide)."""
    squared_relu_mlp: bool = False
    """Informational: the MLP is up -> ReLU^2 -> down (Nemotron-H); priced as a non-gated MLP."""
    source: str = ""
    """Where the numbers come from."""

    def __post_init__(self) -> None:
        positive = ("layers", "hidden", "ffn", "heads", "vocab", "seq_len")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _KINDS:
                if value is not None and not isinstance(value, _KINDS[f.name]):
                    kinds = " or ".join(k.__name__ for k in _KINDS[f.name])
                    raise BandwiseError(f"model {brief(self.name)}: {f.name}={brief(value)} must be a {kinds} or none")
            elif f.type == "int":
                least = 1 if f.name in positive else 0
                if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= MAX_DIMENSION:
                    raise BandwiseError(f"model {brief(self.name)}: {f.name}={brief(value)} must be an integer from {least} to {MAX_DIMENSION:,}")
            elif f.name == "blocks":
                if not isinstance(value, tuple) or not all(isinstance(b, Block) for b in value):
                    raise BandwiseError(f"model {brief(self.name)}: blocks must be a list of blocks (mixer, kv_heads, mlp, ffn)")
            elif f.type == "bool" and not isinstance(value, bool):
                raise BandwiseError(f"model {brief(self.name)}: {f.name}={brief(value)} must be true or false")
            elif f.type == "str" and not isinstance(value, str):
                raise BandwiseError(f"model {brief(self.name)}: {f.name}={brief(value)} must be a string")
        if self.kv_heads and self.heads % self.kv_heads:
            raise BandwiseError(
                f"model {brief(self.name)}: heads={self.heads} is not a multiple of kv_heads={self.kv_heads}; "
                "grouped-query attention needs heads = k * kv_heads"
            )
        if not self.head_dim and not self.kv_lora_rank and self.hidden % self.heads:
            raise BandwiseError(
                f"model {brief(self.name)}: hidden={self.hidden} is not divisible by heads={self.heads}; set head_dim"
            )
        if self.experts:
            if not 0 < self.top_k <= self.experts:
                raise BandwiseError(
                    f"model {brief(self.name)}: top_k={self.top_k} must be between 1 and experts={self.experts}"
                )
            if self.expert_ffn <= 0:
                raise BandwiseError(f"model {brief(self.name)}: an MoE model needs expert_ffn > 0")
            if self.dense_layers >= self.layers:
                raise BandwiseError(
                    f"model {brief(self.name)}: dense_layers={self.dense_layers} leaves no MoE layer of {self.layers}"
                )
            if self.groups_per_token and not (self.expert_groups and self.experts % self.expert_groups == 0 and self.groups_per_token <= self.expert_groups):
                raise BandwiseError(
                    f"model {brief(self.name)}: groups_per_token={self.groups_per_token} needs expert_groups dividing "
                    f"experts={self.experts} and >= groups_per_token (got expert_groups={self.expert_groups})"
                )
        elif self.top_k or self.shared_experts or self.dense_layers or self.interleaved_dense:
            raise BandwiseError(f"model {brief(self.name)}: top_k/shared_experts/dense_layers/interleaved_dense need experts > 0")
        if self.sliding_layers and not self.sliding_window:
            raise BandwiseError(f"model {brief(self.name)}: sliding_layers={self.sliding_layers} needs sliding_window > 0")
        if self.sliding_layers > self.layers:
            raise BandwiseError(
                f"model {brief(self.name)}: sliding_layers={self.sliding_layers} is more than layers={self.layers}"
            )
        if self.chunked_layers and not self.attention_chunk:
            raise BandwiseError(f"model {brief(self.name)}: chunked_layers={self.chunked_layers} needs attention_chunk > 0")
        for kind, count in (("mamba", "mamba_layers"), ("linear_attention", "linear_attention_layers")):
            if bool(getattr(self, kind)) != bool(getattr(self, count)):
                raise BandwiseError(f"model {brief(self.name)}: {count}={getattr(self, count)} and {kind} go together; give both or neither")
        if self.attention_layers < 0:
            raise BandwiseError(
                f"model {brief(self.name)}: mamba_layers + linear_attention_layers + mixer_free_layers = "
                f"{self.layers - self.attention_layers} is more than layers={self.layers}"
            )
        if self.blocks:
            self._check_blocks()
        elif self.mlp_free_layers > self.layers or self.mlp_free_layers + self.mixer_free_layers > self.layers:
            raise BandwiseError(
                f"model {brief(self.name)}: mlp_free_layers={self.mlp_free_layers} and mixer_free_layers={self.mixer_free_layers} "
                f"leave a layer with neither (of {self.layers})"
            )
        if self.sliding_layers > self.attention_layers:
            raise BandwiseError(
                f"model {brief(self.name)}: sliding_layers={self.sliding_layers} is more than the {self.attention_layers} attention layers"
            )
        if self.attention_chunk and self.windowed_layers + self.chunked_count > self.attention_layers:
            raise BandwiseError(
                f"model {brief(self.name)}: {self.windowed_layers} windowed and {self.chunked_count} chunked layers are more than the "
                f"{self.attention_layers} attention layers; give sliding_layers and chunked_layers so that they add up to at most that"
            )
        if self.experts and self.dense_layers >= self.mlp_layers:
            raise BandwiseError(
                f"model {brief(self.name)}: dense_layers={self.dense_layers} leaves no MoE layer of the {self.mlp_layers} with an MLP"
            )
        if self.kv_lora_rank and not (self.qk_nope_head_dim and self.qk_rope_head_dim and self.v_head_dim):
            raise BandwiseError(
                f"model {brief(self.name)}: MLA (kv_lora_rank={self.kv_lora_rank}) needs qk_nope_head_dim, "
                "qk_rope_head_dim and v_head_dim"
            )

    def _check_blocks(self) -> None:
        """`blocks` names every layer once, and the layer counts say what it says."""
        if len(self.blocks) != self.layers:
            raise BandwiseError(f"model {brief(self.name)}: {len(self.blocks)} blocks for layers={self.layers}; give one block a layer")
        if self.experts or self.mamba or self.linear_attention:
            raise BandwiseError(f"model {brief(self.name)}: blocks describe dense attention layers; drop experts, mamba and linear_attention")
        mixer_free = sum(b.mixer != "attention" for b in self.blocks)
        mlp_free = sum(b.mlp != "mlp" for b in self.blocks)
        if (self.mixer_free_layers, self.mlp_free_layers) != (mixer_free, mlp_free):
            raise BandwiseError(f"model {brief(self.name)}: mixer_free_layers={self.mixer_free_layers} and mlp_free_layers="
                                f"{self.mlp_free_layers} disagree with blocks ({mixer_free} and {mlp_free}); set them to those")
        for b in self.blocks:
            if b.mixer == "attention" and self.heads % b.kv_heads:
                raise BandwiseError(f"model {brief(self.name)}: a block's kv_heads={b.kv_heads} does not divide heads={self.heads}")

    # ----- layer kinds (`specs.attention`, `specs.ffn`, `specs.kinds`) -----
    @property
    def attention_kind(self) -> AttentionKind:
        """The attention of the attention layers: MLA where a KV latent rank is given, else
        grouped-query attention (multi-head where kv_heads = heads)."""
        if self.kv_lora_rank:
            return LatentAttention(hidden=self.hidden, heads=self.heads, q_lora_rank=self.q_lora_rank,
                                   kv_lora_rank=self.kv_lora_rank, qk_nope_head_dim=self.qk_nope_head_dim,
                                   qk_rope_head_dim=self.qk_rope_head_dim, v_head_dim=self.v_head_dim)
        return GroupedQueryAttention(hidden=self.hidden, heads=self.heads, kv_heads=self.n_kv_heads,
                                     head_dim=self.head_dim or self.hidden // self.heads, output_gate=self.attention_output_gate)

    @property
    def dense_mlp(self) -> DenseMLP:
        """The MLP of the layers without experts (all of a dense model's, an MoE's `dense_layers`)."""
        return DenseMLP(hidden=self.hidden, ffn=self.ffn, gated=self.gated_mlp)

    @property
    def ffn_kind(self) -> FfnKind:
        """The feed-forward block of the model's main layers: a mixture of experts where experts are
        given (its `dense_layers` keep `dense_mlp`), else the dense MLP."""
        if self.experts:
            return MixtureOfExperts(hidden=self.hidden, experts=self.experts, top_k=self.top_k, expert_ffn=self.expert_ffn,
                                    shared_experts=self.shared_experts, shared_ffn=self.shared_ffn, gated=self.gated_mlp)
        return self.dense_mlp

    def block_attention(self, kv_heads: int) -> GroupedQueryAttention:
        """The attention of one of the `blocks`: the model's query heads, the block's KV heads."""
        return GroupedQueryAttention(hidden=self.hidden, heads=self.heads, kv_heads=kv_heads,
                                     head_dim=self.head_dim or self.hidden // self.heads, output_gate=self.attention_output_gate)

    @property
    def attention_layer_kinds(self) -> tuple[tuple[AttentionKind, int], ...]:
        """Each attention kind with its number of layers: one kind but where `blocks` vary the KV heads."""
        if not self.blocks:
            return ((self.attention_kind, self.attention_layers),) if self.attention_layers else ()
        counts: dict[int, int] = {}
        for b in self.blocks:
            if b.mixer == "attention":
                counts[b.kv_heads] = counts.get(b.kv_heads, 0) + 1
        return tuple((self.block_attention(kv), n) for kv, n in sorted(counts.items()))

    @property
    def linear_layer_params(self) -> int:
        """The hidden × hidden linear maps that stand for attention or an MLP in some `blocks`
        (DeciLM's `replace_with_linear`: nn.Linear(hidden, hidden, bias=False))."""
        maps = sum((b.mixer == "linear") + (b.mlp == "linear") for b in self.blocks)
        return maps * self.hidden * self.hidden

    @property
    def ffn_layers(self) -> tuple[tuple[FfnKind, int], ...]:
        """Each feed-forward kind with its number of layers, dense first; kinds with no layer left out.
        Where `blocks` vary the width, one dense MLP per width, narrowest first."""
        if self.blocks:
            widths: dict[int, int] = {}
            for b in self.blocks:
                if b.mlp == "mlp":
                    widths[b.ffn] = widths.get(b.ffn, 0) + 1
            return tuple((DenseMLP(hidden=self.hidden, ffn=w, gated=self.gated_mlp), n) for w, n in sorted(widths.items()))
        kinds = ((self.dense_mlp, self.n_dense_mlp_layers), (self.ffn_kind, self.moe_layers))
        return tuple((kind, count) for kind, count in kinds if count)

    @property
    def is_moe(self) -> bool:
        """Some layers route tokens to experts: for labels and engine flags; the cost reads the kinds."""
        return self.ffn_kind.routed

    @property
    def is_mla(self) -> bool:
        """The attention is MLA: for labels and engine flags; the cost reads the kinds."""
        return isinstance(self.attention_kind, LatentAttention)

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        """Width of one head in the attention score (q·k) product."""
        return self.attention_kind.d_head

    @property
    def d_value(self) -> int:
        """Width of one head's value vector."""
        return self.attention_kind.d_value

    @property
    def attention_layers(self) -> int:
        """Layers whose mixer is attention (full, windowed or MLA)."""
        return self.layers - self.mamba_layers - self.linear_attention_layers - self.mixer_free_layers

    @property
    def mlp_layers(self) -> int:
        """Layers with an MLP, dense or MoE."""
        return self.layers - self.mlp_free_layers

    @property
    def is_hybrid(self) -> bool:
        """Some layer is not attention + MLP: the cost is then a mean over layer kinds (`cost.mixers`)."""
        return self.attention_layers != self.layers or self.mlp_layers != self.layers

    @property
    def moe_layers(self) -> int:
        return self.mlp_layers - self.dense_layers if self.experts else 0

    @property
    def n_dense_mlp_layers(self) -> int:
        return self.mlp_layers - self.moe_layers

    @property
    def shared_ffn(self) -> int:
        return self.shared_expert_ffn or self.expert_ffn

    # ----- parameter counts (weight matrices; norms and biases only through `vector_params`) -----
    @property
    def attn_params(self) -> int:
        """Attention weights of one layer (`attention_kind.params`)."""
        return self.attention_kind.params

    @property
    def dense_mlp_params(self) -> int:
        return self.dense_mlp.params

    @property
    def embedding_params(self) -> int:
        """Token embedding, and the learned position embedding where there is one."""
        return (self.vocab + self.position_embeddings) * self.hidden

    @property
    def output_params(self) -> int:
        """The output projection, counted once even when tied (it is one GEMM either way)."""
        return self.vocab * self.hidden

    @property
    def routed_expert_params_total(self) -> int:
        return sum(count * kind.routed_params for kind, count in self.ffn_layers)

    @property
    def mtp_expert_params(self) -> int:
        """Routed experts of one MTP module's block (they shard over EP like the model's own)."""
        return self.ffn_kind.routed_params

    @property
    def mtp_module_params(self) -> int:
        """One MTP module: the 2h -> h projection and its block, of the main layers' kinds (embedding
        and head are shared)."""
        return 2 * self.hidden * self.hidden + self.attn_params + self.ffn_kind.params

    @property
    def non_expert_layer_params(self) -> int:
        """All transformer-block weights except routed experts (attention, dense MLPs, shared, router)."""
        ffn = sum(count * kind.non_routed_params for kind, count in self.ffn_layers)
        attention = sum(count * kind.params for kind, count in self.attention_layer_kinds)
        return attention + ffn + self.mixer_params + self.linear_layer_params

    @property
    def mixer_params(self) -> int:
        """All Mamba-2 and Gated DeltaNet mixers' weights, exactly (`specs.kinds`)."""
        mamba = self.mamba_layers * self.mamba.params(self.hidden) if self.mamba else 0
        linear = self.linear_attention_layers * self.linear_attention.params(self.hidden) if self.linear_attention else 0
        return mamba + linear

    @property
    def total_params(self) -> int:
        emb = self.embedding_params + (0 if self.tied_embeddings else self.output_params)
        return self.non_expert_layer_params + self.routed_expert_params_total + emb + self.vector_params

    @property
    def active_nonembedding_params(self) -> int:
        """Weights one token multiplies by in the blocks (top_k routed experts of each MoE layer)."""
        return self.non_expert_layer_params + sum(count * kind.active_routed_params for kind, count in self.ffn_layers)

    # ----- FLOPs -----
    @property
    def windowed_layers(self) -> int:
        """Layers whose attention is windowed (`sliding_window`, `sliding_layers`)."""
        return (self.sliding_layers or self.attention_layers) if self.sliding_window else 0

    @property
    def chunked_count(self) -> int:
        """Layers whose attention is chunked (`attention_chunk`, `chunked_layers`)."""
        return (self.chunked_layers or self.attention_layers) if self.attention_chunk else 0

    @property
    def has_local_attention(self) -> bool:
        """Some attention layer sees fewer keys than its whole prefix (a window or a chunk)."""
        return bool(self.windowed_layers or self.chunked_count)

    def attention_share(self, seq_len: int | None = None) -> float:
        """Attention core work of the mean layer over that of full causal attention, in [0, 1].

        A windowed layer computes `window_share(s, w)` of the (query, key) pairs of full causal
        attention, a chunked one `causal_chunk_pairs(s, c)` over s(s + 1)/2, the other attention
        layers all of them, layers without attention (mixers, MLP alone) none; the mean weights
        each by its number of layers. 1.0 exactly when every layer attends and none is windowed or
        chunked, or the sequence is no longer than the window and the chunk.
        """
        windowed, chunked, attending = self.windowed_layers, self.chunked_count, self.attention_layers
        if not windowed and not chunked:
            return attending / self.layers
        s = self.seq_len if seq_len is None else seq_len
        local = windowed * window_share(s, self.sliding_window) if windowed else 0.0
        if chunked:
            local += chunked * causal_chunk_pairs(s, self.attention_chunk) / causal_window_pairs(s, 0)
        return ((attending - windowed - chunked) + local) / self.layers

    def mixer_flops_per_token(self, seq_len: int | None = None) -> float:
        """Forward+backward FLOPs per token, all layers, of the Mamba-2 and Gated DeltaNet scans
        (`Mamba2.scan_flops_per_token`, `GatedDeltaNet.scan_flops_per_token`): 3 × the forward, as
        PaLM's 12·L·H·Q·T is 3 × attention's 4·H·Q·T forward (the backward of each matrix product is
        two of the same size). Their projections and convolutions are weights, in 6·N."""
        s = self.seq_len if seq_len is None else seq_len
        flops = 0.0
        if self.mamba:
            flops += self.mamba_layers * self.mamba.scan_flops_per_token(s)
        if self.linear_attention:
            flops += self.linear_attention_layers * self.linear_attention.scan_flops_per_token(s)
        return 3.0 * flops

    def attention_flops_per_token(self, seq_len: int | None = None, causal: bool = False) -> float:
        """Forward+backward FLOPs of the score and value products, per token, all layers.

        PaLM (Chowdhery et al. 2022, Appendix B): 12·L·H·Q·T with Q the head width and T the
        sequence length, which counts the full (non-causal) score matrix. With `causal`, half.
        MLA uses qk width for scores and v width for values: 6·L·H·T·(d_qk + d_v).
        Sliding-window layers (Longformer, Beltagy et al. 2020; Mistral 7B, Jiang et al. 2023,
        Sec. 2) multiply fewer keys per query, so the term scales by `attention_share`: PaLM's T is
        the keys a query's products run over, and a windowed layer's run over at most w of them (a
        chunked layer's over those of its chunk, `causal_chunk_pairs`).
        The causal and non-causal conventions keep their factor of 2.
        """
        s = self.seq_len if seq_len is None else seq_len
        flops = 6.0 * self.layers * self.heads * s * (self.d_head + self.d_value)
        if self.has_local_attention or self.attention_layers != self.layers:
            flops *= self.attention_share(s)
        return flops / 2 if causal else flops

    def model_flops_per_token(self, seq_len: int | None = None, causal: bool = False) -> float:
        """Model FLOPs per token for MFU: 6·(active non-embedding params + output projection) + attention.

        DESIGN.md's convention, from PaLM Appendix B. Recomputation is not counted here (that is HFU).
        The attention term counts the keys each query attends to, so sliding-window layers count
        their window (`attention_flops_per_token`): MFU of a windowed model is not inflated by
        attention its kernels never compute.
        """
        flops = 6.0 * (self.active_nonembedding_params + self.output_params) + self.attention_flops_per_token(seq_len, causal)
        if self.mamba or self.linear_attention:  # the scans of mixer layers (`mixer_flops_per_token`)
            flops += self.mixer_flops_per_token(seq_len)
        return flops

    # ----- conversion -----
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_seq_len(self, seq_len: int) -> ModelSpec:
        if not isinstance(seq_len, int) or seq_len <= 0:
            raise BandwiseError(f"seq_len={seq_len!r} must be a positive integer")
        return replace(self, seq_len=seq_len)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "model") -> ModelSpec:
        """Build from a mapping; unknown keys are an error that names them (no silent typos)."""
        if not isinstance(data, dict):
            raise BandwiseError(f"{where}: expected a mapping of model fields, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise BandwiseError(f"{where}: unknown field(s) {clip(', '.join(unknown), 200)}; valid fields: {', '.join(sorted(known))}")
        missing = [n for n in ("name", "layers", "hidden", "ffn", "heads", "vocab") if n not in data]
        if missing:
            raise BandwiseError(f"{where}: missing field(s) {', '.join(missing)}")
        kinds = {k: _kind_from_dict(k, data[k], f"{where}: {k}") for k in _KINDS if data.get(k) is not None}
        if data.get("blocks") is not None:
            blocks = data["blocks"]
            if not isinstance(blocks, (list, tuple)):
                raise BandwiseError(f"{where}: blocks={brief(blocks)} must be a list of blocks, one a layer")
            kinds["blocks"] = tuple(Block.from_dict(b, f"{where}: blocks[{i}]") for i, b in enumerate(blocks))
        return cls(**{**data, **kinds})


_KINDS: dict[str, tuple[type, ...]] = {"mamba": (Mamba2, Mamba1), "linear_attention": (GatedDeltaNet,)}
"""ModelSpec fields that hold a mixer kind, and the classes each may hold."""


def _kind_from_dict(field: str, data: Any, where: str) -> Any:
    """A mixer kind from its mapping: `mamba` is a Mamba-1 when it names a `dt_rank` (Mamba-1's
    time-step projection, which Mamba-2 replaces by one dt per head), else a Mamba-2."""
    if isinstance(data, _KINDS[field]):
        return data
    if field == "mamba" and isinstance(data, dict) and "dt_rank" in data:
        return Mamba1.from_dict(data, where)
    return _KINDS[field][0].from_dict(data, where)
