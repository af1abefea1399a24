"""ModelSpec from Hugging Face config.json: published configs give the preset's shape or the
published parameter count, and malformed configs name the field.

tests/data/hf/<repo>/config.json hold the published config.json values of each model (the keys
the loader reads plus some it must ignore).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bandwise.errors import BandwiseError
from bandwise.specs.hf import SUPPORTED, from_hf_config
from bandwise.specs.registry import get_model

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"


def config(repo: str) -> dict:
    return json.loads((DATA / repo / "config.json").read_text())


def shape(m) -> dict:
    """Everything but the labels and the norm and bias vectors (the presets count weight matrices only)."""
    return {k: v for k, v in dataclasses.asdict(m).items() if k not in ("name", "source", "vector_params")}


# -------------------------------------------------------------- the same shape as a preset
@pytest.mark.parametrize(
    "repo, preset",
    [
        ("Meta-Llama-3.1-8B", "llama3-8b"),
        ("Meta-Llama-3.1-405B", "llama3-405b"),
        ("Mixtral-8x7B-v0.1", "mixtral-8x7b"),
        ("Qwen3-235B-A22B", "qwen3-235b-a22b"),
        ("DeepSeek-V3", "deepseek-v3"),
        ("Kimi-K2-Instruct", "kimi-k2"),
    ],
)
def test_published_config_gives_the_preset_shape(repo, preset):
    expected = get_model(preset)
    loaded = from_hf_config(config(repo), name=repo, seq_len=expected.seq_len)
    # the presets describe the main model; DeepSeek-V3's config also trains one MTP module
    mtp = config(repo).get("num_nextn_predict_layers", 0)
    assert loaded.mtp_depth == mtp
    assert shape(loaded) == shape(dataclasses.replace(expected, mtp_depth=mtp))


# ------------------------------------------- types without a preset: published parameter counts
def test_mistral_7b_count_is_exact():
    # mistralai/Mistral-7B-v0.1 checkpoint: 7,241,732,096 parameters, the RMSNorm weights
    # ((2 * 32 + 1) x 4096) among them.
    m = from_hf_config(config("Mistral-7B-v0.1"))
    assert m.vector_params == (2 * m.layers + 1) * m.hidden
    assert m.total_params == 7_241_732_096


def test_qwen2_7b_count_is_exact():
    # Qwen/Qwen2-7B checkpoint: 7,615,616,512 parameters. Qwen2 adds biases to q, k and v
    # (3584 + 2 x 512 per layer) beside the RMSNorm weights.
    m = from_hf_config(config("Qwen2-7B"))
    biases = m.layers * (m.hidden + 2 * m.n_kv_heads * m.d_head)
    assert m.vector_params == (2 * m.layers + 1) * m.hidden + biases
    assert m.total_params == 7_615_616_512


def test_qwen3_8b_counts():
    # Qwen/Qwen3-8B model card: 8.2B parameters, 6.95B non-embedding (head_dim 128 != 4096/32).
    m = from_hf_config(config("Qwen3-8B"))
    non_embedding = m.total_params - m.embedding_params - m.output_params - m.vector_params
    assert m.d_head == 128
    assert abs(m.total_params - 8.2e9) <= 0.05e9
    assert abs(non_embedding - 6.95e9) <= 0.005e9


@pytest.mark.parametrize(
    "repo, total, total_step, active, active_step",
    [
        # Qwen2 technical report: Qwen2-57B-A14B, 57B total, 14B activated; one shared expert of
        # 20480 next to 64 routed experts of 2560.
        ("Qwen2-57B-A14B", 57e9, 1e9, 14e9, 1e9),
        # gpt-oss model card: gpt-oss-120b, 116.83B total, 5.13B active per token. ModelSpec
        # leaves out expert and attention biases and attention sinks (~40M, 0.04%).
        ("gpt-oss-120b", 116.83e9, 0.01e9 + 0.001 * 116.83e9, 5.13e9, 0.01e9),
    ],
)
def test_moe_types_without_presets_match_published_counts(repo, total, total_step, active, active_step):
    m = from_hf_config(config(repo))
    assert m.is_moe
    assert abs(m.total_params - total) <= total_step / 2
    low = m.active_nonembedding_params + m.output_params  # input embedding is a lookup
    assert low - active_step / 2 <= active <= low + m.embedding_params + active_step / 2


WITHOUT_A_PUBLISHED_CONFIG = {"olmoe", "granite", "granitemoe", "cohere2", "dbrx", "llama4_text", "bamba", "granitemoehybrid", "glm4", "hunyuan_v1_moe", "phimoe",
                              "qwen3_5", "qwen3_5_text", "qwen3_5_moe_text"}
"""Types read by the same rules as their neighbours but with no published config.json copy found to
keep here; test_hf_families checks them on configs built from their classes' keys (bamba and
granitemoehybrid: test_hf_more_families, on their classes' defaults; the other hybrids:
test_layer_kinds, against the presets built from their papers; llama4_text is the text_config the
llama4 fixtures hold, read through them; qwen3_5_moe_text is the Qwen3.6-35B-A3B fixture's text_config; the dense
Qwen3.5 wrapper: test_hf_qwen3_5 and tests/interop/test_qwen3_5.py, on TorchTitan 0.3.0's qwen3_5 flavor shapes)."""


def test_every_supported_type_is_exercised_by_a_fixture():
    types = {config(p.name)["model_type"] for p in DATA.iterdir() if (p / "config.json").is_file()}
    assert types | WITHOUT_A_PUBLISHED_CONFIG == set(SUPPORTED) and not types & WITHOUT_A_PUBLISHED_CONFIG


def test_a_config_file_path_loads_through_the_registry(tmp_path):
    m = get_model(str(DATA / "Qwen3-8B" / "config.json"))
    assert m.name == "Qwen3-8B" and m.head_dim == 128
    bad = tmp_path / "broken" / "config.json"
    bad.parent.mkdir()
    bad.write_text('{"model_type": "llama", "hidden_size": 4096,')
    with pytest.raises(BandwiseError, match="not valid JSON"):
        get_model(str(bad))
    with pytest.raises(BandwiseError, match="does not exist"):
        get_model(str(tmp_path / "missing" / "config.json"))


# -------------------------------------------------------------------------- bad configs
REQUIRED = {
    "Meta-Llama-3.1-8B": ["num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"],
    "Mixtral-8x7B-v0.1": ["num_local_experts", "num_experts_per_tok"],
    "Qwen2-57B-A14B": ["num_experts", "num_experts_per_tok", "moe_intermediate_size"],
    "DeepSeek-V3": ["n_routed_experts", "moe_intermediate_size", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"],
    "Kimi-K2-Instruct": ["num_experts_per_tok", "kv_lora_rank"],
    "gpt-oss-120b": ["num_local_experts"],
}


@pytest.mark.parametrize("repo, key", [(r, k) for r, keys in REQUIRED.items() for k in keys])
def test_missing_field_is_named(repo, key):
    cfg = config(repo)
    del cfg[key]
    if key == "num_experts_per_tok":
        cfg.pop("experts_per_token", None)
    with pytest.raises(BandwiseError) as exc:
        from_hf_config(cfg)
    assert "missing field" in str(exc.value) and key in str(exc.value)


def test_gpt_oss_accepts_either_top_k_key():
    cfg = config("gpt-oss-120b")
    del cfg["num_experts_per_tok"]
    assert from_hf_config(cfg).top_k == 4


@pytest.mark.parametrize(
    "repo, key, value",
    [
        ("Meta-Llama-3.1-8B", "hidden_size", "4096"),
        ("Meta-Llama-3.1-8B", "num_hidden_layers", 32.0),
        ("Meta-Llama-3.1-8B", "vocab_size", True),
        ("Meta-Llama-3.1-8B", "intermediate_size", -14336),
        ("Meta-Llama-3.1-8B", "num_attention_heads", 0),
        ("Meta-Llama-3.1-8B", "num_key_value_heads", "8"),
        ("Meta-Llama-3.1-8B", "tie_word_embeddings", "false"),
        ("Qwen3-8B", "head_dim", 128.5),
        ("DeepSeek-V3", "first_k_dense_replace", [3]),
        ("DeepSeek-V3", "n_shared_experts", "1"),
        ("DeepSeek-V3", "q_lora_rank", -1),
        ("Qwen2-57B-A14B", "shared_expert_intermediate_size", 20480.0),
    ],
)
def test_wrong_type_is_named(repo, key, value):
    cfg = config(repo)
    cfg[key] = value
    with pytest.raises(BandwiseError) as exc:
        from_hf_config(cfg)
    message = str(exc.value)
    assert key in message and "config.json" in message and "\n" not in message


@pytest.mark.parametrize("kind", ["bloom", None, 7])
def test_unknown_model_type_lists_the_supported_ones(kind):
    cfg = config("Meta-Llama-3.1-8B")
    cfg["model_type"] = kind
    with pytest.raises(BandwiseError) as exc:
        from_hf_config(cfg)
    message = str(exc.value)
    assert f"model_type={kind!r}" in message
    assert all(t in message for t in SUPPORTED)


@pytest.mark.parametrize("key, value", [("mlp_only_layers", [1, 3]), ("mlp_only_layers", [0, 2]), ("decoder_sparse_step", 2)])
def test_interleaved_dense_and_moe_layers_are_refused_by_name(key, value):
    cfg = config("Qwen2-57B-A14B")
    cfg[key] = value
    with pytest.raises(BandwiseError, match=key):
        from_hf_config(cfg)


def test_leading_mlp_only_layers_are_the_dense_layers():
    """Qwen2MoeDecoderLayer: a layer listed in mlp_only_layers has the dense MLP of intermediate_size;
    listed from layer 0 on, they are ModelSpec's leading dense layers."""
    cfg = config("Qwen2-57B-A14B")
    m = from_hf_config({**cfg, "mlp_only_layers": [0, 1]})
    base = from_hf_config(cfg)
    assert m.dense_layers == 2 and m.moe_layers == base.layers - 2
    moe = base.ffn_kind
    per_layer_moe = base.experts * moe.expert.params + moe.shared_params + moe.router_params + base.hidden  # + shared gate
    assert base.total_params - m.total_params == 2 * (per_layer_moe - base.dense_mlp_params)


def test_a_config_file_names_the_model_by_its_own_name(tmp_path):
    """A hub config.json takes its folder's name; any other file its own (issue 37: a file in
    `hf_configs/` was named "hf_configs", and a folder named like a preset exported the preset)."""
    import shutil

    from bandwise.specs.registry import get_model

    src = Path(__file__).resolve().parents[1] / "data" / "hf" / "Mistral-7B-v0.1" / "config.json"
    (tmp_path / "hf_configs").mkdir()
    loose = tmp_path / "hf_configs" / "mistral-7b-v0.1.json"
    shutil.copy(src, loose)
    assert get_model(str(loose)).name == "mistral-7b-v0.1"
    (tmp_path / "My-Mistral").mkdir()
    hub = tmp_path / "My-Mistral" / "config.json"
    shutil.copy(src, hub)
    assert get_model(str(hub)).name == "My-Mistral"


def test_models_show_prints_what_was_read(capsys):
    """`bandwise models --show FILE` shows every field read and the counts a plan prices (issue 37)."""
    from bandwise.specs.registry import get_model

    from entry import in_process

    path = str(Path(__file__).resolve().parents[1] / "data" / "hf" / "Mistral-7B-v0.1" / "config.json")
    res = in_process(capsys, "models", "--show", path)
    assert res.returncode == 0
    m = get_model(path)
    text = " ".join(res.stdout.split())
    assert f"total parameters {m.total_params:,}" in text and f"sliding_window {m.sliding_window}" in text
    res = in_process(capsys, "models", "--show", path, "--json")
    assert res.returncode == 0 and json.loads(res.stdout)[path]["total_params"] == m.total_params


def test_phi3_reads_as_the_llama_shape_it_is():
    """Phi-3 fuses q, k, v into one projection and gate and up into another: the same weights as
    Llama's. Counted from the config by hand: embedding and head 32064·3072 each, per layer
    3072·9216 (qkv) + 3072·3072 (o) + 3072·16384 (gate_up) + 8192·3072 (down) + two norms, a final norm;
    3,821,079,552 is also the count keras-hub's Phi-3 presets publish (phi3_presets.py)."""
    from bandwise.specs.hf import from_hf_config

    m = from_hf_config(config("Phi-3-mini-4k-instruct"), name="phi-3-mini")
    h, f, v, layers = 3072, 8192, 32064, 32
    norms = layers * 2 * h + h  # RMSNorm weights, in vector_params
    assert m.vector_params == norms
    assert m.total_params == 2 * v * h + layers * (h * 3 * h + h * h + h * 2 * f + f * h + 2 * h) + h == 3_821_079_552
    # transformers' Phi3Config takes sliding_window (configuration_phi3.py, v4.43), applied on every layer
    assert m.sliding_window == 2047 and m.sliding_layers == 0


def test_deepseek_v2_lite_has_its_published_size():
    """DeepSeek-V2-Lite's model card: 15.7B parameters in all, 2.4B activated per token."""
    from bandwise.specs.hf import from_hf_config

    m = from_hf_config(config("DeepSeek-V2-Lite"), name="v2-lite")
    assert m.total_params == pytest.approx(15.7e9, rel=0.005)
    assert m.active_nonembedding_params + m.output_params == pytest.approx(2.4e9, rel=0.03)


def test_deepseek_v2_is_read_with_deepseek_v3s_keys():
    """DeepSeek-V2's configuration class has V3's keys (MLA ranks, routed and shared experts, the dense
    first layers); the same config under either type is the same model."""
    from bandwise.specs.hf import from_hf_config

    cfg = json.loads((Path(__file__).resolve().parents[1] / "data" / "hf" / "DeepSeek-V3" / "config.json").read_text())
    cfg.pop("num_nextn_predict_layers", None)  # V2 has no multi-token prediction
    v3 = from_hf_config({**cfg, "model_type": "deepseek_v3"}, name="m")
    v2 = from_hf_config({**cfg, "model_type": "deepseek_v2"}, name="m")
    assert dataclasses.replace(v2, source=v3.source) == v3 and v2.is_mla and v2.is_moe
