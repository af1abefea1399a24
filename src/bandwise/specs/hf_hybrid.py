"""ModelSpec from the Hugging Face `config.json` of a hybrid model, keys as transformers' classes:

  nemotron_h   hybrid_override_pattern ("M" Mamba-2, "*" attention, "-" MLP, one block a layer),
               mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, conv_kernel, chunk_size,
               intermediate_size (squared-ReLU MLP), num_attention_heads, num_key_value_heads, head_dim
  qwen3_next   full_attention_interval (or layer_types), linear_num_key_heads, linear_num_value_heads,
               linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim, num_experts,
               num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size
  qwen3_5_moe_text, qwen3_5_text  Qwen3.5 / Qwen3.6's text decoders (a wrapper's text_config, `specs.hf`):
               Qwen3-Next's layers and keys, MoE with the gated shared expert (qwen3_5_moe_text) or a SwiGLU
               MLP of intermediate_size in every layer (qwen3_5_text); mtp_num_hidden_layers as `mtp_depth`
  jamba        attn_layer_period, attn_layer_offset (attention on layer i when i % period == offset,
               Mamba-1 on the others), expert_layer_period, expert_layer_offset (MoE likewise, the
               others a dense MLP), num_experts, num_experts_per_tok, intermediate_size (experts and
               dense MLPs alike), mamba_d_state, mamba_d_conv, mamba_expand, mamba_dt_rank,
               mamba_conv_bias, mamba_proj_bias (`_jamba`)
  bamba        attn_layer_indices (attention there, Mamba-2 elsewhere), mamba_n_heads, mamba_d_head,
               mamba_d_state, mamba_n_groups, mamba_d_conv, mamba_chunk_size; a SwiGLU MLP every layer
  granitemoehybrid  layer_types ("mamba" / "attention"), the Mamba-2 keys as bamba's, num_local_experts
               experts of intermediate_size (top num_experts_per_tok) beside a shared MLP of
               shared_intermediate_size every layer (`_mamba2_hybrid`)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.specs.hf_fields import Fields
from bandwise.specs.kinds import GatedDeltaNet, Mamba1, Mamba2
from bandwise.specs.model import MAX_DIMENSION, ModelSpec, brief

HYBRID = ("nemotron_h", "qwen3_next", "qwen3_5_moe_text", "qwen3_5_text", "jamba", "bamba", "granitemoehybrid")
QWEN3_NEXT_LIKE = ("qwen3_next", "qwen3_5_moe_text", "qwen3_5_text")
"""Qwen3-Next's text decoder, and Qwen3.5's (transformers modeling_qwen3_5_moe.py / modeling_qwen3_5.py: the same
Gated DeltaNet and gated attention layers, (1 + w) RMSNorms and sparse MoE block; the dense variant a SwiGLU MLP)."""

JAMBA_DEFAULTS: dict[str, Any] = {
    # JambaConfig's defaults (transformers `configuration_jamba.py`), which published configs repeat
    "vocab_size": 65536, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_experts_per_tok": 2, "num_experts": 16, "expert_layer_period": 2, "expert_layer_offset": 1,
    "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
    "mamba_dt_rank": "auto", "mamba_conv_bias": True, "mamba_proj_bias": False,
}


MAMBA2_DEFAULTS: dict[str, dict[str, Any]] = {
    # BambaConfig's defaults (transformers configuration_bamba.py, 7a2983f)
    "bamba": {"vocab_size": 128000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "mamba_n_heads": 128, "mamba_d_head": "auto",
              "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256,
              "mamba_conv_bias": True, "mamba_proj_bias": False},
    # GraniteMoeHybridConfig's defaults (configuration_granitemoehybrid.py, 4f7e1d4)
    "granitemoehybrid": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                         "num_attention_heads": 32, "num_local_experts": 8, "num_experts_per_tok": 2,
                         "shared_intermediate_size": 1024, "attention_bias": False, "mamba_n_heads": 128,
                         "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
                         "mamba_expand": 2, "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False},
}


def from_hybrid_config(cfg: Mapping[str, Any], *, name: str = "hf-model", seq_len: int = 4096) -> ModelSpec:
    kind = cfg.get("model_type")

    def need(key: str) -> int:
        value = cfg.get(key)
        if value is None:
            raise BandwiseError(f"config.json ({kind}): missing field {key!r}")
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DIMENSION:
            raise BandwiseError(f"config.json ({kind}): {key}={brief(value)} must be an integer from 1 to {MAX_DIMENSION:,}")
        return value

    if kind == "jamba":
        cfg = (cfg if isinstance(cfg, Fields) else Fields(cfg)).with_defaults(JAMBA_DEFAULTS)
    if kind in MAMBA2_DEFAULTS:
        cfg = (cfg if isinstance(cfg, Fields) else Fields(cfg)).with_defaults(MAMBA2_DEFAULTS[kind])
    if kind == "qwen3_5_moe_text" and cfg.get("intermediate_size") is None:
        # Qwen3_5MoeTextConfig has no intermediate_size: every layer is MoE, so no dense width is priced
        cfg = (cfg if isinstance(cfg, Fields) else Fields(cfg)).with_values(intermediate_size=need("moe_intermediate_size"))
    heads = need("num_attention_heads")
    base: dict[str, Any] = {
        "name": name, "hidden": need("hidden_size"), "ffn": need("intermediate_size"), "heads": heads, "vocab": need("vocab_size"),
        "seq_len": seq_len, "kv_heads": cfg.get("num_key_value_heads") or heads, "head_dim": cfg.get("head_dim") or 0,
        "tied_embeddings": cfg.get("tie_word_embeddings") is True, "source": f"Hugging Face config.json (model_type {kind})",
    }
    if kind == "nemotron_h":
        pattern = cfg.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or not pattern or set(pattern) - set("M*-"):
            raise BandwiseError(f"config.json (nemotron_h): hybrid_override_pattern={brief(pattern)} must be a string of M, * and -")
        mamba = Mamba2(heads=need("mamba_num_heads"), head_dim=need("mamba_head_dim"), state=need("ssm_state_size"),
                       groups=need("n_groups"), conv_kernel=need("conv_kernel"), chunk=need("chunk_size"))
        base.update(head_dim=cfg.get("attention_head_dim") or base["head_dim"])
        # one RMSNorm a block and norm_f (NemotronHBlock, modeling_nemotron_h.py); the mixers count their own vectors
        return ModelSpec(**base, layers=len(pattern), gated_mlp=False, squared_relu_mlp=True, mamba=mamba,
                         mamba_layers=pattern.count("M"), mixer_free_layers=pattern.count("-"),
                         mlp_free_layers=pattern.count("M") + pattern.count("*"), vector_params=(len(pattern) + 1) * base["hidden"])
    if kind in QWEN3_NEXT_LIKE:
        return _qwen3_next(cfg, kind, need, base)
    if kind == "jamba":
        return _jamba(cfg, need, base)
    if kind in MAMBA2_DEFAULTS:
        return _mamba2_hybrid(cfg, kind, need, base)
    raise BandwiseError(f"config.json: model_type={brief(kind)} is not a hybrid bandwise reads; hybrids: {', '.join(HYBRID)}")


def linear_layers(cfg: Mapping[str, Any]) -> tuple[bool, ...]:
    """Which layers of a Qwen3-Next config are Gated DeltaNet layers (True) rather than gated attention,
    in order: its `layer_types` where it lists one per layer, else transformers' Qwen3NextConfig
    default, layer i linear unless (i + 1) % full_attention_interval == 0. The planner counts these
    and the exports write them, so both read the config here."""
    kind = cfg.get("model_type") if cfg.get("model_type") in QWEN3_NEXT_LIKE else "qwen3_next"
    layers = cfg.get("num_hidden_layers")
    if not isinstance(layers, int) or isinstance(layers, bool) or not 1 <= layers <= MAX_DIMENSION:
        raise BandwiseError(f"config.json ({kind}): num_hidden_layers={brief(layers)} must be an integer from 1 to {MAX_DIMENSION:,}")
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        odd = [t for t in types if t not in ("linear_attention", "full_attention")]
        if odd:
            raise BandwiseError(f"config.json ({kind}): layer_types holds {brief(odd[0])}; "
                                "each entry is 'linear_attention' or 'full_attention'")
        return tuple(t == "linear_attention" for t in types)
    every = cfg.get("full_attention_interval")
    if every is None:
        raise BandwiseError(f"config.json ({kind}): missing field 'full_attention_interval'")
    if not isinstance(every, int) or isinstance(every, bool) or not 1 <= every <= MAX_DIMENSION:
        raise BandwiseError(f"config.json ({kind}): full_attention_interval={brief(every)} must be an integer from 1 to "
                            f"{MAX_DIMENSION:,} (or give layer_types, one entry a layer)")
    return tuple((i + 1) % every != 0 for i in range(layers))



def _qwen3_next(cfg: Mapping[str, Any], kind: str, need: Any, base: dict[str, Any]) -> ModelSpec:
    """Qwen3-Next and Qwen3.5 (`QWEN3_NEXT_LIKE`). Qwen3.5's multi-token-prediction block (`mtp.*` tensors: vLLM
    vllm/model_executor/models/qwen3_5_mtp.py at 01d9980, Qwen3_5MultiTokenPredictor) is DeepSeek-V3's module:
    RMSNorms of the hidden state and the next token's embedding, fc Linear(2h, h) without bias, one full-attention
    decoder layer of the model's own kind and a final norm, on the shared embedding and head; mtp_num_hidden_layers
    of them are `mtp_depth` (outside `total_params`, as DeepSeek-V3's 671B)."""
    layers = need("num_hidden_layers")
    linear = sum(linear_layers(cfg))
    heads = base["heads"]
    mixer = GatedDeltaNet(key_heads=need("linear_num_key_heads"), value_heads=need("linear_num_value_heads"),
                          key_head_dim=need("linear_key_head_dim"), value_head_dim=need("linear_value_head_dim"),
                          conv_kernel=need("linear_conv_kernel_dim"))
    h, d = base["hidden"], base["head_dim"] or base["hidden"] // heads
    mtp = 0
    if kind != "qwen3_next":
        if cfg.get("mtp_use_dedicated_embeddings") is True:
            raise BandwiseError(f"config.json ({kind}): mtp_use_dedicated_embeddings=true gives the MTP block its own embedding, "
                                "which DeepSeek-V3's module (`mtp_depth`) shares; not supported")
        if cfg.get("attn_output_gate") is False:
            raise BandwiseError(f"config.json ({kind}): attn_output_gate=false drops the attention's sigmoid gate, which the "
                                "Qwen3-Next reading prices; not supported")
        if kind == "qwen3_5_moe_text" and cfg.get("mlp_only_layers"):
            raise BandwiseError(f"config.json ({kind}): mlp_only_layers={brief(cfg.get('mlp_only_layers'))} puts dense MLPs "
                                "in some layers; bandwise prices MoE in every layer of this family; not supported")
        depth = cfg.get("mtp_num_hidden_layers") or 0
        if not isinstance(depth, int) or isinstance(depth, bool) or not 0 <= depth <= 64:
            raise BandwiseError(f"config.json ({kind}): mtp_num_hidden_layers={brief(depth)} must be an integer from 0 to 64")
        mtp = depth
    # outside the matrices ModelSpec counts (Qwen3NextDecoderLayer, modeling_qwen3_next.py): two RMSNorms a layer and the
    # final one; q_norm and k_norm (head_dim each) on the attention layers; the shared expert's gate, Linear(h, 1), a layer.
    # The Gated DeltaNet counts its own (`GatedDeltaNet.params`).
    if kind == "qwen3_5_text":  # Qwen3_5DecoderLayer: a SwiGLU Qwen3_5MLP of intermediate_size, no experts
        vectors = (2 * layers + 1) * h + 2 * d * (layers - linear)
        return ModelSpec(**base, layers=layers, attention_output_gate=True, linear_attention=mixer, linear_attention_layers=linear,
                         mtp_depth=mtp, vector_params=vectors)
    shared = cfg.get("shared_expert_intermediate_size") or 0
    vectors = (2 * layers + 1) * h + 2 * d * (layers - linear) + (layers * h if shared else 0)
    return ModelSpec(**base, layers=layers, attention_output_gate=True, linear_attention=mixer, linear_attention_layers=linear,
                     experts=need("num_experts"), top_k=need("num_experts_per_tok"), expert_ffn=need("moe_intermediate_size"),
                     shared_experts=1 if shared else 0, shared_expert_ffn=shared, mtp_depth=mtp, vector_params=vectors)

def _jamba(cfg: Mapping[str, Any], need: Any, base: dict[str, Any]) -> ModelSpec:
    """Jamba (transformers `modeling_jamba.py`): layer i is a `JambaAttentionDecoderLayer` when
    i % attn_layer_period == attn_layer_offset, else a `JambaMambaDecoderLayer` whose
    `JambaMambaMixer` is a Mamba-1 mixer with RMSNorms over dt, B and C (`specs.kinds.Mamba1`);
    either way its feed-forward is a `JambaSparseMoeBlock` (router h -> E without bias, E SwiGLU
    experts of intermediate_size) when i % expert_layer_period == expert_layer_offset, else a SwiGLU
    MLP of intermediate_size; two RMSNorms a layer (input, pre-feed-forward) and a final one.
    Attention has no biases and no position encoding."""
    layers = need("num_hidden_layers")

    def every(period_key: str, offset_key: str) -> int:
        period, offset = need(period_key), cfg.get(offset_key)
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < period:
            raise BandwiseError(f"config.json (jamba): {offset_key}={brief(offset)} must be an integer from 0 to {period_key} - 1 = {period - 1}")
        return sum(1 for i in range(layers) if i % period == offset)

    attention, moe = every("attn_layer_period", "attn_layer_offset"), every("expert_layer_period", "expert_layer_offset")
    if cfg.get("sliding_window") is not None:
        raise BandwiseError(f"config.json (jamba): sliding_window={brief(cfg.get('sliding_window'))} is not supported; "
                            "the published Jamba configs set it to null")
    h = base["hidden"]
    rank = cfg.get("mamba_dt_rank")
    rank = Mamba1.auto_dt_rank(h) if rank == "auto" else need("mamba_dt_rank")
    flags = {}
    for key in ("mamba_conv_bias", "mamba_proj_bias"):
        if not isinstance(cfg.get(key), bool):
            raise BandwiseError(f"config.json (jamba): {key}={brief(cfg.get(key))} must be true or false")
        flags[key] = cfg[key]
    mixer = Mamba1(inner=need("mamba_expand") * h, state=need("mamba_d_state"), dt_rank=rank, conv_kernel=need("mamba_d_conv"),
                   conv_bias=flags["mamba_conv_bias"], proj_bias=flags["mamba_proj_bias"], dt_norms=True)
    experts = need("num_experts")
    # a block with one expert is a plain JambaMLP (`layers_num_experts`, JambaDecoderLayer)
    fields = ({"experts": experts, "top_k": need("num_experts_per_tok"), "expert_ffn": base["ffn"], "dense_layers": layers - moe,
               "interleaved_dense": moe < layers}
              if experts > 1 and moe else {})
    return ModelSpec(**base, layers=layers, mamba=mixer, mamba_layers=layers - attention, vector_params=(2 * layers + 1) * h, **fields)


def _mamba2_hybrid(cfg: Mapping[str, Any], kind: str, need: Any, base: dict[str, Any]) -> ModelSpec:
    """Bamba (transformers `modeling_bamba.py`) and Granite 4.0-H (`modular_granitemoehybrid.py`): each layer is
    a Mamba-2 mixer (`BambaMixer`: in_proj h -> 2·I + 2·G·N + H and out_proj I -> h, biases with mamba_proj_bias;
    a depthwise conv1d over I + 2·G·N channels with mamba_conv_bias; dt_bias, A_log, D per head; a gated RMSNorm
    of I; I = mamba_n_heads · mamba_d_head) or attention (q, k, v, o; Granite's with attention_bias), between
    two RMSNorms (input and pre-feed-forward / post-attention); then
      bamba: a SwiGLU MLP of intermediate_size on every layer; attention on attn_layer_indices;
      granitemoehybrid: GraniteMoeMoE (router h -> E without bias, E experts of intermediate_size, input_linear
        2f·h and output_linear h·f) plus the shared GraniteMoeSharedMLP of shared_intermediate_size (input_linear
        2·fs·h, output_linear h·fs) on every layer, the experts left out where num_local_experts is 0; attention
        where layer_types says "attention".
    A final RMSNorm. `specs.kinds.Mamba2` counts the mixer with in/out projections without bias and a conv bias:
    a config with other switches is refused."""
    layers, h = need("num_hidden_layers"), base["hidden"]
    if kind == "bamba":
        idx = cfg.get("attn_layer_indices") or []
        if not isinstance(idx, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in idx):
            raise BandwiseError(f"config.json (bamba): attn_layer_indices={brief(idx)} must list layer indices below "
                                f"num_hidden_layers={layers}")
        attention = len(set(idx))
    else:
        types = cfg.get("layer_types")
        if types is None:
            types = ["mamba"] * layers  # GraniteMoeHybridConfig.layers_block_type
        if not isinstance(types, list) or len(types) != layers or set(types) - {"mamba", "attention"}:
            raise BandwiseError(f"config.json (granitemoehybrid): layer_types={brief(types)} must list {layers} entries, "
                                "each \"mamba\" or \"attention\"")
        attention = types.count("attention")
    for key, want in (("mamba_conv_bias", True), ("mamba_proj_bias", False)):
        if cfg.get(key) is not want:
            raise BandwiseError(f"config.json ({kind}): {key}={brief(cfg.get(key))} is not supported; the Mamba-2 mixer "
                                f"read here has {key}={str(want).lower()}, as the published configs")
    heads, expand = need("mamba_n_heads"), need("mamba_expand")
    head_dim = cfg.get("mamba_d_head")
    head_dim = expand * h // heads if head_dim == "auto" else need("mamba_d_head")
    if head_dim * heads != expand * h:
        raise BandwiseError(f"config.json ({kind}): mamba_n_heads={heads} times mamba_d_head={head_dim} must be "
                            f"mamba_expand={expand} times hidden_size={h}")
    mixer = Mamba2(heads=heads, head_dim=head_dim, state=need("mamba_d_state"), groups=need("mamba_n_groups"),
                   conv_kernel=need("mamba_d_conv"), chunk=need("mamba_chunk_size"))
    vectors = (2 * layers + 1) * h
    fields: dict[str, Any] = {}
    if kind == "granitemoehybrid":
        base["head_dim"] = 0  # GraniteMoeAttention: head_dim = hidden_size // num_attention_heads
        if cfg.get("attention_bias") is True:
            heads_q, kv = base["heads"], base["kv_heads"]
            vectors += attention * ((heads_q + 2 * kv) * (h // heads_q) + h)
        experts, shared = cfg.get("num_local_experts"), cfg.get("shared_intermediate_size")
        if not isinstance(experts, int) or isinstance(experts, bool) or experts < 0:
            raise BandwiseError(f"config.json (granitemoehybrid): num_local_experts={brief(experts)} must be an integer from 0")
        if experts:
            fields = {"experts": experts, "top_k": need("num_experts_per_tok"), "expert_ffn": base["ffn"]}
            if shared:
                fields.update(shared_experts=1, shared_expert_ffn=need("shared_intermediate_size"))
        else:  # the shared MLP alone: a dense SwiGLU of shared_intermediate_size
            base["ffn"] = need("shared_intermediate_size")
    return ModelSpec(**base, layers=layers, mamba=mixer, mamba_layers=layers - attention, vector_params=vectors, **fields)
