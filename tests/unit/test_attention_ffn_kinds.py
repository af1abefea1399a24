"""Attention and feed-forward kinds (`specs.attention`, `specs.ffn`): each kind's weights, GEMM FLOPs
and bytes against closed forms written out from the published configs, not from the kinds' code.

Llama 3 8B: meta-llama/Meta-Llama-3.1-8B config.json (hidden_size 4096, num_attention_heads 32,
num_key_value_heads 8, intermediate_size 14336). DeepSeek-V3: deepseek-ai/DeepSeek-V3 config.json
(hidden_size 7168, num_attention_heads 128, q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128,
qk_rope_head_dim 64, v_head_dim 128, n_routed_experts 256, num_experts_per_tok 8,
moe_intermediate_size 2048, n_shared_experts 1, first_k_dense_replace 3, intermediate_size 18432,
num_hidden_layers 61, vocab_size 129280) and the technical report's 671B total / 37B activated.
"""

from __future__ import annotations

import pytest

from bandwise.cost.flops import attention_core_flops_per_token, layer_flops_per_token
from bandwise.cost.memory import activation_bytes_per_token
from bandwise.specs.attention import GroupedQueryAttention, LatentAttention
from bandwise.specs.ffn import DenseMLP, MixtureOfExperts
from bandwise.specs.registry import get_model

LLAMA = {"hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ffn": 14336}
DSV3 = {"hidden": 7168, "heads": 128, "q_lora": 1536, "kv_lora": 512, "nope": 128, "rope": 64, "v": 128,
        "experts": 256, "top_k": 8, "expert_ffn": 2048, "shared": 1, "dense_ffn": 18432, "layers": 61, "dense_layers": 3,
        "vocab": 129280}


def test_llama3_8b_attention_is_grouped_query_with_its_closed_form_weights():
    c = LLAMA
    kind = get_model("llama3-8b").attention_kind
    assert isinstance(kind, GroupedQueryAttention)
    # q_proj h x H·d, k_proj and v_proj h x kv·d, o_proj H·d x h (LlamaAttention)
    by_hand = c["hidden"] * c["heads"] * c["head_dim"] + 2 * c["hidden"] * c["kv_heads"] * c["head_dim"] + c["heads"] * c["head_dim"] * c["hidden"]
    assert kind.params == by_hand
    # every weight multiplies each token once in the forward: 2 FLOPs per weight
    assert layer_flops_per_token(kind.gemms()) == 2 * by_hand
    assert (kind.d_head, kind.d_value, kind.key_value_heads, kind.rope_dim) == (128, 128, 8, 128)
    assert kind.latent_width == 0 and kind.recomputed_gemms() == []


def test_deepseek_v3_mla_weights_flops_and_tp_split_from_its_config():
    c = DSV3
    kind = get_model("deepseek-v3").attention_kind
    assert isinstance(kind, LatentAttention)
    q_a = c["hidden"] * c["q_lora"]  # q_a_proj
    q_b = c["q_lora"] * c["heads"] * (c["nope"] + c["rope"])  # q_b_proj
    kv_a = c["hidden"] * (c["kv_lora"] + c["rope"])  # kv_a_proj_with_mqa
    kv_b = c["kv_lora"] * c["heads"] * (c["nope"] + c["v"])  # kv_b_proj
    o = c["heads"] * c["v"] * c["hidden"]  # o_proj
    assert kind.params == q_a + q_b + kv_a + kv_b + o
    assert layer_flops_per_token(kind.gemms()) == 2 * (q_a + q_b + kv_a + kv_b + o)
    # the down-projections are replicated over TP, the rest split
    replicated = [g for g in kind.gemms() if g.split == "none"]
    assert sum(g.n * g.k for g in replicated) == q_a + kv_a
    assert kind.latent_width == c["q_lora"] + c["kv_lora"] + c["rope"]
    assert (kind.d_head, kind.d_value, kind.key_value_heads, kind.rope_dim) == (192, 128, 128, 64)
    # `mla_up_proj` re-runs exactly W_UQ and W_UKV
    assert sum(g.n * g.k for g in kind.recomputed_gemms()) == q_b + kv_b


def test_mla_without_a_query_rank_projects_queries_directly():
    """DeepSeek-V2-Lite: q_lora_rank null, W_Q is h x H·(nope + rope) (DeepSeek-V2 paper, Sec. 2.1)."""
    kind = LatentAttention(hidden=2048, heads=16, q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    by_hand = 2048 * 16 * 192 + 2048 * (512 + 64) + 512 * 16 * (128 + 128) + 16 * 128 * 2048
    assert kind.params == by_hand
    assert layer_flops_per_token(kind.gemms()) == 2 * by_hand
    assert kind.latent_width == 512 + 64


def test_attention_core_flops_use_the_kinds_widths():
    """PaLM Appendix B's per-layer 2·s·H·(d_qk + d_v) forward, non-causal, with MLA's 192-wide scores
    and 128-wide values (not one head width for both)."""
    m = get_model("deepseek-v3")
    s, c = m.seq_len, DSV3
    assert attention_core_flops_per_token(m, causal=False) == 2 * s * c["heads"] * ((c["nope"] + c["rope"]) + c["v"])
    assert attention_core_flops_per_token(m, causal=True) == s * c["heads"] * ((c["nope"] + c["rope"]) + c["v"])


def test_mla_keeps_its_heads_unless_up_projections_rerun_and_its_latents_whole():
    """What MLA keeps: H query and key heads of 192 and H value heads of 128 (bf16) unless
    `mla_up_proj` re-runs them; c_Q, c_KV and k_R on every TP rank."""
    m, c = get_model("deepseek-v3"), DSV3
    kept, rep = activation_bytes_per_token(m, moe_layer=False)
    rerun, rep_rerun = activation_bytes_per_token(m, moe_layer=False, selective=True, modules=("mla_up_proj",))
    heads = 2 * c["heads"] * (2 * (c["nope"] + c["rope"]) + c["v"])
    assert kept - rerun == heads
    assert rep == rep_rerun == 2 * (c["q_lora"] + c["kv_lora"] + c["rope"])


def test_a_dense_mlp_has_two_or_three_matrices():
    llama = get_model("llama3-8b").dense_mlp
    assert llama.params == 3 * LLAMA["hidden"] * LLAMA["ffn"]
    assert layer_flops_per_token(llama.gemms()) == 2 * 3 * LLAMA["hidden"] * LLAMA["ffn"]
    gelu = DenseMLP(hidden=12288, ffn=49152, gated=False)  # GPT-3 175B (Brown et al. 2020, Table 2.1): 4h
    assert gelu.params == 2 * 12288 * 49152
    assert not llama.routed and llama.routed_params == 0 and llama.non_routed_params == llama.params
    assert llama.dispatch_copies == 0 and llama.permute_bytes_per_token == 0


def test_deepseek_v3_moe_total_and_active_weights_from_its_config():
    c = DSV3
    m = get_model("deepseek-v3")
    moe = m.ffn_kind
    assert isinstance(moe, MixtureOfExperts) and moe.routed
    expert = 3 * c["hidden"] * c["expert_ffn"]  # gate_proj, up_proj, down_proj
    router = c["hidden"] * c["experts"]  # gate.weight (n_routed_experts x hidden)
    shared = c["shared"] * expert
    assert moe.params == c["experts"] * expert + shared + router
    assert moe.routed_params == c["experts"] * expert
    assert moe.non_routed_params + moe.active_routed_params == c["top_k"] * expert + shared + router
    # a token's forward: the router, the shared expert and its top_k routed experts, 2 FLOPs a weight
    assert layer_flops_per_token(moe.gemms()) == 2 * (c["top_k"] * expert + shared + router)
    assert layer_flops_per_token(moe.routed_gemms()) == 2 * c["top_k"] * expert
    assert moe.dispatch_copies == c["top_k"]  # a token is sent to each of its top_k experts

    # the whole model, layer kind by layer kind, against the report's 671B total and 37B activated
    attn = c["hidden"] * c["q_lora"] + c["q_lora"] * c["heads"] * 192 + c["hidden"] * 576 + c["kv_lora"] * c["heads"] * 256 + c["heads"] * 128 * c["hidden"]
    dense = 3 * c["hidden"] * c["dense_ffn"]
    moe_layers = c["layers"] - c["dense_layers"]
    embeddings = 2 * c["vocab"] * c["hidden"]  # untied input and output
    total = c["layers"] * attn + c["dense_layers"] * dense + moe_layers * (c["experts"] * expert + shared + router) + embeddings
    active = c["layers"] * attn + c["dense_layers"] * dense + moe_layers * (c["top_k"] * expert + shared + router)
    assert m.total_params == total
    assert m.active_nonembedding_params == active
    assert total == pytest.approx(671e9, rel=0.005)
    assert active + embeddings == pytest.approx(37e9, rel=0.03)  # 37.5B with input and output embeddings


def test_moe_keeps_its_top_k_copies_and_router_scores():
    """Per token, an MoE layer keeps beside the dense MLP's structure: per routed copy the expert input
    (h) and the intermediates (w1, w3 outputs and their product: 3 × f), bf16; the shared expert's
    intermediates; and the fp32 router scores (4 bytes × E)."""
    c = DSV3
    m = get_model("deepseek-v3")
    moe_kept, _ = activation_bytes_per_token(m, moe_layer=True)
    dense_kept, _ = activation_bytes_per_token(m, moe_layer=False)
    moe_part = c["top_k"] * (2 * c["hidden"] + 2 * 3 * c["expert_ffn"]) + 2 * 3 * c["shared"] * c["expert_ffn"] + 4 * c["experts"]
    assert moe_kept - dense_kept == moe_part - 2 * 3 * c["dense_ffn"]


def test_the_model_picks_its_kinds_from_its_fields():
    llama, dsv3 = get_model("llama3-8b"), get_model("deepseek-v3")
    assert not llama.is_moe and not llama.is_mla and llama.ffn_kind == llama.dense_mlp
    assert dsv3.is_moe and dsv3.is_mla
    assert [(type(k).__name__, n) for k, n in dsv3.ffn_layers] == [("DenseMLP", 3), ("MixtureOfExperts", 58)]
    assert [(type(k).__name__, n) for k, n in llama.ffn_layers] == [("DenseMLP", 32)]


@pytest.mark.parametrize("protocol, kinds", [
    ("AttentionKind", [GroupedQueryAttention(hidden=64, heads=4, kv_heads=2, head_dim=16),
                       LatentAttention(hidden=64, heads=4, q_lora_rank=8, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)]),
    ("FfnKind", [DenseMLP(hidden=64, ffn=128), MixtureOfExperts(hidden=64, experts=8, top_k=2, expert_ffn=32, shared_experts=1, shared_ffn=32)]),
])
def test_every_kind_supplies_what_its_protocol_names(protocol, kinds):
    """The cost model reads only the protocol: a kind that misses a member fails here, not deep in a cost term."""
    from bandwise.specs import attention, ffn

    proto = getattr(attention, protocol, None) or getattr(ffn, protocol)
    members = {n for n in vars(proto) if not n.startswith("_")} | set(getattr(proto, "__annotations__", {}))
    assert members
    for kind in kinds:
        missing = sorted(n for n in members if not hasattr(kind, n))
        assert not missing, (type(kind).__name__, missing)
