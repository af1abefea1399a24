"""A published run's `model` section -> the ModelSpec it trained."""

from __future__ import annotations

import re
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.plan.run_fields import count, digits, maxtext_dims, need_count
from bandwise.specs.model import ModelSpec, brief

GPT2_VOCAB = 50272
"""GPT-2 BPE vocabulary as padded in the OPT configs (Zhang et al. 2022; noted in the data's flops_note)."""


def read_model(run: dict[str, Any], case_notes: list[str]) -> ModelSpec:
    """The run's `model` section as a ModelSpec; what it leaves unstated takes the default named in `case_notes`."""
    m = run.get("model") or {}
    rid = run.get("id", "?")
    scale = re.search(r"global_parameter_scale=(\d+)", str(m.get("name", "")))
    if scale:  # a MaxText model named by its scale: base.yml's dims scaled, embeddings tied (logits_via_embedding)
        dims = maxtext_dims(digits(scale.group(1), "global_parameter_scale"))
        stated = {k: m.get(k) for k in dims}
        if any(v is not None and v != dims[k] for k, v in stated.items()):
            raise BandwiseError(f"run {brief(rid)}: model dims {brief(stated, 200)} disagree with MaxText's scale rule {dims}")
        m = {"tied_embeddings": True, **m, **dims}
    hidden, heads = need_count(m, "hidden", "model.hidden"), need_count(m, "heads", "model.heads")
    ffn_type = str(m.get("ffn_type") or "").lower()
    # SwiGLU/GeGLU have three matrices; GELU, ReLU, squared-ReLU two. Unstated: GPT's GELU for dense
    # models, SwiGLU experts for MoE (the data set's own FLOP count assumes 3·h·expert_ffn).
    gated = "glu" in ffn_type or (not ffn_type and bool(m.get("moe")))
    kw: dict[str, Any] = dict(
        name=str(m.get("name") or rid), layers=need_count(m, "layers", "model.layers"), hidden=hidden, heads=heads,
        kv_heads=count(m.get("kv_heads"), "model.kv_heads") or 0, head_dim=count(m.get("head_dim"), "model.head_dim") or 0, gated_mlp=gated,
        tied_embeddings=bool(m.get("tied_embeddings")), dropout=bool(m.get("dropout")),
        alibi="alibi" in str(m.get("position") or "").lower(),
    )
    if not m.get("ffn_type"):
        case_notes.append("MLP type not stated: " + ("SwiGLU experts" if gated else "GELU 2-matrix (GPT default)"))
    ffn = count(m.get("ffn"), "model.ffn", least=1)
    moe = m.get("moe") or {}
    if ffn is None and not moe:
        ffn = 4 * hidden
        case_notes.append("ffn not stated: 4h (Megatron GPT default)")
    if count(m.get("kv_heads")) is None:
        case_notes.append("kv_heads not stated: MHA")
    vocab = count(m.get("vocab"), "model.vocab", least=1)
    if vocab is None:
        vocab = GPT2_VOCAB
        case_notes.append(f"vocab not stated: GPT-2 BPE {GPT2_VOCAB}")
    kw["vocab"] = vocab
    seq = count(m.get("seq_len"), "model.seq_len", least=1)
    if seq is None:
        seq = 8192
        case_notes.append("seq_len not stated: 8192 (TorchTitan's Llama 3 default)")
    kw["seq_len"] = seq
    if moe:
        kw.update(
            experts=need_count(moe, "num_experts", "model.moe.num_experts"), top_k=need_count(moe, "top_k", "model.moe.top_k"),
            expert_ffn=need_count(moe, "expert_ffn", "model.moe.expert_ffn"),
            shared_experts=count(moe.get("shared_experts"), "model.moe.shared_experts") or 0,
            shared_expert_ffn=count(moe.get("shared_expert_ffn"), "model.moe.shared_expert_ffn") or 0,
            dense_layers=count(moe.get("dense_layers"), "model.moe.dense_layers") or 0,
        )
        interval = count(moe.get("moe_layer_interval"), "model.moe.moe_layer_interval", least=1)
        if interval and interval > 1:  # every interval-th layer MoE, the others dense (Llama 4's interleave_moe_layer_step)
            dense = kw["layers"] - kw["layers"] // interval
            if count(moe.get("dense_layers")) not in (None, 0, dense):
                raise BandwiseError(f"run {brief(rid)}: model.moe.dense_layers={moe.get('dense_layers')} disagrees with moe_layer_interval={interval} "
                                    f"over {kw['layers']} layers ({dense} dense); give one of them")
            kw.update(dense_layers=dense, interleaved_dense=True)
        grouped = re.search(r"group-limited \((\d+) groups, top-(\d+)\)", str(moe.get("router") or ""))
        if grouped:  # DeepSeek-V3 Sec. 3.2.2: each token's experts on at most top-g of the node groups
            kw.update(expert_groups=digits(grouped.group(1), "model.moe.router"), groups_per_token=digits(grouped.group(2), "model.moe.router"))
        ffn = ffn or kw["expert_ffn"]  # no dense layer uses it when dense_layers == 0
    kw["ffn"] = ffn
    kw["mtp_depth"] = count(m.get("mtp_depth"), "model.mtp_depth") or 0
    mla = re.search(r"MLA \(q_lora (\d+), kv_lora (\d+), qk_nope (\d+), qk_rope (\d+), v (\d+)\)", str(m.get("attention") or ""))
    if mla:
        q, kv, nope, rope, v = (digits(g, "model.attention") for g in mla.groups())
        kw.update(q_lora_rank=q, kv_lora_rank=kv, qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v, head_dim=0)
    kw.update(_window(m, kw["layers"], rid))
    return ModelSpec(**kw, source=f"published run {rid}")


def _window(m: dict[str, Any], layers: int, rid: str) -> dict[str, int]:
    """`sliding_window`/`sliding_layers` and `attention_chunk`/`chunked_layers` of a run's model: as stated, or
    from its `attention` text.

    "sliding-window(N)" sets the window; which layers it covers: "alternating" half of them (gpt-oss: `layer_types`
    alternate sliding and full attention, openai/gpt-oss-120b config.json; model card Sec. 2.1), "A local then B global"
    A of every A + B from the first layer (Gemma 3 Technical Report, Sec. 2: 5 local to 1 global, a local layer first).
    "chunked attention (chunk N) on A of every B layers" chunks A of every B from the first (Llama 4: every
    `no_rope_layer_interval`-th layer global, transformers' Llama4TextConfig)."""
    text = str(m.get("attention") or "")
    out: dict[str, int] = {}
    window = _local(m, text, "sliding_window", "sliding_layers", r"sliding-window\((\d+)\)", layers, rid)
    if window:
        out.update(sliding_window=window[0], sliding_layers=window[1])
    chunk = _local(m, text, "attention_chunk", "chunked_layers", r"chunked attention \(chunk (\d+)\)", layers, rid)
    if chunk:
        out.update(attention_chunk=chunk[0], chunked_layers=chunk[1])
    return out


def _local(m: dict[str, Any], text: str, size_key: str, layers_key: str, named: str, layers: int, rid: str) -> tuple[int, int] | None:
    """(span, layers it covers; 0 = every layer) of one kind of local attention, stated in `model.<size_key>` and
    `model.<layers_key>` or named in the attention text; None where the model has none."""
    size = count(m.get(size_key), f"model.{size_key}")
    local = count(m.get(layers_key), f"model.{layers_key}")
    found = re.search(named, text)
    if size is None and found:
        size = digits(found.group(1), "model.attention")
    if not size:
        return None
    if local is None and found:
        then = re.search(r"(\d+) local then (\d+) global", text)
        every = re.search(r"on (\d+) of every (\d+) layers", text)
        if "alternating" in text:
            local = layers // 2
        elif then or every:
            a, b = (digits(g, "model.attention") for g in (then or every).groups())
            period = a + b if then else b  # A local of every period layers, from the first
            local = layers // period * a + min(layers % period, a)
        else:
            raise BandwiseError(f"run {brief(rid)}: model.attention {brief(text)} names local attention but not its layers; "
                                f"write 'alternating', 'A local then B global' or 'on A of every B layers' in it, or give model.{layers_key}")
    return size, local or 0
