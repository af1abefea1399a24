"""The pipeline bubble at the pace of the ranks the fill and drain pass through (`cost.terms.pipeline.bubble`),
checked against the event simulation of the same schedule with a slow head stage (`cost.pipeline.simulate`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bandwise.cost.pipeline import PipelineSpec, simulate
from bandwise.cost.step import estimate
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

P, M = 4, 16
LAYOUT = Strategy(dp_replicate=2, tp=1, pp=P, schedule="1F1B", micro_batch=1, global_batch=2 * M, recompute="none")


def _busy(e) -> float:
    t = e.breakdown
    return t["compute"] + t["recompute"] + t["tp"] + t["cp"] + t["ep"] + t["fsdp"] + t["contention"]


@pytest.mark.parametrize("name", ("llama3-8b", "nemotron-h-8b"))
def test_a_larger_head_lengthens_the_steady_state_not_the_bubble(name):
    """The head's rank is the slowest; growing its vocabulary adds its time once per micro-batch and leaves the
    fill and drain, which pass through the other ranks, as they were."""
    model, cluster = get_model(name), get_cluster("h100")
    small = estimate(model, cluster, LAYOUT)
    large = estimate(replace(model, vocab=4 * model.vocab), cluster, LAYOUT)
    assert large.microbatches == small.microbatches == M
    assert _busy(large) > _busy(small) * 1.05
    assert large.breakdown["bubble"] == pytest.approx(small.breakdown["bubble"], rel=1e-6)


def test_the_step_is_the_simulated_flow_line():
    """Busy time plus bubble equals the simulated 1F1B makespan with the head stage slower by the planner's ratio
    of the head rank's time to another rank's. Another rank's micro-batch is read from the same layers under a
    head of 8 tokens, where every rank does nearly the same work."""
    model, cluster = get_model("llama3-8b"), get_cluster("h100")
    large = estimate(replace(model, vocab=8 * model.vocab), cluster, LAYOUT)
    other = _busy(estimate(replace(model, vocab=8), cluster, LAYOUT)) / M
    head = _busy(large) / M
    assert head > 1.2 * other
    spec = PipelineSpec(schedule="1F1B", stages=P, microbatches=M, f=other / 3, b=other / 3, w=other / 3,
                        stage_scale=(1.0,) * (P - 1) + (head / other,))
    assert _busy(large) + large.breakdown["bubble"] == pytest.approx(simulate(spec).makespan, rel=2e-3)
