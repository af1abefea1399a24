"""Megatron-Core's "moe_act" and "mlp" recompute modules (TransformerConfig.recompute_modules, megatron-core 0.16:
"moe_act": recompute the MoE MLP activation function; "mlp": recompute the dense MLP submodule), each checked
against what it drops and re-runs, in closed form."""

from __future__ import annotations

import dataclasses

import pytest

from bandwise.cost.memory import BF16, activation_bytes_per_token
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.step import estimate
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

DSV3 = get_model("deepseek-v3")  # 3 dense layers of 61


@pytest.mark.parametrize("fp8", [False, True])
def test_moe_act_drops_the_experts_activation_output_only_in_moe_layers(fp8):
    kw = dict(selective=True, fp8=fp8)
    none = {moe: activation_bytes_per_token(DSV3, moe_layer=moe, modules=(), **kw)[0] for moe in (False, True)}
    act = {moe: activation_bytes_per_token(DSV3, moe_layer=moe, modules=("moe_act",), **kw)[0] for moe in (False, True)}
    both = {moe: activation_bytes_per_token(DSV3, moe_layer=moe, modules=("mlp_act",), **kw)[0] for moe in (False, True)}
    assert act[False] == none[False]  # a dense layer keeps its activation output
    assert act[True] == both[True] < none[True]  # an MoE layer drops it, as mlp_act does there
    # what is dropped: the down-projection's input of each of the top-k routed experts and the shared experts
    g = 1.0 if fp8 else float(BF16)
    ffn = DSV3.ffn_kind
    dropped = g * (ffn.top_k * ffn.expert_ffn + ffn.shared_experts * ffn.shared_ffn)
    assert none[True] - act[True] == pytest.approx(dropped)


@pytest.mark.parametrize("fp8", [False, True])
def test_mlp_keeps_a_dense_layers_mlp_input_alone(fp8):
    kw = dict(selective=True, fp8=fp8)
    without_mlp = activation_bytes_per_token(DSV3, moe_layer=False, modules=(), mlp=False, **kw)[0]
    whole = activation_bytes_per_token(DSV3, moe_layer=False, modules=("mlp",), **kw)[0]
    assert whole == pytest.approx(without_mlp + BF16 * DSV3.hidden)  # the block's input (the fused norm's input)
    moe = {mods: activation_bytes_per_token(DSV3, moe_layer=True, modules=mods, **kw)[0] for mods in ((), ("mlp",))}
    assert moe[("mlp",)] == moe[()]  # an MoE layer is not the dense MLP submodule


def test_mlp_re_runs_the_dense_layers_mlp_forward_and_counts_its_flops_in_hfu():
    cluster = get_cluster("h100")
    s = Strategy(dp_shard=8, ep=8, micro_batch=1, global_batch=64, recompute="selective")
    params = dataclasses.replace(DEFAULT_PARAMS, selective_modules=("mla_up_proj",))
    a = estimate(DSV3, cluster, s, params)
    b = estimate(DSV3, cluster, s, dataclasses.replace(params, selective_modules=("mla_up_proj", "mlp")))
    assert b.breakdown["recompute"] > a.breakdown["recompute"]
    assert b.memory_gib["activations"] < a.memory_gib["activations"]
    # HFU over MFU rises by the dense MLPs' forward FLOPs per token over the model's
    extra = 2.0 * DSV3.n_dense_mlp_layers * DSV3.dense_mlp.params
    model_flops = DSV3.model_flops_per_token(causal=DEFAULT_PARAMS.causal_mfu)
    assert (b.hfu / b.mfu) - (a.hfu / a.mfu) == pytest.approx(extra / model_flops, rel=1e-9)
