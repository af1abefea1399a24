"""Pipeline stages placed by weight, as nanotron places them (`cost.terms.stages.weight_counts`, `weight_split`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.profiles import params_for
from bandwise.cost.step import estimate
from bandwise.cost.terms.stages import weight_counts, weight_split
from bandwise.specs.registry import get_cluster, get_engine, get_model
from bandwise.specs.strategy import Strategy

# nanotron's scripts/scaling_benchmarks.py 1.34B: 16 layers of width 2048, 32 heads, SwiGLU 8192, vocabulary 131072
SMALL = replace(get_model("llama3-8b"), name="nanotron 1.34B", layers=16, hidden=2048, heads=32, kv_heads=32, head_dim=0, ffn=8192,
                vocab=131072)


def test_the_head_weighs_its_vocabulary_and_the_first_ranks_fill_up_to_each_threshold():
    """A layer weighs 4·2048² + 3·8192·2048 = 2^26, the head 131072·2048 = 4·2^26: 20 layers' worth in all.
    Over 2 ranks the first takes layers while the running total is at most 10 (the 10th reaches it, the 11th
    passes it): 11 layers, then 5 and the head. Over 4 ranks the thresholds are 5, 10 and 15: 6, 5, 5 layers,
    and the last rank holds the head alone."""
    assert weight_counts(SMALL, 2) == ([11, 5], 1)
    assert weight_counts(SMALL, 4) == ([6, 5, 5, 0], 3)
    assert weight_counts(SMALL, 1) == ([16], 0)


@pytest.mark.parametrize("pp", [2, 3, 4, 8, 16])
def test_every_layer_is_placed_once_and_no_rank_passes_its_share_by_more_than_a_block(pp):
    model = get_model("llama3-70b")
    counts, head_rank = weight_counts(model, pp)
    assert sum(counts) == model.layers and 0 <= head_rank < pp
    layer = 4 * model.hidden * model.hidden + 3 * model.ffn * model.hidden
    share = (model.layers * layer + model.vocab * model.hidden) / pp
    assert max(counts) * layer <= share + layer


def test_the_slowest_rank_and_the_mean_of_the_others():
    unit, head = np.array([1.0, 2.0]), np.array([3.0, 1.0])
    fullest, on_head, slowest, rest = weight_split(SMALL, np.array([2, 2]), unit, head)
    assert fullest.tolist() == [11, 11] and on_head.tolist() == [5, 5]
    assert slowest.tolist() == [11.0, 22.0]  # 11 layers against 5 + 3 and 10 + 1
    assert rest.tolist() == [8.0, 11.0]



def test_nanotron_prices_its_own_placement():
    """Priced as nanotron, PP 2 places 11 layers before the head's 5 whatever the layers divide into; the
    cost model's default (an even split, the head on top of the last rank's 8) is slower here."""
    cluster = get_cluster("h100")
    s = Strategy(dp_replicate=4, pp=2, micro_batch=4, global_batch=256, schedule="1F1B", recompute="none")
    nanotron = params_for(get_engine("nanotron"), cluster.device)
    assert nanotron.stages_by_weights and not DEFAULT_PARAMS.stages_by_weights
    by_weight = estimate(SMALL, cluster, s, nanotron)
    even = estimate(SMALL, cluster, s, replace(nanotron, stages_by_weights=False))
    assert by_weight.step_time_s < even.step_time_s
