"""What a job must say about a model beyond the shape the planner prices: its positions (RoPE θ
and scaling), norms, biases and router. `ModelSpec` holds the shape; this holds the rest, for the
engines' exports only.

Where it comes from:
- a model preset: `PRESETS`, each from the source its preset cites (a Hugging Face config.json or
  the paper);
- a Hugging Face config.json: `from_hf`, its own keys, with the defaults of the transformers
  configuration class of its `model_type` where a key is absent;
- anything else (a YAML file of ModelSpec fields, a preset with a changed shape): nothing; an
  export that needs these fields refuses and names the first it lacks.

A model read from a file is the preset only when its shape and these fields are the preset's
(`is_preset`): its folder's name plays no part.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.specs.hf import FAMILIES, QWEN3_5_WRAPPERS, dropout_rates, window_layers
from bandwise.specs.hf_blocks import BLOCKS
from bandwise.specs.hf_hybrid import HYBRID, linear_layers
from bandwise.specs.model import ModelSpec, brief


@dataclass(frozen=True)
class Rope:
    """Rotary position embedding: the base θ, and a frequency scaling if any."""

    theta: float
    scaling: str = ""
    """'' none; 'llama3' (Llama 3.1's wavelength-banded scaling); 'yarn'; 'linear' (positions / factor)."""
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_positions: int = 0
    """The context the scaling is relative to (original_max_position_embeddings)."""
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 0.0
    truncate: bool = True
    """YaRN's correction range rounded to whole dimensions (transformers' `truncate`, default true;
    gpt-oss sets false)."""


@dataclass(frozen=True)
class Architecture:
    family: str
    """The Hugging Face model_type whose block this is (llama, qwen3, deepseek_v3, ...)."""
    rope: Rope | None
    """None: learned absolute positions."""
    norm: str = "RMSNorm"
    norm_eps: float = 1e-5
    qk_norm: bool = False
    """A norm on each head's query and key (Qwen3)."""
    qkv_bias: bool = False
    """Biases on the query, key and value projections only (Qwen2)."""
    bias: bool = False
    """Biases on every linear layer and norm (GPT-2/3)."""
    gated: bool = True
    """SwiGLU MLP (SiLU gate); else a two-matrix MLP of `activation`."""
    activation: str = "silu"
    """The MLP's activation: 'silu' (SwiGLU), 'quick_gelu' (gpt-oss's gated x·σ(1.702·x)), 'gelu_tanh' (GELU's tanh approximation: transformers'
    gelu_new and gelu_pytorch_tanh, GPT-2's), 'gelu' (the exact, erf GELU: transformers' gelu),
    'relu2' (squared ReLU, Nemotron-H's)."""
    positions: int = 0
    """Rows of a learned position table (GPT-2's n_positions); 0 where positions are rotary or the
    table is as long as the training sequence."""
    hidden_dropout: float | None = None
    """Dropout after attention and the MLP (GPT-2's resid_pdrop); None: not stated, the engine's default
    where the model trains with dropout (`ModelSpec.dropout`)."""
    attention_dropout: float | None = None
    """Dropout on the attention probabilities; None as `hidden_dropout`."""
    sinks: bool = False
    """A learned sink logit per head in each attention softmax (gpt-oss's `sinks`)."""
    glu_offset: float = 0.0
    """Added to the GLU's linear half before the product: act(gate)·(up + offset) (gpt-oss: 1)."""
    glu_clamp: float = 0.0
    """The GLU's gate clamped above and its linear half on both sides at this value (gpt-oss's
    `swiglu_limit` 7); 0: no clamp."""
    router: str = ""
    """MoE gate scores: 'softmax' or 'sigmoid'; '' for a dense model."""
    topk_norm: bool = True
    """The chosen experts' weights renormalized to sum to 1."""
    expert_bias: bool = False
    """Aux-loss-free balancing: a per-expert bias added to the scores for the choice only (DeepSeek-V3)."""
    routed_scale: float = 1.0
    """Factor on the routed experts' weights."""
    shared_expert_gate: bool = False
    """A sigmoid gate on the shared expert's output (Qwen2-MoE)."""
    sliding_window: int = 0
    """Attention window in tokens; 0 none."""
    local_rope_theta: float = 0.0
    """RoPE base of the windowed layers where it differs (Gemma 3's rope_local_base_freq); 0: `rope.theta`."""
    hybrid_pattern: str = ""
    """A hybrid's layers in order, in Nemotron-H's letters (`hybrid_override_pattern`): M a Mamba-2
    mixer, * attention, - an MLP, one block a layer; '' for a transformer."""
    hybrid_mlp: bool = False
    """Every layer of `hybrid_pattern` is its mixer (M or *) followed by an MLP of `ModelSpec.ffn` (Bamba's
    BambaDecoderLayer), which an engine of Nemotron-H's letters states as the mixer's letter then '-'."""
    blocks_file: str = ""
    """The config.json whose `block_configs` give each layer its widths (Nemotron-NAS), for an engine
    that reads the file itself (Megatron-LM's --heterogeneous-layers-config-path); '' where layers are alike."""
    window_layers: tuple[bool, ...] = ()
    """Which layers the window covers, in order (`specs.hf.window_layers`); () with a window: every layer."""
    linear_layers: tuple[bool, ...] = ()
    """Which layers are Gated DeltaNet layers rather than attention, in order (`specs.hf_hybrid.linear_layers`,
    the planner's own reading); () where every layer attends. The mixer's widths are `ModelSpec.linear_attention`."""
    rotary_fraction: float = 1.0
    """The share of each head's dimensions the rotary embedding turns (transformers' partial_rotary_factor;
    Qwen3-Next: 0.25, Phi-4-mini: 0.75; GPT-NeoX's rotary_pct); the rest carry no position."""
    nope_layers: tuple[bool, ...] = ()
    """Which layers attend without RoPE, in order (SmolLM3's no_rope_layers entries of 0); (): RoPE in every layer."""
    rope_interleaved: bool = False
    """RoPE turns adjacent channel pairs (2i, 2i + 1) of each head (GLM's and ERNIE 4.5's apply_rotary_pos_emb, RoFormer's
    layout), not the pairs (i, i + d/2) of the two halves (Llama's rotate_half)."""
    norm_offset: bool = False
    """Every norm of the residual stream and the q/k norms computed as x̂·(1 + w) with w from zero
    (Qwen3NextRMSNorm's zero-centered weights; Nemotron-4's NemotronLayerNorm1P, a LayerNorm with bias), not x̂·w."""
    unsupported: tuple[str, ...] = ()
    """Parts no engine here writes, each named as its source names it."""
    source: str = ""


def _llama31(size: str) -> Architecture:
    return Architecture(
        family="llama", rope=Rope(500_000.0, "llama3", 8.0, 1.0, 4.0, 8192), norm_eps=1e-5,
        source=f"meta-llama/Meta-Llama-3.1-{size} config.json: rope_theta 500000, rope_scaling llama3 (factor 8, "
               "low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192), rms_norm_eps 1e-5, "
               "no attention or MLP bias",
    )


PRESETS: dict[str, Architecture] = {
    # the sources the presets cite (specs/presets/models.yaml); the debug presets are bandwise's
    # own CPU models and have none
    "llama3-8b": _llama31("8B"),
    "llama3-70b": _llama31("70B"),
    "llama3-405b": _llama31("405B"),
    "deepseek-v3": Architecture(
        family="deepseek_v3", rope=Rope(10_000.0, "yarn", 40.0, original_positions=4096, beta_fast=32.0, beta_slow=1.0,
                                        mscale=1.0, mscale_all_dim=1.0),
        norm_eps=1e-6, router="sigmoid", topk_norm=True, expert_bias=True, routed_scale=2.5,
        source="deepseek-ai/DeepSeek-V3 config.json: rope_theta 10000, rope_scaling yarn (factor 40, original 4096, "
               "beta_fast 32, beta_slow 1, mscale 1, mscale_all_dim 1), rms_norm_eps 1e-6, scoring_func sigmoid, "
               "topk_method noaux_tc (expert bias), norm_topk_prob true, routed_scaling_factor 2.5",
    ),
    "kimi-k2": Architecture(
        family="kimi_k2", rope=Rope(50_000.0, "yarn", 32.0, original_positions=4096, beta_fast=1.0, beta_slow=1.0,
                                    mscale=1.0, mscale_all_dim=1.0),
        norm_eps=1e-6, router="sigmoid", topk_norm=True, expert_bias=True, routed_scale=2.827,
        source="moonshotai/Kimi-K2-Instruct config.json: rope_theta 50000, rope_scaling yarn (factor 32, original 4096, "
               "beta_fast 1, beta_slow 1, mscale 1, mscale_all_dim 1), rms_norm_eps 1e-6, scoring_func sigmoid, "
               "topk_method noaux_tc, norm_topk_prob true, routed_scaling_factor 2.827",
    ),
    "mixtral-8x7b": Architecture(
        family="mixtral", rope=Rope(1_000_000.0), norm_eps=1e-5, router="softmax", topk_norm=True,
        source="mistralai/Mixtral-8x7B-v0.1 config.json: rope_theta 1e6, rms_norm_eps 1e-5, sliding_window null; "
               "the top-2 softmax weights renormalized (transformers MixtralSparseMoeBlock)",
    ),
    "qwen3-235b-a22b": Architecture(
        family="qwen3_moe", rope=Rope(1_000_000.0), norm_eps=1e-6, qk_norm=True, router="softmax", topk_norm=True,
        source="Qwen/Qwen3-235B-A22B config.json: rope_theta 1e6, rms_norm_eps 1e-6, attention_bias false, "
               "norm_topk_prob true; RMSNorm on each head's query and key (transformers Qwen3MoeAttention)",
    ),
    "gpt3-175b": Architecture(
        family="gpt3", rope=None, norm="LayerNorm", norm_eps=1e-5, bias=True, gated=False, activation="gelu_tanh",
        source="Brown et al. 2020, Sec. 2.1: GPT-2's architecture (learned positions, pre-LayerNorm with epsilon 1e-5, "
               "biases, GELU, which GPT-2's code computes by its tanh approximation: transformers' gelu_new); the "
               "planner prices dense attention in every layer, and so does the export",
    ),
    "palm-540b": Architecture(
        family="palm", rope=Rope(10_000.0), norm="LayerNorm", norm_eps=1e-6,
        unsupported=("parallel attention and MLP blocks (PaLM Sec. 2, 'Parallel Layers')",
                     "no biases in the layer norms (PaLM Sec. 2, 'No Biases')"),
        source="Chowdhery et al. 2022, Sec. 2",
    ),
}

TRANSFORMERS_DEFAULTS: dict[str, dict[str, Any]] = {
    # model_type: the defaults of its transformers configuration class (configuration_<type>.py)
    # for the keys read below, used when a config.json leaves one out
    "llama": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6},
    "mistral": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6},
    "qwen2": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6},
    "qwen3": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6},
    "mixtral": {"rope_theta": 1e6, "rms_norm_eps": 1e-5},
    "qwen2_moe": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "norm_topk_prob": False},
    "qwen3_moe": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "norm_topk_prob": False},
    "deepseek_v3": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                    "norm_topk_prob": True, "routed_scaling_factor": 2.5},
    "kimi_k2": {"rope_theta": 50000.0, "rms_norm_eps": 1e-6, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                "norm_topk_prob": True, "routed_scaling_factor": 2.827},
    "gpt_oss": {"rope_theta": 150000.0, "rms_norm_eps": 1e-5, "swiglu_limit": 7.0},
    # transformers 4.57.1 configuration classes (InternLM2's is the model's own remote code)
    "deepseek_v2": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "scoring_func": "softmax", "topk_method": "greedy",
                    "norm_topk_prob": False, "routed_scaling_factor": 1.0},
    "phi3": {"rope_theta": 10000.0, "rms_norm_eps": 1e-5, "partial_rotary_factor": 1.0},
    "internlm2": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "bias": True},
    "granite": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "embedding_multiplier": 1.0, "residual_multiplier": 1.0,
                "attention_multiplier": 1.0, "logits_scaling": 1.0},
    "granitemoe": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "embedding_multiplier": 1.0, "residual_multiplier": 1.0,
                   "attention_multiplier": 1.0, "logits_scaling": 1.0},
    "olmo2": {"rope_theta": 10000.0, "rms_norm_eps": 1e-5},
    "olmo3": {"rope_theta": 10000.0, "rms_norm_eps": 1e-5},
    "olmoe": {"rope_theta": 10000.0, "rms_norm_eps": 1e-5, "norm_topk_prob": False},
    "gemma": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh"},
    "gemma2": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh",
               "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0},
    "gemma3_text": {"rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh"},
    "cohere": {"rope_theta": 10000.0, "layer_norm_eps": 1e-5, "logit_scale": 0.0625},
    "cohere2": {"rope_theta": 10000.0, "layer_norm_eps": 1e-5, "logit_scale": 0.0625},
    "gpt2": {"layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "n_positions": 1024},
    "gpt_neox": {"rotary_emb_base": 10000.0, "layer_norm_eps": 1e-5, "hidden_act": "gelu", "rotary_pct": 0.25,
                 "use_parallel_residual": True},
    # FalconMLP's activation is nn.GELU(), the exact one; its config has no key for it
    "falcon": {"rope_theta": 10000.0, "layer_norm_epsilon": 1e-5, "parallel_attn": True, "alibi": False, "hidden_act": "gelu"},
    "starcoder2": {"rope_theta": 10000.0, "norm_epsilon": 1e-5, "hidden_act": "gelu_pytorch_tanh", "use_bias": True},
    "dbrx": {},
    "llama4": {}, "llama4_text": {}, "gemma3": {},  # gemma3: its text_config, as gemma3_text
}
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
"""transformers' activation names (activations.py, ACT2FN): gelu_new and gelu_pytorch_tanh are GELU's tanh
approximation, gelu the exact (erf) one."""
ACT_KEYS = {"gpt2": "activation_function", "gemma2": "hidden_activation", "gemma3_text": "hidden_activation"}
"""Where a family names its MLP's activation (else hidden_act)."""
NORM_EPS_KEYS = {"gpt2": "layer_norm_epsilon", "falcon": "layer_norm_epsilon", "starcoder2": "norm_epsilon",
                 "gpt_neox": "layer_norm_eps", "cohere": "layer_norm_eps", "cohere2": "layer_norm_eps"}
"""Where a family keeps its norm's epsilon (else rms_norm_eps); these are LayerNorm families."""
WHOLE_MODEL_PARTS: dict[str, str] = {
    # parts of a family no export here writes, named as its config and modelling code name them
    "gemma": "embeddings scaled by sqrt(hidden_size) and RMSNorm applied as (1 + weight) (Gemma)",
    "gemma2": "post_attention_layernorm and post_feedforward_layernorm on the block outputs (Gemma 2's sandwich norms)",
    "gemma3_text": "post_attention_layernorm and post_feedforward_layernorm on the block outputs (Gemma 3's sandwich norms)",
    "olmo2": "post_attention_layernorm and post_feedforward_layernorm on the block outputs, no norm before them (OLMo 2)",
    "olmo3": "post_attention_layernorm and post_feedforward_layernorm on the block outputs, no norm before them (OLMo 3)",
    "olmoe": "q_norm and k_norm over all heads' projections (OLMoE)",
    "cohere": "attention and the MLP in parallel from one LayerNorm (Cohere)",
    "cohere2": "attention and the MLP in parallel from one LayerNorm (Cohere 2)",
    "dbrx": "attn_config.clip_qkv and bias-free LayerNorms (DBRX)",
    "llama4_text": "chunked attention on the RoPE layers and no_rope_layer_interval layers without positions (Llama 4)",
    "llama4": "chunked attention on the RoPE layers and no_rope_layer_interval layers without positions (Llama 4)",
}


def from_hf(cfg: dict[str, Any], where: str = "config.json") -> Architecture:
    """The architecture a Hugging Face config.json describes (its model_type is one `specs.hf` reads)."""
    kind = cfg.get("model_type")
    defaults = TRANSFORMERS_DEFAULTS.get(kind)
    if kind in LLAMA_LIKE:  # families read as Llama's block plus their own parts (below)
        return _llama_like(cfg, kind, where)
    if kind in BLOCKS:  # Llama's block, layer by layer (specs/hf_blocks.py): Llama's positions, norms and biases
        return replace(from_hf({**cfg, "model_type": "llama"}, where), family=kind, blocks_file=where,
                       source=f"{where} (model_type {kind})")
    if kind in QWEN3_5_WRAPPERS:  # the vision-language wrapper: its language model, read as the planner reads it
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise BandwiseError(f"{where}: model_type {kind} without a text_config mapping")
        top = {"tie_word_embeddings": cfg["tie_word_embeddings"]} if "tie_word_embeddings" in cfg else {}
        return from_hf({**top, **text, "model_type": QWEN3_5_WRAPPERS[kind]}, where)
    if defaults is None:
        if kind in HYBRID:
            return _hybrid(cfg, kind, where)
        raise BandwiseError(f"{where}: model_type={brief(kind)} has no architecture record for the engines; "
                            f"known: {', '.join(TRANSFORMERS_DEFAULTS)}")
    if kind == "gemma3":  # the vision-language wrapper: its language model, read as the planner reads it (specs.hf)
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise BandwiseError(f"{where}: model_type gemma3 without a text_config mapping")
        return from_hf({**text, "model_type": "gemma3_text"}, where)
    if kind in ("dbrx", "llama4", "llama4_text"):  # nested configs: named, not read
        return Architecture(family=kind, rope=None, unsupported=(WHOLE_MODEL_PARTS[kind],), source=f"{where} (model_type {kind})")

    def get(key: str) -> Any:
        value = cfg.get(key)
        return defaults.get(key) if value is None else value

    def number(key: str) -> float:
        value = get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise BandwiseError(f"{where}: {key}={brief(value)} must be a positive number")
        return float(value)

    def _fraction(key: str) -> float:
        """A share of each head's channels the rotary embedding turns, the first int(head_dim · share) of them
        (transformers' Phi-3 partial_rotary_factor and GPT-NeoX rotary_pct: apply_rotary_pos_emb on q[..., :rotary_dim])."""
        value = number(key)
        if value > 1:
            raise BandwiseError(f"{where}: {key}={brief(cfg.get(key))} must be at most 1")
        return value

    unsupported: list[str] = [WHOLE_MODEL_PARTS[kind]] if kind in WHOLE_MODEL_PARTS else []
    fraction = 1.0
    if kind == "gemma2":  # Gemma 1's scaled embedding and (1 + w) norms are Gemma 2's and 3's too
        unsupported.insert(0, WHOLE_MODEL_PARTS["gemma"])
    if kind == "gemma3_text":
        unsupported.insert(0, WHOLE_MODEL_PARTS["gemma"])
    positions = 0
    if kind == "gpt2":  # learned positions (GPT2Model.wpe: an Embedding of n_positions rows)
        rope = None
        positions = int(number("n_positions"))
    else:
        rope = Rope(number("rotary_emb_base" if kind == "gpt_neox" else "rope_theta"))
    scaling = cfg.get("rope_scaling") if rope is not None else None
    if scaling:
        if not isinstance(scaling, dict):
            raise BandwiseError(f"{where}: rope_scaling={brief(scaling)} must be a mapping")
        rtype = scaling.get("rope_type", scaling.get("type"))
        if rtype == "llama3":
            rope = replace(rope, scaling="llama3", factor=float(scaling.get("factor", 8.0)),
                           low_freq_factor=float(scaling.get("low_freq_factor", 1.0)),
                           high_freq_factor=float(scaling.get("high_freq_factor", 4.0)),
                           original_positions=int(scaling.get("original_max_position_embeddings", 8192)))
        elif rtype == "yarn":
            rope = replace(rope, scaling="yarn", factor=float(scaling.get("factor", 1.0)),
                           original_positions=int(scaling.get("original_max_position_embeddings", 4096)),
                           beta_fast=float(scaling.get("beta_fast", 32.0)), beta_slow=float(scaling.get("beta_slow", 1.0)),
                           mscale=float(scaling.get("mscale", 1.0)), mscale_all_dim=float(scaling.get("mscale_all_dim", 0.0)),
                           truncate=scaling.get("truncate", True) is not False)
        elif rtype == "linear":  # positions divided by the factor (transformers' _compute_linear_scaling_rope_parameters)
            rope = replace(rope, scaling="linear", factor=float(scaling.get("factor", 1.0)))
            unsupported.append(f"rope_scaling type 'linear' (factor {rope.factor:g})")
        elif rtype != "default":
            unsupported.append(f"rope_scaling type {rtype!r}")
    gated = FAMILIES.get(kind, {}).get("gated", True)
    act_key = ACT_KEYS.get(kind, "hidden_act")
    act_name = get(act_key) if get(act_key) is not None else get("hidden_act") or "silu"
    activation = ACTIVATIONS.get(act_name, act_name)
    if gated and activation != "silu":
        unsupported.append(f"{act_key}={act_name!r} (a SwiGLU MLP takes silu)")
    elif not gated and activation not in ("gelu", "gelu_tanh"):
        unsupported.append(f"{act_key}={act_name!r} (a two-matrix MLP here takes a GELU)")
    if cfg.get("mlp_bias"):
        unsupported.append("mlp_bias=true")
    bias = False  # biases on every linear layer (and LayerNorm shifts): the GPT-2 families
    qkv_bias = kind in ("qwen2", "qwen2_moe")  # transformers Qwen2Attention / Qwen2MoeAttention: bias on q, k, v
    if kind == "gpt2":  # Conv1D layers with biases throughout (modeling_gpt2.py)
        bias = True
    elif kind == "starcoder2":  # every projection takes use_bias (modeling_starcoder2.py)
        bias = bool(get("use_bias"))
    elif kind == "gpt_neox":  # the MLP's dense_h_to_4h / dense_4h_to_h always have biases; attention's follow attention_bias
        if get("attention_bias") is False:
            unsupported.append("attention_bias=false with the MLP's biases (GPT-NeoX)")
        bias = True
        if get("use_parallel_residual"):
            unsupported.append("use_parallel_residual=true (attention and the MLP in parallel)")
        fraction = _fraction("rotary_pct")
    elif kind == "falcon":
        if get("parallel_attn") or cfg.get("new_decoder_architecture"):
            unsupported.append("parallel_attn=true (attention and the MLP in parallel)")
        if get("alibi"):
            unsupported.append("alibi=true (ALiBi position biases)")
        if cfg.get("bias"):
            unsupported.append("bias=true")
    elif kind == "internlm2" and get("bias"):
        unsupported.append("bias=true (biases on wqkv and wo only)")
    elif kind == "phi3":
        fraction = _fraction("partial_rotary_factor")
    elif kind in ("granite", "granitemoe"):
        unsupported += [f"{k}={get(k)}" for k in ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling")
                        if get(k) != 1]
    elif kind in ("cohere", "cohere2") and get("logit_scale") not in (None, 1):
        unsupported.append(f"logit_scale={get('logit_scale')}")
    elif kind == "gemma2":
        unsupported += [f"{k}={get(k)}" for k in ("attn_logit_softcapping", "final_logit_softcapping") if get(k)]
    if cfg.get("attention_bias") and kind not in ("gpt_oss", "gpt_neox"):
        unsupported.append("attention_bias=true (a bias on the output projection as well as on q, k, v)")
    # the window as the planner reads it (specs.hf.window_layers), layer by layer
    window, windowed = window_layers(cfg)
    rates = dropout_rates(cfg, kind)
    if rates.embedding is not None and rates.embedding != rates.hidden:
        # Megatron-LM drops the embeddings' output at its hidden dropout; MaxText has one rate
        unsupported.append(f"{rates.embedding_key}={rates.embedding:g}, unlike the hidden dropout {rates.hidden:g}")
    eps_key = NORM_EPS_KEYS.get(kind, "rms_norm_eps")
    arch = Architecture(family=kind, rope=rope, norm="LayerNorm" if kind in NORM_EPS_KEYS else "RMSNorm", norm_eps=number(eps_key),
                        qk_norm=kind in ("qwen3", "qwen3_moe"), qkv_bias=qkv_bias, bias=bias, gated=gated, activation=activation,
                        positions=positions, sliding_window=window, window_layers=windowed, hidden_dropout=rates.hidden, attention_dropout=rates.attention,
                        rotary_fraction=fraction,
                        source=f"{where} (model_type {kind})")
    if kind == "gemma3_text":  # Gemma3TextConfig: rope_local_base_freq 10000 on the sliding layers
        arch = replace(arch, local_rope_theta=float(get("rope_local_base_freq") or 10_000.0))
    if kind in ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe"):
        # granitemoe: GraniteMoeTopKGating takes the softmax over the top-k logits, renormalized weights
        norm = get("norm_topk_prob") if kind not in ("mixtral", "granitemoe") else True
        arch = replace(arch, router="softmax", topk_norm=bool(norm), shared_expert_gate=kind == "qwen2_moe")
        if kind in ("qwen2_moe", "qwen3_moe") and cfg.get("mlp_only_layers"):
            unsupported.append("mlp_only_layers")
    elif kind in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        score = get("scoring_func")
        if score not in ("sigmoid", "softmax"):
            unsupported.append(f"scoring_func={score!r}")
        method = get("topk_method")
        if method not in ("noaux_tc", "greedy", "group_limited_greedy"):
            unsupported.append(f"topk_method={method!r}")
        arch = replace(arch, router=score, topk_norm=bool(get("norm_topk_prob")), expert_bias=method == "noaux_tc",
                       routed_scale=number("routed_scaling_factor"))
    elif kind == "gpt_oss":
        # transformers modeling_gpt_oss.py: GptOssAttention's per-head `sinks` and biased q, k, v, o; GptOssTopKRouter's
        # linear with bias, a softmax over the top-k logits; GptOssExperts' biased gate_up and down, and
        # _apply_gate: gate.clamp(max=limit), up.clamp(-limit, limit), (up + 1)·gate·σ(1.702·gate) (alpha 1.702)
        arch = replace(arch, bias=True, activation="quick_gelu", sinks=True, glu_offset=1.0, glu_clamp=number("swiglu_limit"),
                       router="softmax", topk_norm=True)
    return replace(arch, unsupported=tuple(unsupported))


HYBRID_PARTS = {
    # the parts of a hybrid no export here writes, named with the engine code that lacks them
    "jamba": "Mamba-1 mixers (Jamba's JambaMambaMixer): Megatron-LM d98e8a6's hybrid model has Mamba-2 mixers only "
             "(megatron/core/ssm/mamba_mixer.py, the SSD kernel), and TorchTitan 0.3.0 and MaxText 0.2.5 have no Mamba block",
}


PRESETS.update({
    # the hybrids and Llama 4: their records name what no export here writes
    "nemotron-h-8b": Architecture(
        family="nemotron_h", rope=None, norm_eps=1e-5, gated=False, activation="relu2", hidden_dropout=0.0, attention_dropout=0.0,
        hybrid_pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        source="nvidia/Nemotron-H-8B-Base-8K config.json: hybrid_override_pattern M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-, "
               "rms_norm_eps 1e-5, mlp_hidden_act relu2, no biases, no position embeddings",
    ),
    "jamba-1.5-mini": Architecture(
        family="jamba", rope=None, unsupported=(HYBRID_PARTS["jamba"],),
        source="ai21labs/AI21-Jamba-1.5-Mini config.json: Mamba-1 layers (mamba_d_state 16, mamba_expand 2) with attention "
               "every 8th layer, no position embeddings",
    ),
    "qwen3-next-80b-a3b": Architecture(
        family="qwen3_next", rope=Rope(10_000_000.0), norm_eps=1e-6, qk_norm=True, router="softmax", topk_norm=True,
        shared_expert_gate=True, linear_layers=tuple((i + 1) % 4 != 0 for i in range(48)), rotary_fraction=0.25, norm_offset=True,
        hidden_dropout=0.0, attention_dropout=0.0,
        source="Qwen/Qwen3-Next-80B-A3B-Instruct config.json: rope_theta 1e7, partial_rotary_factor 0.25, rms_norm_eps 1e-6, "
               "norm_topk_prob true, full_attention_interval 4 (Gated DeltaNet on 3 layers of 4), attention_dropout 0; "
               "zero-centered RMSNorms, q/k norms and the shared expert's sigmoid gate (transformers modeling_qwen3_next.py)",
    ),
    "llama4-scout": Architecture(
        family="llama4_text", rope=Rope(500_000.0), norm_eps=1e-5, router="sigmoid", unsupported=(WHOLE_MODEL_PARTS["llama4_text"],),
        source="meta-llama/Llama-4-Scout-17B-16E config.json (text_config): rope_theta 500000, rms_norm_eps 1e-5, top-1 "
               "sigmoid routing, chunked attention (attention_chunk_size 8192) on 3 layers of 4",
    ),
    "llama4-maverick": Architecture(
        family="llama4_text", rope=Rope(500_000.0), norm_eps=1e-5, router="sigmoid", unsupported=(WHOLE_MODEL_PARTS["llama4_text"],),
        source="meta-llama/Llama-4-Maverick-17B-128E config.json (text_config): rope_theta 500000, rms_norm_eps 1e-5, top-1 "
               "sigmoid routing, MoE on every other layer, chunked attention on 3 layers of 4",
    ),
})


def _hybrid(cfg: dict[str, Any], kind: str, where: str) -> Architecture:
    """A hybrid's record: Nemotron-H's in full (no positions: its attention layers use none, as
    NemotronHAttention in its modeling code; squared-ReLU MLPs; RMSNorm), Qwen3-Next's (`_qwen3_next`),
    Jamba's named."""
    if kind == "qwen3_next":
        return _qwen3_next(cfg, where)
    if kind in ("qwen3_5_text", "qwen3_5_moe_text"):
        return _qwen3_5(cfg, kind, where)
    if kind == "bamba":
        return _bamba(cfg, where)
    if kind != "nemotron_h":
        parts = granite_multipliers(cfg, where) if kind == "granitemoehybrid" else []
        return Architecture(family=kind, rope=None, unsupported=(*parts, HYBRID_PARTS[kind]), source=f"{where} (model_type {kind})")
    eps = cfg.get("rms_norm_eps", cfg.get("layer_norm_epsilon", 1e-5))
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
        raise BandwiseError(f"{where}: rms_norm_eps={brief(eps)} must be a positive number")
    unsupported = [f"{k}=true" for k in ("use_bias", "mlp_bias", "attention_bias") if cfg.get(k)]
    act = cfg.get("mlp_hidden_act", cfg.get("hidden_act", "relu2"))
    if act != "relu2":
        unsupported.append(f"mlp_hidden_act={act!r} (Nemotron-H's MLP is squared ReLU)")
    return Architecture(family=kind, rope=None, norm_eps=float(eps), gated=False, activation="relu2",
                        hybrid_pattern=str(cfg.get("hybrid_override_pattern", "")), unsupported=tuple(unsupported),
                        hidden_dropout=0.0, attention_dropout=0.0, source=f"{where} (model_type {kind})")


BAMBA_DEFAULTS: dict[str, Any] = {
    # BambaConfig (transformers configuration_bamba.py): rope_theta 10000 and partial_rotary_factor 0.5 set in __init__
    # (a config.json's own keys override them as PretrainedConfig sets them after), rms_norm_eps 1e-5, hidden_act silu,
    # attention_dropout 0, no attention or MLP bias
    "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-5, "hidden_act": "silu", "attention_dropout": 0.0,
}


def _bamba(cfg: dict[str, Any], where: str) -> Architecture:
    """Bamba (transformers modeling_bamba.py, BambaDecoderLayer): input RMSNorm, then a Mamba-2 mixer (BambaMixer) or, on
    attn_layer_indices, attention with RoPE on partial_rotary_factor of each head (BambaAttention), then pre_ff_layernorm and
    a SwiGLU MLP on every layer; the layer count and mixer widths are the planner's (specs.hf_hybrid._mamba2_hybrid)."""
    def get(key: str) -> Any:
        value = cfg.get(key)
        return BAMBA_DEFAULTS[key] if value is None else value

    for key in ("rope_theta", "rms_norm_eps"):
        value = get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise BandwiseError(f"{where}: {key}={brief(value)} must be a positive number")
    unsupported = [f"hidden_act={brief(get('hidden_act'))} (Bamba's MLP here is SwiGLU)"] if get("hidden_act") != "silu" else []
    if cfg.get("rope_scaling"):
        unsupported.append(f"rope_scaling={brief(cfg.get('rope_scaling'))}")
    dropout = get("attention_dropout")
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        raise BandwiseError(f"{where}: attention_dropout={brief(dropout)} must be a number from 0 to below 1")
    layers = cfg.get("num_hidden_layers", 32)  # BambaConfig's default; specs.hf_hybrid checked the indices against it
    attention = set(cfg.get("attn_layer_indices") or [])
    pattern = "".join("*" if i in attention else "M" for i in range(layers if isinstance(layers, int) else 0))
    return Architecture(family="bamba", rope=Rope(float(get("rope_theta"))), rotary_fraction=_fraction(
                            {"partial_rotary_factor": get("partial_rotary_factor")}, where), norm_eps=float(get("rms_norm_eps")),
                        hybrid_pattern=pattern, hybrid_mlp=True, hidden_dropout=0.0, attention_dropout=float(dropout),
                        unsupported=tuple(unsupported), source=f"{where} (model_type bamba)")


QWEN3_NEXT_DEFAULTS: dict[str, Any] = {
    # transformers configuration_qwen3_next.py, Qwen3NextConfig's defaults for the keys read here
    "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "partial_rotary_factor": 0.25, "hidden_act": "silu", "norm_topk_prob": True,
    "decoder_sparse_step": 1, "attention_dropout": 0.0,
}


def _qwen3_next(cfg: dict[str, Any], where: str) -> Architecture:
    """Qwen3-Next (transformers modeling_qwen3_next.py): Qwen3NextAttention with a sigmoid output gate
    (`ModelSpec.attention_output_gate`), q_norm and k_norm, partial rotary positions; Gated DeltaNet on
    the layers `linear_layers` names; Qwen3NextRMSNorm, x̂·(1 + w) with w from zero; every layer a
    Qwen3NextSparseMoeBlock (softmax top-k, renormalized by norm_topk_prob, a shared expert behind a
    sigmoid gate) unless mlp_only_layers or decoder_sparse_step say otherwise; no biases."""
    def get(key: str) -> Any:
        value = cfg.get(key)
        return QWEN3_NEXT_DEFAULTS.get(key) if value is None else value

    def number(key: str) -> float:
        value = get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise BandwiseError(f"{where}: {key}={brief(value)} must be a positive number")
        return float(value)

    unsupported = []
    if get("hidden_act") != "silu":
        unsupported.append(f"hidden_act={get('hidden_act')!r} (Qwen3-Next's experts are SwiGLU)")
    if cfg.get("attention_bias"):
        unsupported.append("attention_bias=true")
    if cfg.get("mlp_only_layers") or get("decoder_sparse_step") != 1:
        # the planner prices an MoE block in every layer (specs.hf_hybrid)
        unsupported.append(f"mlp_only_layers={brief(cfg.get('mlp_only_layers'))}, decoder_sparse_step={brief(get('decoder_sparse_step'))} "
                           "(dense MLPs in some layers)")
    if cfg.get("rope_scaling"):
        unsupported.append(f"rope_scaling={brief(cfg.get('rope_scaling'))}")
    fraction = number("partial_rotary_factor")
    if fraction > 1:
        raise BandwiseError(f"{where}: partial_rotary_factor={brief(cfg.get('partial_rotary_factor'))} must be at most 1")
    dropout = get("attention_dropout")
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        raise BandwiseError(f"{where}: attention_dropout={brief(dropout)} must be a number from 0 to below 1")
    return Architecture(family="qwen3_next", rope=Rope(number("rope_theta")), norm_eps=number("rms_norm_eps"), qk_norm=True,
                        router="softmax", topk_norm=bool(get("norm_topk_prob")), shared_expert_gate=True,
                        linear_layers=linear_layers(cfg), rotary_fraction=fraction, norm_offset=True,
                        hidden_dropout=0.0, attention_dropout=float(dropout),
                        unsupported=tuple(unsupported), source=f"{where} (model_type qwen3_next)")


def _qwen3_5(cfg: dict[str, Any], kind: str, where: str) -> Architecture:
    """Qwen3.5 / Qwen3.6's text decoder (transformers modeling_qwen3_5_moe.py, modeling_qwen3_5.py): Qwen3-Next's layers
    (`_qwen3_next`), so the record is Qwen3-Next's family and the engines' Qwen3-Next paths state it: TorchTitan's written
    module builds it from TorchTitan's own qwen3_5 blocks, dense (`_build_qwen35_layers`) or MoE. Its rope_theta and
    partial_rotary_factor sit in rope_parameters; its RoPE is MRoPE (mrope_section), which on text positions alone is
    the plain rotation (TorchTitan 0.3.0 torchtitan/models/qwen3_5/rope.py, MRoPE._reshape_cache: 2D text positions
    take CosSinRoPE's lookup; three equal position ids turn every channel pair by the same angle). The dense variant's
    SwiGLU MLPs are named where an engine's Qwen3-Next path has MoE in every layer."""
    rope = cfg.get("rope_parameters")
    flat = dict(cfg)
    if isinstance(rope, dict):
        if rope.get("rope_type", "default") != "default":
            flat["rope_scaling"] = {"rope_type": rope.get("rope_type")}
        for key in ("rope_theta", "partial_rotary_factor"):
            if flat.get(key) is None and rope.get(key) is not None:
                flat[key] = rope[key]
    if kind == "qwen3_5_moe_text":  # Qwen3_5MoeTextConfig: MoE in every layer; no mlp_only_layers key is read
        flat.pop("mlp_only_layers", None)
    arch = _qwen3_next(flat, where)
    unsupported = list(arch.unsupported)
    if kind == "qwen3_5_text":
        unsupported = [u for u in unsupported if not u.startswith("mlp_only_layers=")]
    return replace(arch, unsupported=tuple(unsupported), shared_expert_gate=kind == "qwen3_5_moe_text",
                   source=f"{where} (model_type {kind})")


def architecture(model: ModelSpec, source: str | Path | None = None) -> Architecture | None:
    """The architecture of `model`: from `source` (the --model argument) when it names a file or a Hub
    id (`registry.model_file`, the planner's own look-up), else from the preset `model` is (its shape
    exactly, any sequence length); None when neither says. The window is the planner's reading of the
    config (`ModelSpec.sliding_window`), so the job states the attention the plan priced (`from_hf`)."""
    from bandwise.specs.registry import model_file, model_file_fields, model_presets

    path = None
    if source is not None and str(source).lower() not in (model.name.lower(), *model_presets()):
        path = model_file(str(source))
    if path is not None and path.is_file():
        data = model_file_fields(path)  # the planner's own reading of the file
        if "model_type" in data or "architectures" in data:
            arch = from_hf(data, where=str(source))
            return replace(arch, blocks_file=str(path.resolve())) if arch.blocks_file else arch
        return None
    preset = _preset_spec(model.name)
    if preset is not None and _shape(preset) == _shape(model):
        return PRESETS.get(preset.name)
    return None


def is_preset(model: ModelSpec, arch: Architecture | None) -> str | None:
    """The name of the preset `model` is, in shape and architecture alike, or None. An engine's
    stock config for that preset runs this model; for any other model it does not, whatever its name."""
    from bandwise.specs.registry import model_presets

    if arch is None:
        return None
    for name, preset in model_presets().items():
        known = PRESETS.get(name)
        if known is not None and _shape(preset) == _shape(model) and _settled(known, preset) == _settled(arch, model):
            return name
    return None


def _settled(arch: Architecture, model: ModelSpec) -> Architecture:
    """`arch` without its source, and its unstated dropout rates as a job takes them: none where the model
    trains without dropout, so a preset's unstated rates equal a config's stated zeros."""
    rate = lambda r: r if r is not None or model.dropout else 0.0  # noqa: E731
    return replace(arch, source="", hidden_dropout=rate(arch.hidden_dropout), attention_dropout=rate(arch.attention_dropout))


def differences(model: ModelSpec, arch: Architecture | None, preset: str) -> list[str]:
    """How `model` differs from the preset named `preset`: 'field=value (preset value)' each."""
    spec = _preset_spec(preset)
    if spec is None:
        return []
    out = [f"{f}={getattr(model, f)} ({getattr(spec, f)})" for f in ModelSpec.__dataclass_fields__
           if f not in ("name", "source", "seq_len", "vector_params") and getattr(model, f) != getattr(spec, f)]
    known = PRESETS.get(spec.name)
    if known is not None and arch is not None:
        arch, known = _settled(arch, model), _settled(known, spec)
        for f in Architecture.__dataclass_fields__:
            mine, theirs = getattr(arch, f), getattr(known, f)
            if f in ("source", "family") or mine == theirs:
                continue
            if f == "rope" and mine is not None and theirs is not None:
                out += [f"rope.{g}={getattr(mine, g)} ({getattr(theirs, g)})" for g in Rope.__dataclass_fields__
                        if getattr(mine, g) != getattr(theirs, g)]
            else:
                out.append(f"{f}={mine} ({theirs})")
    elif arch is None:
        out.append("rope, norms and router not given")
    return out


def _preset_spec(name: str) -> ModelSpec | None:
    from bandwise.specs.registry import model_presets

    return model_presets().get(name.lower())


@lru_cache(maxsize=512)
def _shape(m: ModelSpec) -> ModelSpec:
    """The fields that make the model: not its name, source or training sequence length, nor its
    norm and bias count (`vector_params`, which the presets leave at 0: they count weight matrices).
    Cached: an export compares the model with every preset for each candidate layout it adapts."""
    return replace(m, name="", source="", seq_len=1, vector_params=0)


def refusals(model: ModelSpec, arch: Architecture | None, *, windows: bool = False) -> list[str]:
    """What no engine here writes for this model, one line each; [] when every part has a flag somewhere.
    `windows`: the engine states a window layer by layer, so a window shorter than the sequence is no refusal."""
    if arch is None:
        return [(f"rope_theta, norms, biases and router of {model.name!r}: a model file of ModelSpec fields, or a preset "
                 "with a changed shape, does not give them; pass the model's Hugging Face config.json")]
    out = list(arch.unsupported)
    if arch.sliding_window and arch.sliding_window < model.seq_len and not windows:
        out.append(f"sliding_window={arch.sliding_window}, shorter than the {model.seq_len}-token sequence")
    if arch.rope is None and arch.positions and arch.positions < model.seq_len:
        out.append(f"n_positions={arch.positions}: its learned position table is shorter than the {model.seq_len}-token sequence")
    return out


# ----------------------------------------------------------------- Llama-like families
LLAMA_LIKE: dict[str, dict[str, Any]] = {
    # model_type: its configuration class's defaults for the keys read here (transformers configuration_<type>.py)
    "glm4_moe": {"rope_theta": 10000.0, "rms_norm_eps": 1e-5, "partial_rotary_factor": 0.5, "norm_topk_prob": True,
                 "routed_scaling_factor": 1.0, "use_qk_norm": False},  # configuration_glm4_moe.py c7ec229
    # Glm4Config (configuration_glm4.py 008e574): rms_norm_eps 1.5625e-07, attention_bias true, partial_rotary_factor 0.5;
    # rope_theta 10000 (rope_parameters' default)
    "glm4": {"rope_theta": 10000.0, "rms_norm_eps": 1.5625e-07, "partial_rotary_factor": 0.5, "attention_bias": True},
    # SeedOssConfig (configuration_seed_oss.py d9aa776)
    "seed_oss": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "attention_bias": True, "attention_out_bias": False},
    # HunYuanDenseV1Config (configuration_hunyuan_v1_dense.py 28ca27c)
    "hunyuan_v1_dense": {"rope_theta": 10000.0, "rms_norm_eps": 1e-5},
    "hunyuan_v1_moe": {"rope_theta": 10000.0, "rms_norm_eps": 1e-5},  # HunYuanMoEV1Config (configuration_hunyuan_v1_moe.py)
    "ernie4_5": {"use_bias": False},  # the keys read are required but use_bias (Ernie4_5Config's default false)
    # Ernie4_5_MoeConfig (configuration_ernie4_5_moe.py f479d93)
    "ernie4_5_moe": {"rope_theta": 500000.0, "rms_norm_eps": 1e-5, "use_bias": False},
    "apertus": {"qk_norm": True, "post_norm": False, "hidden_act": "xielu"},  # ApertusConfig's defaults for these keys
    # PhimoeConfig (configuration_phimoe.py 040e1a7)
    "phimoe": {"rope_theta": 1e6, "rms_norm_eps": 1e-5, "attention_bias": False, "lm_head_bias": False},
    "nemotron": {"rope_theta": 10000.0, "norm_eps": 1e-5, "partial_rotary_factor": 0.5, "hidden_act": "relu2"},  # configuration_nemotron.py
    # OlmoConfig's rope_theta (configuration_olmo.py); OlmoLayerNorm's epsilon is fixed at 1e-5 in its code, no config key
    "olmo": {"rope_theta": 10000.0, "rms_norm_eps": 1e-5},
    "exaone4": {},  # the keys read are required: no class defaults are read for them here
    "smollm3": {"rope_theta": 2_000_000.0, "rms_norm_eps": 1e-6, "no_rope_layer_interval": 4},  # modular_smollm3.py cbc6e94
}
"""Families whose block is Llama's with parts named here; read by `from_hf` as Llama's (positions, norm
epsilon, activation, dropout), then given their own parts."""


def _llama_like(cfg: dict[str, Any], kind: str, where: str) -> Architecture:
    defaults = LLAMA_LIKE[kind]
    merged = {**defaults, **{k: v for k, v in cfg.items() if v is not None}}
    for key in ("rope_theta", "norm_eps" if kind == "nemotron" else "rms_norm_eps"):
        if key not in merged:
            raise BandwiseError(f"{where}: missing field {key!r} (model_type {kind})")
    llama = {**merged, "model_type": "llama", "attention_bias": False}
    if kind in ("nemotron", "apertus"):  # their activation and biases (and Nemotron's norm epsilon) are set below
        llama.update(hidden_act="silu", mlp_bias=False)
    if kind == "nemotron":
        llama.update(rms_norm_eps=merged["norm_eps"])
    base = from_hf(llama, where)
    window, windowed = window_layers(cfg)  # the family's own window rule, as the planner reads it
    arch = replace(base, family=kind, sliding_window=window, window_layers=windowed, source=f"{where} (model_type {kind})")
    if kind == "smollm3":
        # SmolLM3Attention (modular_smollm3.py cbc6e94) skips RoPE where no_rope_layers[i] is 0: every 4th layer by default
        # (SmolLM3Config, configuration_smollm3.py: no_rope_layers[i] = int((i + 1) % no_rope_layer_interval != 0) when
        # the list is not given)
        layers = cfg.get("num_hidden_layers")
        rope = merged.get("no_rope_layers")
        if rope is None:
            interval = merged["no_rope_layer_interval"]
            if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
                raise BandwiseError(f"{where}: no_rope_layer_interval={brief(interval)} must be a whole number from 1")
            rope = [int((i + 1) % interval != 0) for i in range(layers if isinstance(layers, int) else 0)]
        if not isinstance(rope, list) or len(rope) != layers or any(v not in (0, 1) or isinstance(v, bool) for v in rope):
            raise BandwiseError(f"{where}: no_rope_layers={brief(rope)} must list 0 or 1 for each of the "
                                f"num_hidden_layers={brief(layers)} layers")
        if 0 in rope:
            arch = replace(arch, nope_layers=tuple(v == 0 for v in rope))
    if kind == "nemotron":
        # modeling_nemotron.py: NemotronLayerNorm1P (a LayerNorm with weight and bias, applied as weight + 1), up_proj ->
        # relu2 -> down_proj, RoPE on partial_rotary_factor of each head; biases with attention_bias and mlp_bias
        # (the 1 + weight norm is `norm_offset` on a LayerNorm, Megatron-LM's --apply-layernorm-1p, which these records
        # state; an engine without it refuses it by name)
        act = merged["hidden_act"]
        parts = [f"{k}=true" for k in ("attention_bias", "mlp_bias") if merged.get(k) is True]
        if act != "relu2":
            parts.append(f"hidden_act={brief(act)} (a two-matrix MLP here takes relu2)")
        arch = replace(arch, norm="LayerNorm", norm_offset=True, norm_eps=float(merged["norm_eps"]), gated=False,
                       activation="relu2", rotary_fraction=_fraction(merged, where), unsupported=(*arch.unsupported, *parts))
    if kind == "olmo":
        # modular_olmo.py: OlmoLayerNorm is F.layer_norm without weight or bias; clip_qkv clamps q, k and v when set
        parts = ["LayerNorm without weight or bias (OLMo's OlmoLayerNorm)"]
        if merged.get("clip_qkv") is not None:
            parts.append(f"clip_qkv={brief(merged['clip_qkv'])} (q, k and v clamped)")
        parts += ["attention_bias=true"] if merged.get("attention_bias") is True else []
        arch = replace(arch, norm="LayerNorm", unsupported=(*arch.unsupported, *parts))
    if kind == "exaone4":
        # modular_exaone4.py: OLMo 2's post-norms, q/k RMSNorms over head_dim, no RoPE on the global layers of a windowed model
        parts = ["post_attention_layernorm and post_feedforward_layernorm on the block outputs, no norm before them (EXAONE 4.0)"]
        if window:
            parts.append("no RoPE on the full-attention layers (EXAONE 4.0's global layers)")
        arch = replace(arch, qk_norm=True, unsupported=(*arch.unsupported, *parts))
    if kind == "phimoe":
        # modular_phimoe.py: PhimoeTopKRouter's sparsemixer (a masked softmax per choice, jitter in training), LayerNorms
        # with bias, biases on q, k, v, o (attention_bias) and lm_head (lm_head_bias)
        parts = ["sparsemixer top-2 routing (PhiMoE's PhimoeTopKRouter)"]
        parts += [f"{k}=true" for k in ("attention_bias", "lm_head_bias") if merged.get(k) is True]
        arch = replace(arch, norm="LayerNorm", router="softmax", unsupported=(*arch.unsupported, *parts))
    if kind == "apertus":
        # modeling_apertus.py: up_proj -> xIELU (learned alpha_p, alpha_n; activations.py XIELUActivation) -> down_proj;
        # q_norm and k_norm over head_dim with qk_norm; post_norm moves the norms after the sublayers
        parts = [f"hidden_act={brief(merged['hidden_act'])} (Apertus's xIELU, with learned alpha_p and alpha_n per layer)"]
        parts += [f"{k}=true" for k in ("post_norm", "attention_bias", "mlp_bias") if merged.get(k) is True]
        arch = replace(arch, gated=False, activation=str(merged["hidden_act"]), qk_norm=merged["qk_norm"] is True,
                       unsupported=(*arch.unsupported, *parts))
    if kind == "seed_oss":
        # modular_seed_oss.py (6e4054a): q, k, v biases with attention_bias, o_proj's with attention_out_bias; dropout on
        # the attention probabilities and after attention and the MLP (residual_dropout, 0.1 by default)
        rates = dropout_rates(cfg, kind)
        parts = ["attention_out_bias=true"] if merged.get("attention_out_bias") is True else []
        arch = replace(arch, qkv_bias=merged.get("attention_bias") is True, hidden_dropout=rates.hidden,
                       attention_dropout=rates.attention, unsupported=(*arch.unsupported, *parts))
    if kind in ("hunyuan_v1_dense", "hunyuan_v1_moe"):
        # modular_hunyuan_v1_dense.py (6095fdd), modular_hunyuan_v1_moe.py (3404f51): query_layernorm and key_layernorm over
        # head_dim, applied after RoPE; the MoE's router a softmax over all experts, the top-k weights renormalized
        parts = ["query_layernorm and key_layernorm applied after RoPE (Hunyuan)"]
        parts += ["attention_bias=true"] if merged.get("attention_bias") is True else []
        arch = replace(arch, qk_norm=True, unsupported=(*arch.unsupported, *parts))
        if kind == "hunyuan_v1_moe":
            arch = replace(arch, router="softmax", topk_norm=True)
    if kind == "ernie4_5":
        # modular_ernie4_5.py (7abb76c): apply_rotary_pos_emb turns interleaved pairs ("glm rope style")
        parts = ["use_bias=true"] if merged.get("use_bias") is True else []
        arch = replace(arch, rope_interleaved=True, unsupported=(*arch.unsupported, *parts))
    if kind == "ernie4_5_moe":
        # modular_ernie4_5_moe.py (a4d4492): softmax router whose choice adds moe_statics.e_score_correction_bias, the chosen
        # weights renormalized; ERNIE's own rotary embedding (ernie4_5's apply_rotary_pos_emb) turns interleaved pairs
        parts = ["use_bias=true"] if merged.get("use_bias") is True else []
        arch = replace(arch, router="softmax", topk_norm=True, expert_bias=True, rope_interleaved=True,
                       unsupported=(*arch.unsupported, *parts))
    if kind == "glm4":
        # modular_glm4.py (08c5327): GlmAttention's q, k, v biases (attention_bias), RoPE on partial_rotary_factor of each
        # head, and post_self_attn_layernorm / post_mlp_layernorm on the sublayer outputs
        # (GLM's apply_rotary_pos_emb, modeling_glm.py, turns interleaved pairs: `rope_interleaved`)
        arch = replace(arch, qkv_bias=merged.get("attention_bias") is True, rotary_fraction=_fraction(merged, where),
                       rope_interleaved=True,
                       unsupported=(*arch.unsupported, "post_self_attn_layernorm and post_mlp_layernorm on the block outputs "
                                                       "(GLM-4's sandwich norms)"))
    if kind == "glm4_moe":
        # modeling_glm4_moe.py (a0699c9): biases on q, k, v only (attention_bias), q/k RMSNorms with use_qk_norm, RoPE on
        # partial_rotary_factor of each head; Glm4MoeTopkRouter: sigmoid scores, e_score_correction_bias for the choice
        # only, top-k weights renormalized with norm_topk_prob and scaled by routed_scaling_factor
        scale = merged["routed_scaling_factor"]
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not scale > 0:
            raise BandwiseError(f"{where}: routed_scaling_factor={brief(scale)} must be a positive number")
        arch = replace(arch, qkv_bias=merged.get("attention_bias") is True, qk_norm=merged["use_qk_norm"] is True,
                       rotary_fraction=_fraction(merged, where), router="sigmoid", expert_bias=True,
                       topk_norm=merged["norm_topk_prob"] is True, routed_scale=float(scale))
    return arch


def _fraction(cfg: dict[str, Any], where: str) -> float:
    """partial_rotary_factor, checked: the share of each head RoPE turns."""
    fraction = cfg["partial_rotary_factor"]
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction <= 1:
        raise BandwiseError(f"{where}: partial_rotary_factor={brief(fraction)} must be a number above 0 and at most 1")
    return float(fraction)


HYBRID_PARTS.update({
    # Granite 4.0-H (specs.hf_hybrid._mamba2_hybrid): TorchTitan 0.3.0 and MaxText 0.2.5 have no Mamba block; the Megatron-LM
    # export writes Mamba-2 layers with an MLP (Bamba's, `hybrid_mlp`) but not with routed experts
    "granitemoehybrid": "Mamba-2 layers with routed experts and a shared MLP each (Granite 4.0-H's GraniteMoeHybridDecoderLayer): "
                        "the Megatron-LM export writes a Mamba-2 layer with a dense MLP only, and TorchTitan 0.3.0 and MaxText "
                        "0.2.5 have no Mamba block",
})

GRANITE_MULTIPLIERS: dict[str, str] = {
    # GraniteMoeHybridConfig's muP-style multipliers (defaults 1.0), and what Megatron-LM d98e8a6 lacks for each
    "residual_multiplier": "each sublayer's output scaled before the residual add: Megatron-LM d98e8a6 adds it unscaled "
                           "(megatron/core/fusions/fused_bias_dropout.py) and TransformerConfig has no field for it",
    "embedding_multiplier": "the embeddings scaled: Megatron-LM d98e8a6 scales them (mup_embedding_mult) only under --use-mup, "
                            "which also rescales initialization and learning rates (language_model_embedding.py)",
    "logits_scaling": "the logits divided: Megatron-LM d98e8a6 scales them (mup_output_mult) only under --use-mup "
                      "(language_module.py, _scale_logits)",
}


def granite_multipliers(cfg: dict[str, Any], where: str) -> list[str]:
    """Granite 4.0-H's multipliers that are not 1, each named with what Megatron-LM lacks for it (attention_multiplier is
    TransformerConfig.softmax_scale and is no refusal)."""
    out = []
    for key, why in GRANITE_MULTIPLIERS.items():
        value = cfg.get(key, 1.0)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise BandwiseError(f"{where}: {key}={brief(value)} must be a positive number")
        if value != 1:
            out.append(f"{key}={value:g} ({why})")
    return out
