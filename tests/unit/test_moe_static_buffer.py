"""Dropless expert parallelism in a static worst-case buffer (MaxText under JAX): min(ep, E/K) times the rows a balanced
rank fills, its permutation and activation run over every row. Checked against the closed form of those bytes, its
bounds (no EP, a capacity factor, E/K), and the engines that have it."""

from __future__ import annotations

import dataclasses

import pytest

from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.profiles import params_for
from bandwise.cost.terms.compute import Rates, layer_compute
from bandwise.cost.terms.shape import Shape
from bandwise.specs.registry import get_cluster, get_engine, get_model
from bandwise.specs.strategy import Layouts, Strategy

ON = dataclasses.replace(DEFAULT_PARAMS, moe_static_buffer=True)


def _moe_fwd(model: str, ep: int, params):
    m, c = get_model(model), get_cluster("h100")
    s = Shape.of(m, Layouts.of([Strategy(dp_shard=ep, ep=ep, micro_batch=1, global_batch=64)]))
    rates = Rates.of(c.device, s, DEFAULT_PARAMS)
    off = layer_compute(m, c.device, s, rates, dataclasses.replace(params, moe_static_buffer=False))
    on = layer_compute(m, c.device, s, rates, params)
    return m, s, rates, float((on.moe_fwd - off.moe_fwd)[0]), float((on.bwd - off.bwd)[0])


@pytest.mark.parametrize("model, ep, rows", [("deepseek-v3", 8, 8), ("deepseek-v3", 64, 32), ("mixtral-8x7b", 8, 4)])
def test_the_empty_rows_cost_the_bytes_of_the_filled_ones(model, ep, rows):
    """DeepSeek-V3 (E 256, K 8): the buffer is ep times the filled rows up to E/K = 32; Mixtral (E 8, K 2): at most 4."""
    m, s, rates, fwd, bwd = _moe_fwd(model, ep, ON)
    k, h, f = m.top_k, m.hidden, m.expert_ffn
    per_row = 2 * (2 * 2 * h) + (2 + 2 + 2) * f  # the gathers in and out (bf16 read + write), SwiGLU (two reads, one write)
    expected = float(rates.streamed((rows - 1) * k * per_row * float(s.tokens[0])))
    assert fwd == pytest.approx(expected, rel=1e-9)
    assert bwd == pytest.approx(2 * expected * m.moe_layers / m.layers, rel=1e-9)


@pytest.mark.parametrize("ep, params", [(1, ON), (8, dataclasses.replace(ON, moe_capacity_factor=1.25)), (8, DEFAULT_PARAMS)])
def test_no_buffer_without_ep_under_a_capacity_or_off(ep, params):
    assert _moe_fwd("deepseek-v3", ep, params)[3] == 0.0


@pytest.mark.parametrize("engine, on", [("maxtext", True), ("megatron", False), ("torchtitan", False), ("bandwise", False)])
def test_maxtext_prices_the_static_buffer(engine, on):
    assert params_for(get_engine(engine), get_cluster("h100").device, DEFAULT_PARAMS).moe_static_buffer is on
