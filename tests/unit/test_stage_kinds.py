"""Pipeline stages of models whose layers differ in kind (issue 37, point 1): the heaviest rank and
the head's rank compute their own layers' share, placed as the trainer places them."""

from __future__ import annotations

import numpy as np
import pytest

from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.step import estimate
from bandwise.cost.terms.stages import kind_weights
from bandwise.specs.layer_order import layer_flops, layer_kinds, stage_weights
from bandwise.specs.model import causal_window_pairs
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy


def brute(m, pp, v):
    """Stages by numpy's array_split (earlier stages take the remainder), ranks looped: stage j on rank j % pp."""
    w = layer_flops(m)
    w = w / w.mean()
    stages = np.array_split(np.arange(m.layers), pp * v)
    weight, count = np.zeros(pp), np.zeros(pp)
    for j, idx in enumerate(stages):
        weight[j % pp] += w[idx].sum()
        count[j % pp] += len(idx)
    return max(weight.max() / count.max(), 1.0), weight[pp - 1] / count[pp - 1]


def test_a_layer_weighs_its_own_flops():
    """Nemotron-H 8B's three kinds, each from its own parts: the attention layer's GEMMs and causal
    core, the Mamba-2 layer's projections and SSD scan, the MLP-only layer's two matrices."""
    m = get_model("nemotron-h-8b")
    s = m.seq_len
    by_kind: dict[tuple[str, str], set[float]] = {}
    for kind, f in zip(layer_kinds(m), layer_flops(m)):
        by_kind.setdefault((kind.mixer, kind.mlp), set()).add(round(float(f)))
    attention = 2 * m.attention_kind.params + 2 * m.heads * (m.d_head + m.d_value) * causal_window_pairs(s, 0) / s
    assert by_kind == {("attention", "none"): {round(attention)},
                       ("mamba2", "none"): {round(2 * m.mamba.params(m.hidden) + m.mamba.scan_flops_per_token(s))},
                       ("none", "dense"): {round(2 * m.dense_mlp.params)}}


@pytest.mark.parametrize("name", ["nemotron-h-8b", "jamba-1.5-mini", "qwen3-next-80b-a3b", "deepseek-v3", "llama4-maverick"])
@pytest.mark.parametrize("pp,v", [(2, 1), (4, 1), (4, 2), (8, 1), (3, 1)])
def test_stage_weights_are_the_ranks_sums(name, pp, v):
    m = get_model(name)
    heavy, head = stage_weights(m, pp, v, False)
    want_heavy, want_head = brute(m, pp, v)
    # the cost model's fullest rank holds ceil(L / pp·v)·v layers; the weight is over that count's mean
    assert heavy == pytest.approx(want_heavy) and head == pytest.approx(want_head)


def test_one_kind_is_priced_as_before():
    """Every layer alike: the factors are exactly 1, so a single-kind model's step is the mean layer's."""
    for name in ("llama3-8b", "mixtral-8x7b", "llama4-scout"):
        heavy, head = kind_weights(get_model(name), np.array([1, 2, 4, 8]), np.array([1, 1, 2, 1]), np.zeros(4, bool))
        assert np.all(heavy == 1.0) and np.all(head == 1.0), name


def test_a_hybrid_pipeline_waits_for_its_heaviest_rank(monkeypatch):
    """Nemotron-H 8B in 8 stages: the slowest rank's layer compute is the mean layer's times its weight."""
    from bandwise.cost.terms import stages

    m, cluster = get_model("nemotron-h-8b"), get_cluster("h100")
    s = Strategy(dp_replicate=2, pp=8, micro_batch=1, global_batch=64, schedule="1F1B", recompute="full")
    heavy, _ = stage_weights(m, 8, 1, False)
    assert heavy > 1.01
    weighed = estimate(m, cluster, s, DEFAULT_PARAMS)
    monkeypatch.setattr(stages, "kind_weights", lambda m, pp, v, vs: (np.ones(np.shape(pp)), np.ones(np.shape(pp))))
    mean = estimate(m, cluster, s, DEFAULT_PARAMS)
    assert weighed.breakdown["recompute"] == pytest.approx(heavy * mean.breakdown["recompute"], rel=1e-9)
    assert weighed.step_time_s > mean.step_time_s
