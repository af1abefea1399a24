"""A TorchTitan config function for a model TorchTitan ships no config for, built from the blocks it has.

TorchTitan 0.3.0 takes a model only from a Python config function (`--module M --config F`; its
ConfigManager imports `M.config_registry`, else `M` itself, and calls `F()`:
torchtitan/config/manager.py, `_load_config_from_registry`). So for a model whose block TorchTitan
has in torchtitan/models/, the export writes such a module beside the job: the config function of
the same family that TorchTitan ships, with its `model_spec.model` rebuilt at the model's shape by
that family's own layer builders, and the loss's vocabulary size recomputed from it.

Families written (torchtitan 0.3.0, torchtitan/models/<package>/__init__.py):
  qwen3, qwen3_moe   qwen3: `_build_qwen3_layers` / `_build_qwen3_moe_layers`: RMSNorm eps 1e-6
                     (`_EPS`), RMSNorm on each head's q and k, no biases, RoPE without scaling
                     (`CosSinRoPE.Config`), SwiGLU; MoE with a softmax router over every expert,
                     the top-k weights renormalized (`route_norm=True`), no shared expert.
  llama, mistral,    llama3: `_build_llama3_layers`: RMSNorm with RMSNorm.Config's eps 1e-5
                     (models/common/nn_modules.py), heads dim / n_heads wide, no biases, SwiGLU,
  phi3, internlm2    RoPE (`ComplexRoPE.Config`) plain or with Llama 3.1's scaling; no window. (Phi-3's and InternLM2's
                     fused qkv and gate_up projections are Llama's block with its weights laid out otherwise.)
  qwen3_next         qwen3_5: `_build_qwen35_moe_layers` / `_build_qwen35_layers`, the blocks of TorchTitan's
                     Qwen3.5 (models/qwen3_5/model.py): GatedDeltaNet (separate q, k, v, z, a, b projections,
                     depthwise causal convs of `_qwen35_deltanet_config`'s default kernel 4, A_log and dt_bias per
                     value head, RMSNormGated), Qwen35Attention (wq twice as wide for the sigmoid output gate,
                     OffsetRMSNorm q/k norms, RoPE on the first `rotary_dim` channels), OffsetRMSNorm x̂·(1 + w)
                     everywhere with eps 1e-6 (`_EPS`; RMSNormGated's 1e-6), full attention where
                     (layer + 1) % full_attention_interval == 0, MoE with a softmax router over every expert, the
                     top-k weights renormalized (`route_norm=True`) and one sigmoid-gated shared expert
                     (`_shared_experts_config`, SigmoidGatedFeedForward, gate without bias).
                     Qwen35Model.Config requires a vision encoder, Qwen35Model.__init__ builds it and its
                     forward reads the multimodal collator's `special_tokens` (models/qwen3_5/model.py); so the
                     written module subclasses it as a text decoder (`Qwen3NextText`): no vision encoder is
                     built, the layers take the token embeddings, and Qwen35Model.Config.update_from_config runs
                     with the vision encoder's sharding step (sharding.py, `_set_vision_encoder_sharding`) skipped.
                     Its data, tokenizer and optimizer are TorchTitan's qwen3 `qwen3_30b_a3b`: the qwen3_5 configs
                     load image-text data (qwen3_5/config_registry.py, MMDataLoader). TorchTitan refuses context
                     parallelism for these blocks (parallelize.py, parallelize_qwen3_5) and a TP degree that does
                     not divide the DeltaNet's heads (model.py, Qwen35Model.Config.update_from_config); the plan's
                     own rule for Gated DeltaNet layers (specs/strategy.py) refuses the second, and
                     `torchtitan.adapt` the first (Megatron-LM runs these layers under CP; TorchTitan does not).
  gpt_oss            gpt_oss: `_build_gptoss_layers`: every layer MoE (GptOssMoE: a biased router gate, softmax over
                     every expert, the top-k weights renormalized; GptOssGroupedExperts with biased mlp1/mlp2 and
                     gpt-oss's clamped SwiGLU, `swiglu`: alpha 1.702, limit `swiglu_limit` 7.0 (its Config's default,
                     not passed on), (up + 1)), attention with biased q, k, v, o and one sink logit per head
                     (models/gpt_oss/model.py, Attention), heads fixed by `_make_gptoss_attn_config`'s defaults
                     (64 query, 8 key/value, 64 wide), a 128-token window on the even layers, RMSNorm.Config's eps
                     1e-5, RoPE plain or YaRN (CosSinRoPE; Attention folds YaRN's mscale² into the softmax scale).
                     Its ModelSpec (parallelize_gptoss, the MoE balancing hook) and trainer settings are
                     `gpt_oss_120b`'s (gpt_oss/config_registry.py), its attention FlexAttention (as
                     `gpt_oss_debugmodel_flex`): TorchTitan's context parallelism refuses the shipped varlen backend
                     (torchtitan/distributed/context_parallel/api.py, apply_cp_to_forward) and takes flex.
  deepseek_v3, kimi_k2, deepseek_v2
                     deepseek_v3: `_build_dsv3_layers` (build_mla_moe_layers with DeepSeek-V3's inits): MLA with or
                     without a q low-rank (wq, or wq_a, q_norm, wq_b; wkv_a, kv_norm, wkv_b), no biases, the first
                     `n_dense_layers` dense and MoE on every later layer, each with one shared FFN
                     `moe_hidden_dim · num_shared_experts` wide, a router of softmax or sigmoid scores, grouped
                     (top-2 sum per group, the groups limited) or not, scaled and optionally renormalized; RoPE plain
                     or YaRN (ComplexRoPE; Attention folds YaRN's mscale² into the softmax scale from its `mscale`,
                     DeepSeek's mscale_all_dim). The builders leave every RMSNorm at RMSNorm.Config's eps 1e-5: the
                     written module sets the config's eps on each (the field TorchTitan's RMSNorm takes).
                     Multi-token prediction: `_build_mtp_layers` and MTPLoss (deepseek_v3/mtp.py), which
                     MTPDecoder.Config.update_from_config refuses under pipeline or context parallelism; there the
                     written module builds none and the job says so. Its trainer settings are `deepseek_v3_16b`'s.
What the builders cannot state is refused by name (`blockers`).
"""

from __future__ import annotations

import re

from bandwise.export.architecture import Architecture
from bandwise.specs.model import ModelSpec

EPS = {"qwen3": 1e-6, "llama3": 1e-5, "qwen3_5": 1e-6, "gpt_oss": 1e-5}
"""(deepseek_v3's builders also give RMSNorm.Config's 1e-5, and the written module sets the model's own eps.)"""
"""Every RMSNorm's epsilon the package's builders give: qwen3's `_EPS`; llama3 sets none, so RMSNorm.Config's
default (torchtitan/models/common/nn_modules.py)."""
PACKAGES = {"qwen3": "qwen3", "qwen3_moe": "qwen3", "llama": "llama3", "mistral": "llama3", "phi3": "llama3", "internlm2": "llama3",
            "qwen3_next": "qwen3_5",
            "gpt_oss": "gpt_oss", "deepseek_v3": "deepseek_v3", "kimi_k2": "deepseek_v3", "deepseek_v2": "deepseek_v3"}
"""Hugging Face model_type: the torchtitan/models/ package whose blocks build it."""
BASES = {("qwen3", False): "qwen3_14b", ("qwen3", True): "qwen3_30b_a3b", ("llama3", False): "llama3_8b",
         ("qwen3_5", False): "qwen3_14b", ("qwen3_5", True): "qwen3_30b_a3b", ("gpt_oss", True): "gpt_oss_120b",
         ("deepseek_v3", True): "deepseek_v3_16b"}
"""The shipped config function (torchtitan/models/<package>/config_registry.py; for qwen3_5 the text configs of
torchtitan/models/qwen3/config_registry.py) a written one starts from, dense or MoE: its optimizer, data and
checkpoint settings; the job's flags set the layout."""
HYBRID_FLAVORS = {False: "0.8B", True: "35B-A3B"}
"""The qwen3_5 model_registry flavor whose ModelSpec (parallelize_qwen3_5, pipeline_vlm, the MoE balancing hook)
a written hybrid takes, dense or MoE, with its own model in it (torchtitan/models/qwen3_5/__init__.py)."""
GPTOSS_HEADS = (64, 8, 64)
"""Query heads, key/value heads and head width of every gpt_oss attention: `_make_gptoss_attn_config`'s defaults, which
`_build_gptoss_layers` does not pass on (torchtitan 0.3.0 torchtitan/models/gpt_oss/__init__.py)."""
GPTOSS_WINDOW = 128
"""`_build_gptoss_layers`: `sliding_window_size=128 if layer_id % 2 == 0 else None`."""
GPTOSS_SWIGLU = (1.702, 7.0)
"""gpt_oss/moe.py: `swiglu`'s alpha, and GptOssGroupedExperts.Config's swiglu_limit default (not passed on)."""
DELTANET_CONV = 4
"""The conv kernel of every GatedDeltaNet the qwen3_5 builders make: `_qwen35_deltanet_config`'s default, which
`_build_qwen35_layers` and `_build_qwen35_moe_layers` do not pass on."""


def where(package: str) -> str:
    return f"torchtitan 0.3.0 torchtitan/models/{package}/__init__.py"


def _embedding(model: ModelSpec) -> str:
    """The token embedding every written module builds (TorchTitan's Embedding.Config with its package's init)."""
    return f"tok_embeddings=Embedding.Config(num_embeddings={model.vocab}, embedding_dim={model.hidden}, param_init=_EMBEDDING_INIT)"


def _rms_norm(model: ModelSpec) -> str:
    """The final RMSNorm of the packages that build it from RMSNorm.Config with their own init."""
    return f"norm=RMSNorm.Config(normalized_shape={model.hidden}, param_init=_NORM_INIT)"


def _head(model: ModelSpec, init: str) -> str:
    """The output projection, with the package's init expression `init`."""
    return f"lm_head=Linear.Config(in_features={model.hidden}, out_features={model.vocab}, param_init={init})"


def family(arch: Architecture | None) -> str | None:
    """The TorchTitan model package whose blocks this architecture is, or None."""
    return PACKAGES.get(arch.family) if arch is not None else None


def blockers(model: ModelSpec, arch: Architecture) -> list[str]:
    """What the family's builders cannot state for this model, one line each ([]: it can be written)."""
    package = PACKAGES[arch.family]
    if package == "qwen3_5":
        return _hybrid_blockers(model, arch)
    if package == "gpt_oss":
        return _gptoss_blockers(model, arch)
    if package == "deepseek_v3":
        return _mla_blockers(model, arch)
    WHERE = where(package)  # noqa: N806
    out = [f"{part}: {WHERE} has no such part" for part in arch.unsupported]
    scalings = ("", "llama3") if package == "llama3" else ("",)
    if arch.rope is None or arch.rope.scaling not in scalings:
        out.append(f"rope_scaling {arch.rope.scaling if arch.rope else 'none'}: {WHERE} builds RoPE "
                   + ("plain or with Llama 3.1's scaling" if package == "llama3" else "without scaling (CosSinRoPE)"))
    if arch.sliding_window and arch.sliding_window < model.seq_len:
        out.append(f"sliding_window={arch.sliding_window}: {WHERE} builds full attention only")
    if abs(arch.norm_eps - EPS[package]) > 1e-12:
        out.append(f"rms_norm_eps={arch.norm_eps:g}: {WHERE} gives every RMSNorm eps {EPS[package]:g}")
    if package == "llama3" and model.d_head * model.heads != model.hidden:
        out.append(f"head_dim={model.d_head} with {model.heads} heads of a {model.hidden}-wide model: {WHERE} makes heads "
                   "dim / n_heads wide")
    if package == "llama3" and model.is_moe:
        out.append(f"experts: {WHERE} builds dense layers only")
    if arch.qkv_bias or arch.bias:
        out.append(f"attention biases: {WHERE} builds q, k, v and o without bias")
    if arch.rotary_fraction != 1:
        out.append(f"partial_rotary_factor={arch.rotary_fraction:g}: torchtitan 0.3.0's text attention (GQAttention, "
                   "torchtitan/models/common/attention.py) turns every channel of each head")
    if any(arch.nope_layers):
        out.append(f"layers without RoPE: {WHERE} gives every layer the one rope config")
    if arch.norm != "RMSNorm" or arch.norm_offset or (arch.qk_norm and package == "llama3"):
        out.append(f"{arch.norm} (offset {arch.norm_offset}, q/k norms {arch.qk_norm}): {WHERE} builds x̂·w RMSNorms"
                   + (" without q/k norms" if package == "llama3" else " with q/k norms"))
    if (arch.gated, arch.activation, arch.glu_clamp, arch.sinks) != (True, "silu", 0.0, False):
        out.append(f"MLP {arch.activation} (gated {arch.gated}): {WHERE} builds SwiGLU (models/common/feed_forward.py)")
    if (arch.hidden_dropout or 0) > 0 or (arch.attention_dropout or 0) > 0:
        out.append(f"dropout: {WHERE} builds no dropout")
    if model.is_moe:
        if not arch.topk_norm:
            out.append(f"norm_topk_prob=false: {WHERE} renormalizes the top-k weights (route_norm=True)")
        if model.dense_layers or model.shared_experts:
            out.append(f"dense layers or shared experts beside the MoE layers: {WHERE} builds MoE on every layer, no shared expert")
    return out


def attention_interval(pattern: tuple[bool, ...]) -> int | None:
    """The k for which layer i attends exactly when (i + 1) % k == 0 (`pattern[i]`: layer i is Gated DeltaNet), or None."""
    n = len(pattern)
    return next((k for k in range(1, n + 1) if all(la == ((i + 1) % k != 0) for i, la in enumerate(pattern))), None)


def rotary_dim(model: ModelSpec, arch: Architecture) -> float:
    """The channels of each head the rotary embedding turns (transformers: int(head_dim · partial_rotary_factor))."""
    return model.d_head * arch.rotary_fraction


def _hybrid_blockers(model: ModelSpec, arch: Architecture) -> list[str]:
    """What TorchTitan 0.3.0's Qwen3.5 builders cannot state of a Gated DeltaNet hybrid (see the module's docstring)."""
    WHERE = "torchtitan 0.3.0 torchtitan/models/qwen3_5/__init__.py"  # noqa: N806
    out = [f"{part}: {WHERE} has no such part" for part in arch.unsupported]
    mixer, pattern = model.linear_attention, arch.linear_layers
    if mixer is None or len(pattern) != model.layers or sum(pattern) != model.linear_attention_layers:
        out.append(f"Gated DeltaNet layers without their order ({len(pattern)} listed): pass the model's config.json")
        return out
    every = attention_interval(pattern)
    if every is None:
        out.append(f"its layer order: {WHERE}'s builders attend on layer i exactly when (i + 1) % full_attention_interval == 0")
    if mixer.conv_kernel != DELTANET_CONV:
        out.append(f"linear_conv_kernel_dim={mixer.conv_kernel}: {WHERE} builds every GatedDeltaNet conv {DELTANET_CONV} wide "
                   "(_qwen35_deltanet_config's default, not passed on by _build_qwen35_layers)")
    if not model.attention_output_gate:
        out.append(f"attention without an output gate: {WHERE} builds Qwen35Attention's wq twice as wide for its sigmoid gate")
    if not arch.qk_norm or not arch.norm_offset:
        out.append(f"norms other than (1 + w) RMSNorms with q/k norms: {WHERE} builds OffsetRMSNorm everywhere, q and k included")
    turned = rotary_dim(model, arch)
    if arch.rope is None or arch.rope.scaling or turned != int(turned) or int(turned) % 2:
        out.append(f"positions other than unscaled RoPE on an even number of channels (rope_scaling "
                   f"{arch.rope.scaling if arch.rope else 'none'}, partial_rotary_factor {arch.rotary_fraction:g} of head_dim "
                   f"{model.d_head}): Qwen35Attention turns its first rotary_dim channels (torchtitan/models/qwen3_5/model.py)")
    if abs(arch.norm_eps - EPS["qwen3_5"]) > 1e-12:
        out.append(f"rms_norm_eps={arch.norm_eps:g}: {WHERE} gives every OffsetRMSNorm and RMSNormGated eps 1e-6")
    if model.mtp_depth:
        out.append(f"mtp_num_hidden_layers={model.mtp_depth}: {WHERE} builds no multi-token-prediction layer (the plan prices "
                   "it); set mtp_num_hidden_layers to 0 to plan without it")
    if model.tied_embeddings:
        out.append(f"tie_word_embeddings=true: {WHERE} builds a separate lm_head for Qwen3.5 (its configs' note: tied "
                   "embeddings not supported)")
    if arch.qkv_bias or arch.bias:
        out.append(f"biases: {WHERE} builds the attention and DeltaNet projections without bias")
    if (arch.hidden_dropout or 0) > 0 or (arch.attention_dropout or 0) > 0:
        out.append(f"dropout: {WHERE} builds no dropout")
    if arch.sliding_window and arch.sliding_window < model.seq_len:
        out.append(f"sliding_window={arch.sliding_window}: {WHERE} builds full attention only")
    if model.is_moe:
        if arch.router != "softmax" or not arch.topk_norm or arch.routed_scale != 1 or arch.expert_bias:
            out.append(f"router {arch.router} (norm_topk_prob {arch.topk_norm}, scale {arch.routed_scale:g}): {WHERE} routes by "
                       "a softmax over every expert, the top-k weights renormalized (route_norm=True)")
        if model.dense_layers or model.shared_experts != 1 or not arch.shared_expert_gate:
            out.append(f"{model.shared_experts} shared experts (gated: {arch.shared_expert_gate}), {model.dense_layers} dense "
                       f"layers: {WHERE} builds MoE on every layer with one sigmoid-gated shared expert (_shared_experts_config)")
    return out


def _gptoss_blockers(model: ModelSpec, arch: Architecture) -> list[str]:
    """What TorchTitan 0.3.0's gpt_oss builders fix and this model differs in (see the module's docstring)."""
    WHERE = where("gpt_oss")  # noqa: N806
    out = [f"{part}: {WHERE} has no such part" for part in arch.unsupported]
    heads = (model.heads, model.n_kv_heads, model.d_head)
    if heads != GPTOSS_HEADS:
        out.append(f"{heads[0]} heads, {heads[1]} key/value heads, head_dim {heads[2]}: {WHERE} builds every attention with "
                   f"{GPTOSS_HEADS[0]}, {GPTOSS_HEADS[1]} and {GPTOSS_HEADS[2]} (_make_gptoss_attn_config's defaults, not passed on "
                   "by _build_gptoss_layers)")
    even = tuple(i % 2 == 0 for i in range(model.layers))
    windowed = arch.window_layers or (tuple([True] * model.layers) if arch.sliding_window else ())
    if arch.sliding_window != GPTOSS_WINDOW or windowed != even:
        out.append(f"sliding_window={arch.sliding_window} on {sum(windowed)} of {model.layers} layers: {WHERE} windows the even "
                   f"layers at {GPTOSS_WINDOW} tokens and no others (_build_gptoss_layers)")
    if (arch.activation, arch.glu_offset, arch.glu_clamp) != ("quick_gelu", 1.0, GPTOSS_SWIGLU[1]):
        out.append(f"MLP {arch.activation} (offset {arch.glu_offset:g}, clamp {arch.glu_clamp:g}): {WHERE} builds gpt-oss's "
                   f"clamped SwiGLU (torchtitan/models/gpt_oss/moe.py, swiglu: alpha {GPTOSS_SWIGLU[0]}, limit {GPTOSS_SWIGLU[1]:g}, up + 1)")
    if not arch.sinks or not arch.bias or arch.qk_norm:
        out.append(f"attention without sinks or biases, or with q/k norms: {WHERE} builds biased q, k, v, o, one sink logit per head "
                   "and no q/k norm (gpt_oss/model.py, Attention)")
    if arch.rope is None or arch.rope.scaling not in ("", "yarn") or arch.rotary_fraction != 1 or arch.rope_interleaved:
        out.append(f"positions (rope_scaling {arch.rope.scaling if arch.rope else 'none'}): {WHERE} builds RoPE on every channel, "
                   "plain or YaRN (CosSinRoPE)")
    if abs(arch.norm_eps - EPS["gpt_oss"]) > 1e-12 or arch.norm != "RMSNorm" or arch.norm_offset:
        out.append(f"{arch.norm} eps {arch.norm_eps:g}: {WHERE} builds RMSNorm with RMSNorm.Config's eps 1e-5")
    if (arch.hidden_dropout or 0) > 0 or (arch.attention_dropout or 0) > 0:
        out.append(f"dropout: {WHERE} builds no dropout")
    if not model.is_moe or model.dense_layers or model.shared_experts:
        out.append(f"{'dense layers or shared experts' if model.is_moe else 'a dense model'}: {WHERE} builds MoE on every layer, "
                   "no shared expert")
    elif arch.router != "softmax" or not arch.topk_norm or arch.routed_scale != 1 or arch.expert_bias:
        out.append(f"router {arch.router} (norm_topk_prob {arch.topk_norm}, scale {arch.routed_scale:g}): {WHERE} routes by a "
                   "softmax over every expert, the top-k weights renormalized (route_norm=True)")
    return out


def _mla_blockers(model: ModelSpec, arch: Architecture) -> list[str]:
    """What TorchTitan 0.3.0's deepseek_v3 builders fix and this model differs in (see the module's docstring)."""
    WHERE = where("deepseek_v3")  # noqa: N806
    out = [f"{part}: {WHERE} has no such part" for part in arch.unsupported]
    if not model.is_mla:
        out.append(f"attention without a latent KV (kv_lora_rank 0): {WHERE} builds multi-head latent attention only "
                   "(make_mla_attention_config)")
    rope = arch.rope
    if rope is None or rope.scaling not in ("", "yarn") or arch.rotary_fraction != 1:
        out.append(f"positions (rope_scaling {rope.scaling if rope else 'none'}): {WHERE} builds RoPE plain or YaRN (ComplexRoPE)")
    elif rope.scaling == "yarn" and rope.factor > 1 and rope.mscale != rope.mscale_all_dim:
        out.append(f"YaRN mscale {rope.mscale:g} with mscale_all_dim {rope.mscale_all_dim:g}: {WHERE} scales no cos/sin "
                   "(ComplexRoPE) and folds one mscale into the softmax scale (deepseek_v3/model.py, Attention)")
    if arch.norm != "RMSNorm" or arch.norm_offset or arch.qk_norm:
        out.append(f"{arch.norm} norms: {WHERE} builds RMSNorm (x̂·w) only, without q/k norms")
    if arch.qkv_bias or arch.bias:
        out.append(f"biases: {WHERE} builds the attention and MLP projections without bias")
    if (arch.activation, arch.gated, arch.glu_clamp) != ("silu", True, 0.0):
        out.append(f"MLP {arch.activation}: {WHERE} builds SwiGLU")
    if (arch.hidden_dropout or 0) > 0 or (arch.attention_dropout or 0) > 0:
        out.append(f"dropout: {WHERE} builds no dropout")
    if arch.sliding_window and arch.sliding_window < model.seq_len:
        out.append(f"sliding_window={arch.sliding_window}: {WHERE} builds full attention only")
    if not model.is_moe or model.interleaved_dense:
        out.append(f"{'dense layers between MoE layers' if model.is_moe else 'a dense model'}: {WHERE} builds the first "
                   "n_dense_layers dense and MoE on every later layer (build_mla_moe_layers)")
    elif model.shared_experts < 1 or model.shared_ffn != model.expert_ffn:
        out.append(f"{model.shared_experts} shared experts {model.shared_ffn} wide beside experts {model.expert_ffn} wide: {WHERE} "
                   "builds one shared FFN moe_hidden_dim · num_shared_experts wide on every MoE layer")
    elif arch.router not in ("softmax", "sigmoid"):
        out.append(f"router {arch.router}: {WHERE} scores by softmax or sigmoid")
    elif model.expert_groups > 1 and not arch.expert_bias:
        out.append(f"grouped routing (n_group {model.expert_groups}) without noaux_tc: {WHERE} scores a group by its top-2 "
                   "experts' sum (torchtitan/models/common/moe.py, _get_node_limited_routing_scores), not its best expert")
    return out


def mtp_layers(model: ModelSpec, pp: int, cp: int) -> int:
    """The multi-token prediction layers a written deepseek_v3 module builds: the model's, but none under pipeline or
    context parallelism, which MTPDecoder.Config.update_from_config refuses (torchtitan 0.3.0 deepseek_v3/mtp.py)."""
    return model.mtp_depth if pp == 1 and cp == 1 else 0


def slug(name: str) -> str:
    """A Python identifier from the model's name: `Qwen3-30B-A3B` -> `qwen3_30b_a3b`."""
    s = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower() or "model"
    return s if s[0].isalpha() else f"m_{s}"


def module_name(model: ModelSpec) -> str:
    return f"bandwise_torchtitan_{slug(model.name)}"


def function_name(model: ModelSpec) -> str:
    return f"bandwise_{slug(model.name)}"


def source(model: ModelSpec, arch: Architecture, mtp: int = 0) -> str:
    """The module's text: one config function, `function_name(model)`; `mtp` multi-token prediction layers
    (deepseek_v3 only, `mtp_layers`)."""
    assert arch.rope is not None
    if PACKAGES[arch.family] == "deepseek_v3":
        return _deepseek_v3(model, arch, mtp)
    if PACKAGES[arch.family] == "llama3":
        return _llama3(model, arch)
    if PACKAGES[arch.family] == "qwen3_5":
        return _qwen3_next(model, arch)
    if PACKAGES[arch.family] == "gpt_oss":
        return _gpt_oss(model, arch)
    moe = model.is_moe
    common = (f"fuse_qkv=True, n_layers={model.layers}, dim={model.hidden}, n_heads={model.heads}, n_kv_heads={model.n_kv_heads}, "
              f"head_dim={model.d_head}, attn_backend=\"flex\", "
              f"rope=CosSinRoPE.Config(dim={model.d_head}, max_seq_len={model.seq_len}, theta={float(arch.rope.theta)!r})")
    layers = (f"_build_qwen3_moe_layers({common}, moe_hidden_dim={model.expert_ffn}, num_experts={model.experts}, top_k={model.top_k}, "
              f"moe_comm_backend=\"standard\")" if moe else f"_build_qwen3_layers({common}, hidden_dim={model.ffn})")
    return f'''"""TorchTitan config function for {model.name}, written by bandwise from the model's config.json:
TorchTitan's {BASES["qwen3", moe]} with the model rebuilt at this shape by TorchTitan's own Qwen3 builders."""

import dataclasses

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.models.common import CosSinRoPE, Embedding, Linear
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.qwen3 import (
    _EMBEDDING_INIT,
    _LINEAR_INIT,
    _build_qwen3_layers,
    _build_qwen3_moe_layers,
    _qwen3_norm,
)
from torchtitan.models.qwen3 import config_registry as shipped
from torchtitan.models.qwen3.model import Qwen3Model


def {function_name(model)}():
    config = shipped.{BASES["qwen3", moe]}()
    model = Qwen3Model.Config(
        vocab_size={model.vocab},
        dim={model.hidden},
        norm=_qwen3_norm({model.hidden}),
        enable_weight_tying={model.tied_embeddings},
        {_embedding(model)},
        {_head(model, "_LINEAR_INIT")},
        layers={layers},
    )
    config.model_spec = dataclasses.replace(config.model_spec, flavor={model.name!r}, model=model)
    config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec)))
    config.hf_assets_path = "./assets/hf/{model.name}"
    return config
'''


def _llama3(model: ModelSpec, arch: Architecture) -> str:
    rope = arch.rope
    assert rope is not None
    scaling = (f", scaling=\"llama\", scaling_factor={rope.factor!r}, low_freq_factor={rope.low_freq_factor!r}, "
               f"high_freq_factor={rope.high_freq_factor!r}, original_max_position_embeddings={rope.original_positions}"
               if rope.scaling == "llama3" else "")
    return f'''"""TorchTitan config function for {model.name}, written by bandwise from the model's config.json:
TorchTitan's llama3_8b with the model rebuilt at this shape by TorchTitan's own Llama 3 builders."""

import dataclasses

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.models.common import ComplexRoPE, Embedding, Linear
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.common.nn_modules import RMSNorm
from torchtitan.models.llama3 import _EMBEDDING_INIT, _NORM_INIT, _build_llama3_layers, _output_linear_init
from torchtitan.models.llama3 import config_registry as shipped
from torchtitan.models.llama3.model import Llama3Model


def {function_name(model)}():
    config = shipped.llama3_8b()
    model = Llama3Model.Config(
        dim={model.hidden},
        vocab_size={model.vocab},
        enable_weight_tying={model.tied_embeddings},
        {_embedding(model)},
        {_rms_norm(model)},
        {_head(model, f"_output_linear_init({model.hidden})")},
        layers=_build_llama3_layers(
            fuse_qkv=True, n_layers={model.layers}, dim={model.hidden}, n_heads={model.heads}, n_kv_heads={model.n_kv_heads},
            hidden_dim={model.ffn}, attn_backend="flex",
            rope=ComplexRoPE.Config(dim={model.d_head}, max_seq_len={model.seq_len}, theta={float(rope.theta)!r}{scaling}),
        ),
    )
    config.model_spec = dataclasses.replace(config.model_spec, flavor={model.name!r}, model=model)
    config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec)))
    config.hf_assets_path = "./assets/hf/{model.name}"
    return config
'''


def _gpt_oss(model: ModelSpec, arch: Architecture) -> str:
    rope = arch.rope
    assert rope is not None
    yarn = (f", scaling=\"yarn\", rope_factor={rope.factor!r}, beta_fast={rope.beta_fast!r}, beta_slow={rope.beta_slow!r}, "
            f"truncate={rope.truncate}, original_seq_len={rope.original_positions}" if rope.scaling == "yarn" else "")
    return f'''"""TorchTitan config function for {model.name}, written by bandwise from the model's config.json:
TorchTitan's gpt_oss_120b with the model rebuilt at this shape by TorchTitan's own gpt-oss builders."""

import dataclasses

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.models.common import CosSinRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.gpt_oss import _EMBEDDING_INIT, _NORM_INIT, _build_gptoss_layers, _output_linear_init
from torchtitan.models.gpt_oss import config_registry as shipped
from torchtitan.models.gpt_oss.model import GptOssModel


def {function_name(model)}():
    config = shipped.gpt_oss_120b()
    model = GptOssModel.Config(
        dim={model.hidden},
        vocab_size={model.vocab},
        enable_weight_tying={model.tied_embeddings},
        {_embedding(model)},
        {_rms_norm(model)},
        {_head(model, f"_output_linear_init({model.hidden})")},
        layers=_build_gptoss_layers(
            fuse_qkv=True, dim={model.hidden}, n_layers={model.layers}, hidden_dim={model.expert_ffn}, num_experts={model.experts},
            top_k={model.top_k}, load_balance_coeff=1e-3, attn_backend="flex", moe_comm_backend="standard",
            rope=CosSinRoPE.Config(dim={model.d_head}, max_seq_len={model.seq_len}, theta={float(rope.theta)!r}{yarn}),
        ),
    )
    config.model_spec = dataclasses.replace(config.model_spec, flavor={model.name!r}, model=model)
    config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec)))
    config.hf_assets_path = "./assets/hf/{model.name}"
    return config
'''


def _deepseek_v3(model: ModelSpec, arch: Architecture, mtp: int) -> str:
    rope = arch.rope
    assert rope is not None
    yarn = rope.scaling == "yarn" and rope.factor > 1
    scaling = (f", scaling=\"yarn\", rope_factor={rope.factor!r}, beta_fast={rope.beta_fast!r}, beta_slow={rope.beta_slow!r}, "
               f"truncate={rope.truncate}, original_seq_len={rope.original_positions}" if yarn else "")
    groups = (f"router_num_expert_groups={model.expert_groups}, router_num_limited_groups={model.groups_per_token}, "
              if model.expert_groups > 1 else "")
    loss = ("MTPLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec))" if mtp else
            "ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec)))")
    return f'''"""TorchTitan config function for {model.name}, written by bandwise from the model's config.json:
TorchTitan's deepseek_v3_16b with the model rebuilt at this shape by TorchTitan's own DeepSeek-V3 builders (MLA, MoE
with shared experts after the first dense layers), {mtp} multi-token prediction layers, and every RMSNorm at the
model's eps (the builders leave RMSNorm.Config's default)."""

import dataclasses

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.deepseek_v3 import _EMBEDDING_INIT, _NORM_INIT, _build_dsv3_layers, _build_mtp_layers, _output_linear_init
from torchtitan.models.deepseek_v3 import config_registry as shipped
from torchtitan.models.deepseek_v3.model import DeepSeekV3Model
from torchtitan.models.deepseek_v3.mtp import MTPLoss


def _with_eps(config, eps):
    """Every RMSNorm.Config in `config` set to `eps`."""
    if isinstance(config, RMSNorm.Config):
        config.eps = eps
    elif isinstance(config, list):
        for item in config:
            _with_eps(item, eps)
    elif dataclasses.is_dataclass(config):
        for field in dataclasses.fields(config):
            _with_eps(getattr(config, field.name), eps)
    return config


def {function_name(model)}():
    config = shipped.deepseek_v3_16b()
    layers = _build_dsv3_layers(
        n_layers={model.layers}, n_dense_layers={model.dense_layers}, dim={model.hidden}, n_heads={model.heads},
        q_lora_rank={model.q_lora_rank}, kv_lora_rank={model.kv_lora_rank}, qk_nope_head_dim={model.qk_nope_head_dim},
        qk_rope_head_dim={model.qk_rope_head_dim}, v_head_dim={model.v_head_dim}, mscale={rope.mscale_all_dim if yarn else 1.0!r},
        dense_hidden_dim={model.ffn}, moe_hidden_dim={model.expert_ffn}, num_experts={model.experts},
        num_shared_experts={model.shared_experts}, router_top_k={model.top_k}, router_score_func="{arch.router}",
        {groups}router_route_scale={float(arch.routed_scale)!r}, router_route_norm={arch.topk_norm},
        attn_backend="flex", moe_comm_backend="standard", non_blocking_capacity_factor=None,
        rope=ComplexRoPE.Config(dim={model.qk_rope_head_dim}, max_seq_len={model.seq_len}, theta={float(rope.theta)!r}{scaling}),
    )
    model = DeepSeekV3Model.Config(
        vocab_size={model.vocab},
        dim={model.hidden},
        enable_weight_tying={model.tied_embeddings},
        {_embedding(model)},
        {_rms_norm(model)},
        {_head(model, f"_output_linear_init({model.hidden})")},
        layers=layers,
        mtp_layers=_build_mtp_layers(layers[-1], dim={model.hidden}, num_mtp_layers={mtp}),
    )
    config.model_spec = dataclasses.replace(config.model_spec, flavor={model.name!r}, model=_with_eps(model, {arch.norm_eps!r}))
    config.loss = {loss}
    config.hf_assets_path = "./assets/hf/{model.name}"
    return config
'''


def _qwen3_next(model: ModelSpec, arch: Architecture) -> str:
    mixer = model.linear_attention
    assert mixer is not None and arch.rope is not None
    moe = model.is_moe
    common = (f"n_layers={model.layers}, dim={model.hidden}, n_heads={model.heads}, n_kv_heads={model.n_kv_heads}, "
              f"head_dim={model.d_head}, rotary_dim={int(rotary_dim(model, arch))}, "
              f"rope=CosSinRoPE.Config(dim={int(rotary_dim(model, arch))}, max_seq_len={model.seq_len}, theta={float(arch.rope.theta)!r}), "
              f"n_key_heads={mixer.key_heads}, n_value_heads={mixer.value_heads}, key_head_dim={mixer.key_head_dim}, "
              f"value_head_dim={mixer.value_head_dim}, full_attention_interval={attention_interval(arch.linear_layers)}, "
              f"attn_backend=\"flex\"")
    layers = (f"_build_qwen35_moe_layers({common}, moe_hidden_dim={model.expert_ffn}, num_experts={model.experts}, top_k={model.top_k}, "
              f"shared_expert_hidden_dim={model.shared_ffn}, moe_comm_backend=\"standard\")" if moe
              else f"_build_qwen35_layers({common}, hidden_dim={model.ffn})")
    registry = repr(HYBRID_FLAVORS[moe]) + (', moe_comm_backend="standard"' if moe else "")
    return f'''"""TorchTitan config function for {model.name}, written by bandwise from the model's config.json: its text
decoder from TorchTitan's own Qwen3.5 blocks (torchtitan/models/qwen3_5: GatedDeltaNet, Qwen35Attention with the
output gate and partial RoPE, OffsetRMSNorm, the sigmoid-gated shared expert), with no vision encoder; data,
tokenizer and optimizer from TorchTitan's {BASES["qwen3_5", moe]}. Needs flash-linear-attention (fla) installed:
torchtitan.models.qwen3_5 imports its Gated DeltaNet kernels."""

import dataclasses

import torchtitan.models.qwen3_5.sharding as qwen35_sharding
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.models.common import CosSinRoPE, Embedding, Linear
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.common.decoder import Decoder
from torchtitan.models.qwen3 import config_registry as shipped
from torchtitan.models.qwen3_5 import (
    _EMBEDDING_INIT,
    _build_qwen35_layers,
    _build_qwen35_moe_layers,
    _offset_norm,
    _output_linear_init,
    model_registry,
)
from torchtitan.models.qwen3_5.model import Qwen35Model
from torchtitan.models.qwen3_5.vision_encoder import Qwen35VisionEncoder


class Qwen3NextText(Qwen35Model):
    """Qwen35Model as a text decoder: no vision encoder is built, and the layers take the token embeddings."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Qwen35Model.Config):
        vision_encoder: Qwen35VisionEncoder.Config | None = None

        def update_from_config(self, *, config, **kwargs) -> None:
            # Qwen35Model.Config's checks and sharding, but for the vision encoder's sharding: there is none
            shard_vision = qwen35_sharding._set_vision_encoder_sharding
            qwen35_sharding._set_vision_encoder_sharding = lambda vision: None
            try:
                Qwen35Model.Config.update_from_config(self, config=config, **kwargs)
            finally:
                qwen35_sharding._set_vision_encoder_sharding = shard_vision

    def __init__(self, config: Config):
        Decoder.__init__(self, config)
        self.vision_encoder = None
        self.spatial_merge_size = None

    def _prepare_multimodal_embeds(self, tokens, **_):
        # text batches: the embeddings alone (a later pipeline stage, without tok_embeddings, gets hidden states)
        return self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens


def {function_name(model)}():
    config = shipped.{BASES["qwen3_5", moe]}()
    model = Qwen3NextText.Config(
        vocab_size={model.vocab},
        dim={model.hidden},
        norm=_offset_norm({model.hidden}),
        enable_weight_tying={model.tied_embeddings},
        {_embedding(model)},
        {_head(model, f"_output_linear_init({model.hidden})")},
        layers={layers},
    )
    spec = model_registry({registry})
    config.model_spec = dataclasses.replace(spec, flavor={model.name!r}, model=model)
    config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec)))
    config.hf_assets_path = "./assets/hf/{model.name}"
    return config
'''


HEREDOC = "BANDWISE_MODULE"


def written(text: str) -> tuple[str, str] | None:
    """(module name, source) of the config-function module a job script writes, or None."""
    m = re.search(rf"cat > (\w+)\.py <<'{HEREDOC}'\n(.*?)\n{HEREDOC}\n", text, re.S)
    return (m[1], m[2] + "\n") if m else None
