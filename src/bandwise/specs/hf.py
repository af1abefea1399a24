"""ModelSpec from a Hugging Face `config.json`.

Each supported `model_type` is read from its own keys, with the defaults of its transformers
configuration class where a published config leaves a key out; the shapes follow that family's
modelling code in transformers (`src/transformers/models/<type>/modeling_<type>.py`, read at
huggingface/transformers d98ac17 and neighbours) or, for remote-code models, the model's own file:
  llama, mistral, qwen2, qwen3, phi3,      dense, GQA, SwiGLU; biases and q/k norms as each class has
  gemma, gemma2, gemma3_text (gemma3),     them; Gemma ties the embeddings, has 2 (Gemma) or 4 (Gemma 2/3)
  olmo2, olmo3, granite, cohere, cohere2,  norms a layer; OLMo 2 and 3 norm q and k over all heads; Cohere runs
  internlm2                                attention and MLP in parallel from one bias-free LayerNorm
  gpt2, gpt_neox, falcon, starcoder2       two-matrix GELU MLP, LayerNorm with bias; GPT-2's learned
                                           position table (`n_positions`); Falcon's multi-query / GQA
  mixtral, phimoe, qwen2_moe, qwen3_moe,   routed experts (no shared one except Qwen2-MoE's, which every
  olmoe, granitemoe, dbrx, gpt_oss         Qwen2-MoE layer has, with a one-output gate)
  deepseek_v2, deepseek_v3, kimi_k2        MLA, routed + shared experts, first_k_dense_replace dense layers
  glm4                                     GLM-4-0414: four RMSNorms a layer, q/k/v biases, fused gate_up
  glm4_moe                                 GQA with q/k/v biases, routed + one shared expert, leading dense
                                           layers, MTP layers beside the model (`_glm4_moe`)
  ernie4_5, ernie4_5_moe                   Llama's block with use_bias; the MoE: routed + shared experts from moe_layer_start_index, use_bias everywhere
  apertus                                  Llama's attention with q/k norms, a two-matrix xIELU MLP
  seed_oss                                 Llama's block, q/k/v biases and a separate o_proj bias switch
  hunyuan_v1_dense, hunyuan_v1_moe         Llama's block with q/k norms over head_dim (cross-layer KV refused); the
                                           MoE: routed experts and one shared MLP, all of intermediate_size
  smollm3, exaone4, olmo, nemotron         Llama's block without RoPE on some layers (SmolLM3); with OLMo 2's
                                           post-norms and q/k norms (EXAONE 4.0); with weightless LayerNorms
                                           (OLMo 1); with LayerNorm1P and a squared-ReLU MLP (Nemotron-4)
  llama4 (llama4_text)                     MoE (one shared expert, top-1 routed) on `moe_layers`, dense
                                           `intermediate_size_mlp` MLPs on the others; chunked attention
                                           on the RoPE layers (`_llama4`)
Parameters outside the weight matrices (norms, biases, sinks, gates) land in `vector_params`, so
`total_params` is the checkpoint's count. Hybrids (nemotron_h, qwen3_next, jamba) are read by
`specs.hf_hybrid`, Qwen3.5 / Qwen3.6's wrappers (qwen3_5, qwen3_5_moe) as their text_config there, Nemotron-NAS's per-layer widths (nemotron-nas `block_configs`) by `specs.hf_blocks`.

A config ModelSpec cannot describe is refused in one line that names the field and the modelling file
(`REFUSED`): DeciLM's per-layer KV heads (deci), a Mamba-2 mixer beside attention in one layer
(falcon_h1), lightning attention (minimax), DeepSeek Sparse Attention (deepseek_v32), and the hybrids
not read yet.

Sliding-window attention (`window_spec`): the window is `sliding_window` (absent or null: none),
switched off by `use_sliding_window: false`. Which layers it covers: `layer_types`
("sliding_attention" / "full_attention" per layer) where given, else `sliding_window_pattern` n
(every n-th layer full), else the class's rule: every layer (Mistral, Mixtral, Phi-3, Starcoder2),
layers from `max_window_layers` on (Qwen, only with `use_sliding_window: true`), every other layer
from the first (gpt-oss, Gemma 2), every 6th full (Gemma 3), every 4th full (Cohere 2, OLMo 3).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.specs.hf_fields import ConfigRead, Fields
from bandwise.specs.hf_blocks import BLOCKS, from_blocks_config
from bandwise.specs.hf_hybrid import HYBRID, from_hybrid_config
from bandwise.specs.model import MAX_DIMENSION, ModelSpec, brief

QWEN = {"qwen2", "qwen3", "qwen2_moe", "qwen3_moe"}
QWEN_MAX_WINDOW_LAYERS = 28
"""`max_window_layers` default of transformers' Qwen2/Qwen3 (and MoE) configuration classes."""
DEEPSEEK = ("deepseek_v2", "deepseek_v3", "kimi_k2")

FAMILIES: dict[str, dict[str, Any]] = {
    # norms: per-layer norm vectors of width h; norm_bias: LayerNorm with a shift; qkv/o/mlp: bias
    # switches (a key name, or a constant); tied: the class's tie_word_embeddings default;
    # window: the class's default rule for windowed layers (None: the class reads no sliding_window).
    "llama": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "mlp": "mlp_bias"},
    "mistral": {"norms": 2, "window": "all"},
    "mixtral": {"norms": 2, "window": "all"},
    "qwen2": {"norms": 2, "qkv": True, "window": "qwen"},
    "qwen2_moe": {"norms": 2, "qkv": True, "window": "qwen"},
    "qwen3": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "qk_norm": "head", "window": "qwen"},
    "qwen3_moe": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "qk_norm": "head", "window": "qwen"},
    "phi3": {"norms": 2, "window": "all"},
    "gemma": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "tied": True},
    "gemma2": {"norms": 4, "qkv": "attention_bias", "o": "attention_bias", "tied": True, "window": 2},
    "gemma3_text": {"norms": 4, "qkv": "attention_bias", "o": "attention_bias", "qk_norm": "head", "tied": True, "window": 6},
    "olmo2": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "qk_norm": "all"},
    # OLMo 3 (modeling_olmo3.py, transformers 4.57.1): OLMo 2's block, windowed on every layer but each 4th
    "olmo3": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "qk_norm": "all", "window": 4},
    "olmoe": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "qk_norm": "olmoe"},
    "granite": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "mlp": "mlp_bias"},
    "granitemoe": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias"},
    "cohere": {"norms": 1, "qkv": "attention_bias", "o": "attention_bias", "qk_norm": "cohere", "tied": True},
    "cohere2": {"norms": 1, "qkv": "attention_bias", "o": "attention_bias", "tied": True, "window": 4},
    "internlm2": {"norms": 2, "qkv": "bias", "o": "bias"},
    "gpt2": {"norms": 2, "norm_bias": True, "qkv": True, "o": True, "mlp": True, "gated": False, "tied": True},
    "gpt_neox": {"norms": 2, "norm_bias": True, "qkv": "attention_bias", "o": "attention_bias", "mlp": True, "gated": False},
    "falcon": {"norms": 1, "norm_bias": True, "qkv": "bias", "o": "bias", "mlp": "bias", "gated": False, "tied": True},
    "starcoder2": {"norms": 2, "norm_bias": True, "qkv": "use_bias", "o": "use_bias", "mlp": "use_bias", "gated": False, "tied": True, "window": "all"},
    "dbrx": {"norms": 2},
    "gpt_oss": {"norms": 2, "qkv": True, "o": True, "window": 2},
    **{k: {"norms": 2} for k in DEEPSEEK},
    # GLM-4.5 (modeling_glm4_moe.py, huggingface/transformers a0699c9): Glm4MoeAttention's q, k, v take
    # attention_bias, o_proj none; q_norm and k_norm over head_dim only with use_qk_norm
    "glm4_moe": {"norms": 2, "qkv": "attention_bias", "qk_norm": "use_qk_norm"},
    # SmolLM3 (modular_smollm3.py, huggingface/transformers cbc6e94): Llama's attention and MLP, every
    # no_rope_layer_interval-th layer without RoPE (no parameters); SmolLM3Config leaves tie_word_embeddings to
    # PretrainedConfig's default, true; a window, with use_sliding_window, on the layers without RoPE
    # Nemotron-4 / Minitron (modeling_nemotron.py): two NemotronLayerNorm1P a layer and a final one (LayerNorms with
    # weight and bias), q, k, v, o with attention_bias, a two-matrix squared-ReLU MLP (up_proj, down_proj) with mlp_bias
    "nemotron": {"norms": 2, "norm_bias": True, "qkv": "attention_bias", "o": "attention_bias", "mlp": "mlp_bias", "gated": False},
    # EXAONE 4.0 (modular_exaone4.py): OLMo 2's block (post_attention_layernorm and post_feedforward_layernorm, no
    # norm before attention), bias-free q, k, v, o with q_norm and k_norm over head_dim; every 4th layer global,
    # the others windowed (sliding_window_pattern 4: "LLLG")
    "exaone4": {"norms": 2, "qk_norm": "head", "window": 4},
    # OLMo 1 (modular_olmo.py): OlmoLayerNorm has no weight or bias (input, post-attention and final norms alike),
    # LlamaAttention's q, k, v, o take attention_bias, OlmoMLP's gate/up/down none
    "olmo": {"norms": 0, "norm_free": True, "qkv": "attention_bias", "o": "attention_bias"},
    # GLM-4-0414 (modular_glm4.py, huggingface/transformers 08c5327): four RMSNorms a layer (input, post_self_attn,
    # post_attention, post_mlp), GlmAttention's q, k, v with attention_bias and o_proj without, Phi3MLP's fused gate_up
    "glm4": {"norms": 4, "qkv": "attention_bias"},
    # Seed-OSS (modular_seed_oss.py, huggingface/transformers 6e4054a): Llama's block with q, k, v biases
    # (attention_bias), an o_proj bias of its own switch (attention_out_bias), MLP biases with mlp_bias
    "seed_oss": {"norms": 2, "qkv": "attention_bias", "o": "attention_out_bias", "mlp": "mlp_bias"},
    # Hunyuan dense (modular_hunyuan_v1_dense.py, huggingface/transformers 6095fdd): LlamaAttention (q, k, v, o with
    # attention_bias) whose query_layernorm and key_layernorm over head_dim it always builds; a bias-free SwiGLU MLP
    "hunyuan_v1_dense": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "qk_norm": "head"},
    # ERNIE 4.5 MoE (modular_ernie4_5_moe.py, huggingface/transformers a4d4492): every projection, lm_head's too, takes
    # use_bias; tied by default
    # ERNIE 4.5 dense (modular_ernie4_5.py, huggingface/transformers 7abb76c): Llama's block, q/k/v/o and MLP biases with
    # use_bias, lm_head without; tied by default
    "ernie4_5": {"norms": 2, "qkv": "use_bias", "o": "use_bias", "mlp": "use_bias", "tied": True},
    "ernie4_5_moe": {"norms": 2, "qkv": "use_bias", "o": "use_bias", "mlp": "use_bias", "tied": True},
    # Apertus (modeling_apertus.py): attention_layernorm and feedforward_layernorm, q, k, v, o with attention_bias and
    # q_norm / k_norm over head_dim with qk_norm (default true); a two-matrix MLP (up_proj, down_proj, mlp_bias) whose
    # xIELU activation (activations.py XIELUActivation) learns alpha_p and alpha_n, one value each, per layer
    "apertus": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "mlp": "mlp_bias", "gated": False,
                "qk_norm": "qk_norm"},
    # Hunyuan MoE (modular_hunyuan_v1_moe.py, huggingface/transformers 3404f51): the dense family's attention, and on
    # every layer HunYuanMoEV1Moe: gate.wg h -> E without bias, E SwiGLU experts and one shared_mlp, all LlamaMLP of
    # intermediate_size
    "hunyuan_v1_moe": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "qk_norm": "head"},
    # Phi-3.5-MoE (modular_phimoe.py): LayerNorms with bias (input, post-attention, final), LlamaAttention's q, k, v, o
    # with attention_bias, Mixtral's experts and router; lm_head's bias with lm_head_bias; a window on every layer
    "phimoe": {"norms": 2, "norm_bias": True, "qkv": "attention_bias", "o": "attention_bias", "window": "all"},
    "smollm3": {"norms": 2, "qkv": "attention_bias", "o": "attention_bias", "mlp": "mlp_bias", "tied": True, "window": "nope"},
}
QWEN3_5_WRAPPERS = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}
"""Qwen3.5 / Qwen3.6's vision-language wrappers and the model_type of their text_config (`qwen3_5_text`)."""
SUPPORTED = sorted({*FAMILIES, "gemma3", "llama4", "llama4_text", *QWEN3_5_WRAPPERS, *HYBRID, *BLOCKS})

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    # Keys published configs leave to the class (transformers' configuration_<type>.py defaults).
    "gemma3_text": {"vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                        "sliding_window": 4096, "sliding_window_pattern": 6},  # configuration_gemma3.py, d98ac17
    "gpt_neox": {"attention_bias": True},  # configuration_gpt_neox.py
    # Glm4Config's defaults (configuration_glm4.py, huggingface/transformers 008e574): GLM-4-9B's shape
    "glm4": {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
             "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "attention_bias": True},
    # SeedOssConfig's defaults (configuration_seed_oss.py, huggingface/transformers d9aa776)
    "seed_oss": {"vocab_size": 155136, "hidden_size": 4096, "intermediate_size": 27648, "num_hidden_layers": 64,
                 "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128, "attention_bias": True},
    # Ernie4_5_MoeConfig's defaults (configuration_ernie4_5_moe.py, huggingface/transformers f479d93): ERNIE-4.5-21B-A3B
    "ernie4_5_moe": {"vocab_size": 103424, "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
                     "num_attention_heads": 20, "num_key_value_heads": 4, "moe_intermediate_size": 1536, "moe_k": 6,
                     "moe_num_experts": 64, "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_interval": 1},
    # HunYuanMoEV1Config's defaults (configuration_hunyuan_v1_moe.py, huggingface/transformers 6e4054a)
    "hunyuan_v1_moe": {"vocab_size": 290943, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                       "num_attention_heads": 32},
    # PhimoeConfig's defaults (configuration_phimoe.py, huggingface/transformers 040e1a7): Phi-3.5-MoE's shape
    "phimoe": {"vocab_size": 32064, "hidden_size": 4096, "intermediate_size": 6400, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 16, "num_experts_per_tok": 2},
    # Glm4MoeConfig's defaults (configuration_glm4_moe.py, huggingface/transformers c7ec229)
    "glm4_moe": {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
                 "num_attention_heads": 96, "num_key_value_heads": 8, "moe_intermediate_size": 1408, "num_experts_per_tok": 8,
                 "n_shared_experts": 1, "n_routed_experts": 128, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1},
    "olmo3": {"sliding_window": 4096},  # configuration_olmo3.py (4.57.1)
    "starcoder2": {"use_bias": True},  # configuration_starcoder2.py
    # Llama4TextConfig's defaults (configuration_llama4.py, huggingface/transformers 008e574): Scout's shape
    "llama4_text": {"vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
                    "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                    "num_experts_per_tok": 1, "num_local_experts": 16, "interleave_moe_layer_step": 1,
                    "no_rope_layer_interval": 4, "attention_chunk_size": 8192},
}

DROPOUT_KEYS: dict[str, tuple[str | None, str, str | None]] = {
    # where a family keeps its dropout rates: (after attention and the MLP, on the attention probabilities, on the
    # embeddings); transformers' configuration_<type>.py (4.57.1) defaults them to 0.0, GPT-2's to 0.1
    "gpt2": ("resid_pdrop", "attn_pdrop", "embd_pdrop"),
    "gpt_neox": ("hidden_dropout", "attention_dropout", None),
    "falcon": ("hidden_dropout", "attention_dropout", None),
    "phi3": ("resid_pdrop", "attention_dropout", "embd_pdrop"),
    "starcoder2": ("residual_dropout", "attention_dropout", "embedding_dropout"),
    "seed_oss": ("residual_dropout", "attention_dropout", None),  # SeedOssMLP / SeedOssAttention's residual_dropout
}
"""Every other family has `attention_dropout` alone (LlamaConfig and its kin)."""
DROPOUT_DEFAULTS = {"resid_pdrop": 0.1, "attn_pdrop": 0.1, "embd_pdrop": 0.1}  # GPT2Config
CLASS_DROPOUT = {"gpt2": DROPOUT_DEFAULTS,
                 "seed_oss": {"residual_dropout": 0.1, "attention_dropout": 0.1}}  # SeedOssConfig (configuration_seed_oss.py)
"""The families whose configuration class defaults a dropout rate above 0."""


@dataclass(frozen=True)
class Dropout:
    """A config's dropout rates, each checked and named by its key (`DROPOUT_KEYS`)."""

    hidden: float
    """After attention and the MLP; 0 where the family has no key for it."""
    attention: float
    embedding: float | None
    """On the embeddings' output, where the family has its own key; None: none of its own."""
    embedding_key: str | None

    @property
    def any(self) -> bool:
        return any(rate > 0 for rate in (self.hidden, self.attention, self.embedding or 0.0))


def dropout_rates(cfg: Mapping[str, Any], kind: str) -> Dropout:
    """The family's dropout rates, checked: each a number from 0 to below 1."""

    def rate(key: str | None) -> float | None:
        if key is None:
            return None
        value = cfg.get(key)
        if value is None:
            value = CLASS_DROPOUT.get(kind, {}).get(key, 0.0)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
            raise BandwiseError(f"config.json ({kind}): {key}={brief(value)} must be a dropout rate from 0 to below 1")
        return float(value)

    hidden, attention, embedding = DROPOUT_KEYS.get(kind, (None, "attention_dropout", None))
    return Dropout(hidden=rate(hidden) or 0.0, attention=rate(attention) or 0.0, embedding=rate(embedding), embedding_key=embedding)


REFUSED = {
    # model_type: (the config field, what ModelSpec lacks)
    # DeciLM's modeling code (the models' own modeling_decilm.py): each block_configs entry sets its layer's
    # attention (n_heads_in_group, or no_op / replace_with_linear) and FFN (ffn_mult, or no_op)
    "deci": ("block_configs", "per-layer widths and layers without attention or MLP (modeling_decilm.py)"),
    # FalconH1DecoderLayer (modeling_falcon_h1.py) runs its Mamba-2 mixer and attention side by side on one input
    "falcon_h1": ("mamba_d_ssm", "a Mamba-2 mixer beside attention in every layer (modeling_falcon_h1.py)"),
    # MiniMaxDecoderLayer (modeling_minimax.py): MiniMaxLightningAttention on the "linear_attention" layers, its own
    # residual weights (full_attn_alpha_factor, linear_attn_alpha_factor, mlp_alpha_factor and their betas)
    "minimax": ("layer_types", "lightning (linear) attention layers and weighted residuals (modeling_minimax.py)"),
    # DeepseekV32Attention (modeling_deepseek_v32.py): MLA whose keys are picked per query by a lightning indexer of
    # index_n_heads heads of index_head_dim
    "deepseek_v32": ("index_topk", "DeepSeek Sparse Attention, index_topk keys per query chosen by an indexer "
                                   "(modeling_deepseek_v32.py)"),
}


class _Keys:
    """One config.json mapping, its values checked and named by their own keys."""

    def __init__(self, cfg: Mapping[str, Any], kind: str) -> None:
        self.cfg, self.kind = cfg, kind
        self.defaults = CLASS_DEFAULTS.get(kind, {})

    def get(self, key: str) -> Any:
        value = self.cfg.get(key)
        return self.defaults.get(key) if value is None else value

    def integer(self, key: str, value: Any, least: int = 0) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= MAX_DIMENSION:
            raise BandwiseError(f"config.json ({self.kind}): {key}={brief(value)} must be an integer from {least} to {MAX_DIMENSION:,}")
        return value

    def need(self, key: str, *alternatives: str) -> int:
        for k in (key, *alternatives):
            if self.get(k) is not None:
                return self.integer(k, self.get(k), least=1)
        raise BandwiseError(f"config.json ({self.kind}): missing field {' or '.join((key, *alternatives))!r}")

    def opt(self, key: str, default: int = 0) -> int:
        """An optional key, checked here so that a bad value is named by its config.json key."""
        value = self.get(key)
        return default if value is None else self.integer(key, value)

    def flag(self, key: str | bool, default: bool = False) -> bool:
        if isinstance(key, bool):
            return key
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise BandwiseError(f"config.json ({self.kind}): {key}={brief(value)} must be true or false")
        return value


def read_hf_config(cfg: Mapping[str, Any], *, name: str = "hf-model", seq_len: int = 4096) -> tuple[ModelSpec, ConfigRead]:
    """The model a config.json describes, and which of its fields were read (`hf_fields`)."""
    fields = cfg if isinstance(cfg, Fields) else Fields(cfg)
    model = _from_fields(fields, name=name, seq_len=seq_len)
    return model, ConfigRead(read=fields.read(), not_read=fields.not_read())


def from_hf_config(cfg: Mapping[str, Any], *, name: str = "hf-model", seq_len: int = 4096) -> ModelSpec:
    return read_hf_config(cfg, name=name, seq_len=seq_len)[0]


def qwen3_5_text(cfg: Fields) -> Fields:
    """A Qwen3.5 / Qwen3.6 wrapper's language model (Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration
    in transformers): its text_config as `QWEN3_5_WRAPPERS` names it, with the wrapper's tie_word_embeddings where the
    text_config gives none (Qwen3_5Config takes it at the top); the two differing is refused. Its vision_config is not read: the vision encoder is
    not priced."""
    kind = cfg.get("model_type")
    if not isinstance(cfg.get("text_config"), dict):
        raise BandwiseError(f"config.json ({kind}): missing field 'text_config'")
    text = cfg.nested("text_config").with_values(model_type=QWEN3_5_WRAPPERS[kind])
    outer, inner = cfg.get("tie_word_embeddings"), text.get("tie_word_embeddings")
    if outer is not None and inner is not None and bool(outer) != bool(inner):
        # which of the two ties the head differs across transformers versions; published configs give them equal
        raise BandwiseError(f"config.json ({kind}): tie_word_embeddings={brief(outer)} but text_config.tie_word_embeddings="
                            f"{brief(inner)}; make them equal")
    if inner is None and outer is not None:
        text = text.with_values(tie_word_embeddings=outer)
    return text


def _from_fields(cfg: Fields, *, name: str, seq_len: int) -> ModelSpec:
    kind = cfg.get("model_type")
    if isinstance(kind, str) and kind in QWEN3_5_WRAPPERS:  # the multimodal wrapper: its language model
        model = _from_fields(qwen3_5_text(cfg), name=name, seq_len=seq_len)
        return replace(model, source=f"Hugging Face config.json (model_type {kind}: its text_config, "
                                     f"{QWEN3_5_WRAPPERS[kind]}; the vision encoder is not priced)")
    if isinstance(kind, str) and kind in HYBRID:  # layer kinds besides attention (specs/hf_hybrid.py)
        return from_hybrid_config(cfg, name=name, seq_len=seq_len)
    if isinstance(kind, str) and kind in BLOCKS:  # per-layer widths (specs/hf_blocks.py)
        return from_blocks_config(cfg, name=name, seq_len=seq_len)
    if isinstance(kind, str) and kind in REFUSED:
        field, what = REFUSED[kind]
        raise BandwiseError(f"config.json ({kind}): {field} describes {what}, which ModelSpec does not describe; not supported")
    if kind == "llama4":  # the multimodal wrapper: its language model (the vision encoder is not priced)
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise BandwiseError("config.json (llama4): missing field 'text_config'")
        return _from_fields(cfg.nested("text_config").with_values(model_type="llama4_text"), name=name, seq_len=seq_len)
    if kind == "llama4_text":
        return _llama4(_Keys(cfg, kind), name, seq_len)
    if kind == "gemma3":  # the multimodal wrapper: its language model (the SigLIP vision tower is not priced)
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise BandwiseError("config.json (gemma3): missing field 'text_config'")
        return _from_fields(cfg.nested("text_config").with_values(model_type="gemma3_text"), name=name, seq_len=seq_len)
    if not isinstance(kind, str) or kind not in FAMILIES:
        raise BandwiseError(f"config.json: model_type={brief(kind)} is not supported; supported: {', '.join(SUPPORTED)}")
    r = _Keys(cfg, kind)
    fam = FAMILIES[kind]
    if kind == "gpt2":
        if r.flag("add_cross_attention"):
            raise BandwiseError("config.json (gpt2): add_cross_attention=true adds an encoder-decoder attention ModelSpec does not describe")
        r.cfg = cfg.with_values(hidden_size=r.need("n_embd"), num_hidden_layers=r.need("n_layer"),
                                num_attention_heads=r.need("n_head"), intermediate_size=r.opt("n_inner") or 4 * r.need("n_embd"))
    elif kind == "falcon":
        r.cfg = cfg.with_values(num_hidden_layers=r.need("num_hidden_layers", "n_layer"),
                                num_attention_heads=r.need("num_attention_heads", "n_head"),
                                intermediate_size=r.opt("ffn_hidden_size") or 4 * r.need("hidden_size"))
    elif kind == "dbrx":
        return _dbrx(r, name, seq_len)

    layers, heads, h = r.need("num_hidden_layers"), r.need("num_attention_heads"), r.need("hidden_size")
    spec: dict[str, Any] = {
        "name": name, "layers": layers, "hidden": h, "ffn": r.need("intermediate_size"), "heads": heads,
        "kv_heads": r.opt("num_key_value_heads", heads), "head_dim": r.opt("head_dim", 0), "vocab": r.need("vocab_size"),
        "seq_len": seq_len, "gated_mlp": fam.get("gated", True), "tied_embeddings": r.flag("tie_word_embeddings", fam.get("tied", False)),
        "source": f"Hugging Face config.json (model_type {kind})",
    }
    if kind == "falcon":
        spec["kv_heads"] = _falcon_kv_heads(r, heads)
        spec["alibi"] = r.flag("alibi")  # Falcon-RW's ALiBi bias in place of RoPE (FalconAttention, modeling_falcon.py)
    if kind == "gpt2":
        spec["position_embeddings"] = r.need("n_positions")
    if kind in ("hunyuan_v1_dense", "hunyuan_v1_moe") and r.flag("use_cla"):
        raise BandwiseError(f"config.json ({kind}): use_cla=true shares keys and values across layers "
                            "(Hunyuan's cross-layer attention), which ModelSpec does not describe; not supported")
    if kind == "nemotron":  # NemotronMLP: up_proj -> relu2 -> down_proj
        spec["squared_relu_mlp"] = True
    # trained with dropout: each dropout keeps a mask for its backward (`ModelSpec.dropout`)
    spec["dropout"] = dropout_rates(r.cfg, kind).any
    spec.update(window_spec(r, kind, layers, fam.get("window")))
    spec.update(_moe(r, kind, spec))
    probe = ModelSpec(**spec)  # the shapes, checked, before their vectors are counted
    spec["vector_params"] = _vectors(r, kind, probe)
    return ModelSpec(**spec)


def _falcon_kv_heads(r: _Keys, heads: int) -> int:
    """FalconAttention (modeling_falcon.py): the new decoder architecture has `num_kv_heads` key/value
    heads; the old one one head with `multi_query` (Falcon-7B), else one per query head."""
    if r.flag("new_decoder_architecture"):
        return r.opt("num_kv_heads", heads)
    return 1 if r.flag("multi_query", True) else heads


def _moe(r: _Keys, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The MoE fields of each family (empty for a dense one)."""
    layers = spec["layers"]
    if kind in ("mixtral", "gpt_oss", "granitemoe", "phimoe"):
        # granitemoe's experts are `intermediate_size` wide (GraniteMoeParallelExperts), as Mixtral's
        return {"experts": r.need("num_local_experts"), "top_k": r.need("num_experts_per_tok", "experts_per_token"), "expert_ffn": spec["ffn"]}
    if kind == "olmoe":  # OlmoeSparseMoeBlock: num_experts experts of intermediate_size, no dense layer
        return {"experts": r.need("num_experts"), "top_k": r.need("num_experts_per_tok"), "expert_ffn": spec["ffn"]}
    if kind in ("qwen2_moe", "qwen3_moe"):
        # Layer i is sparse when i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
        # (Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer); only leading dense layers fit ModelSpec.
        step = r.opt("decoder_sparse_step", 1)
        only = r.get("mlp_only_layers") or []
        if not isinstance(only, list) or step != 1 or sorted(only) != list(range(len(only))):
            key = "decoder_sparse_step" if step != 1 else "mlp_only_layers"
            raise BandwiseError(
                f"config.json ({kind}): {key}={brief(r.get(key))} interleaves dense and MoE layers, which ModelSpec "
                "does not describe; only leading dense layers are supported"
            )
        fields = {"experts": r.need("num_experts"), "top_k": r.need("num_experts_per_tok"),
                      "expert_ffn": r.need("moe_intermediate_size"), "dense_layers": len(only)}
        if kind == "qwen2_moe":
            # Qwen2MoeSparseMoeBlock always holds one shared expert of shared_expert_intermediate_size;
            # Qwen3MoeSparseMoeBlock has none, whatever the config says (modular_qwen3_moe.py, b282e23).
            shared = r.need("shared_expert_intermediate_size")
            fields.update(shared_experts=1, shared_expert_ffn=shared)
        return fields
    if kind == "glm4_moe":
        return _glm4_moe(r, layers)
    if kind == "ernie4_5_moe":
        return _ernie_moe(r, layers)
    if kind == "hunyuan_v1_moe":
        return _hunyuan_moe(r, spec["ffn"])
    if kind in DEEPSEEK:
        # MoE on layer i when i >= first_k_dense_replace and i % moe_layer_freq == 0 (DeepSeek's
        # modeling_deepseek.py); a frequency above 1 puts dense layers between MoE ones.
        freq = r.opt("moe_layer_freq", 1)
        if freq != 1:
            raise BandwiseError(
                f"config.json ({kind}): moe_layer_freq={freq} puts dense layers between MoE layers, which ModelSpec "
                "does not describe; only leading dense layers (first_k_dense_replace) are supported"
            )
        if r.flag("attention_bias"):
            raise BandwiseError(f"config.json ({kind}): attention_bias=true on the MLA projections is not supported")
        fields = {
            "experts": r.need("n_routed_experts"), "top_k": r.need("num_experts_per_tok"), "expert_ffn": r.need("moe_intermediate_size"),
            "shared_experts": r.opt("n_shared_experts", 0), "dense_layers": r.opt("first_k_dense_replace", 0),
            "q_lora_rank": r.opt("q_lora_rank", 0), "kv_lora_rank": r.need("kv_lora_rank"),
            "qk_nope_head_dim": r.need("qk_nope_head_dim"), "qk_rope_head_dim": r.need("qk_rope_head_dim"),
            "v_head_dim": r.need("v_head_dim"), "kv_heads": 0, "mtp_depth": r.opt("num_nextn_predict_layers", 0),
        }
        groups = r.opt("n_group", 1)
        if groups > 1:
            fields.update(expert_groups=groups, groups_per_token=r.opt("topk_group", groups))
        if fields["dense_layers"] >= layers:
            raise BandwiseError(f"config.json ({kind}): first_k_dense_replace={fields['dense_layers']} leaves no MoE layer of {layers}")
        return fields
    return {}


def _glm4_moe(r: _Keys, layers: int) -> dict[str, Any]:
    """GLM-4.5 (modeling_glm4_moe.py, huggingface/transformers a0699c9): Glm4MoeDecoderLayer i is a
    Glm4MoeMoE when i >= first_k_dense_replace, else a SwiGLU MLP of intermediate_size; Glm4MoeMoE holds
    n_routed_experts SwiGLU experts of moe_intermediate_size, a router h -> E without bias (its
    e_score_correction_bias is a buffer, not a parameter) and one shared MLP of
    moe_intermediate_size · n_shared_experts. The checkpoints' num_nextn_predict_layers MTP layers sit
    past num_hidden_layers (transformers does not build them): `mtp_depth`, as DeepSeek-V3's."""
    fields = {"experts": r.need("n_routed_experts"), "top_k": r.need("num_experts_per_tok"),
              "expert_ffn": r.need("moe_intermediate_size"), "shared_experts": r.opt("n_shared_experts", 0),
              "dense_layers": r.opt("first_k_dense_replace", 0), "mtp_depth": r.opt("num_nextn_predict_layers", 0)}
    if fields["dense_layers"] >= layers:
        raise BandwiseError(f"config.json (glm4_moe): first_k_dense_replace={fields['dense_layers']} leaves no MoE layer of {layers}")
    groups = r.opt("n_group", 1)
    if groups > 1:
        fields.update(expert_groups=groups, groups_per_token=r.opt("topk_group", groups))
    return fields


def _hunyuan_moe(r: _Keys, ffn: int) -> dict[str, Any]:
    """Hunyuan MoE (modular_hunyuan_v1_moe.py, 3404f51): num_experts and moe_topk, each one value or one per layer
    (the same on every layer here); experts and the shared MLP both of intermediate_size, as that code builds them. A
    config whose moe_intermediate_size or num_shared_expert says otherwise is refused rather than guessed at."""
    def uniform(key: str, default: int) -> int:
        value = r.cfg.get(key)
        value = default if value is None else value
        values = value if isinstance(value, list) else [value]
        if not values or len(set(map(repr, values))) != 1:
            raise BandwiseError(f"config.json (hunyuan_v1_moe): {key}={brief(value)} differs from layer to layer, which "
                                "ModelSpec does not describe; not supported")
        return r.integer(key, values[0], least=1)

    widths = r.cfg.get("moe_intermediate_size")
    if widths is not None and {v for v in (widths if isinstance(widths, list) else [widths])} != {ffn}:
        raise BandwiseError(f"config.json (hunyuan_v1_moe): moe_intermediate_size={brief(widths)} differs from intermediate_size="
                            f"{ffn}, the width transformers' HunYuanMoEV1MLP gives every expert; not supported")
    if uniform("num_shared_expert", 1) != 1:
        raise BandwiseError(f"config.json (hunyuan_v1_moe): num_shared_expert={brief(r.cfg.get('num_shared_expert'))} is not 1, "
                            "the one shared_mlp transformers builds; not supported")
    return {"experts": uniform("num_experts", 1), "top_k": uniform("moe_topk", 1), "expert_ffn": ffn, "shared_experts": 1}


def ernie_moe_layers(r: _Keys, layers: int) -> list[bool]:
    """Which ERNIE 4.5 layers are Ernie4_5_MoeSparseMoeBlock (modular_ernie4_5_moe.py, a4d4492): layer i when
    (i + 1) % moe_layer_interval == 0 and moe_layer_start_index <= i <= moe_layer_end_index (-1 or absent: the last)."""
    interval, start = r.need("moe_layer_interval"), r.opt("moe_layer_start_index", 0)
    end = r.cfg.get("moe_layer_end_index")
    end = layers - 1 if end is None or end == -1 else r.integer("moe_layer_end_index", end)
    return [(i + 1) % interval == 0 and start <= i <= end for i in range(layers)]


def _ernie_moe(r: _Keys, layers: int) -> dict[str, Any]:
    """ERNIE 4.5's MoE layers (`ernie_moe_layers`): moe_num_experts SwiGLU experts of moe_intermediate_size, top moe_k,
    a router h -> E without bias, and one shared MLP of moe_intermediate_size · moe_num_shared_experts; the other
    layers a SwiGLU MLP of intermediate_size. Only leading dense layers fit ModelSpec."""
    moe = ernie_moe_layers(r, layers)
    dense = moe.index(True) if any(moe) else layers
    if not any(moe) or not all(moe[dense:]):
        key = "moe_layer_interval" if r.get("moe_layer_interval") != 1 else "moe_layer_end_index"
        raise BandwiseError(f"config.json (ernie4_5_moe): {key}={brief(r.get(key))} leaves dense layers between or after the "
                            "MoE layers, which ModelSpec does not describe; only leading dense layers are supported")
    return {"experts": r.need("moe_num_experts"), "top_k": r.need("moe_k"), "expert_ffn": r.need("moe_intermediate_size"),
            "shared_experts": r.opt("moe_num_shared_experts", 0), "dense_layers": dense}


def _vectors(r: _Keys, kind: str, m: ModelSpec) -> int:
    """Norm and bias parameters of the main model (not of multi-token-prediction modules), from the
    family's modelling code: per layer its norms, q/k norms and biases, then the final norm."""
    fam = FAMILIES[kind]
    h, H, kv, d, f = m.hidden, m.heads, m.n_kv_heads, m.d_head, m.ffn
    norm = 0 if fam.get("norm_free") else 2 * h if fam.get("norm_bias") else h
    per_layer = fam["norms"] * norm
    if kind == "falcon" and (r.flag("new_decoder_architecture") and r.opt("num_ln_in_parallel_attn", 2) == 2 or not r.flag("parallel_attn", True)):
        per_layer = 2 * norm  # ln_attn + ln_mlp, or input + post-attention norms
    qk = fam.get("qk_norm")
    if qk == "head":  # Qwen3 / Gemma 3: one RMSNorm of head_dim shared by all heads
        per_layer += 2 * d
    elif qk == "all":  # OLMo 2: RMSNorm over all heads' q (H·d) and k (kv·d)
        per_layer += H * d + kv * d
    elif qk == "olmoe":  # OlmoeAttention: q_norm over h, k_norm over h / H · kv
        per_layer += h + h // H * kv
    elif qk == "use_qk_norm" and r.flag("use_qk_norm"):  # GLM-4.5: q_norm, k_norm of head_dim
        per_layer += 2 * d
    elif qk == "qk_norm" and r.flag("qk_norm", True):  # Apertus: q_norm, k_norm of head_dim (ApertusConfig: true)
        per_layer += 2 * d
    elif qk == "cohere" and r.flag("use_qk_norm"):  # CohereLayerNorm of (heads, head_dim)
        per_layer += H * d + kv * d
    if r.flag(fam.get("qkv", False)):
        per_layer += H * d + 2 * kv * d
    if r.flag(fam.get("o", False)):
        per_layer += h
    mlp_bias = r.flag(fam.get("mlp", False))
    if m.is_mla:  # DeepSeek: q_a_layernorm (q_lora_rank) and kv_a_layernorm (kv_lora_rank)
        per_layer += m.q_lora_rank + m.kv_lora_rank
    total = m.layers * per_layer + norm  # the final norm
    if mlp_bias:
        total += m.n_dense_mlp_layers * ((2 if m.gated_mlp else 1) * f + h)
    if kind == "gpt_oss":
        # GptOssAttention.sinks (H); GptOssTopKRouter.bias (E); GptOssExperts biases (E·2f, E·h)
        total += m.layers * (H + m.experts + m.experts * (2 * m.expert_ffn + h))
    if kind == "qwen2_moe":  # shared_expert_gate, Linear(h, 1)
        total += m.moe_layers * h
    if kind == "phimoe" and r.flag("lm_head_bias"):  # PhimoeForCausalLM.lm_head's bias
        total += m.vocab
    if kind == "apertus" and r.get("hidden_act") in (None, "xielu"):  # XIELUActivation.alpha_p, alpha_n: (1,) each
        total += 2 * m.layers
    if kind == "ernie4_5_moe":
        # Ernie4_5_MoeStatics.e_score_correction_bias, an nn.Parameter (1, E) held frozen, on each MoE layer; with use_bias,
        # every expert's and the shared MLP's gate/up/down biases and lm_head's (ModelSpec counts one output matrix)
        total += m.moe_layers * m.experts
        if mlp_bias:
            shared = m.shared_experts * m.expert_ffn
            total += m.moe_layers * (m.experts * (2 * m.expert_ffn + h) + (2 * shared + h if shared else 0)) + m.vocab
    return total


def _dbrx(r: _Keys, name: str, seq_len: int) -> ModelSpec:
    """DBRX (modeling_dbrx.py): `d_model`, `n_heads`, `n_layers`, `attn_config.kv_n_heads`,
    `ffn_config` (moe_num_experts experts of ffn_hidden_size, moe_top_k); bias-free LayerNorms."""
    attn, ffn = r.get("attn_config") or {}, r.get("ffn_config") or {}
    if not isinstance(attn, dict) or not isinstance(ffn, dict):
        raise BandwiseError("config.json (dbrx): attn_config and ffn_config must be mappings")
    cfg = r.cfg if isinstance(r.cfg, Fields) else Fields(r.cfg)
    sub = _Keys(ChainMap(cfg.nested("ffn_config"), cfg.nested("attn_config")), "dbrx")
    h, layers, heads = r.need("d_model"), r.need("n_layers"), r.need("n_heads")
    f = sub.need("ffn_hidden_size")
    m = ModelSpec(
        name=name, layers=layers, hidden=h, ffn=f, heads=heads, kv_heads=sub.opt("kv_n_heads", 1), vocab=r.need("vocab_size"),
        seq_len=seq_len, tied_embeddings=r.flag("tie_word_embeddings"), experts=sub.need("moe_num_experts"),
        top_k=sub.need("moe_top_k"), expert_ffn=f, vector_params=(2 * layers + 1) * h,
        source="Hugging Face config.json (model_type dbrx)",
    )
    return m


def _layer_list(r: _Keys, key: str, layers: int) -> list[int] | None:
    """A config's per-layer list of integers (`moe_layers`, `no_rope_layers`), checked; None if absent."""
    value = r.cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise BandwiseError(f"config.json ({r.kind}): {key}={brief(value)} must be a list of integers")
    return value


def _llama4(r: _Keys, name: str, seq_len: int) -> ModelSpec:
    """Llama 4's language model (transformers `modeling_llama4.py`, `Llama4TextDecoderLayer`):

    - layer i is MoE when i is in `moe_layers` (default: every `interleave_moe_layer_step`-th,
      from step - 1): `Llama4TextMoe`, a router h -> E without bias (top-k scores through a
      sigmoid), E routed experts of `intermediate_size` (gate_up_proj E·h·2f, down_proj E·f·h) and
      one shared expert of `intermediate_size`; the other layers a SwiGLU MLP of
      `intermediate_size_mlp`. Scout: 48 MoE layers; Maverick (step 2): 24 MoE and 24 dense;
    - attention q, k, v, o (bias `attention_bias`); layer i uses RoPE when `no_rope_layers[i]` is
      truthy (default: all but every `no_rope_layer_interval`-th, counting from 1), and those
      layers are `chunked_attention` (`layer_types`), the others global; the QK norm of the RoPE
      layers (`use_qk_norm`) is an L2 norm without weights (`Llama4TextL2Norm`), no parameters;
    - two RMSNorms a layer and a final one; lm_head untied by default.
    """
    layers, h, heads = r.need("num_hidden_layers"), r.need("hidden_size"), r.need("num_attention_heads")
    step = r.need("interleave_moe_layer_step")
    moe = _layer_list(r, "moe_layers", layers)
    moe = set(range(step - 1, layers, step)) if moe is None else set(moe)
    if not moe <= set(range(layers)):
        raise BandwiseError(f"config.json (llama4_text): moe_layers={brief(sorted(moe))} must be layer indices below num_hidden_layers={layers}")
    types = r.cfg.get("layer_types")
    if types is not None:
        if not (isinstance(types, list) and len(types) == layers and set(types) <= {"chunked_attention", "full_attention"}):
            raise BandwiseError(f"config.json (llama4_text): layer_types={brief(types)} must list {layers} entries, "
                                "each \"chunked_attention\" or \"full_attention\"")
        chunked = types.count("chunked_attention")
    else:
        rope = _layer_list(r, "no_rope_layers", layers)  # 1: the layer uses RoPE (configuration_llama4.py)
        if rope and len(rope) != layers:
            raise BandwiseError(f"config.json (llama4_text): no_rope_layers has {len(rope)} entries; num_hidden_layers={layers}")
        if not rope:  # absent or empty: the class's default
            interval = r.need("no_rope_layer_interval")
            rope = [int((i + 1) % interval != 0) for i in range(layers)]
        chunked = sum(1 for v in rope if v)
    # an explicit null turns chunking off (the class's default, 8192, stands only where the key is absent)
    chunk = 0 if "attention_chunk_size" in r.cfg and r.cfg["attention_chunk_size"] is None else r.opt("attention_chunk_size", 0)
    f = r.need("intermediate_size")
    spec: dict[str, Any] = {
        "name": name, "layers": layers, "hidden": h, "ffn": r.need("intermediate_size_mlp"), "heads": heads,
        "kv_heads": r.opt("num_key_value_heads", heads), "head_dim": r.opt("head_dim", 0), "vocab": r.need("vocab_size"),
        "seq_len": seq_len, "tied_embeddings": r.flag("tie_word_embeddings"),
        "attention_chunk": chunk if chunked else 0, "chunked_layers": 0 if not chunk or chunked == layers else chunked,
        "source": "Hugging Face config.json (model_type llama4)",
    }
    if moe:
        spec.update(experts=r.need("num_local_experts"), top_k=r.need("num_experts_per_tok"), expert_ffn=f,
                    shared_experts=1, shared_expert_ffn=f, dense_layers=layers - len(moe),
                    interleaved_dense=moe != set(range(layers - len(moe), layers)))
    probe = ModelSpec(**spec)
    per_layer = 2 * h + ((heads + 2 * probe.n_kv_heads) * probe.d_head + h if r.flag("attention_bias") else 0)
    return ModelSpec(**spec, vector_params=layers * per_layer + h)


def window_spec(r: _Keys, kind: str, layers: int, rule: Any) -> dict[str, int]:
    """`sliding_window` and `sliding_layers` of a ModelSpec from a config's window keys (module
    docstring); {} when no layer is windowed. `rule` is the class's default (FAMILIES)."""
    window, windowed = _window_layers(r, kind, layers, rule)
    count = sum(windowed)
    if not count:
        return {}
    return {"sliding_window": window, "sliding_layers": 0 if count == layers else count}


def window_layers(cfg: Mapping[str, Any]) -> tuple[int, tuple[bool, ...]]:
    """The window of a config.json and, layer by layer, whether it is windowed: what the planner
    prices (`window_spec`, the same reading), for the exports to state layer by layer. (0, ()) when
    no layer is windowed or the family reads no window."""
    fields = cfg if isinstance(cfg, Fields) else Fields(cfg)
    kind = fields.get("model_type")
    if kind == "gemma3":
        fields, kind = fields.nested("text_config").with_values(model_type="gemma3_text"), "gemma3_text"
    if not isinstance(kind, str) or kind not in FAMILIES:
        return 0, ()
    layers = fields.get("num_hidden_layers", fields.get("n_layer"))
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        return 0, ()
    window, windowed = _window_layers(_Keys(fields, kind), kind, layers, FAMILIES[kind].get("window"))
    return (window, windowed) if any(windowed) else (0, ())


def _window_layers(r: _Keys, kind: str, layers: int, rule: Any) -> tuple[int, tuple[bool, ...]]:
    """(window, windowed per layer) by the module docstring's rules; (0, all False) for none."""
    none = (0, (False,) * layers)
    types = r.cfg.get("layer_types")
    kinds = {"sliding_attention", "full_attention"}
    if types is not None and not (isinstance(types, list) and len(types) == layers and all(t in kinds for t in types)):
        raise BandwiseError(
            f"config.json ({kind}): layer_types={brief(types)} must list num_hidden_layers={layers} entries, "
            "each \"sliding_attention\" or \"full_attention\" (other layer kinds are not supported)"
        )
    if rule is None:
        return none  # the class reads no window
    switch = r.flag("use_sliding_window", True)
    if not switch or r.get("sliding_window") is None:
        return none
    window = r.integer("sliding_window", r.get("sliding_window"), 1)
    if types is not None:
        windowed = [t == "sliding_attention" for t in types]
    elif r.get("sliding_window_pattern") is not None:
        # Gemma 3 / Cohere 2: layer i is global when (i + 1) % pattern == 0
        n = r.integer("sliding_window_pattern", r.get("sliding_window_pattern"), 1)
        windowed = [(i + 1) % n != 0 for i in range(layers)]
    elif rule == "nope":  # SmolLM3Config: windowed where no_rope_layers[i] is 0 (default: every interval-th layer)
        if r.cfg.get("use_sliding_window") is not True:
            return none
        rope = _layer_list(r, "no_rope_layers", layers)
        if rope is None or len(rope) != layers:
            interval = r.opt("no_rope_layer_interval", 4) or 4
            rope = [int((i + 1) % interval != 0) for i in range(layers)]
        windowed = [not v for v in rope]
    elif rule == "qwen":
        if r.cfg.get("use_sliding_window") is not True:  # the Qwen classes' default is off
            return none
        first = r.cfg.get("max_window_layers")
        first = QWEN_MAX_WINDOW_LAYERS if first is None else r.integer("max_window_layers", first)
        windowed = [i >= first for i in range(layers)]
    elif isinstance(rule, int):  # every rule-th layer full, counting from 1 (gpt-oss, Gemma 2: layers 0, 2, 4 windowed)
        windowed = [(i + 1) % rule != 0 for i in range(layers)]
    else:  # every layer
        windowed = [True] * layers
    return window, tuple(windowed)
