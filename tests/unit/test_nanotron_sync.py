"""nanotron's data-parallel synchronisation (src/nanotron at c2528430, the `nanotron` engine preset): under
ZeRO-1 with fp32 accumulation no DDP hook runs, the fp32 gradients are all-reduced whole after the backward
and the bf16 weights all-gathered after the step; under ZeRO-0 DDP overlaps it, as Megatron-Core's does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bandwise.cost.flops import BF16
from bandwise.cost.profiles import params_for
from bandwise.cost.step import estimate
from bandwise.specs.registry import get_cluster, get_engine, get_model
from bandwise.specs.strategy import Strategy

CLUSTER = get_cluster("h100")
MODEL = get_model("llama3-70b")
NANOTRON = params_for(get_engine("nanotron"), CLUSTER.device)


def _layout(zero: int, dp: int = 64) -> Strategy:
    return Strategy(dp_replicate=dp, tp=8, zero_stage=zero, micro_batch=1, global_batch=dp * 4, recompute="full")


def test_the_preset_sets_the_two_behaviours_from_nanotrons_code():
    assert NANOTRON.zero_grad_all_reduce and not NANOTRON.zero_sync_overlapped
    assert NANOTRON.grad_reduce_bytes == 4  # FP32GradientAccumulator's buffers are what is reduced
    assert NANOTRON.grad_bucket_params == 25 * 2**20 / BF16  # ddp_bucket_cap_mb = 25 of bf16 gradients


def test_zero1_moves_an_all_reduce_and_a_gather_through_the_ring():
    """Ring collectives (NCCL's ring: an all-reduce is a reduce-scatter then an all-gather, each moving
    (n - 1)/n of the buffer per rank): all-reducing g-byte gradients and gathering bf16 weights moves
    2g + 2 bytes per parameter, against g + 2 for a reduce-scatter; 10 / 6 at g = 4, latency aside (a
    70B model's 8.8B parameters per TP-8 rank make the few latencies negligible)."""
    reduce_scatter = replace(NANOTRON, zero_grad_all_reduce=False)
    ar = estimate(MODEL, CLUSTER, _layout(1), NANOTRON).comm_total_s["dp"]
    rs = estimate(MODEL, CLUSTER, _layout(1), reduce_scatter).comm_total_s["dp"]
    g = NANOTRON.grad_reduce_bytes
    assert ar / rs == pytest.approx((2 * g + BF16) / (g + BF16), rel=0.01)


def test_zero1_sync_after_the_backward_is_all_exposed_and_zero0_is_not():
    z1 = estimate(MODEL, CLUSTER, _layout(1), NANOTRON)
    assert z1.breakdown["dp"] == pytest.approx(z1.comm_total_s["dp"], rel=1e-9)
    overlapped = estimate(MODEL, CLUSTER, _layout(1), replace(NANOTRON, zero_sync_overlapped=True))
    assert overlapped.breakdown["dp"] < overlapped.comm_total_s["dp"]  # part hidden behind the backward
    z0 = estimate(MODEL, CLUSTER, _layout(0), NANOTRON)
    assert z0.breakdown["dp"] < z0.comm_total_s["dp"]  # DDP's hook overlaps it
    # ZeRO-0 is DDP's all-reduce either way: neither behaviour touches it
    plain = replace(NANOTRON, zero_grad_all_reduce=False, zero_sync_overlapped=True)
    assert estimate(MODEL, CLUSTER, _layout(0), plain).step_time_s == z0.step_time_s


def test_the_search_priced_as_nanotron_never_shards_data_parallelism():
    rules = get_engine("nanotron").rules
    fsdp = Strategy(dp_shard=64, tp=8, micro_batch=1, global_batch=256, recompute="full")
    assert rules.why(fsdp, MODEL) is not None and "sharded" in rules.why(fsdp, MODEL)
    assert rules.why(_layout(1), MODEL) is None
    assert rules.why(fsdp, MODEL) != get_engine("megatron").rules.why(fsdp, MODEL)
