"""A run's element-wise kernels: fused (Transformer Engine's norms and RoPE, compiled activations) or eager (one kernel
per op, fp32 where the code upcasts), whatever its engine's default. Checked against the closed form of
`cost.flops.elementwise_bytes_per_token` at the streamed HBM rate, and the reader's one-line refusals."""

from __future__ import annotations

import dataclasses

import pytest

from bandwise.cost.flops import elementwise_bytes_per_token
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.terms.compute import Rates, layer_compute
from bandwise.cost.terms.shape import Shape
from bandwise.errors import BandwiseError
from bandwise.plan.run_stated import ELEMENTWISE_KERNELS, read_stated
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Layouts, Strategy


@pytest.mark.parametrize("kernels, eager", [("fused", False), ("eager", True)])
def test_a_stated_kernel_class_wins_over_the_engine_default(kernels, eager):
    for engine_default in (True, False):
        stated = read_stated({"id": "r", "precision": "BF16", "elementwise": kernels}, "", None, [])
        assert "elementwise" in stated.names
        assert stated.apply(dataclasses.replace(DEFAULT_PARAMS, eager_elementwise=engine_default)).eager_elementwise is eager


def test_eager_kernels_cost_a_layer_the_bytes_the_closed_form_adds():
    """Llama 3 8B, one H100, micro-batch 2: the forward of a layer grows by the eager bytes less the fused ones, per
    token, at the streamed rate; the GEMMs and attention do not move."""
    m, c = get_model("llama3-8b"), get_cluster("h100")
    s = Shape.of(m, Layouts.of([Strategy(micro_batch=2, global_batch=16)]))
    fused = dataclasses.replace(DEFAULT_PARAMS, eager_elementwise=ELEMENTWISE_KERNELS["fused"])
    eager = dataclasses.replace(DEFAULT_PARAMS, eager_elementwise=ELEMENTWISE_KERNELS["eager"])
    rates = Rates.of(c.device, s, fused)
    a, b = layer_compute(m, c.device, s, rates, fused), layer_compute(m, c.device, s, rates, eager)
    added = (elementwise_bytes_per_token(m, False, eager=True) - elementwise_bytes_per_token(m, False, eager=False)) * float(s.tokens[0])
    assert float((b.fwd - a.fwd)[0]) == pytest.approx(float(rates.streamed(added)), rel=1e-9)
    assert float(b.attn[0]) == float(a.attn[0]) and float(b.mlp_up[0]) == float(a.mlp_up[0])


@pytest.mark.parametrize("bad", ["te", True, ["fused"]])
def test_an_unknown_kernel_class_is_refused_in_one_line(bad):
    with pytest.raises(BandwiseError, match="elementwise") as err:
        read_stated({"id": "r", "precision": "BF16", "elementwise": bad}, "", None, [])
    assert "\n" not in str(err.value) and "fused" in str(err.value)
