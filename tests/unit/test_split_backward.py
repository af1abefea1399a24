"""What a split backward keeps between its input and weight passes (zero-bubble schedules)."""

from __future__ import annotations

import pytest

from bandwise.cost.memory import BF16, weight_output_grad_bytes_per_token
from bandwise.cost.pipeline import waiting_for_weights
from bandwise.specs.registry import get_model


@pytest.mark.parametrize("schedule,v", [("GPipe", 1), ("1F1B", 1), ("Interleaved1F1B", 2), ("LoopedBFS", 2)])
def test_schedules_that_do_not_split_the_backward_keep_nothing_waiting(schedule, v):
    waiting, head = waiting_for_weights(schedule, 4, 8, v)
    assert waiting == (0.0,) * 4 and head == (0.0,) * 4


def test_interleaved_zero_bubble_waiting_micro_batches_by_hand():
    """torch's InterleavedZeroBubble for 2 ranks, 4 micro-batches, 2 stages a rank; rank 1 holds
    stages 1 and 3 (the last):
        F1.0 F1.1 F3.0 I3.0 F3.1 I3.1 W3.0 ...
    Its in-flight peak (four stage-micro-batches, F3.1 onwards) is held after I3.1 with 3.0 and 3.1
    both waiting for W: 2 stage-micro-batches = 1.0 of the rank's layers, both of the last stage.
    Rank 0 (F0.0 F0.1 F2.0 F2.1 I2.0 W2.0 ...) peaks at four with 2.0 waiting: 0.5, none the last's."""
    waiting, head = waiting_for_weights("InterleavedZeroBubble", 2, 4, 2)
    assert waiting == (0.5, 1.0)
    assert head == (0.0, 2.0)


def _linear_outputs(module) -> int:
    import torch

    return sum(mod.out_features for mod in module.modules() if isinstance(mod, torch.nn.Linear))


@pytest.mark.parametrize("name", ["llama3-8b", "gpt3-175b", "deepseek-v3", "qwen3-235b-a22b"])
def test_output_gradients_are_the_runtime_layers_gemm_outputs(name):
    """Against torch: the output features of every GEMM in one of the runtime's blocks (the routed
    experts' once for each of the top-k, the gate's scores), built on the meta device."""
    torch = pytest.importorskip("torch")
    from bandwise.runtime.model import Block, ModelConfig

    spec = get_model(name)
    layers = [0] if not spec.is_moe else [spec.dense_layers]
    if spec.is_moe and spec.dense_layers:
        layers.insert(0, 0)
    with torch.device("meta"):
        for layer in layers:
            block = Block(spec, ModelConfig(), layer)
            outputs = _linear_outputs(block)
            if block.moe_layer:
                experts = block.feed_forward.experts
                outputs += spec.top_k * (experts.w1.shape[-1] + experts.w3.shape[-1] + experts.w2.shape[-1])
            split, replicated = weight_output_grad_bytes_per_token(spec, moe_layer=block.moe_layer)
            assert (split + replicated) / BF16 == outputs, (name, layer)


def test_interleaved_stages_hold_gradients_in_spans_of_their_own_by_hand():
    """torch's Interleaved1F1B for 2 ranks and 2 micro-batches, 2 stages a rank; rank 1 runs
        F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 B1.0 B1.1
    Stage 3 holds gradients from B3.0 to its last backward B3.1 (the reduce-scatter ends them),
    stage 1 from B1.0: never both. While one does, the most in flight is at F3.1: 1.0, 1.1 and 3.1,
    three stage-micro-batches = 1.5 of the rank's layers. With 4 micro-batches the spans overlap."""
    from bandwise.cost.pipeline import stages_with_gradients

    assert stages_with_gradients("Interleaved1F1B", 2, 2, 2) == ((1.0, 1.0), (1.5, 1.5))
    assert stages_with_gradients("Interleaved1F1B", 2, 4, 2)[0] == (2.0, 2.0)


@pytest.mark.parametrize("schedule,p,m", [("1F1B", 4, 4), ("1F1B", 4, 9), ("GPipe", 3, 5), ("1F1B", 8, 32)])
def test_one_stage_a_rank_holds_its_gradients_from_the_first_backward(schedule, p, m):
    from bandwise.cost.pipeline import inflight_after_backward, stages_with_gradients

    most, inflight = stages_with_gradients(schedule, p, m, 1)
    assert most == (1.0,) * p and inflight == inflight_after_backward(schedule, p, m, 1)


@pytest.mark.parametrize("schedule,p,m,v,held", [
    ("GPipe", 2, 4, 1, 4.0),  # all forwards first: every loss runs before the first backward
    ("LoopedBFS", 2, 4, 2, 4.0),
    ("1F1B", 4, 8, 1, 1.0),  # the last stage runs each micro-batch's backward right after its forward
    # rank 1 of Interleaved1F1B: F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 ...: one loss at a time
    ("Interleaved1F1B", 2, 4, 2, 1.0),
])
def test_losses_held_on_the_head_rank_by_hand(schedule, p, m, v, held):
    from bandwise.cost.pipeline import losses_held

    per_rank = losses_held(schedule, p, m, v)
    assert per_rank[-1] == held and all(x == 0.0 for x in per_rank[:-1])
