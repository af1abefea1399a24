"""MaxText's `mlpwo` in a routed MoE layer is a residual of the backward (`cost/remat.py`).

MaxText names the grouped down projection's output `mlpwo` before the routing-weighted sum
(`RoutedMoE.sparse_matmul`, src/maxtext/layers/moe.py at a0fceb5), and the sum's gradient with respect
to the routing weights reads it: dL/dg_k = <y_k, dL/dout>. Reference: what torch's autograd itself
saves for that sum (`einsum("tke,tk->te")`) against what it saves for a dense MLP's output added to
the residual stream (nothing), counted with `torch.autograd.graph.saved_tensors_hooks`.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from bandwise.cost.memory import GIB
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.remat import RematPolicy
from bandwise.cost.step import estimate
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

OFFLOAD_MLPWO = RematPolicy(name="custom", offload=frozenset({"mlpwo"}))


def _saved_elements(fn, *inputs: torch.Tensor) -> int:
    """Elements autograd keeps for `fn(*inputs)`'s backward that are views of the first input."""
    kept: list[int] = []
    first = inputs[0].untyped_storage().data_ptr()

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() == first:
            kept.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(kept)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-235b-a22b"])
def test_a_routed_layers_mlpwo_holds_what_autograd_keeps_for_the_routing_weighted_sum(name):
    m = get_model(name)
    tokens = 3
    expert_out = torch.randn(tokens, m.top_k, m.hidden, dtype=torch.bfloat16, requires_grad=True)
    weights = torch.randn(tokens, m.top_k, dtype=torch.bfloat16, requires_grad=True)
    kept = _saved_elements(lambda y, g: torch.einsum("tke,tk->te", y, g), expert_out, weights)
    assert OFFLOAD_MLPWO.bytes_per_token(m, True, "offload") == 2 * kept / tokens  # bf16


def test_a_dense_mlps_mlpwo_is_read_by_no_backward():
    m = get_model("llama3-8b")
    residual = torch.randn(3, m.hidden, dtype=torch.bfloat16, requires_grad=True)
    mlp_out = torch.randn(3, m.hidden, dtype=torch.bfloat16, requires_grad=True)
    assert _saved_elements(lambda y, x: x + y, mlp_out, residual) == 0
    assert OFFLOAD_MLPWO.bytes_per_token(m, False, "offload") == 0


def _activations_gib(model: str, device: frozenset[str]) -> float:
    policy = RematPolicy(name="custom", device=device)
    s = Strategy(dp_shard=8, recompute="full", micro_batch=4)
    est = estimate(get_model(model), get_cluster("tpu-v5p"), s, replace(DEFAULT_PARAMS, remat_policy=policy))
    return est.memory_gib["activations"]


def test_keeping_mlpwo_on_the_device_holds_top_k_rows_per_token_in_every_moe_layer_and_nothing_in_a_dense_one():
    """pp = 1, one micro-batch of 4 sequences in flight: every layer holds its kept tensors for all its tokens."""
    base = frozenset({"decoder_layer_input"})
    with_wo = base | {"mlpwo"}
    assert _activations_gib("llama3-8b", with_wo) == pytest.approx(_activations_gib("llama3-8b", base), rel=1e-12)
    m = get_model("mixtral-8x7b")
    closed = m.moe_layers * 4 * m.seq_len * 2 * m.top_k * m.hidden / GIB
    assert _activations_gib("mixtral-8x7b", with_wo) - _activations_gib("mixtral-8x7b", base) == pytest.approx(closed, rel=1e-9)
