"""Families read since the first HF round: their variants counted against `hf_tensors`, and the families
ModelSpec cannot describe refused in one line that names the config field and the modelling file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hf_tensors import count

from bandwise.errors import BandwiseError
from bandwise.specs.hf import REFUSED, from_hf_config

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"


def config(repo: str) -> dict:
    return json.loads((DATA / repo / "config.json").read_text())


@pytest.mark.parametrize("change", [{"use_qk_norm": True}, {"first_k_dense_replace": 3}, {"attention_bias": False},
                                    {"n_shared_experts": 2}, {"tie_word_embeddings": True}])
def test_glm4_moe_variants_count_as_the_checkpoint(change):
    cfg = {**config("GLM-4.5-Air"), **change}
    assert from_hf_config(cfg).total_params == count(cfg)


def test_glm4_moe_mtp_layers_are_counted_apart():
    m = from_hf_config(config("GLM-4.5-Air"))
    assert m.mtp_depth == 1 and m.dense_layers == 1 and m.shared_experts == 1


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_refused_families_say_which_field_in_one_line(kind):
    with pytest.raises(BandwiseError) as err:
        from_hf_config({"model_type": kind, "num_hidden_layers": 2, "hidden_size": 64})
    text = str(err.value)
    field, _ = REFUSED[kind]
    assert "\n" not in text and field in text and "not supported" in text


# ------------------------------------------------------------------- published figures
def test_exaone4_32b_non_embedding_count_is_the_cards():
    # LGAI-EXAONE/EXAONE-4.0-32B model card: "Number of Parameters (without embeddings): 30.95B"
    m = from_hf_config(config("EXAONE-4.0-32B"))
    assert abs(m.total_params - m.embedding_params - m.output_params - 30.95e9) < 0.005e9


def test_glm45_air_total_is_the_published_106b():
    # transformers docs/source/en/model_doc/glm4_moe.md: GLM-4.5-Air "106 billion total parameters"
    # (the checkpoint's MTP layer, `mtp_depth`, is not among them)
    assert abs(from_hf_config(config("GLM-4.5-Air")).total_params - 106e9) < 1e9


# ------------------------------------------------------------------- Mamba-2 hybrids
# No copy of a published Bamba or Granite 4.0-H config.json was found to keep in tests/data/hf: the shapes are their
# configuration classes' defaults (hf_tensors.BAMBA, GRANITE_HYBRID) with the layer layouts varied.
@pytest.mark.parametrize("cfg", [
    {"model_type": "bamba", "attn_layer_indices": [9, 18, 27]},
    {"model_type": "bamba", "attn_layer_indices": [1], "num_hidden_layers": 2, "mamba_n_groups": 8, "head_dim": 64},
    {"model_type": "granitemoehybrid", "num_hidden_layers": 4, "layer_types": ["mamba", "mamba", "mamba", "attention"]},
    {"model_type": "granitemoehybrid", "num_hidden_layers": 2, "layer_types": ["attention", "mamba"], "num_local_experts": 0,
     "attention_bias": True, "num_key_value_heads": 8, "tie_word_embeddings": True},
    {"model_type": "granitemoehybrid", "num_hidden_layers": 2, "layer_types": ["mamba", "attention"], "shared_intermediate_size": 0},
])
def test_mamba2_hybrids_count_as_the_checkpoint(cfg):
    m = from_hf_config(cfg)
    assert m.total_params == count(cfg)
    assert m.mamba_layers == len(cfg.get("layer_types") or []) - (cfg.get("layer_types") or []).count("attention") or \
        m.mamba_layers == m.layers - len(cfg.get("attn_layer_indices", []))


@pytest.mark.parametrize("change", [{"mamba_conv_bias": False}, {"mamba_proj_bias": True}, {"attn_layer_indices": [40]}])
def test_bamba_switches_the_mixer_does_not_count_are_refused_by_name(change):
    key = next(iter(change))
    with pytest.raises(BandwiseError, match=key):
        from_hf_config({"model_type": "bamba", **change})


# ------------------------------------------------------------------- GLM-4 (dense)
# No copy of a published GLM-4-0414 config.json was found: Glm4Config's defaults are GLM-4-9B's shape.
@pytest.mark.parametrize("change", [{}, {"attention_bias": False}, {"tie_word_embeddings": True}, {"head_dim": 64}])
def test_glm4_counts_as_the_checkpoint(change):
    cfg = {"model_type": "glm4", **change}
    assert from_hf_config(cfg).total_params == count(cfg)


def test_seed_oss_36b_count_is_its_checkpoints():
    # ByteDance-Seed/Seed-OSS-36B-Instruct: its checkpoint index's parameter count, 36,151,104,512, as a public snapshot
    # of the hub's Seed-OSS-36B files (2026-05-13) records it
    assert from_hf_config(config("Seed-OSS-36B-Instruct")).total_params == 36_151_104_512


def test_seed_oss_trains_with_its_class_dropout_unless_the_config_sets_zero():
    assert from_hf_config(config("Seed-OSS-36B-Instruct")).dropout
    assert not from_hf_config({**config("Seed-OSS-36B-Instruct"), "attention_dropout": 0.0, "residual_dropout": 0.0}).dropout


def test_hunyuan_cross_layer_attention_is_refused_by_name():
    with pytest.raises(BandwiseError, match="use_cla=true"):
        from_hf_config({**config("Hunyuan-MT-7B"), "use_cla": True})


@pytest.mark.parametrize("change", [{"use_bias": True, "tie_word_embeddings": False}, {"moe_num_shared_experts": 0},
                                    {"moe_layer_start_index": 3, "moe_layer_end_index": -1}])
def test_ernie45_moe_variants_count_as_the_checkpoint(change):
    cfg = {**config("ERNIE-4.5-21B-A3B-PT"), **change}
    assert from_hf_config(cfg).total_params == count(cfg)


def test_ernie45_moe_dense_layers_between_moe_layers_are_refused_by_name():
    with pytest.raises(BandwiseError, match="moe_layer_interval=2"):
        from_hf_config({**config("ERNIE-4.5-21B-A3B-PT"), "moe_layer_interval": 2})


def test_ernie45_21b_a3b_is_21b_with_3b_active():
    # baidu/ERNIE-4.5-21B-A3B-PT card: "21B total parameters and 3B activated parameters for each token"
    m = from_hf_config(config("ERNIE-4.5-21B-A3B-PT"))
    assert abs(m.total_params - 21e9) < 1e9 and abs(m.active_nonembedding_params - 3e9) < 0.5e9


# ------------------------------------------------------------------- Hunyuan MoE
# No published config.json copy was found whole; the shape of Hunyuan-A13B as a public profiler's tests keep it
# (HUNYUAN_MOE_LIST_CONFIG: 32 layers, hidden 4096, 64 experts of 3072, top 8, one shared expert) is one variant.
A13B = {"model_type": "hunyuan_v1_moe", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072, "vocab_size": 128167, "num_experts": 64,
        "moe_intermediate_size": [3072] * 32, "moe_topk": [8] * 32, "num_shared_expert": [1] * 32}


@pytest.mark.parametrize("cfg", [A13B, {**A13B, "attention_bias": True, "tie_word_embeddings": True},
                                 {"model_type": "hunyuan_v1_moe", "num_experts": 4, "moe_topk": 2, "num_hidden_layers": 2}])
def test_hunyuan_moe_counts_as_the_checkpoint(cfg):
    assert from_hf_config(cfg).total_params == count(cfg)


def test_hunyuan_a13b_is_80b_with_13b_active():
    # tencent/Hunyuan-A13B-Instruct card: "80 billion total parameters and 13 billion active parameters"
    m = from_hf_config(A13B)
    assert abs(m.total_params - 80e9) < 1e9 and abs(m.active_nonembedding_params + m.output_params - 13e9) < 0.5e9  # to the card's whole billions


@pytest.mark.parametrize("change, key", [({"moe_intermediate_size": [2048] * 32}, "moe_intermediate_size"),
                                         ({"num_experts": [64] * 31 + [32]}, "num_experts"),
                                         ({"num_shared_expert": 2}, "num_shared_expert")])
def test_hunyuan_moe_shapes_its_code_does_not_build_are_refused_by_name(change, key):
    with pytest.raises(BandwiseError, match=key):
        from_hf_config({**A13B, **change})


# ------------------------------------------------------------------- Phi-3.5-MoE
# No whole copy of the published config.json was found (the copies kept trim the biases); PhimoeConfig's defaults are
# Phi-3.5-MoE's shape, and the published config's attention_bias and lm_head_bias (true) a variant.
@pytest.mark.parametrize("cfg", [{"model_type": "phimoe"},
                                 {"model_type": "phimoe", "attention_bias": True, "lm_head_bias": True, "sliding_window": 131072},
                                 {"model_type": "phimoe", "num_hidden_layers": 2, "tie_word_embeddings": True}])
def test_phimoe_counts_as_the_checkpoint(cfg):
    assert from_hf_config(cfg).total_params == count(cfg)


def test_phi35_moe_is_42b_with_6_6b_active():
    # microsoft/Phi-3.5-MoE-instruct card: "16x3.8B parameters with 6.6B active parameters", 42B in total
    m = from_hf_config({"model_type": "phimoe", "attention_bias": True, "lm_head_bias": True})
    active = m.active_nonembedding_params + m.output_params + m.embedding_params
    assert abs(m.total_params - 42e9) < 0.5e9 and abs(active - 6.6e9) < 0.05e9
