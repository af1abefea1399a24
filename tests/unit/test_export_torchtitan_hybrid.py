"""Qwen3-Next to TorchTitan: what its Qwen3.5 builders fix is refused by name, and the written module states the
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

QWEN3_NEXT = Path(__file__).parents[1] / "data" / "hf" / "Qwen3-Next-80B-A3B-Instruct" / "config.json"
LAYOUT = Strategy(dp_shard=32, ep=8, micro_batch=1, global_batch=256, recompute="full")


def _variant(tmp_path: Path, **changes: object) -> str:
    return variant(tmp_path, QWEN3_NEXT, **changes)


def _torchtitan(path: str, s: Strategy = LAYOUT) -> str:
    model = get_model(path).with_seq_len(4096)
    return export("torchtitan", model, get_cluster("h100"), s, 32, model_source=path).text


def test_the_written_module_states_the_configs_widths() -> None:
    cfg = json.loads(QWEN3_NEXT.read_text())
    source, call, args = builder_call(_torchtitan(str(QWEN3_NEXT)), r"_build_qwen35_moe_layers\((.*?)\),\n")
    assert re.search(r"CosSinRoPE\.Config\(dim=64,", call)
    head = cfg["head_dim"]
    assert int(args["rotary_dim"]) == int(head * cfg["partial_rotary_factor"]) == 64
    assert [int(args[k]) for k in ("n_layers", "dim", "n_heads", "n_kv_heads", "head_dim")] == [
        cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], head]
    assert [int(args[k]) for k in ("n_key_heads", "n_value_heads", "key_head_dim", "value_head_dim", "full_attention_interval")] == [
        cfg["linear_num_key_heads"], cfg["linear_num_value_heads"], cfg["linear_key_head_dim"], cfg["linear_value_head_dim"],
        cfg["full_attention_interval"]]
    assert [int(args[k]) for k in ("moe_hidden_dim", "num_experts", "top_k", "shared_expert_hidden_dim")] == [
        cfg["moe_intermediate_size"], cfg["num_experts"], cfg["num_experts_per_tok"], cfg["shared_expert_intermediate_size"]]
    assert f"theta={float(cfg['rope_theta'])!r}" in call
    assert "vision_encoder: Qwen35VisionEncoder.Config | None = None" in source


@pytest.mark.parametrize("changes,named", [
    ({"linear_conv_kernel_dim": 3}, "_qwen35_deltanet_config"),
    ({"norm_topk_prob": False}, "route_norm=True"),
    ({"rms_norm_eps": 1e-5}, "eps 1e-6"),
    ({"tie_word_embeddings": True}, "separate lm_head"),
    ({"full_attention_interval": None, "layer_types": ["linear_attention", "full_attention"] * 24}, None),
])
def test_what_the_qwen3_5_builders_fix_is_refused_by_name(tmp_path: Path, changes: dict, named: str | None) -> None:
    path = _variant(tmp_path, **changes)
    if named is None:  # attention on every other layer: (i + 1) % 2 == 0, which the builders state
        assert "full_attention_interval=2" in _torchtitan(path)
        return
    with pytest.raises(BandwiseError, match=re.escape(named)) as refused:
        _torchtitan(path)
    assert "torchtitan 0.3.0" in str(refused.value) and "\n" not in str(refused.value)


def test_context_parallel_is_refused_where_torchtitan_refuses_it() -> None:
    """The planner runs Gated DeltaNet under CP as Megatron-LM does; TorchTitan's qwen3_5 parallelize raises
    on CP, so a CP layout is not a TorchTitan job (its own source says so, where TorchTitan is installed)."""
    with pytest.raises(BandwiseError, match="no context parallelism") as exc:
        _torchtitan(str(QWEN3_NEXT), Strategy(dp_shard=16, cp=2, ep=8, micro_batch=1, global_batch=256, recompute="full"))
    assert "\n" not in str(exc.value)
    try:
        from torchtitan.models.qwen3_5 import parallelize
    except ImportError:
        return
    import inspect

    assert "Context Parallel is not yet supported" in inspect.getsource(parallelize)
