"""ModelSpec from a Hugging Face `config.json`.

Supported `model_type`s and the keys each reads (names as in the transformers configuration
classes of those models):
  llama, mistral, qwen2, qwen3, phi3  dense, GQA, SwiGLU (phi3's fused qkv and gate_up projections hold the same weights)
  mixtral                             num_local_experts, num_experts_per_tok (expert = intermediate_size)
  qwen2_moe, qwen3_moe                num_experts, moe_intermediate_size, shared_expert_intermediate_size,
                                      decoder_sparse_step, mlp_only_layers
  deepseek_v2, deepseek_v3, kimi_k2   n_routed_experts, n_shared_experts, first_k_dense_replace, MLA ranks
                                      (DeepSeek-V2's configuration class has V3's keys, less multi-token prediction)
  gpt_oss                             num_local_experts, experts_per_token / num_experts_per_tok
A missing required key is an error that names it; keys the planner does not need are ignored.

Sliding-window attention (`window_spec`), for mistral, mixtral, the qwen types and gpt_oss: the
window is `sliding_window` (absent or null: none), switched off by `use_sliding_window: false`
(Qwen2/Qwen3 ship a `sliding_window` value with the switch off). Which layers it covers:
`layer_types` ("sliding_attention" / "full_attention" per layer) where given, else
`sliding_window_pattern` n (every n-th layer full, Gemma 2/3 style), else the configuration
class's rule: every layer (Mistral, Mixtral, Phi-3), layers from `max_window_layers` (default 28) on
(Qwen, only with `use_sliding_window: true`, whose class default is false), every other layer
starting with the first (gpt-oss).
"""

from __future__ import annotations

from typing import Any

from bandwise.errors import BandwiseError
from bandwise.specs.model import MAX_DIMENSION, ModelSpec, brief

DENSE = {"llama", "mistral", "qwen2", "qwen3", "phi3"}
WINDOWED = {"mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gpt_oss", "phi3"}
"""Model types whose transformers configuration reads `sliding_window` (Llama's and DeepSeek's do not)."""
QWEN = {"qwen2", "qwen3", "qwen2_moe", "qwen3_moe"}
QWEN_MAX_WINDOW_LAYERS = 28
"""`max_window_layers` default of transformers' Qwen2/Qwen3 (and MoE) configuration classes."""
DEEPSEEK = ("deepseek_v2", "deepseek_v3", "kimi_k2")
SUPPORTED = sorted(DENSE | {"mixtral", "qwen2_moe", "qwen3_moe", *DEEPSEEK, "gpt_oss"})


def from_hf_config(cfg: dict[str, Any], *, name: str = "hf-model", seq_len: int = 4096) -> ModelSpec:
    kind = cfg.get("model_type")
    if kind not in SUPPORTED:
        raise BandwiseError(f"config.json: model_type={brief(kind)} is not supported; supported: {', '.join(SUPPORTED)}")

    def integer(key: str, value: Any, least: int = 0) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= MAX_DIMENSION:
            raise BandwiseError(f"config.json ({kind}): {key}={brief(value)} must be an integer from {least} to {MAX_DIMENSION:,}")
        return value

    def need(key: str, *alternatives: str) -> int:
        for k in (key, *alternatives):
            if cfg.get(k) is not None:
                return integer(k, cfg[k], least=1)
        raise BandwiseError(f"config.json ({kind}): missing field {' or '.join((key, *alternatives))!r}")

    # Optional keys are checked here too, so a bad value is named by its config.json key rather
    # than by the ModelSpec field it lands in (and "false" as a string is not silently true).
    def opt(key: str, default: int = 0) -> int:
        value = cfg.get(key)
        return default if value is None else integer(key, value)

    def flag(key: str) -> bool:
        value = cfg.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise BandwiseError(f"config.json ({kind}): {key}={brief(value)} must be true or false")
        return value

    heads = need("num_attention_heads")
    layers = need("num_hidden_layers")
    spec: dict[str, Any] = dict(
        name=name,
        layers=layers,
        hidden=need("hidden_size"),
        ffn=need("intermediate_size"),
        heads=heads,
        kv_heads=opt("num_key_value_heads", heads),
        head_dim=opt("head_dim", 0),
        vocab=need("vocab_size"),
        seq_len=seq_len,
        gated_mlp=True,
        tied_embeddings=flag("tie_word_embeddings"),
        source=f"Hugging Face config.json (model_type {kind})",
    )
    if kind in WINDOWED:
        spec.update(window_spec(cfg, kind, layers, integer))
    if kind == "mixtral":
        spec.update(experts=need("num_local_experts"), top_k=need("num_experts_per_tok"), expert_ffn=spec["ffn"])
    elif kind in ("qwen2_moe", "qwen3_moe"):
        step = opt("decoder_sparse_step", 1)
        if cfg.get("mlp_only_layers") or step != 1:
            raise BandwiseError(
                f"config.json ({kind}): mlp_only_layers / decoder_sparse_step != 1 interleave dense and MoE layers, "
                "which ModelSpec does not describe; only leading dense layers are supported"
            )
        shared = opt("shared_expert_intermediate_size", 0)
        spec.update(
            experts=need("num_experts"),
            top_k=need("num_experts_per_tok"),
            expert_ffn=need("moe_intermediate_size"),
            shared_experts=1 if shared else 0,
            shared_expert_ffn=shared,
        )
    elif kind in DEEPSEEK:
        spec.update(
            experts=need("n_routed_experts"),
            top_k=need("num_experts_per_tok"),
            expert_ffn=need("moe_intermediate_size"),
            shared_experts=opt("n_shared_experts", 0),
            dense_layers=opt("first_k_dense_replace", 0),
            q_lora_rank=opt("q_lora_rank", 0),
            kv_lora_rank=need("kv_lora_rank"),
            qk_nope_head_dim=need("qk_nope_head_dim"),
            qk_rope_head_dim=need("qk_rope_head_dim"),
            v_head_dim=need("v_head_dim"),
            kv_heads=0,
            mtp_depth=opt("num_nextn_predict_layers", 0),
        )
        groups = opt("n_group", 1)
        if isinstance(groups, int) and groups > 1:
            spec.update(expert_groups=groups, groups_per_token=opt("topk_group", groups))
    elif kind == "gpt_oss":
        spec.update(
            experts=need("num_local_experts"),
            top_k=need("num_experts_per_tok", "experts_per_token"),
            expert_ffn=spec["ffn"],
        )
    return ModelSpec(**spec)


def window_spec(cfg: dict[str, Any], kind: str, layers: int, integer: Any) -> dict[str, int]:
    """`sliding_window` and `sliding_layers` of a ModelSpec from a config's window keys (module
    docstring); {} when no layer is windowed."""
    switch = cfg.get("use_sliding_window")
    if switch is not None and not isinstance(switch, bool):
        raise BandwiseError(f"config.json ({kind}): use_sliding_window={brief(switch)} must be true or false")
    types = cfg.get("layer_types")
    kinds = {"sliding_attention", "full_attention"}
    if types is not None and not (isinstance(types, list) and len(types) == layers and all(t in kinds for t in types)):
        raise BandwiseError(
            f"config.json ({kind}): layer_types={brief(types)} must list num_hidden_layers={layers} entries, "
            "each \"sliding_attention\" or \"full_attention\""
        )
    if switch is False or cfg.get("sliding_window") is None:
        return {}
    window = integer("sliding_window", cfg["sliding_window"], 1)
    if types is not None:
        windowed = types.count("sliding_attention")
    elif cfg.get("sliding_window_pattern") is not None:
        # Gemma 3: layer i is global when (i + 1) % pattern == 0, so layers // pattern of them
        windowed = layers - layers // integer("sliding_window_pattern", cfg["sliding_window_pattern"], 1)
    elif kind in QWEN:
        if switch is not True:  # the Qwen classes' default is off
            return {}
        first = cfg.get("max_window_layers")
        first = QWEN_MAX_WINDOW_LAYERS if first is None else integer("max_window_layers", first)
        windowed = max(0, layers - first)
    elif kind == "gpt_oss":
        windowed = (layers + 1) // 2  # layers 0, 2, 4, ... (GptOssConfig's default layer_types)
    else:  # mistral, mixtral: every layer
        windowed = layers
    if not windowed:
        return {}
    return {"sliding_window": window, "sliding_layers": 0 if windowed == layers else windowed}
