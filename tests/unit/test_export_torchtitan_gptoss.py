"""gpt-oss to TorchTitan: what its gpt_oss builders fix is refused by name, and the written module states the
config.json's widths (export/torchtitan_module.py). No TorchTitan here: the module is read as text; the interop
matrix (tests/interop/test_configs.py) imports it and builds the model on the meta device."""

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

GPT_OSS = Path(__file__).parents[1] / "data" / "hf" / "gpt-oss-120b" / "config.json"
LAYOUT = Strategy(dp_shard=64, ep=8, micro_batch=1, global_batch=256, recompute="full")


def _variant(tmp_path: Path, **changes: object) -> str:
    return variant(tmp_path, GPT_OSS, **changes)


def _torchtitan(path: str) -> str:
    model = get_model(path).with_seq_len(4096)
    return export("torchtitan", model, get_cluster("h100"), LAYOUT, 64, model_source=path).text


def test_the_written_module_states_the_configs_widths() -> None:
    cfg = json.loads(GPT_OSS.read_text())
    source, call, args = builder_call(_torchtitan(str(GPT_OSS)), r"_build_gptoss_layers\((.*?)\),\n    \)", re.S)
    assert re.search(rf"CosSinRoPE\.Config\(dim={cfg['head_dim']},", call)
    assert [int(args[k]) for k in ("dim", "n_layers", "hidden_dim", "num_experts", "top_k")] == [
        cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["num_local_experts"], cfg["num_experts_per_tok"]]
    yarn = cfg["rope_scaling"]
    assert [float(args[k]) for k in ("theta", "rope_factor", "beta_fast", "beta_slow")] == [
        cfg["rope_theta"], yarn["factor"], yarn["beta_fast"], yarn["beta_slow"]]
    assert int(args["original_seq_len"]) == yarn["original_max_position_embeddings"] and args["truncate"] == str(yarn["truncate"])
    assert f"vocab_size={cfg['vocab_size']}," in source and "enable_weight_tying=False" in source
    assert args["attn_backend"] == '"flex"'  # context parallelism takes flex, not the shipped varlen (context_parallel/api.py)


@pytest.mark.parametrize("changes,named", [
    ({"num_attention_heads": 32}, "_make_gptoss_attn_config's defaults"),
    ({"head_dim": 128}, "_make_gptoss_attn_config's defaults"),
    ({"sliding_window": 256}, "the even layers at 128 tokens"),
    ({"layer_types": ["full_attention"] * 36}, "the even layers at 128 tokens"),
    ({"swiglu_limit": 10.0}, "limit 7"),
    ({"rms_norm_eps": 1e-6}, "eps 1e-5"),
    ({"rope_scaling": None}, None),
])
def test_what_the_gpt_oss_builders_fix_is_refused_by_name(tmp_path: Path, changes: dict, named: str | None) -> None:
    path = _variant(tmp_path, **changes)
    if named is None:  # plain RoPE: CosSinRoPE without scaling, which the builders take
        text = _torchtitan(path)
        assert "_build_gptoss_layers(" in text and "yarn" not in text
        return
    with pytest.raises(BandwiseError, match=re.escape(named)) as refused:
        _torchtitan(path)
    assert "torchtitan 0.3.0" in str(refused.value) and "\n" not in str(refused.value)
