"""The host syncs of a MoE layer's forward by token dispatcher and permutation (`cost.params.moe_host_syncs`):
what a run states of them, the term against its closed form, and a synthetic run priced with them."""

from __future__ import annotations

import pytest
import published

from bandwise.cost.params import DEFAULT_PARAMS, CostParams, moe_host_syncs
from bandwise.cost.profiles import params_for
from bandwise.cost.terms.compute import kernel_gaps
from bandwise.errors import BandwiseError
from bandwise.plan.run_stated import STATED, read_stated
from bandwise.plan.runs import convert
from bandwise.plan.validate import predict, priced
from bandwise.specs.engine import engine_from_dict
from bandwise.specs.registry import get_engine


def moe_run(**parallelism):
    """One H100, a small MoE (4 layers, the first dense), 4 micro-batches of 1 sequence."""
    return {
        "id": "r", "source": "s", "engine": "megatron",
        "hardware": {"accelerator": "H100", "count": 1},
        "model": {"name": "m", "type": "moe", "layers": 4, "hidden": 512, "heads": 8, "kv_heads": 8, "ffn": 2048,
                  "ffn_type": "SwiGLU", "vocab": 32000, "seq_len": 1024,
                  "moe": {"num_experts": 8, "top_k": 2, "expert_ffn": 512, "dense_layers": 1}},
        "parallelism": {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "dp": 1, "micro_batch": 1, "global_batch_seqs": 4,
                        "recompute": "none", **parallelism},
        "precision": "bf16",
        "target": {"tokens_per_sec_per_device": 1000.0},
    }


@pytest.mark.parametrize("words, dispatcher", [("AlltoAll", "alltoall"), ("all-to-all", "alltoall"), ("allgather", "allgather"),
                                               ("DeepEP", "deepep"), ("flex (DeepEP)", "deepep"), ("flex", "deepep"),
                                               ("HybridEP", "hybridep"), ("flex, hybridep backend", "hybridep")])
def test_a_stated_dispatcher_is_read_and_named(words, dispatcher):
    s = read_stated(moe_run(moe_dispatcher=words), "", None, [])
    assert s.moe_dispatcher == dispatcher and s.names == ["moe_dispatcher"] and "moe_dispatcher" in STATED


def test_stated_permute_fusion_and_graph_scope():
    s = read_stated(moe_run(moe_permute_fusion=False, cuda_graph_scope=["attn", "MoE_Router"]), "", None, [])
    assert s.moe_permute_fusion is False and s.cuda_graph_scope == ("attn", "moe_router")
    assert s.names == ["moe_permute_fusion", "cuda_graph_scope"]
    unstated = read_stated(moe_run(), "", None, [])
    assert unstated.moe_dispatcher is None and unstated.moe_permute_fusion is None and unstated.cuda_graph_scope is None


@pytest.mark.parametrize("field, value, match", [("moe_dispatcher", "ring", "moe_dispatcher 'ring'"),
                                                 ("moe_permute_fusion", "yes", "moe_permute_fusion 'yes'"),
                                                 ("cuda_graph_scope", [3], "cuda_graph_scope"),
                                                 ("cuda_graph_scope", ["attn", "atn"], "cuda_graph_scope")])
def test_unreadable_statements_are_one_line_errors(field, value, match):
    with pytest.raises(BandwiseError, match=match):
        read_stated(moe_run(**{field: value}), "", None, [])


def test_syncs_by_dispatcher_and_fusion():
    """Megatron-Core core_v0.15.0: one sync per forward for each dispatcher, two more from the unfused
    permute's masked_selects, none of those for HybridEP, which permutes inside its dispatch."""
    assert moe_host_syncs(DEFAULT_PARAMS) == 0
    for d in ("alltoall", "allgather", "deepep", "hybridep"):
        assert moe_host_syncs(CostParams(moe_dispatcher=d)) == 1
    assert moe_host_syncs(CostParams(moe_dispatcher="alltoall", moe_permute_fusion=False)) == 3
    assert moe_host_syncs(CostParams(moe_dispatcher="hybridep", moe_permute_fusion=False)) == 1


def test_a_graph_over_the_whole_moe_layer_leaves_no_sync():
    """No sync can be captured: a `moe` or full-iteration graph runs the layer without one; attention or
    router scopes leave the dispatcher's sync outside the graph."""
    for scope in (("moe",), ("attn", "moe"), ("full_iteration",)):
        assert moe_host_syncs(CostParams(moe_dispatcher="alltoall", moe_permute_fusion=False, moe_cuda_graph_scope=scope)) == 0
    narrow = CostParams(moe_dispatcher="hybridep", moe_cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))
    assert moe_host_syncs(narrow) == 1


def test_kernel_gaps_add_each_sync_once_per_moe_layer():
    base = CostParams(host_sync_s=7e-6)
    unfused = CostParams(host_sync_s=7e-6, moe_dispatcher="alltoall", moe_permute_fusion=False)
    for share in (0.0, 0.25, 1.0):
        assert kernel_gaps(unfused, share) - kernel_gaps(base, share) == pytest.approx(share * 3 * 7e-6)


def test_a_synthetic_moe_run_pays_its_syncs_and_a_dense_one_none():
    """4 micro-batches x 3 MoE layers: the unfused alltoall run pays 2 syncs a layer more than the HybridEP one."""
    unfused = convert(moe_run(moe_dispatcher="AlltoAll", moe_permute_fusion=False), published.SOURCES)
    hybrid = convert(moe_run(moe_dispatcher="HybridEP"), published.SOURCES)
    assert priced(unfused).moe_dispatcher == "alltoall" and not priced(unfused).moe_permute_fusion
    a, b = predict(unfused).estimate, predict(hybrid).estimate
    assert a.step_time_s - b.step_time_s == pytest.approx(4 * 3 * 2 * DEFAULT_PARAMS.host_sync_s, rel=1e-6)
    dense = moe_run(moe_dispatcher="AlltoAll")
    dense["model"] = {k: v for k, v in dense["model"].items() if k not in ("moe", "type")}
    d_sync, d_none = convert(dense, published.SOURCES), convert({**dense, "parallelism": {**dense["parallelism"], "moe_dispatcher": None}}, published.SOURCES)
    assert predict(d_sync).estimate.step_time_s == predict(d_none).estimate.step_time_s


def test_engine_defaults_price_the_dispatcher_they_cite():
    """megatron: Megatron-LM's command-line defaults (allgather, unfused); megatron@bridge: Bridge's providers (alltoall, fused)."""
    assert moe_host_syncs(params_for(get_engine("megatron"))) == 3
    assert moe_host_syncs(params_for(get_engine("megatron@bridge"))) == 1
    assert moe_host_syncs(params_for(get_engine("megatron@2024"))) == 1  # argsort permute before core_r0.10.0: no masked_select
    assert moe_host_syncs(params_for(get_engine("torchtitan"))) == 0


def test_an_engine_file_naming_an_unknown_dispatcher_is_one_line():
    engine = engine_from_dict("mine", {"title": "t", "behaviours": {"moe_dispatcher": {"value": "ring", "source": "s"}}}, "mine.yaml")
    with pytest.raises(BandwiseError, match="moe_dispatcher='ring' is not a dispatcher bandwise prices; write one of alltoall"):
        params_for(engine)
