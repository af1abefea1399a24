"""Every model family bandwise reads from a Hugging Face config.json, counted twice.

bandwise's count (`ModelSpec.total_params`, weight matrices plus `vector_params`) is compared, exactly,
with `hf_tensors.count`: the checkpoint's named tensors listed module by module from each family's
modelling code, written without bandwise's reader. Where a model card or technical report publishes
a count, that is checked too, to the precision it is published at.
"""

from __future__ import annotations

import json
import re
from math import prod
from pathlib import Path

import pytest
from hf_tensors import count, tensors

from bandwise.errors import BandwiseError
from bandwise.specs.hf import from_hf_config

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"
FIXTURES = sorted(p.parent.name for p in DATA.glob("*/config.json"))


def config(repo: str) -> dict:
    return json.loads((DATA / repo / "config.json").read_text())


def test_the_fixtures_cover_thirty_configs_of_eighteen_types():
    assert len(FIXTURES) >= 30
    assert len({config(r)["model_type"] for r in FIXTURES}) >= 18


@pytest.mark.parametrize("repo", FIXTURES)
def test_count_is_the_checkpoints_tensor_by_tensor(repo):
    cfg = config(repo)
    m = from_hf_config(cfg, name=repo)
    assert m.total_params == count(cfg)
    if m.is_moe and cfg["model_type"] not in ("gpt_oss", "llama4"):  # gpt-oss and Llama 4 stack their experts in one tensor
        # one tensor an expert (".mlp.e<j>."), or Qwen3.5's experts stacked in experts.gate_up_proj and experts.down_proj
        experts = sum(prod(shape) for name, shape in tensors(cfg).items()
                      if re.search(r"\.mlp\.e\d+\.|\.experts\.(gate_up|down)_proj$", name))
        assert m.routed_expert_params_total == experts


# ------------------------------------------------------------------- published figures
@pytest.mark.parametrize(
    "repo, embedding, non_embedding",
    [
        # Gemma 2 technical report (Gemma Team 2024, arXiv:2408.00118), Table 2: non-embedding parameters
        # (its embedding column counts the 256,128-row table as trained, the checkpoint keeps 256,000 rows)
        ("gemma-2-2b-it", None, 2_024_517_888),
        ("gemma-2-9b", None, 8_324_201_984),
        ("gemma-2-27b", None, 26_047_480_320),
        # Gemma technical report (Gemma Team 2024, arXiv:2403.08295), Table 2: 2B non-embedding 1,981,884,416
        ("gemma-2b", None, 1_981_884_416),
    ],
)
def test_gemma_non_embedding_counts_are_the_reports(repo, embedding, non_embedding):
    m = from_hf_config(config(repo))
    assert m.total_params - m.embedding_params == non_embedding


@pytest.mark.parametrize(
    "repo, total, step, non_embedding, non_embedding_step",
    [
        ("gpt2", 124e6, 1e6, None, None),  # openai-community/gpt2 card: "124M parameters"
        ("gpt2-medium", 355e6, 1e6, None, None),  # gpt2-medium card: "the 355M parameter version"
        ("gemma-3-1b-it", 1.0e9, 0.01e9, 698e6, 1e6),  # Gemma 3 report (arXiv:2503.19786) Table 1: 302M + 698M
        ("Qwen3-0.6B", 0.6e9, 0.1e9, 0.44e9, 0.01e9),  # Qwen/Qwen3-0.6B card: 0.6B, 0.44B non-embedding
        ("Qwen3-1.7B", 1.7e9, 0.1e9, 1.4e9, 0.1e9),  # Qwen/Qwen3-1.7B card: 1.7B, 1.4B non-embedding
        ("Llama-3.2-1B", 1.23e9, 0.02e9, None, None),  # meta-llama/Llama-3.2-1B card: 1.23B (truncated, not rounded)
        ("Phi-4-mini-instruct", 3.8e9, 0.1e9, None, None),  # microsoft/Phi-4-mini-instruct card: 3.8B
        ("SmolLM2-135M", 135e6, 1e6, None, None),  # HuggingFaceTB/SmolLM2-135M card: 135M
        ("Qwen1.5-MoE-A2.7B-Chat", 14.3e9, 0.1e9, None, None),  # Qwen1.5-MoE card: 14.3B in total
        ("OLMo-2-1124-7B", 7.3e9, 0.1e9, None, None),  # OLMo 2 report (arXiv:2501.00656) Table 1: 7.3B
        ("OLMo-2-1124-13B", 13.7e9, 0.1e9, None, None),  # same table: 13.7B
        ("Qwen3-Next-80B-A3B-Instruct", 80e9, 1e9, None, None),  # Qwen/Qwen3-Next-80B-A3B-Instruct card: 80B in total
    ],
)
def test_counts_are_the_published_ones_to_their_precision(repo, total, step, non_embedding, non_embedding_step):
    m = from_hf_config(config(repo))
    assert abs(m.total_params - total) <= step / 2
    if non_embedding is not None:
        inner = m.total_params - m.embedding_params - (0 if m.tied_embeddings else m.output_params)
        assert abs(inner - non_embedding) <= non_embedding_step / 2


def test_gpt2_counts_its_learned_position_table():
    """GPT2Model.wpe: n_positions x n_embd, beside the tied token embedding."""
    cfg = config("gpt2")
    m = from_hf_config(cfg)
    assert m.position_embeddings == 1024 and m.tied_embeddings and not m.gated_mlp
    assert m.embedding_params == (50257 + 1024) * 768


def test_falcon_40b_is_grouped_query_with_two_norms_a_layer():
    """falcon-40b's new decoder architecture: 8 key/value heads of 128 query heads, ln_attn and ln_mlp."""
    m = from_hf_config(config("falcon-40b-instruct"))
    assert m.kv_heads == 8 and m.d_head == 64 and m.ffn == 4 * 8192 and m.tied_embeddings
    assert m.vector_params == (60 * 2 + 1) * 2 * 8192


def test_windows_follow_each_class():
    g2, g3 = from_hf_config(config("gemma-2-9b")), from_hf_config(config("gemma-3-1b-it"))
    assert (g2.sliding_window, g2.sliding_layers) == (4096, 21)  # every other layer from the first
    assert (g3.sliding_window, g3.sliding_layers) == (512, 26 - 26 // 6)  # 5 local : 1 global
    sc = from_hf_config(config("starcoder2-7b"))
    assert (sc.sliding_window, sc.sliding_layers) == (4096, 0)  # every layer
    assert from_hf_config(config("Llama-3.2-1B")).sliding_window == 0


# ---------------------------------------------------- the shared-expert rule and moe_layer_freq
def test_qwen3_moe_has_no_shared_expert_whatever_the_config_says():
    """Qwen3MoeSparseMoeBlock holds only the router and the routed experts (modular_qwen3_moe.py)."""
    cfg = config("Qwen3-235B-A22B")
    with_key = {**cfg, "shared_expert_intermediate_size": 4096}
    assert from_hf_config(with_key).shared_experts == 0
    assert from_hf_config(with_key).total_params == from_hf_config(cfg).total_params == count(with_key)


def test_qwen2_moe_always_has_its_shared_expert_and_gate():
    m = from_hf_config(config("Qwen1.5-MoE-A2.7B-Chat"))
    assert m.shared_experts == 1 and m.shared_expert_ffn == 5632
    # Qwen1.5-MoE card: 2.7B activated at runtime: top-4 of 60 experts of 1408 plus the shared 5632
    active = m.active_nonembedding_params + m.output_params
    assert abs(active - 2.7e9) <= 0.05e9 + m.embedding_params


def test_deepseek_moe_layer_freq_above_one_is_refused_by_name():
    cfg = {**config("DeepSeek-V3"), "moe_layer_freq": 2}
    with pytest.raises(BandwiseError, match="moe_layer_freq=2") as exc:
        from_hf_config(cfg)
    assert "\n" not in str(exc.value)
    assert from_hf_config({**config("DeepSeek-V3"), "moe_layer_freq": 1}) == from_hf_config(config("DeepSeek-V3"))


# ------------------------------------------------------------------- refused in one line
@pytest.mark.parametrize(
    "cfg, field",
    [
        ({"model_type": "falcon_h1", "mamba_d_ssm": 1024}, "mamba_d_ssm"),
        ({"model_type": "deci", "block_configs": [{"attention": {"no_op": True}}]}, "block_configs"),
    ],
)
def test_families_modelspec_cannot_describe_are_refused_by_field(cfg, field):
    with pytest.raises(BandwiseError) as exc:
        from_hf_config(cfg)
    message = str(exc.value)
    assert field in message and "\n" not in message and cfg["model_type"] in message


def test_a_linear_attention_layer_type_is_refused_in_any_family():
    cfg = config("Qwen3-8B")
    cfg["layer_types"] = ["linear_attention"] * 9 + ["full_attention"] * 27
    with pytest.raises(BandwiseError, match="layer_types"):
        from_hf_config(cfg)


def test_gpt2_cross_attention_is_refused():
    with pytest.raises(BandwiseError, match="add_cross_attention"):
        from_hf_config({**config("gpt2"), "add_cross_attention": True})


# -------------------------------- types with no published config copy here: built from their keys
def _dbrx() -> dict:
    # databricks/dbrx-base shape (DBRX announcement, 2024-03-27: 132B total, 36B active; 16 experts, 4 chosen)
    return {"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "n_layers": 40, "vocab_size": 100352,
            "attn_config": {"kv_n_heads": 8, "clip_qkv": 8}, "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}}


def _olmoe() -> dict:
    # allenai/OLMoE-1B-7B-0924 shape (Muennighoff et al. 2024, arXiv:2409.02060, Table 1: 6.9B total, 1.3B active)
    return {"model_type": "olmoe", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
            "num_key_value_heads": 16, "intermediate_size": 1024, "num_experts": 64, "num_experts_per_tok": 8,
            "vocab_size": 50304, "tie_word_embeddings": False}


@pytest.mark.parametrize(
    "cfg, total, active",
    [(_dbrx(), 132e9, 36e9), (_olmoe(), 6.9e9, 1.3e9)],
    ids=["dbrx", "olmoe"],
)
def test_moe_types_built_from_their_keys(cfg, total, active):
    m = from_hf_config(cfg)
    assert m.total_params == count(cfg)
    assert abs(m.total_params - total) <= 0.005 * total
    assert abs(m.active_nonembedding_params + m.embedding_params + (0 if m.tied_embeddings else m.output_params) - active) <= 0.05 * active


def test_granite_types_read_as_their_llama_and_mixtral_shapes():
    """GraniteConfig adds multipliers (no parameters) and mlp_bias; GraniteMoe's experts are
    intermediate_size wide, num_local_experts of them."""
    llama = config("Llama-3.2-1B")
    granite = {**llama, "model_type": "granite", "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "mlp_bias": True}
    m = from_hf_config(granite)
    assert m.total_params == count(granite)
    assert m.total_params - from_hf_config(llama).total_params == m.layers * (2 * m.ffn + m.hidden)
    moe = {**llama, "model_type": "granitemoe", "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 512}
    assert from_hf_config(moe).total_params == count(moe) and from_hf_config(moe).expert_ffn == 512


def test_cohere2_and_the_gemma3_wrapper():
    aya = config("aya-23-8B")
    c2 = {**aya, "model_type": "cohere2", "sliding_window": 4096, "sliding_window_pattern": 4}
    m = from_hf_config(c2)
    assert m.total_params == count(c2) and (m.sliding_window, m.sliding_layers) == (4096, 24)
    text = config("gemma-3-1b-it")
    wrapped = {"model_type": "gemma3", "text_config": {k: v for k, v in text.items() if k != "model_type"}}
    assert from_hf_config(wrapped, name="g") == from_hf_config(text, name="g")
    # keys the text_config leaves out take Gemma3TextConfig's defaults (configuration_gemma3.py)
    sparse = {"model_type": "gemma3", "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34, "sliding_window": 1024}}
    g = from_hf_config(sparse)
    assert (g.heads, g.n_kv_heads, g.d_head, g.vocab) == (8, 4, 256, 262_208) and g.total_params == count(sparse)
