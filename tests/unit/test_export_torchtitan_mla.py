"""DeepSeek-V3, Kimi K2 and DeepSeek-V2 to TorchTitan: the written module states the config.json's MLA, MoE and
routing through TorchTitan's deepseek_v3 builders, its multi-token prediction layers where TorchTitan builds them, and
what the builders fix is refused by name (export/torchtitan_module.py). No TorchTitan here: the module is read as
text; the interop matrix (tests/interop/test_configs.py) imports it and builds the model on the meta device."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bandwise.errors import BandwiseError
from bandwise.export import export
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy
from written_module import builder_call, variant

HF = Path(__file__).parents[1] / "data" / "hf"
LAYOUT = Strategy(dp_shard=1024, ep=8, micro_batch=1, global_batch=1024, recompute="full")


def _variant(tmp_path: Path, name: str, **changes: object) -> str:
    return variant(tmp_path, HF / name / "config.json", **changes)


def _export(path: str, s: Strategy = LAYOUT):
    model = get_model(path).with_seq_len(4096)
    return export("torchtitan", model, get_cluster("h100"), s, s.world_size, model_source=path)


def _call(text: str) -> dict[str, str]:
    return builder_call(text, r"_build_dsv3_layers\((.*?)\n    \)\n", re.S)[2]


@pytest.mark.parametrize("name", ["DeepSeek-V3", "Kimi-K2-Instruct", "DeepSeek-V2-Lite"])
def test_the_written_module_states_the_configs_mla_and_moe(name: str) -> None:
    cfg = json.loads((HF / name / "config.json").read_text())
    text = _export(str(HF / name / "config.json")).text
    args = _call(text)
    assert [int(args[k]) for k in ("n_layers", "n_dense_layers", "dim", "n_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                   "qk_rope_head_dim", "v_head_dim", "dense_hidden_dim", "moe_hidden_dim", "num_experts",
                                   "num_shared_experts", "router_top_k")] == [
        cfg[k] or 0 for k in ("num_hidden_layers", "first_k_dense_replace", "hidden_size", "num_attention_heads", "q_lora_rank",
                              "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size",
                              "moe_intermediate_size", "n_routed_experts", "n_shared_experts", "num_experts_per_tok")]
    assert args["router_score_func"] == f'"{cfg["scoring_func"]}"'
    assert float(args["router_route_scale"]) == cfg["routed_scaling_factor"]
    assert args["router_route_norm"] == str(cfg["norm_topk_prob"])
    if cfg["n_group"] > 1:
        assert (int(args["router_num_expert_groups"]), int(args["router_num_limited_groups"])) == (cfg["n_group"], cfg["topk_group"])
    else:
        assert "router_num_expert_groups" not in args
    assert f"theta={float(cfg['rope_theta'])!r}" in text and "ComplexRoPE.Config(dim=64," in text
    assert f"_with_eps(model, {cfg['rms_norm_eps']!r})" in text
    assert f"num_mtp_layers={cfg.get('num_nextn_predict_layers', 0)})" in text


def test_multi_token_prediction_is_built_but_under_a_pipeline(tmp_path: Path) -> None:
    """TorchTitan's MTPDecoder refuses its MTP layers under pipeline parallelism: the job builds none there and says so."""
    path = _variant(tmp_path, "DeepSeek-V2-Lite", num_nextn_predict_layers=1)
    flat = _export(path, Strategy(dp_shard=16, ep=8, micro_batch=1, global_batch=256, recompute="full"))
    assert "num_mtp_layers=1)" in flat.text and "MTPLoss.Config(" in flat.text
    piped = _export(path, Strategy(dp_shard=8, pp=2, ep=8, micro_batch=1, global_batch=256, recompute="full"))
    assert "num_mtp_layers=0)" in piped.text and "MTPLoss.Config(" not in piped.text
    assert any("builds none of the model's 1 multi-token prediction layers" in n for n in piped.notes)


def test_yarn_states_its_factor_and_mscale(tmp_path: Path) -> None:
    yarn = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
            "mscale": 0.707, "mscale_all_dim": 0.707}
    args = _call(_export(_variant(tmp_path, "DeepSeek-V2-Lite", rope_scaling=yarn)).text)
    assert (float(args["rope_factor"]), float(args["mscale"]), int(args["original_seq_len"])) == (40.0, 0.707, 4096)


@pytest.mark.parametrize("name,changes,named", [
    ("DeepSeek-V3", {"n_shared_experts": 0}, "one shared FFN"),
    ("DeepSeek-V2-Lite", {"topk_method": "group_limited_greedy", "n_group": 8, "topk_group": 3}, "_get_node_limited_routing_scores"),
    ("DeepSeek-V2-Lite", {"rope_scaling": {"type": "yarn", "factor": 40, "mscale": 0.707, "mscale_all_dim": 1.0}},
     "folds one mscale into the softmax scale"),
])
def test_what_the_deepseek_v3_builders_fix_is_refused_by_name(tmp_path: Path, name: str, changes: dict, named: str) -> None:
    path = _variant(tmp_path, name, **changes)
    with pytest.raises(BandwiseError, match=re.escape(named)) as refused:
        _export(path)
    assert "torchtitan 0.3.0" in str(refused.value) and "\n" not in str(refused.value)
