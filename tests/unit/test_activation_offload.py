"""Megatron's `cpu_offloading_num_layers` (`CostParams.offloaded_layers`): Transformer Engine's offload
keeps the saved activations of (L - N) of L layers on the device at the peak (transformer_engine/pytorch/
cpu_offload.py at 00382b96, `get_cpu_offload_context`: "activation memory usage is equal to
(num_layers - num_offloaded_layers) * T"). Checked against a model that has only those L - N layers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.step import estimate
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

M = get_model("llama3-8b")  # 32 layers
S = Strategy(dp_shard=8, recompute="none", micro_batch=1, global_batch=8)


def _activations(model, offloaded: int) -> float:
    return estimate(model, get_cluster("h100"), S, replace(DEFAULT_PARAMS, offloaded_layers=offloaded)).memory_gib["activations"]


@pytest.mark.parametrize("n", [1, 8, 31])
def test_offloading_n_layers_keeps_the_activations_of_a_model_without_them(n):
    assert _activations(M, n) == pytest.approx(_activations(replace(M, layers=M.layers - n), 0), rel=1e-9)


def test_offload_moves_only_the_activations():
    base = estimate(M, get_cluster("h100"), S, DEFAULT_PARAMS)
    off = estimate(M, get_cluster("h100"), S, replace(DEFAULT_PARAMS, offloaded_layers=16))
    assert off.memory_gib["activations"] < base.memory_gib["activations"]
    assert {k: v for k, v in off.memory_gib.items() if k != "activations"} == pytest.approx(
        {k: v for k, v in base.memory_gib.items() if k != "activations"})
    assert off.tokens_per_s_per_device == pytest.approx(base.tokens_per_s_per_device, rel=1e-12)
