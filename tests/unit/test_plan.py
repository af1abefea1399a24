"""The search is exhaustive and consistent with the scalar path; the verdict follows its rule."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bandwise.cost.results import Estimate

from bandwise.cost.step import estimate
from bandwise.errors import BandwiseError
from bandwise.plan.search import VIRTUAL_CHOICES, Layout, SearchResult, search
from bandwise.plan.verdict import decide
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import LOOPED, RECOMPUTE, SINGLE_STAGE, V_SHAPED, Strategy

DEBUG = get_model("debug")
DEBUG_MOE = get_model("debug-moe")


def brute_force_count(model, devices: int, global_batch: int) -> int:
    """Every Strategy of the search's declared space, checked one by one with Strategy.check."""
    scheds = [(s, 1) for s in SINGLE_STAGE] + [(s, v) for s in LOOPED for v in VIRTUAL_CHOICES] + [(s, 2) for s in V_SHAPED]
    mbs = [1 << i for i in range(16) if (1 << i) <= global_batch]
    count = 0
    divs = [d for d in range(1, devices + 1) if devices % d == 0]
    for tp, cp, pp, dps, ep in itertools.product(divs, divs, divs, divs, divs):
        rest = devices // (tp * cp * pp * dps) if devices % (tp * cp * pp * dps) == 0 else 0
        if not rest or cp > 16:
            continue
        for zero in ((0, 1, 2) if dps == 1 and rest * cp > 1 else (0,)):
            for (sched, v), mb, rec in itertools.product(scheds if pp > 1 else [("1F1B", 1)], mbs, RECOMPUTE):
                s = Strategy(dp_replicate=rest, dp_shard=dps, tp=tp, cp=cp, pp=pp, ep=ep, zero_stage=zero, micro_batch=mb,
                             global_batch=global_batch, schedule=sched, virtual_stages=v, recompute=rec)
                try:
                    s.check(devices, model)
                except BandwiseError:
                    continue
                count += 1
    return count


@pytest.mark.parametrize("model", [DEBUG, DEBUG_MOE], ids=["dense", "moe"])
def test_search_covers_exactly_the_valid_space(model):
    cluster = get_cluster("h100")
    result = search(model, cluster, 4, 8, top=3)
    assert result.searched == brute_force_count(model, 4, 8) > 100


def test_vectorized_and_scalar_estimates_agree():
    cluster = get_cluster("h100")
    model = get_model("llama3-8b")
    result = search(model, cluster, 16, 64, top=5)
    for lay in result.top + [result.best_without_pp]:
        again = estimate(model, cluster, lay.strategy)
        assert again.step_time_s == pytest.approx(lay.estimate.step_time_s, rel=1e-9)
        assert again.memory_gib_per_device == pytest.approx(lay.estimate.memory_gib_per_device, rel=1e-9)


def test_ranking_is_by_throughput_and_all_listed_layouts_fit():
    result = search(get_model("llama3-8b"), get_cluster("a100-80g"), 32, 128, top=8)
    tps = [lay.estimate.tokens_per_s_per_device for lay in result.top]
    assert tps == sorted(tps, reverse=True)
    assert all(lay.estimate.fits for lay in result.top)
    assert result.best_without_pp.strategy.pp == 1
    assert result.best.estimate.tokens_per_s_per_device >= result.best_without_pp.estimate.tokens_per_s_per_device


def test_breakdown_adds_up_to_the_step_time():
    est = estimate(get_model("debug-moe"), get_cluster("h100"), Strategy(dp_shard=2, tp=2, pp=2, ep=4, micro_batch=1, global_batch=8))
    assert sum(est.breakdown.values()) == pytest.approx(est.step_time_s, rel=1e-9)
    assert sum(est.memory_gib.values()) == pytest.approx(est.memory_gib_per_device, rel=1e-9)


def test_fixed_fields_are_respected():
    result = search(get_model("llama3-8b"), get_cluster("h100"), 16, 64, top=5, fixed={"tp": 2, "recompute": "full"})
    assert result.top and all(l.strategy.tp == 2 and l.strategy.recompute == "full" for l in result.top)
    with pytest.raises(BandwiseError, match="tpx"):
        search(get_model("llama3-8b"), get_cluster("h100"), 16, 64, fixed={"tpx": 2})


# ---------------------------------------------------------------- monotonicity (properties)
small_strategies = st.builds(
    lambda tp, pp, mb, rec: Strategy(dp_shard=16 // (tp * pp), tp=tp, pp=pp, micro_batch=mb, global_batch=64, recompute=rec,
                                     schedule="1F1B"),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2]),
    st.sampled_from(RECOMPUTE),
)


@settings(max_examples=30, deadline=None)
@given(small_strategies, st.floats(1.0, 16.0), st.sampled_from([0, 1]))
def test_more_bandwidth_is_never_slower(strategy, factor, level):
    model, cluster = get_model("llama3-8b"), get_cluster("h100")
    faster = cluster.with_level(level, bandwidth=cluster.levels[level].bandwidth * factor)
    assert estimate(model, faster, strategy).step_time_s <= estimate(model, cluster, strategy).step_time_s * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(small_strategies, st.floats(0.0, 1e-4))
def test_more_latency_is_never_faster(strategy, extra):
    model, cluster = get_model("llama3-8b"), get_cluster("h100")
    slower = cluster.with_level(1, latency=cluster.levels[1].latency + extra)
    assert estimate(model, slower, strategy).step_time_s >= estimate(model, cluster, strategy).step_time_s * (1 - 1e-12)


@pytest.mark.parametrize("factor", [1.5, 2.0])
def test_more_memory_never_fits_fewer_layouts(factor):
    model, cluster = get_model("llama3-70b"), get_cluster("a100-80g")
    bigger = cluster.with_device(hbm_bytes=cluster.device.hbm_bytes * factor)
    base = search(model, cluster, 32, 64, top=1)
    more = search(model, bigger, 32, 64, top=1)
    assert more.searched == base.searched
    assert more.fitting >= base.fitting > 0


# ---------------------------------------------------------------- verdict
def _layout(pp: int, tps: float, **breakdown: float) -> Layout:
    terms = dict(compute=1.0, recompute=0.0, bubble=0.0, tp=0.0, cp=0.0, ep=0.0, fsdp=0.0, dp=0.0, pp=0.0, optimizer=0.0)
    terms.update(breakdown)
    est = Estimate(step_time_s=sum(terms.values()), tokens_per_s_per_device=tps, mfu=0.4, hfu=0.4, memory_gib_per_device=50, fits=True, breakdown=terms)
    return Layout(strategy=Strategy(dp_shard=16 // pp, pp=pp, global_batch=64), estimate=est)


def _result(top: list[Layout], nopp: Layout | None) -> SearchResult:
    return SearchResult(searched=10, fitting=5, seconds=0.1, top=top, best_without_pp=nopp, min_memory_gib=50, min_memory_gib_without_pp=90 if nopp is None else 50, capacity_gib=72)


def test_verdict_pp_not_needed_within_threshold():
    v = decide(_result([_layout(2, 1020.0)], _layout(1, 1000.0)), get_cluster("h100"))
    assert not v.needs_pp and v.gain == pytest.approx(0.02) and "within 2.0%" in v.reason


def test_verdict_names_the_communication_pp_avoids():
    best = _layout(2, 1500.0, bubble=0.05)
    nopp = _layout(1, 1000.0, fsdp=0.5)
    v = decide(_result([best], nopp), get_cluster("h100"))
    assert v.needs_pp and v.gain == pytest.approx(0.5)
    assert "FSDP" in v.reason and "500 ms" in v.reason and "infiniband" in v.reason


def test_verdict_when_nothing_fits_without_pp():
    v = decide(_result([_layout(2, 1500.0)], None), get_cluster("h100"))
    assert v.needs_pp and "90.0 GiB" in v.reason and "72.0 GiB" in v.reason


def test_verdict_when_nothing_fits_at_all():
    r = search(get_model("llama3-405b"), get_cluster("a100-80g"), 8, 8, top=1)
    assert r.best is None
    v = decide(r, get_cluster("a100-80g"))
    assert v.needs_pp is None and "nothing fits" in v.reason  # no verdict on PP when nothing fits


def test_no_pp_search_has_no_pipeline():
    r = search(get_model("llama3-8b"), get_cluster("h100"), 16, 64, top=5, allow_pp=False)
    assert all(l.strategy.pp == 1 for l in r.top)
    assert np.isclose(r.best.estimate.tokens_per_s_per_device, r.best_without_pp.estimate.tokens_per_s_per_device)


def test_verdict_without_pp_names_what_the_best_pipeline_would_give():
    result = _result([_layout(1, 1000.0)], _layout(1, 1000.0))
    result.best_with_pp = _layout(2, 950.0)
    v = decide(result, get_cluster("h100"))
    assert not v.needs_pp and "best pipelined layout" in v.reason and "-5% tokens/s" in v.reason


@pytest.mark.parametrize("model_name", ["llama3-8b", "mixtral-8x7b"])
def test_network_search_equals_the_exhaustive_search(model_name):
    """Pruning by the compute-only bound must not change any answer of the exhaustive search."""
    from bandwise.plan.search import NetworkSearch

    model, base = get_model(model_name).with_seq_len(4096), get_cluster("h100")
    shared = NetworkSearch(model, base, 32, 128, top=5)
    variants = [base.with_level(1, bandwidth=b * 1e9) for b in (5, 50, 800)] + [base.with_level(0, size=s) for s in (2, 16, 24)]  # 24: the job takes 16 of each domain
    for cluster in variants:
        fast, full = shared.search(cluster), search(model, cluster, 32, 128, top=5)
        assert (fast.searched, fast.fitting) == (full.searched, full.fitting)
        assert [l.strategy for l in fast.top] == [l.strategy for l in full.top]
        assert [l.estimate.step_time_s for l in fast.top] == pytest.approx([l.estimate.step_time_s for l in full.top], rel=1e-12)
        assert fast.best_without_pp.strategy == full.best_without_pp.strategy
        assert fast.best_with_pp.strategy == full.best_with_pp.strategy
        assert decide(fast, cluster) == decide(full, cluster)


def test_network_search_refuses_another_device():
    from bandwise.plan.search import NetworkSearch

    shared = NetworkSearch(DEBUG, get_cluster("h100"), 8, 16, top=1)
    with pytest.raises(BandwiseError, match="a100"):
        shared.search(get_cluster("a100-80g"))


def test_group_link_names_the_level_of_the_placed_job():
    # 128 GPUs on 72-GPU racks run as 64 per rack, so a 64-way FSDP group stays on NVLink
    from bandwise.plan.verdict import group_link
    from bandwise.specs.strategy import Strategy

    s = Strategy(dp_shard=64, dp_replicate=2, micro_batch=1, global_batch=128)
    assert group_link(get_cluster("gb200-nvl72"), s, "fsdp").startswith("nvlink")
    assert group_link(get_cluster("gb200-nvl72"), s, "dp").startswith("infiniband")


def test_a_stated_virtual_stage_count_outside_the_choices_is_searched_as_stated():
    """NeMo's recipes state VP5, VP7, VP12, none of VIRTUAL_CHOICES: the search prices the stated count."""
    model = get_model("llama3-70b")  # 80 layers: pp 2 x 5 virtual stages x 8 layers
    assert 5 not in VIRTUAL_CHOICES
    result = search(model, get_cluster("h100"), 32, 64, top=1,
                    fixed={"tp": 8, "pp": 2, "cp": 1, "schedule": "Interleaved1F1B", "virtual_stages": 5})
    assert result.best is not None and result.best.strategy.virtual_stages == 5
