"""An independent parameter count of a Hugging Face decoder: the named tensors its checkpoint holds.

Written from each family's modelling code in transformers (`models/<type>/modeling_<type>.py`) or
the model's own remote code, module by module and layer by layer, and summed. It shares no code
with bandwise's reader: a test compares the two counts. The main model only (DeepSeek's multi-token
prediction layers are counted by bandwise as `mtp_depth`, not here); a tied head is one tensor.
"""

from __future__ import annotations

from math import prod


def tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    c = dict(cfg)
    kind = c["model_type"]
    if kind == "gemma3":
        c = {**c["text_config"], "model_type": "gemma3_text"}
        kind = "gemma3_text"
    if kind in ("qwen3_5", "qwen3_5_moe"):  # the language model (model.language_model.*); the vision tower not listed
        c = {"tie_word_embeddings": c.get("tie_word_embeddings", False), **c["text_config"]}
        kind = c["model_type"]
    if kind == "llama4":  # the language model; `llama4_vision_tensors` lists the vision side
        c = {**c["text_config"], "model_type": "llama4_text"}
        kind = "llama4_text"
    return {"gpt2": _gpt2, "gpt_neox": _neox, "falcon": _falcon, "dbrx": _dbrx, "llama4_text": _llama4,
            "jamba": _jamba, "nemotron_h": _nemotron_h, "qwen3_next": _qwen3_next,
            "qwen3_5_text": _qwen3_5, "qwen3_5_moe_text": _qwen3_5,
            "nemotron-nas": _nemotron_nas, "glm4_moe": _glm4_moe, "bamba": _mamba2_hybrid,
            "granitemoehybrid": _mamba2_hybrid, "ernie4_5_moe": _ernie_moe, "apertus": _apertus,
            "hunyuan_v1_moe": _hunyuan_moe, "phimoe": _phimoe}.get(kind, _llama_like)(c)


def count(cfg: dict) -> int:
    return sum(prod(shape) for shape in tensors(cfg).values())


def _gpt2(c: dict) -> dict:
    # modeling_gpt2.py: wte, wpe; per block ln_1, attn.c_attn (Conv1D h -> 3h), attn.c_proj, ln_2,
    # mlp.c_fc (h -> n_inner, default 4h), mlp.c_proj; ln_f. lm_head is wte.
    h, n = c["n_embd"], c.get("n_inner") or 4 * c["n_embd"]
    t = {"wte": (c["vocab_size"], h), "wpe": (c["n_positions"], h), "ln_f.w": (h,), "ln_f.b": (h,)}
    for i in range(c["n_layer"]):
        p = f"h.{i}."
        t |= {p + "ln_1.w": (h,), p + "ln_1.b": (h,), p + "c_attn.w": (h, 3 * h), p + "c_attn.b": (3 * h,),
              p + "attn.c_proj.w": (h, h), p + "attn.c_proj.b": (h,), p + "ln_2.w": (h,), p + "ln_2.b": (h,),
              p + "c_fc.w": (h, n), p + "c_fc.b": (n,), p + "mlp.c_proj.w": (n, h), p + "mlp.c_proj.b": (h,)}
    return t


def _neox(c: dict) -> dict:
    # modeling_gpt_neox.py: embed_in; per layer input_layernorm, post_attention_layernorm (LayerNorm),
    # attention.query_key_value (h -> 3h, bias=attention_bias, default True), attention.dense,
    # mlp.dense_h_to_4h / dense_4h_to_h (bias=True); final_layer_norm; embed_out (no bias).
    h, f, b = c["hidden_size"], c["intermediate_size"], c.get("attention_bias", True)
    t = {"embed_in": (c["vocab_size"], h), "final_ln.w": (h,), "final_ln.b": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["embed_out"] = (c["vocab_size"], h)
    for i in range(c["num_hidden_layers"]):
        p = f"layers.{i}."
        t |= {p + "in_ln.w": (h,), p + "in_ln.b": (h,), p + "post_ln.w": (h,), p + "post_ln.b": (h,),
              p + "qkv.w": (3 * h, h), p + "dense.w": (h, h), p + "h_to_4h.w": (f, h), p + "h_to_4h.b": (f,),
              p + "4h_to_h.w": (h, f), p + "4h_to_h.b": (h,)}
        if b:
            t |= {p + "qkv.b": (3 * h,), p + "dense.b": (h,)}
    return t


def _falcon(c: dict) -> dict:
    # modeling_falcon.py: word_embeddings; per layer self_attention.query_key_value, dense, mlp
    # dense_h_to_4h / dense_4h_to_h (bias=config.bias); LayerNorms ln_attn + ln_mlp (new decoder
    # architecture, num_ln_in_parallel_attn 2) or input_layernorm (+ post_attention_layernorm when
    # not parallel_attn); ln_f; lm_head tied by default.
    h = c["hidden_size"]
    H = c.get("num_attention_heads") or c["n_head"]
    d, f = h // H, c.get("ffn_hidden_size") or 4 * h
    new = c.get("new_decoder_architecture", False)
    kv = c.get("num_kv_heads") or H if new else (1 if c.get("multi_query", True) else H)
    qkv = (H + 2 * kv) * d
    bias = c.get("bias", False)
    two_ln = (new and (c.get("num_ln_in_parallel_attn") or 2) == 2) or not c.get("parallel_attn", True)
    t = {"word_embeddings": (c["vocab_size"], h), "ln_f.w": (h,), "ln_f.b": (h,)}
    if not c.get("tie_word_embeddings", True):
        t["lm_head"] = (c["vocab_size"], h)
    for i in range(c.get("num_hidden_layers") or c["n_layer"]):
        p = f"h.{i}."
        t |= {p + "qkv.w": (qkv, h), p + "dense.w": (h, h), p + "h_to_4h.w": (f, h), p + "4h_to_h.w": (h, f)}
        t |= {p + f"ln{j}.{x}": (h,) for j in range(2 if two_ln else 1) for x in "wb"}
        if bias:
            t |= {p + "qkv.b": (qkv,), p + "dense.b": (h,), p + "h_to_4h.b": (f,), p + "4h_to_h.b": (h,)}
    return t


def _dbrx(c: dict) -> dict:
    # modeling_dbrx.py: wte; per block norm_1, norm_2 (LayerNorm without bias), attn.Wqkv, attn.out_proj,
    # ffn.router.layer (h -> E), ffn.experts.mlp w1, v1, w2 (E * ffn_hidden_size, h each); norm_f; lm_head.
    h, H, a, f = c["d_model"], c["n_heads"], c["attn_config"], c["ffn_config"]
    d, kv, E, F = h // H, a.get("kv_n_heads", 1), f["moe_num_experts"], f["ffn_hidden_size"]
    t = {"wte": (c["vocab_size"], h), "norm_f": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (c["vocab_size"], h)
    for i in range(c["n_layers"]):
        p = f"blocks.{i}."
        t |= {p + "norm_1": (h,), p + "norm_2": (h,), p + "Wqkv": ((H + 2 * kv) * d, h), p + "out_proj": (h, h),
              p + "router": (E, h), p + "w1": (E * F, h), p + "v1": (E * F, h), p + "w2": (E * F, h)}
    return t


TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3_text", "cohere", "cohere2", "starcoder2", "smollm3", "ernie4_5"}
"""Classes whose tie_word_embeddings default is true (the others' is false)."""


def _llama_like(c: dict) -> dict:
    """Llama and the families built like it: embed_tokens; per layer attention (q, k, v, o or fused
    qkv), norms, an MLP or an MoE block; the final norm; lm_head unless tied."""
    kind = c["model_type"]
    defaults = {"gemma3_text": {"vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256},
                # Glm4Config (configuration_glm4.py)
                # SeedOssConfig (configuration_seed_oss.py)
                "seed_oss": {"vocab_size": 155136, "hidden_size": 4096, "intermediate_size": 27648, "num_hidden_layers": 64,
                             "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128, "attention_bias": True},
                "glm4": {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
                         "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "attention_bias": True}}
    c = {**defaults.get(kind, {}), **{k: v for k, v in c.items() if v is not None}}
    h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    H = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or H
    d = c.get("head_dim") or h // H
    f = c["intermediate_size"]
    # nn.LayerNorm with a bias (Nemotron's NemotronLayerNorm1P is one); the others RMSNorm (Cohere: LayerNorm, no bias)
    layer_norm = kind in ("starcoder2", "nemotron")
    t = {"embed_tokens": (V, h)}
    if kind != "olmo":  # OlmoLayerNorm holds no weight or bias
        t |= _norm("norm", h, layer_norm)
    if not c.get("tie_word_embeddings", kind in TIED_BY_DEFAULT):
        t["lm_head"] = (V, h)
    for i in range(L):
        p = f"layers.{i}."
        t |= _attention(p, c, kind, h, H, kv, d)
        norms = {"gemma2": 4, "gemma3_text": 4, "glm4": 4, "cohere": 1, "cohere2": 1, "olmo": 0}.get(kind, 2)
        if kind in ("olmo2", "olmo3", "exaone4"):  # Olmo2DecoderLayer (Exaone4DecoderLayer is one): post-norms only
            names = ["post_attention_layernorm", "post_feedforward_layernorm"]
        else:
            names = ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"][:norms]
        for n in names:
            t |= _norm(p + n, h, layer_norm)
        t |= _feed_forward(p, c, kind, i, h, f)
    return t


def _nemotron_nas(c: dict) -> dict:
    # modeling_decilm.py (the model's own code): embed_tokens; per block_configs entry a DeciLMDecoderLayer whose
    # attention, unless no_op, is input_layernorm (h) and either self_attn.linear_attn (h, h) (replace_with_linear)
    # or q_proj (H·d, h), k_proj and v_proj (H/n_heads_in_group · d, h), o_proj (h, H·d), no biases; whose FFN,
    # unless no_op, is post_attention_layernorm (h) and either mlp.linear_mlp (h, h) or gate_proj and up_proj
    # (f, h) and down_proj (h, f) with f from ffn_mult (_ffn_mult_to_intermediate_size: 2/3 of ffn_mult·h, up
    # to a multiple of 256); then norm and an untied lm_head.
    h, V, H = c["hidden_size"], c["vocab_size"], c["num_attention_heads"]
    d = h // H
    t = {"embed_tokens": (V, h), "norm": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (V, h)
    for i, block in enumerate(c["block_configs"]):
        p, att, ffn = f"layers.{i}.", block["attention"], block["ffn"]
        if not att["no_op"]:
            t[p + "input_layernorm"] = (h,)
            if att["replace_with_linear"]:
                t[p + "linear_attn"] = (h, h)
            else:
                kv = H // att["n_heads_in_group"]
                t |= {p + "q_proj": (H * d, h), p + "k_proj": (kv * d, h), p + "v_proj": (kv * d, h), p + "o_proj": (h, H * d)}
        if not ffn["no_op"]:
            t[p + "post_attention_layernorm"] = (h,)
            if ffn["replace_with_linear"]:
                t[p + "linear_mlp"] = (h, h)
            else:
                f = int(2 * ffn["ffn_mult"] * h / 3)
                f += -f % 256
                t |= {p + "gate_proj": (f, h), p + "up_proj": (f, h), p + "down_proj": (h, f)}
    return t


def _norm(name: str, width: int, bias: bool) -> dict:
    return {name + ".weight": (width,), **({name + ".bias": (width,)} if bias else {})}


def _attention(p: str, c: dict, kind: str, h: int, H: int, kv: int, d: int) -> dict:
    if c.get("kv_lora_rank"):  # DeepSeek MLA (modeling_deepseek_v3.py)
        q, r = c.get("q_lora_rank"), c["kv_lora_rank"]
        nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        t = {p + "kv_a_proj_with_mqa": (r + rope, h), p + "kv_a_layernorm": (r,), p + "kv_b_proj": (H * (nope + v), r),
             p + "o_proj": (h, H * v)}
        if q:
            t |= {p + "q_a_proj": (q, h), p + "q_a_layernorm": (q,), p + "q_b_proj": (H * (nope + rope), q)}
        else:
            t |= {p + "q_proj": (H * (nope + rope), h)}
        return t
    if kind == "internlm2":  # attention.wqkv, attention.wo (bias=config.bias)
        qkv = {"wqkv": ((H + 2 * kv) * d, h)}
    elif kind == "phi3":  # self_attn.qkv_proj
        qkv = {"qkv_proj": ((H + 2 * kv) * d, h)}
    else:
        qkv = {"q_proj": (H * d, h), "k_proj": (kv * d, h), "v_proj": (kv * d, h)}
    t = {p + k + ".weight": s for k, s in qkv.items()} | {p + "o_proj.weight": (h, H * d)}
    qkv_bias = {"qwen2": True, "qwen2_moe": True, "gpt_oss": True, "internlm2": c.get("bias", False),
                "ernie4_5": c.get("use_bias", False),
                "starcoder2": c.get("use_bias", True)}.get(kind, c.get("attention_bias", False))
    o_bias = {"qwen2": False, "qwen2_moe": False, "glm4": False,
              "seed_oss": c.get("attention_out_bias", False), "ernie4_5": c.get("use_bias", False), "gpt_oss": True, "internlm2": c.get("bias", False),
              "starcoder2": c.get("use_bias", True)}.get(kind, c.get("attention_bias", False))
    if qkv_bias:
        t |= {p + k + ".bias": (s[0],) for k, s in qkv.items()}
    if o_bias:
        t[p + "o_proj.bias"] = (h,)
    if kind in ("qwen3", "qwen3_moe", "gemma3_text", "exaone4", "hunyuan_v1_dense"):  # q/k norms over head_dim
        t |= {p + "q_norm": (d,), p + "k_norm": (d,)}
    elif kind in ("olmo2", "olmo3"):  # q_norm over H * d, k_norm over kv * d
        t |= {p + "q_norm": (H * d,), p + "k_norm": (kv * d,)}
    elif kind == "olmoe":  # q_norm over h, k_norm over h // H * kv
        t |= {p + "q_norm": (h,), p + "k_norm": (h // H * kv,)}
    elif kind == "cohere" and c.get("use_qk_norm"):
        t |= {p + "q_norm": (H, d), p + "k_norm": (kv, d)}
    if kind == "gpt_oss":
        t[p + "sinks"] = (H,)
    return t


def _mlp(p: str, h: int, f: int, gated: bool = True, bias: bool = False) -> dict:
    t = {p + "up": (f, h), p + "down": (h, f)} | ({p + "gate": (f, h)} if gated else {})
    if bias:
        t |= {p + "up.b": (f,), p + "down.b": (h,)} | ({p + "gate.b": (f,)} if gated else {})
    return t


def _feed_forward(p: str, c: dict, kind: str, i: int, h: int, f: int) -> dict:
    p += "mlp."
    if kind in ("mixtral", "granitemoe"):  # block_sparse_moe: gate (h -> E), E experts of intermediate_size
        E = c["num_local_experts"]
        return {p + "router": (E, h)} | {k: s for e in range(E) for k, s in _mlp(f"{p}e{e}.", h, f).items()}
    if kind == "olmoe":
        E = c["num_experts"]
        return {p + "router": (E, h)} | {k: s for e in range(E) for k, s in _mlp(f"{p}e{e}.", h, f).items()}
    if kind == "gpt_oss":  # router (weight + bias); experts gate_up_proj (E, h, 2f) + bias, down_proj (E, f, h) + bias
        E = c["num_local_experts"]
        return {p + "router.w": (E, h), p + "router.b": (E,), p + "gate_up": (E, h, 2 * f), p + "gate_up.b": (E, 2 * f),
                p + "down": (E, f, h), p + "down.b": (E, h)}
    if kind in ("qwen2_moe", "qwen3_moe"):
        step, only = c.get("decoder_sparse_step", 1), c.get("mlp_only_layers") or []
        if i in only or (i + 1) % step:
            return _mlp(p, h, f)
        E, m = c["num_experts"], c["moe_intermediate_size"]
        t = {p + "router": (E, h)} | {k: s for e in range(E) for k, s in _mlp(f"{p}e{e}.", h, m).items()}
        if kind == "qwen2_moe":  # shared_expert and shared_expert_gate (h -> 1)
            t |= _mlp(p + "shared.", h, c["shared_expert_intermediate_size"]) | {p + "shared_gate": (1, h)}
        return t
    if c.get("n_routed_experts"):  # DeepSeek: dense before first_k_dense_replace, then routed + shared
        if i < c.get("first_k_dense_replace", 0) or i % c.get("moe_layer_freq", 1):
            return _mlp(p, h, f)
        E, m, S = c["n_routed_experts"], c["moe_intermediate_size"], c.get("n_shared_experts") or 0
        t = {p + "router": (E, h)} | {k: s for e in range(E) for k, s in _mlp(f"{p}e{e}.", h, m).items()}
        return t | (_mlp(p + "shared.", h, m * S) if S else {})
    if kind == "ernie4_5":  # Ernie4_5MLP: gate/up/down with use_bias
        return _mlp(p, h, f, bias=c.get("use_bias", False))
    if kind == "nemotron":  # NemotronMLP: up_proj, down_proj (no gate), bias=mlp_bias
        return _mlp(p, h, f, gated=False, bias=c.get("mlp_bias", False))
    if kind == "starcoder2":  # c_fc, c_proj with use_bias
        return _mlp(p, h, f, gated=False, bias=c.get("use_bias", True))
    return _mlp(p, h, f, bias=c.get("mlp_bias", False) if kind in ("llama", "granite", "smollm3", "seed_oss") else False)


def _llama4(c: dict) -> dict:
    # modeling_llama4.py (Llama4ForCausalLM): embed_tokens; per layer self_attn q/k/v/o (bias=attention_bias,
    # no QK-norm weights: Llama4TextL2Norm has none), input_layernorm, post_attention_layernorm, and
    # feed_forward: on moe_layers (default range(step - 1, L, step)) Llama4TextMoe = experts.gate_up_proj
    # (E, h, 2f), experts.down_proj (E, f, h), router (E, h), shared_expert gate/up/down of intermediate_size;
    # elsewhere Llama4TextMLP of intermediate_size_mlp; norm; lm_head (tie_word_embeddings default false).
    h, L, V = c.get("hidden_size", 5120), c.get("num_hidden_layers", 48), c.get("vocab_size", 202048)
    H, kv, d = c.get("num_attention_heads", 40), c.get("num_key_value_heads", 8), c.get("head_dim", 128)
    f, f_mlp = c.get("intermediate_size", 8192), c.get("intermediate_size_mlp", 16384)
    E, step = c.get("num_local_experts", 16), c.get("interleave_moe_layer_step", 1)
    moe = c.get("moe_layers")
    moe = range(step - 1, L, step) if moe is None else moe
    t = {"embed_tokens": (V, h), "norm": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (V, h)
    for i in range(L):
        p = f"layers.{i}."
        t |= {p + "q": (H * d, h), p + "k": (kv * d, h), p + "v": (kv * d, h), p + "o": (h, H * d),
              p + "input_layernorm": (h,), p + "post_attention_layernorm": (h,)}
        if c.get("attention_bias", False):
            t |= {p + "q.b": (H * d,), p + "k.b": (kv * d,), p + "v.b": (kv * d,), p + "o.b": (h,)}
        if i in moe:
            t |= {p + "experts.gate_up_proj": (E, h, 2 * f), p + "experts.down_proj": (E, f, h), p + "router": (E, h)}
            t |= _mlp(p + "shared_expert.", h, f)
        else:
            t |= _mlp(p + "feed_forward.", h, f_mlp)
    return t


def llama4_vision_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    """The vision side of Llama4ForConditionalGeneration (modeling_llama4.py): Llama4VisionModel's
    patch embedding (a bias-free linear of channels·patch² -> hidden), class embedding, positional
    embedding ((image/patch)² + 1 rows), LayerNorms pre and post, its encoder layers (q/k/v/o with
    biases, fc1/fc2 with biases, two LayerNorms), the pixel-shuffle adapter (fc1 intermediate_size ->
    projector_input_dim, fc2 projector_output_dim squared, no biases); and the multi-modal projector
    (vision_output_dim -> the text hidden size, no bias)."""
    v, h_text = cfg["vision_config"], cfg["text_config"]["hidden_size"]
    h, f, n = v["hidden_size"], v["intermediate_size"], v["num_hidden_layers"]
    patches = (v["image_size"] // v["patch_size"]) ** 2 + 1
    t = {"patch": (h, v["num_channels"] * v["patch_size"] ** 2), "class": (h,), "pos": (patches, h),
         "pre.w": (h,), "pre.b": (h,), "post.w": (h,), "post.b": (h,),
         "adapter.fc1": (v["projector_input_dim"], f), "adapter.fc2": (v["projector_output_dim"], v["projector_output_dim"]),
         "projector": (h_text, v["vision_output_dim"])}
    for i in range(n):
        p = f"vision.{i}."
        for proj in "qkvo":
            t |= {p + proj: (h, h), p + proj + ".b": (h,)}
        t |= {p + "fc1": (f, h), p + "fc1.b": (f,), p + "fc2": (h, f), p + "fc2.b": (h,)}
        t |= {p + ln + x: (h,) for ln in ("ln1.", "ln2.") for x in "wb"}
    return t


def _nemotron_h(c: dict) -> dict:
    # modeling_nemotron_h.py (the model's own code): backbone.embeddings; per hybrid_override_pattern letter a
    # NemotronHBlock of one RMSNorm (h) and its mixer: "M" NemotronHMamba2Mixer: in_proj (2·I + 2·G·N + H_m, h), no
    # bias (use_bias false), conv1d (I + 2·G·N, 1, K) + bias (use_conv_bias), dt_bias, A_log, D (H_m each), a gated
    # RMSNorm (I), out_proj (h, I), with I = mamba_num_heads · mamba_head_dim; "*" attention q, k, v, o without bias;
    # "-" MLP up_proj (f, h), down_proj (h, f) (squared ReLU, no gate); then norm_f and an untied lm_head.
    h, V, f = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    H, kv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("attention_head_dim") or c.get("head_dim") or h // H
    Hm, P, G, N, K = c["mamba_num_heads"], c["mamba_head_dim"], c["n_groups"], c["ssm_state_size"], c["conv_kernel"]
    inner, conv = Hm * P, Hm * P + 2 * G * N
    t = {"embeddings": (V, h), "norm_f": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (V, h)
    for i, kind in enumerate(c["hybrid_override_pattern"]):
        p = f"layers.{i}."
        t[p + "norm"] = (h,)
        if kind == "M":
            t |= {p + "in_proj": (2 * inner + 2 * G * N + Hm, h), p + "conv1d": (conv, 1, K), p + "conv1d.b": (conv,),
                  p + "dt_bias": (Hm,), p + "A_log": (Hm,), p + "D": (Hm,), p + "mixer_norm": (inner,), p + "out_proj": (h, inner)}
        elif kind == "*":
            t |= {p + "q": (H * d, h), p + "k": (kv * d, h), p + "v": (kv * d, h), p + "o": (h, H * d)}
        else:
            t |= {p + "up_proj": (f, h), p + "down_proj": (h, f)}
    return t


def _qwen3_next(c: dict) -> dict:
    # modeling_qwen3_next.py (transformers): embed_tokens; per layer input_layernorm and post_attention_layernorm (h);
    # layer_types[i] (default: "full_attention" where (i + 1) % full_attention_interval == 0) picks Qwen3NextAttention,
    # q_proj (2·H·d, h: the query and its output gate), k_proj, v_proj (kv·d, h), o_proj (h, H·d), no biases, q_norm and
    # k_norm (d), or Qwen3NextGatedDeltaNet, in_proj_qkvz (2·Kh·dk + 2·Vh·dv, h), in_proj_ba (2·Vh, h), conv1d
    # (2·Kh·dk + Vh·dv, 1, K) without bias, dt_bias and A_log (Vh), norm (dv), out_proj (h, Vh·dv); every layer a
    # Qwen3NextSparseMoeBlock: gate (E, h), E experts of gate/up (f, h) and down (h, f), shared_expert likewise of fs,
    # shared_expert_gate (1, h); then norm and an untied lm_head.
    h, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    H, kv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // H
    Kh, Vh, dk, dv, K = (c[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                        "linear_value_head_dim", "linear_conv_kernel_dim"))
    E, f, fs = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    types = c.get("layer_types") or ["full_attention" if (i + 1) % c["full_attention_interval"] == 0 else "linear_attention"
                                     for i in range(L)]
    t = {"embed_tokens": (V, h), "norm": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (V, h)
    for i, kind in enumerate(types):
        p = f"layers.{i}."
        t |= {p + "input_layernorm": (h,), p + "post_attention_layernorm": (h,)}
        if kind == "full_attention":
            t |= {p + "q_proj": (2 * H * d, h), p + "k_proj": (kv * d, h), p + "v_proj": (kv * d, h), p + "o_proj": (h, H * d),
                  p + "q_norm": (d,), p + "k_norm": (d,)}
        else:
            t |= {p + "in_proj_qkvz": (2 * Kh * dk + 2 * Vh * dv, h), p + "in_proj_ba": (2 * Vh, h),
                  p + "conv1d": (2 * Kh * dk + Vh * dv, 1, K), p + "dt_bias": (Vh,), p + "A_log": (Vh,), p + "norm": (dv,),
                  p + "out_proj": (h, Vh * dv)}
        t[p + "gate"] = (E, h)
        for j in range(E):
            t |= {p + f"mlp.e{j}.gate_proj": (f, h), p + f"mlp.e{j}.up_proj": (f, h), p + f"mlp.e{j}.down_proj": (h, f)}
        t |= {p + "shared_expert.gate_proj": (fs, h), p + "shared_expert.up_proj": (fs, h), p + "shared_expert.down_proj": (h, fs),
              p + "shared_expert_gate": (1, h)}
    return t


def _qwen3_5(c: dict) -> dict:
    # modeling_qwen3_5.py / modeling_qwen3_5_moe.py (transformers), as TorchTitan 0.3.0's qwen3_5 state_dict_adapter.py
    # names the checkpoint: embed_tokens; per layer input_layernorm, post_attention_layernorm (h); on layer_types[i]
    # "full_attention" self_attn q_proj (2·H·d, h), k_proj, v_proj (kv·d, h), o_proj (h, H·d), q_norm, k_norm (d);
    # else linear_attn in_proj_qkv (2·Kh·dk + Vh·dv, h), in_proj_z (Vh·dv, h), in_proj_b and in_proj_a (Vh, h), conv1d
    # (2·Kh·dk + Vh·dv, 1, K), dt_bias, A_log (Vh), norm (dv), out_proj (h, Vh·dv); mlp: the dense model's gate_proj,
    # up_proj (f, h), down_proj (h, f), the MoE model's gate (E, h), experts.gate_up_proj (E, 2·fe, h) and down_proj
    # (E, h, fe), shared_expert of fs and shared_expert_gate (1, h); norm; lm_head unless tied. mtp.* is not listed.
    h, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    H, kv, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    Kh, Vh, dk, dv, K = (c[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                        "linear_value_head_dim", "linear_conv_kernel_dim"))
    types = c.get("layer_types") or ["full_attention" if (i + 1) % c["full_attention_interval"] == 0 else "linear_attention"
                                     for i in range(L)]
    t = {"embed_tokens": (V, h), "norm": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (V, h)
    for i, kind in enumerate(types):
        p = f"layers.{i}."
        t |= {p + "input_layernorm": (h,), p + "post_attention_layernorm": (h,)}
        if kind == "full_attention":
            t |= {p + "q_proj": (2 * H * d, h), p + "k_proj": (kv * d, h), p + "v_proj": (kv * d, h), p + "o_proj": (h, H * d),
                  p + "q_norm": (d,), p + "k_norm": (d,)}
        else:
            t |= {p + "in_proj_qkv": (2 * Kh * dk + Vh * dv, h), p + "in_proj_z": (Vh * dv, h), p + "in_proj_b": (Vh, h),
                  p + "in_proj_a": (Vh, h), p + "conv1d": (2 * Kh * dk + Vh * dv, 1, K), p + "dt_bias": (Vh,),
                  p + "A_log": (Vh,), p + "norm": (dv,), p + "out_proj": (h, Vh * dv)}
        if c["model_type"] == "qwen3_5_text":
            f = c["intermediate_size"]
            t |= {p + "gate_proj": (f, h), p + "up_proj": (f, h), p + "down_proj": (h, f)}
            continue
        E, fe, fs = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
        t |= {p + "gate": (E, h), p + "experts.gate_up_proj": (E, 2 * fe, h), p + "experts.down_proj": (E, h, fe),
              p + "shared_expert.gate_proj": (fs, h), p + "shared_expert.up_proj": (fs, h), p + "shared_expert.down_proj": (h, fs),
              p + "shared_expert_gate": (1, h)}
    return t


def _jamba(c: dict) -> dict:
    # modeling_jamba.py: embed_tokens; layer i attention (q, k, v, o, no bias) when i % attn_layer_period ==
    # attn_layer_offset, else JambaMambaMixer: in_proj (2·d_inner, h) (+ bias with mamba_proj_bias), conv1d
    # (d_inner, 1, d_conv) + bias (mamba_conv_bias), x_proj (R + 2N, d_inner), dt_proj (d_inner, R) + bias,
    # A_log (d_inner, N), D (d_inner), out_proj (h, d_inner) (+ bias), dt/b/c_layernorm (R, N, N); then
    # feed_forward: JambaSparseMoeBlock (router (E, h), experts e{k} gate/up/down) when i % expert_layer_period
    # == expert_layer_offset and E > 1, else JambaMLP; input_layernorm, pre_ff_layernorm; final_layernorm; lm_head.
    h, L, V = c.get("hidden_size", 4096), c.get("num_hidden_layers", 32), c.get("vocab_size", 65536)
    H, kv, f = c.get("num_attention_heads", 32), c.get("num_key_value_heads", 8), c.get("intermediate_size", 14336)
    d = h // H
    E = c.get("num_experts", 16)
    inner, N, k = c.get("mamba_expand", 2) * h, c.get("mamba_d_state", 16), c.get("mamba_d_conv", 4)
    R = c.get("mamba_dt_rank", "auto")
    R = -(-h // 16) if R == "auto" else R
    t = {"embed_tokens": (V, h), "final_layernorm": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (V, h)
    for i in range(L):
        p = f"layers.{i}."
        if i % c.get("attn_layer_period", 8) == c.get("attn_layer_offset", 4):
            t |= {p + "q": (H * d, h), p + "k": (kv * d, h), p + "v": (kv * d, h), p + "o": (h, H * d)}
        else:
            t |= {p + "in_proj": (2 * inner, h), p + "conv1d": (inner, 1, k), p + "x_proj": (R + 2 * N, inner),
                  p + "dt_proj": (inner, R), p + "dt_proj.b": (inner,), p + "A_log": (inner, N), p + "D": (inner,),
                  p + "out_proj": (h, inner), p + "dt_norm": (R,), p + "b_norm": (N,), p + "c_norm": (N,)}
            if c.get("mamba_conv_bias", True):
                t[p + "conv1d.b"] = (inner,)
            if c.get("mamba_proj_bias", False):
                t |= {p + "in_proj.b": (2 * inner,), p + "out_proj.b": (h,)}
        t |= {p + "input_layernorm": (h,), p + "pre_ff_layernorm": (h,)}
        if E > 1 and i % c.get("expert_layer_period", 2) == c.get("expert_layer_offset", 1):
            t |= {p + "mlp.router": (E, h)} | {k2: s for e in range(E) for k2, s in _mlp(f"{p}mlp.e{e}.", h, f).items()}
        else:
            t |= _mlp(p + "ffn.", h, f)
    return t


def _glm4_moe(c: dict) -> dict:
    # modeling_glm4_moe.py (transformers a0699c9): embed_tokens; per layer self_attn q_proj (H·d, h), k_proj, v_proj
    # (kv·d, h), each with a bias when attention_bias, o_proj (h, H·d) without, q_norm and k_norm (d) when use_qk_norm;
    # input_layernorm, post_attention_layernorm; mlp: Glm4MoeMLP gate/up/down of intermediate_size on layers below
    # first_k_dense_replace (default 1), else Glm4MoeMoE: gate.weight (E, h), experts e{k} gate/up/down of
    # moe_intermediate_size, shared_experts of moe_intermediate_size · n_shared_experts; norm; lm_head (untied).
    d0 = {"n_shared_experts": 1, "first_k_dense_replace": 1}
    c = {**d0, **c}
    h, L, V, H, kv = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // H
    E, m = c["n_routed_experts"], c["moe_intermediate_size"]
    t = {"embed_tokens": (V, h), "norm": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (V, h)
    for i in range(L):
        p = f"layers.{i}."
        t |= {p + "q_proj": (H * d, h), p + "k_proj": (kv * d, h), p + "v_proj": (kv * d, h), p + "o_proj": (h, H * d),
              p + "input_layernorm": (h,), p + "post_attention_layernorm": (h,)}
        if c.get("attention_bias", False):
            t |= {p + "q_proj.b": (H * d,), p + "k_proj.b": (kv * d,), p + "v_proj.b": (kv * d,)}
        if c.get("use_qk_norm", False):
            t |= {p + "q_norm": (d,), p + "k_norm": (d,)}
        if i < c["first_k_dense_replace"]:
            t |= _mlp(p + "mlp.", h, c["intermediate_size"])
        else:
            t[p + "mlp.gate"] = (E, h)
            for e in range(E):
                t |= _mlp(f"{p}mlp.e{e}.", h, m)
            t |= _mlp(p + "mlp.shared_experts.", h, m * c["n_shared_experts"])
    return t


BAMBA = {"vocab_size": 128000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "mamba_n_heads": 128, "mamba_d_head": "auto",
         "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2}
"""BambaConfig.__init__'s defaults (configuration_bamba.py)."""
GRANITE_HYBRID = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_local_experts": 8, "shared_intermediate_size": 1024,
                  "mamba_n_heads": 128, "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_d_state": 256,
                  "mamba_d_conv": 4, "mamba_expand": 2}
"""GraniteMoeHybridConfig.__init__'s defaults (configuration_granitemoehybrid.py)."""


def _mamba2_hybrid(c: dict) -> dict:
    # modeling_bamba.py / modular_granitemoehybrid.py: embed_tokens; per layer input_layernorm and
    # pre_ff_layernorm (Granite: post_attention_layernorm), then the mixer: BambaMixer in_proj (I + conv + H, h)
    # with conv = I + 2·G·N, conv1d (conv, 1, K) + bias, dt_bias, A_log, D (H), norm (I), out_proj (h, I);
    # or attention q, k, v, o (h // H per head; Granite's biased with attention_bias). The feed-forward: Bamba's
    # feed_forward gate/up/down of intermediate_size; Granite's block_sparse_moe router (E, h), input_linear
    # (E, 2f, h), output_linear (E, h, f), and shared_mlp input_linear (2·fs, h), output_linear (h, fs).
    # A final norm, and lm_head unless tied (default untied).
    granite = c["model_type"] == "granitemoehybrid"
    c = {**(GRANITE_HYBRID if granite else BAMBA), **{k: v for k, v in c.items() if v is not None}}
    h, L, V, H = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or H
    d = h // H if granite else (c.get("head_dim") or h // H)
    Hm, G, N, K = c["mamba_n_heads"], c["mamba_n_groups"], c["mamba_d_state"], c["mamba_d_conv"]
    inner = c["mamba_expand"] * h
    conv = inner + 2 * G * N
    if granite:
        kinds = c.get("layer_types") or ["mamba"] * L
    else:
        kinds = ["attention" if i in (c.get("attn_layer_indices") or []) else "mamba" for i in range(L)]
    t = {"embed_tokens": (V, h), "final_norm": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (V, h)
    for i, kind in enumerate(kinds):
        p = f"layers.{i}."
        t |= {p + "norm1": (h,), p + "norm2": (h,)}
        if kind == "mamba":
            t |= {p + "in_proj": (inner + conv + Hm, h), p + "conv1d": (conv, 1, K), p + "conv1d.b": (conv,),
                  p + "dt_bias": (Hm,), p + "A_log": (Hm,), p + "D": (Hm,), p + "mixer_norm": (inner,),
                  p + "out_proj": (h, inner)}
        else:
            t |= {p + "q": (H * d, h), p + "k": (kv * d, h), p + "v": (kv * d, h), p + "o": (h, H * d)}
            if granite and c.get("attention_bias"):
                t |= {p + "q.b": (H * d,), p + "k.b": (kv * d,), p + "v.b": (kv * d,), p + "o.b": (h,)}
        if granite:
            E, f, fs = c["num_local_experts"], c["intermediate_size"], c["shared_intermediate_size"]
            if E:
                t |= {p + "router": (E, h), p + "experts.input_linear": (E, 2 * f, h), p + "experts.output_linear": (E, h, f)}
            if fs:
                t |= {p + "shared_mlp.input_linear": (2 * fs, h), p + "shared_mlp.output_linear": (h, fs)}
        else:
            t |= _mlp(p + "feed_forward.", h, c["intermediate_size"])
    return t


ERNIE_MOE = {"vocab_size": 103424, "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
             "num_attention_heads": 20, "num_key_value_heads": 4, "moe_intermediate_size": 1536, "moe_k": 6,
             "moe_num_experts": 64, "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": -1,
             "moe_layer_interval": 1, "use_bias": False, "tie_word_embeddings": True}
"""Ernie4_5_MoeConfig.__init__'s defaults (configuration_ernie4_5_moe.py)."""


def _ernie_moe(c: dict) -> dict:
    # modular_ernie4_5_moe.py: embed_tokens; per layer q/k/v/o (head_dim, default h // H) with use_bias,
    # input_layernorm, post_attention_layernorm; mlp: Ernie4_5_MoeSparseMoeBlock when (i + 1) % interval == 0 and
    # start <= i <= end (end -1: the last layer) — moe_statics.e_score_correction_bias (1, E), gate (E, h), experts
    # e{k} gate/up/down of moe_intermediate_size, shared_experts of moe_intermediate_size · shared — else an MLP of
    # intermediate_size; every MLP's projections with use_bias; norm; lm_head (bias use_bias) unless tied.
    c = {**ERNIE_MOE, **{k: v for k, v in c.items() if v is not None}}
    h, L, V, H, kv = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d, b = c.get("head_dim") or h // H, c["use_bias"]
    E, m, S = c["moe_num_experts"], c["moe_intermediate_size"], c["moe_num_shared_experts"]
    end = L - 1 if c["moe_layer_end_index"] == -1 else c["moe_layer_end_index"]
    t = {"embed_tokens": (V, h), "norm": (h,)}
    if not c["tie_word_embeddings"]:
        t |= {"lm_head": (V, h)} | ({"lm_head.b": (V,)} if b else {})
    for i in range(L):
        p = f"layers.{i}."
        t |= {p + "q": (H * d, h), p + "k": (kv * d, h), p + "v": (kv * d, h), p + "o": (h, H * d),
              p + "input_layernorm": (h,), p + "post_attention_layernorm": (h,)}
        if b:
            t |= {p + "q.b": (H * d,), p + "k.b": (kv * d,), p + "v.b": (kv * d,), p + "o.b": (h,)}
        if (i + 1) % c["moe_layer_interval"] == 0 and c["moe_layer_start_index"] <= i <= end:
            t |= {p + "mlp.moe_statics": (1, E), p + "mlp.gate": (E, h)}
            for e in range(E):
                t |= _mlp(f"{p}mlp.e{e}.", h, m, bias=b)
            if S:
                t |= _mlp(p + "mlp.shared.", h, m * S, bias=b)
        else:
            t |= _mlp(p + "mlp.", h, c["intermediate_size"], bias=b)
    return t


def _apertus(c: dict) -> dict:
    # modeling_apertus.py: embed_tokens; per layer q/k/v/o (bias attention_bias), q_norm and k_norm (head_dim) when qk_norm
    # (default true), attention_layernorm, feedforward_layernorm, mlp up_proj (f, h) and down_proj (h, f) with mlp_bias and
    # its XIELUActivation's alpha_p and alpha_n (one value each); norm; lm_head unless tied.
    h, L, V, H = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["num_attention_heads"]
    kv, f = c.get("num_key_value_heads") or H, c["intermediate_size"]
    d = c.get("head_dim") or h // H
    t = {"embed_tokens": (V, h), "norm": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (V, h)
    for i in range(L):
        p = f"layers.{i}."
        t |= {p + "q": (H * d, h), p + "k": (kv * d, h), p + "v": (kv * d, h), p + "o": (h, H * d),
              p + "attention_layernorm": (h,), p + "feedforward_layernorm": (h,),
              p + "up_proj": (f, h), p + "down_proj": (h, f), p + "alpha_p": (1,), p + "alpha_n": (1,)}
        if c.get("qk_norm", True):
            t |= {p + "q_norm": (d,), p + "k_norm": (d,)}
        if c.get("attention_bias", False):
            t |= {p + "q.b": (H * d,), p + "k.b": (kv * d,), p + "v.b": (kv * d,), p + "o.b": (h,)}
        if c.get("mlp_bias", False):
            t |= {p + "up_proj.b": (f,), p + "down_proj.b": (h,)}
    return t


def _hunyuan_moe(c: dict) -> dict:
    # modular_hunyuan_v1_moe.py (HunYuanMoEV1Config defaults: vocab 290943, hidden 4096, intermediate 11008, 32 layers,
    # 32 heads, num_experts 1, moe_topk 1): embed_tokens; per layer q/k/v/o (bias attention_bias), query_layernorm and
    # key_layernorm (head_dim, default h // H), input_layernorm, post_attention_layernorm; mlp.gate.wg (E, h), experts
    # e{k} and shared_mlp gate/up/down of intermediate_size; norm; lm_head unless tied.
    c = {"vocab_size": 290943, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_experts": 1, **{k: v for k, v in c.items() if v is not None}}
    h, L, V, H, f = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["num_attention_heads"], c["intermediate_size"]
    kv, d = c.get("num_key_value_heads") or H, c.get("head_dim") or h // H
    t = {"embed_tokens": (V, h), "norm": (h,)}
    if not c.get("tie_word_embeddings", False):
        t["lm_head"] = (V, h)
    for i in range(L):
        p = f"layers.{i}."
        E = c["num_experts"][i] if isinstance(c["num_experts"], list) else c["num_experts"]
        t |= {p + "q": (H * d, h), p + "k": (kv * d, h), p + "v": (kv * d, h), p + "o": (h, H * d),
              p + "query_layernorm": (d,), p + "key_layernorm": (d,), p + "input_layernorm": (h,),
              p + "post_attention_layernorm": (h,), p + "mlp.gate.wg": (E, h)}
        if c.get("attention_bias", False):
            t |= {p + "q.b": (H * d,), p + "k.b": (kv * d,), p + "v.b": (kv * d,), p + "o.b": (h,)}
        for e in range(E):
            t |= _mlp(f"{p}mlp.e{e}.", h, f)
        t |= _mlp(p + "mlp.shared_mlp.", h, f)
    return t


def _phimoe(c: dict) -> dict:
    # modular_phimoe.py (PhimoeConfig defaults: vocab 32064, hidden 4096, intermediate 6400, 32 layers, 32 heads, 8 KV
    # heads, 16 experts): embed_tokens; per layer q/k/v/o with attention_bias, input_layernorm and post_attention_layernorm
    # (nn.LayerNorm: weight and bias), block_sparse_moe router (E, h) and experts e{k} gate/up/down; norm (LayerNorm);
    # lm_head with a bias when lm_head_bias.
    c = {"vocab_size": 32064, "hidden_size": 4096, "intermediate_size": 6400, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 16, **{k: v for k, v in c.items() if v is not None}}
    h, L, V, H, kv, f = (c[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
                                         "num_key_value_heads", "intermediate_size"))
    d, E = c.get("head_dim") or h // H, c["num_local_experts"]
    t = {"embed_tokens": (V, h), "norm.w": (h,), "norm.b": (h,)}
    if not c.get("tie_word_embeddings", False):
        t |= {"lm_head": (V, h)} | ({"lm_head.b": (V,)} if c.get("lm_head_bias", False) else {})
    for i in range(L):
        p = f"layers.{i}."
        t |= {p + "q": (H * d, h), p + "k": (kv * d, h), p + "v": (kv * d, h), p + "o": (h, H * d), p + "router": (E, h)}
        t |= {p + n + x: (h,) for n in ("input_layernorm.", "post_attention_layernorm.") for x in "wb"}
        if c.get("attention_bias", False):
            t |= {p + "q.b": (H * d,), p + "k.b": (kv * d,), p + "v.b": (kv * d,), p + "o.b": (h,)}
        for e in range(E):
            t |= _mlp(f"{p}mlp.e{e}.", h, f)
    return t
