"""Qwen3.5 / Qwen3.6 configs (model_type qwen3_5, qwen3_5_moe; their text_config qwen3_5_text, qwen3_5_moe_text): the
language model counted against `hf_tensors` (the checkpoint's tensors by name), what the reading cannot state refused
in one line. The shapes are TorchTitan 0.3.0's qwen3_5 flavors (torchtitan/models/qwen3_5/__init__.py: 0.8B and
35B-A3B), which tests/interop/test_qwen3_5.py builds and counts; the one published config kept in tests/data/hf
(Qwen3.6-35B-A3B) is counted by test_hf_families and exported by the interop matrix."""

from __future__ import annotations

import pytest
from hf_tensors import count

from bandwise.errors import BandwiseError
from bandwise.specs.hf import from_hf_config, read_hf_config

GDN = {"linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
       "head_dim": 256, "vocab_size": 248320, "full_attention_interval": 4, "mtp_num_hidden_layers": 1}
DENSE = {"model_type": "qwen3_5", "tie_word_embeddings": True, "vision_config": {"depth": 12}, "text_config": {
    **GDN, "model_type": "qwen3_5_text", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 8,
    "num_key_value_heads": 2, "intermediate_size": 3584, "linear_num_value_heads": 16}}
MOE = {"model_type": "qwen3_5_moe", "tie_word_embeddings": False, "vision_config": {"depth": 27}, "text_config": {
    **GDN, "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40, "num_attention_heads": 16,
    "num_key_value_heads": 2, "linear_num_value_heads": 32, "num_experts": 256, "num_experts_per_tok": 8,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512}}


def _with(cfg: dict, **text: object) -> dict:
    return {**cfg, "text_config": {**cfg["text_config"], **text}}


@pytest.mark.parametrize("cfg", [
    DENSE, MOE, {**DENSE, "tie_word_embeddings": False}, _with(MOE, full_attention_interval=2),
    _with(MOE, layer_types=["full_attention" if i % 5 == 0 else "linear_attention" for i in range(40)]),
    _with(DENSE, linear_num_value_heads=32, num_hidden_layers=8), {**MOE["text_config"]}, {**DENSE["text_config"]},
])
def test_language_model_counts_as_the_checkpoint(cfg: dict) -> None:
    assert from_hf_config(cfg).total_params == count(cfg)


def test_the_wrapper_reads_its_text_config_and_names_the_vision_encoder_unpriced() -> None:
    model, fields = read_hf_config(MOE)
    assert model.mtp_depth == 1 and model.linear_attention_layers == 30 and model.experts == 256
    assert "vision encoder is not priced" in model.source and "qwen3_5_moe" in model.source
    assert "vision_config" in fields.not_read and "text_config.num_experts" in fields.read
    dense = from_hf_config(DENSE)
    assert dense.tied_embeddings and dense.experts == 0 and dense.ffn == 3584


@pytest.mark.parametrize(("cfg", "named"), [
    ({"model_type": "qwen3_5_moe"}, "text_config"),
    (_with(MOE, mtp_use_dedicated_embeddings=True), "mtp_use_dedicated_embeddings"),
    (_with(MOE, mlp_only_layers=[0]), "mlp_only_layers"),
    (_with(DENSE, attn_output_gate=False), "attn_output_gate"),
    (_with(MOE, mtp_num_hidden_layers=-1), "mtp_num_hidden_layers"),
    (_with(MOE, tie_word_embeddings=True), "tie_word_embeddings"),
])
def test_what_the_reading_cannot_state_is_refused_in_one_line(cfg: dict, named: str) -> None:
    with pytest.raises(BandwiseError) as err:
        from_hf_config(cfg)
    assert named in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------- architecture record and exports
ROPE = {"rope_parameters": {"rope_type": "default", "rope_theta": 10_000_000, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True}, "rms_norm_eps": 1e-6}


def _export(tmp_path, cfg: dict, engine: str):
    import json

    from bandwise.export import export
    from bandwise.specs.registry import get_cluster, get_model
    from bandwise.specs.strategy import Strategy

    path = tmp_path / "q35" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(cfg))
    moe = from_hf_config(cfg).experts > 0
    s = Strategy(dp_shard=16, ep=8 if moe else 1, micro_batch=1, global_batch=256, recompute="full")
    return export(engine, get_model(str(path)).with_seq_len(4096), get_cluster("h100"), s, 16, model_source=str(path))


def test_the_record_is_qwen3_nexts_read_from_rope_parameters() -> None:
    from bandwise.export.architecture import from_hf

    moe, dense = from_hf(_with(MOE, **ROPE)), from_hf(_with(DENSE, **ROPE))
    assert moe.family == dense.family == "qwen3_next" and moe.rope is not None and moe.rope.theta == 1e7
    assert moe.rotary_fraction == 0.25 and sum(moe.linear_layers) == 30 and not moe.unsupported
    assert moe.shared_expert_gate and not dense.shared_expert_gate
    assert "rope_scaling" in " ".join(from_hf(_with(MOE, rope_parameters={"rope_type": "yarn", "factor": 4.0})).unsupported)


def test_megatron_states_the_mtp_layer_only_where_its_last_layer_attends(tmp_path) -> None:
    job = _export(tmp_path, _with(MOE, **ROPE), "megatron")
    assert "--experimental-attention-variant gated_delta_net" in job.text and "--mtp-num-layers 1" in job.text
    last_linear = ["full_attention" if i % 4 == 0 else "linear_attention" for i in range(40)]
    with pytest.raises(BandwiseError, match="gpt_builders.py"):
        _export(tmp_path, _with(MOE, layer_types=last_linear, **ROPE), "megatron")


def test_maxtext_and_torchtitan_refuse_the_mtp_layer_by_name(tmp_path) -> None:
    with pytest.raises(BandwiseError, match="mtp_num_hidden_layers=1"):
        _export(tmp_path, _with(MOE, **ROPE), "maxtext")
    with pytest.raises(BandwiseError, match="mtp_num_hidden_layers=1"):
        _export(tmp_path, _with(MOE, **ROPE), "torchtitan")
    without = _with(MOE, mtp_num_hidden_layers=0, **ROPE)
    assert "_build_qwen35_moe_layers(" in _export(tmp_path, without, "torchtitan").text
    assert "qwen3_next" in _export(tmp_path, without, "maxtext").text.split("decoder_block:")[1].split("\n")[0]
    with pytest.raises(BandwiseError, match="dense SwiGLU MLP"):
        _export(tmp_path, _with({**DENSE, "tie_word_embeddings": False}, mtp_num_hidden_layers=0, **ROPE), "maxtext")
