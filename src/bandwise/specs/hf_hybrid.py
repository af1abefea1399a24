"""ModelSpec from the Hugging Face `config.json` of a hybrid model, keys as transformers' classes:

  nemotron_h   hybrid_override_pattern ("M" Mamba-2, "*" attention, "-" MLP, one block a layer),
               mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, conv_kernel, chunk_size,
               intermediate_size (squared-ReLU MLP), num_attention_heads, num_key_value_heads, head_dim
  qwen3_next   full_attention_interval (or layer_types), linear_num_key_heads, linear_num_value_heads,
               linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim, num_experts,
               num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size
"""

from __future__ import annotations

from typing import Any

from bandwise.errors import BandwiseError
from bandwise.specs.kinds import GatedDeltaNet, Mamba2
from bandwise.specs.model import MAX_DIMENSION, ModelSpec, brief

HYBRID = ("nemotron_h", "qwen3_next")


def from_hybrid_config(cfg: dict[str, Any], *, name: str = "hf-model", seq_len: int = 4096) -> ModelSpec:
    kind = cfg.get("model_type")

    def need(key: str) -> int:
        value = cfg.get(key)
        if value is None:
            raise BandwiseError(f"config.json ({kind}): missing field {key!r}")
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DIMENSION:
            raise BandwiseError(f"config.json ({kind}): {key}={brief(value)} must be an integer from 1 to {MAX_DIMENSION:,}")
        return value

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
        return ModelSpec(**base, layers=len(pattern), gated_mlp=False, squared_relu_mlp=True, mamba=mamba,
                         mamba_layers=pattern.count("M"), mixer_free_layers=pattern.count("-"),
                         mlp_free_layers=pattern.count("M") + pattern.count("*"))
    if kind == "qwen3_next":
        layers = need("num_hidden_layers")
        types = cfg.get("layer_types")
        if isinstance(types, list) and len(types) == layers:
            linear = sum(t == "linear_attention" for t in types)
        else:  # transformers' default: every full_attention_interval-th layer attends
            linear = layers - layers // need("full_attention_interval")
        shared = cfg.get("shared_expert_intermediate_size") or 0
        mixer = GatedDeltaNet(key_heads=need("linear_num_key_heads"), value_heads=need("linear_num_value_heads"),
                              key_head_dim=need("linear_key_head_dim"), value_head_dim=need("linear_value_head_dim"),
                              conv_kernel=need("linear_conv_kernel_dim"))
        return ModelSpec(**base, layers=layers, attention_output_gate=True, linear_attention=mixer, linear_attention_layers=linear,
                         experts=need("num_experts"), top_k=need("num_experts_per_tok"), expert_ffn=need("moe_intermediate_size"),
                         shared_experts=1 if shared else 0, shared_expert_ffn=shared)
    raise BandwiseError(f"config.json: model_type={brief(kind)} is not a hybrid bandwise reads; hybrids: {', '.join(HYBRID)}")
