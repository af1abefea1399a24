"""Strategy.check: one test per validity rule, each message naming the bad value; and the
vectorized valid_mask (the planner's path) agreeing with check (the runtime's path)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bandwise.errors import BandwiseError
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import DIMS, RECOMPUTE, SCHEDULES, Layouts, Strategy, divisors, valid_mask

DEBUG = get_model("debug")  # 4 layers, 4 heads / 2 KV heads, ffn 352, seq 256
DEBUG_MOE = get_model("debug-moe")  # + 16 experts of width 64


def model(**changes) -> ModelSpec:
    base = dict(name="custom", layers=8, hidden=64, ffn=256, heads=8, vocab=100, seq_len=256)
    return ModelSpec(**{**base, **changes})


def message(strategy: Strategy, world: int, m: ModelSpec | None = None) -> str:
    with pytest.raises(BandwiseError) as exc:
        strategy.check(world, m)
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_valid_layout_passes():
    s = Strategy(dp_shard=4, tp=2, pp=2, ep=8, micro_batch=1, global_batch=8, schedule="1F1B")
    s.check(16, DEBUG_MOE)
    assert s.world_size == 16 and s.microbatches == 2 and s.zero == 3


# ------------------------------------------------------------------- one test per rule
@pytest.mark.parametrize("field", ["dp_replicate", "dp_shard", "tp", "cp", "pp", "ep", "micro_batch", "virtual_stages"])
def test_degrees_must_be_positive(field):
    assert f"{field}=0" in message(Strategy(**{field: 0}), 1)


def test_negative_global_batch():
    with pytest.raises(BandwiseError, match="integers >= 1"):
        Strategy(global_batch=-1).check(1)


@pytest.mark.parametrize(
    "changes, names",
    [
        (dict(schedule="OneFOneB"), "unknown schedule 'OneFOneB'; valid: GPipe, 1F1B"),
        (dict(recompute="some"), "unknown recompute 'some'; valid: none, selective, full"),
        (dict(precision="fp6"), "unknown precision 'fp6'; valid: bf16, fp8, fp4, int8"),
        (dict(order=("tp", "cp", "pp")), "order ['tp', 'cp', 'pp'] must be a permutation"),
    ],
)
def test_unknown_names_list_the_valid_ones(changes, names):
    assert names in message(Strategy(**changes), 1)


def test_degrees_must_multiply_to_the_device_count():
    text = message(Strategy(dp_shard=4, tp=2), 16)
    assert "= 8, not the 16 devices" in text and "dp_shard=8" in text
    Strategy(dp_shard=8, tp=2).check(16)


def test_ep_must_divide_the_dp_shard_cp_tp_region():
    text = message(Strategy(dp_shard=6, ep=4), 6)
    assert "ep=4 must divide dp_shard·cp·tp = 6" in text and "valid ep: 1, 2, 3, 6" in text
    Strategy(dp_shard=6, ep=3).check(6)


def test_ep_may_span_the_region_and_some_replicas():
    """Megatron / DeepSeek-V3: expert parallelism carved out of replicated data parallelism."""
    Strategy(dp_replicate=8, ep=8, zero_stage=1).check(8)  # EP over the whole replicated group
    Strategy(dp_replicate=4, tp=2, ep=4).check(8)  # tp and 2 of 4 replicas
    text = message(Strategy(dp_replicate=3, tp=2, ep=4), 6)  # 4 is not 2 x a divisor of 3
    assert "ep=4 must divide dp_shard·cp·tp = 2, or be a multiple of it dividing dp·cp·tp = 6" in text
    assert "valid ep: 1, 2, 6" in text
    # under FSDP (dp_shard > 1) experts stay inside the shard region, as torchtitan places them
    assert "with dp_shard = 1 it may also span replicas" in message(Strategy(dp_replicate=4, dp_shard=2, ep=4), 8)


@pytest.mark.parametrize(
    "changes, names",
    [
        (dict(zero_stage=5), "zero_stage=5 must be 0-3"),
        (dict(dp_shard=2, zero_stage=1), "zero_stage=1 with dp_shard=2"),
        (dict(dp_replicate=2, zero_stage=3), "zero_stage=3 with dp_shard=1"),
    ],
)
def test_zero_stage_rules(changes, names):
    s = Strategy(**changes)
    assert names in message(s, s.world_size)


def test_global_batch_must_split_over_dp_and_micro_batches():
    text = message(Strategy(dp_shard=4, micro_batch=2, global_batch=12), 4)
    assert "global_batch=12" in text and "4·2 = 8" in text
    Strategy(dp_shard=4, micro_batch=2, global_batch=16).check(4)


@pytest.mark.parametrize(
    "schedule, v, names",
    [
        ("1F1B", 2, "1 stage per rank"),
        ("Interleaved1F1B", 1, "2 or more stages per rank"),
        ("ZBVZeroBubble", 3, "exactly 2 stages per rank"),
        ("DualPipeV", 1, "exactly 2 stages per rank"),
    ],
)
def test_schedule_fixes_the_stages_per_rank(schedule, v, names):
    text = message(Strategy(pp=2, schedule=schedule, virtual_stages=v, global_batch=4), 2)
    assert names in text and f"virtual_stages={v}" in text and schedule in text


def test_fewer_micro_batches_than_stages_is_a_layout_and_torch_s_1f1b_refuses_it():
    """1F1B runs any m (Megatron-Core warms up min(p - r - 1, m)); torch's Schedule1F1B alone needs
    m >= p, which the torch engines' rules keep, and the trainer refuses in torch's own words."""
    s = Strategy(pp=4, schedule="1F1B", global_batch=2)
    s.check(4)
    Strategy(pp=4, schedule="GPipe", global_batch=2).check(4)  # GPipe runs any m
    pytest.importorskip("torch")
    from bandwise.runtime.parallel.mesh import check_runtime_support

    with pytest.raises(BandwiseError) as err:
        check_runtime_support(s, get_model("llama3-8b"))
    assert "Number of microbatches (2) must be greater than or equal to the number of stages (4)" in str(err.value)
    assert "Use at least 4 micro-batches with 1F1B" in str(err.value)


def test_looped_schedules_need_rounds_of_pp():
    # torch runs interleaved micro-batches in rounds of max(1, m // pp): m must be a multiple of that
    text = message(Strategy(pp=4, schedule="Interleaved1F1B", virtual_stages=2, global_batch=9), 4)
    assert "9" in text and "rounds" in text
    Strategy(pp=2, schedule="Interleaved1F1B", virtual_stages=2, global_batch=3).check(2)  # 3 rounds of 1


def test_stages_cannot_exceed_layers():
    s = Strategy(pp=4, schedule="Interleaved1F1B", virtual_stages=2, global_batch=8)
    assert "pp·virtual_stages = 8 stages exceeds the 4 layers of debug" in message(s, 4, DEBUG)
    s.check(4, model(layers=8))


def test_tp_must_divide_heads():
    text = message(Strategy(tp=8), 8, DEBUG)
    assert "tp=8 must divide heads=4" in text and "valid tp: 1, 2, 4" in text


def test_tp_must_divide_or_be_a_multiple_of_kv_heads():
    m = model(heads=12, kv_heads=4, hidden=96, ffn=384, seq_len=288)
    text = message(Strategy(tp=6), 6, m)
    assert "tp=6" in text and "kv_heads=4" in text
    Strategy(tp=12).check(12, m)  # a multiple of kv_heads replicates KV heads


def test_tp_must_divide_the_mlp_widths():
    assert "tp=8 must divide the MLP width ffn=100" in message(Strategy(tp=8), 8, model(ffn=100))
    moe = model(experts=4, top_k=1, expert_ffn=36)
    assert "expert_ffn=36" in message(Strategy(tp=8), 8, moe)


def test_ep_needs_an_moe_model_whose_experts_it_divides():
    assert "ep=2 needs an MoE model" in message(Strategy(dp_shard=2, ep=2), 2, DEBUG)
    text = message(Strategy(dp_shard=3, ep=3), 3, DEBUG_MOE)
    assert "16 experts" in text and "valid ep: 1, 2, 4, 8, 16" in text


def test_cp_needs_a_load_balanced_sequence_split():
    assert "cp=3 needs seq_len=256 divisible by 2·cp = 6" in message(Strategy(cp=3), 3, DEBUG)


def test_tensor_parallel_need_not_divide_the_sequence():
    # PaLM's layout: 12-way model parallelism on 2048-token sequences (sequence parallelism pads)
    Strategy(tp=12, global_batch=1).check(12, model(heads=48, kv_heads=1, hidden=96 * 48, ffn=12 * 64, seq_len=2048))


def test_from_dict_rejects_unknown_fields_and_non_integers():
    with pytest.raises(BandwiseError, match="unknown field.*tensor_parallel"):
        Strategy.from_dict({"tensor_parallel": 2})
    with pytest.raises(BandwiseError, match="tp='2' must be an integer"):
        Strategy.from_dict({"tp": "2"})
    s = Strategy(dp_shard=2, tp=4, order=("cp", "tp", "dp_shard", "dp_replicate", "pp"))
    assert Strategy.from_dict(s.to_dict()) == s


# ------------------------------------------------- the vectorized mask agrees with check
@st.composite
def strategy_st(draw) -> Strategy:
    """Mostly plausible layouts, each field broken now and then, so both verdicts are common."""

    def maybe(valid, broken, p_broken=0.15):
        return draw(broken) if draw(st.integers(0, 99)) < 100 * p_broken else draw(valid)

    degree = st.sampled_from([1, 1, 1, 2, 2, 4])
    dp_replicate, dp_shard, tp, cp, pp = (maybe(degree, st.sampled_from([0, 3, 8]), 0.05) for _ in range(5))
    region = max(dp_shard * cp * tp, 1)
    ep = maybe(st.sampled_from([d for d in (1, 2, 4, 8, 16) if region % d == 0]), st.integers(0, 8))
    schedule = maybe(st.sampled_from(SCHEDULES), st.just("Unknown"), 0.05)
    v = 2 if schedule in ("ZBVZeroBubble", "DualPipeV") else 1 if schedule in ("GPipe", "1F1B") else draw(st.integers(2, 3))
    micro_batch = maybe(st.integers(1, 2), st.just(0), 0.05)
    dp = max(dp_replicate * dp_shard * micro_batch, 1)
    return Strategy(
        dp_replicate=dp_replicate,
        dp_shard=dp_shard,
        tp=tp,
        cp=cp,
        pp=pp,
        ep=ep,
        zero_stage=maybe(st.just(3 if dp_shard > 1 else draw(st.integers(0, 2))), st.integers(0, 4)),
        micro_batch=micro_batch,
        global_batch=maybe(st.sampled_from([dp * k for k in (1, 2, 4, 8, 12)]), st.integers(-1, 24)),
        schedule=schedule,
        virtual_stages=maybe(st.just(v), st.integers(0, 3)),
        recompute=maybe(st.sampled_from(RECOMPUTE), st.just("some"), 0.05),
        precision=maybe(st.sampled_from(("bf16", "fp8")), st.just("fp4"), 0.05),
        order=maybe(st.sampled_from([DIMS, DIMS[::-1]]), st.just(("tp", "cp", "pp")), 0.05),
    )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example, HealthCheck.data_too_large])
@given(
    batch=st.lists(strategy_st(), min_size=20, max_size=20),
    world=st.sampled_from([None, 1, 4, 8, 16, 24]),
    m=st.sampled_from([None, DEBUG, DEBUG_MOE]),
)
def test_valid_mask_agrees_with_check(batch, world, m):
    # Degrees of 0 make the ep-divides rule divide by zero in both paths; rule 1 rejects them.
    with np.errstate(divide="ignore", invalid="ignore"):
        for group_world in sorted({s.world_size for s in batch} if world is None else {world}):
            group = [s for s in batch if world is not None or s.world_size == group_world]
            mask = valid_mask(Layouts.of(group), group_world, m)
            for s, ok in zip(group, mask):
                try:
                    s.check(group_world, m)
                    accepted = True
                except BandwiseError:
                    accepted = False
                assert accepted == bool(ok), s


def test_trainer_refuses_ep_over_replicas_in_one_line():
    """The planner may print EP spanning replicas (Megatron/DeepSeek); the trainer says it does not run it yet."""
    pytest.importorskip("torch")
    from bandwise.runtime.parallel.mesh import check_runtime_support

    s = Strategy(dp_replicate=2, ep=2, zero_stage=1, micro_batch=1, global_batch=2)
    s.check(2, DEBUG_MOE)
    with pytest.raises(BandwiseError, match=r"ep=2 must divide dp_shard=1: .*planned but not executed"):
        check_runtime_support(s, DEBUG_MOE)


@pytest.mark.parametrize("n", [1, 2, 12, 36, 97, 4096, 720720, 999_983])
def test_divisors_are_the_brute_force_ones(n):
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


def test_divisors_of_a_mistyped_device_count_come_at_once():
    """10^12 and 10^12 - 1: trial division up to sqrt(n), a million steps each, not 10^12."""
    assert len(divisors(10**12)) == 169 and divisors(999_999_999_999)[-1] == 999_999_999_999


def test_a_split_may_give_the_embedding_and_the_loss_a_stage_each_where_the_engine_does():
    """Megatron-Core counts the embedding and the loss as a layer each in the pipeline split
    (account_for_embedding/loss_in_pipeline_split): up to layers + 2 stages, the engines that split
    whole layers alone (and the trainer) no more than the layers."""
    from bandwise.runtime.parallel.mesh import check_runtime_support
    from bandwise.specs.registry import get_engine

    L = DEBUG.layers
    fits = Strategy(pp=2, virtual_stages=(L + 2) // 2, schedule="Interleaved1F1B", global_batch=8)
    fits.check(fits.world_size, DEBUG)
    past = Strategy(pp=2, virtual_stages=(L + 4) // 2, schedule="Interleaved1F1B", global_batch=8)
    with pytest.raises(BandwiseError, match="exceeds"):
        past.check(past.world_size, DEBUG)
    assert get_engine("megatron").rules.why(fits, DEBUG) is None
    assert get_engine("torchtitan").rules.why(fits, DEBUG) == "more pipeline stages than layers"
    with pytest.raises(BandwiseError, match="stages of whole layers"):
        check_runtime_support(fits, DEBUG)
