"""`bandwise validate`: conversion of published runs, completion by search, statistics, the CLI, and
a guard on the accuracy achieved over the shipped runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from entry import exit_code
import published
from published import shipped_run

from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.errors import BandwiseError
from bandwise.inputs import shipped_yaml
from bandwise.plan.validate import (
    RunResult,
    by_source,
    convert,
    default_runs_path,
    maxtext_dims,
    parse_precision,
    parse_recompute,
    parse_schedule,
    predict,
    priced,
    report_dict,
    run_all,
    summarize,
)
from bandwise.specs.registry import get_engine
from bandwise.specs.strategy import Strategy


# ---------------------------------------------------------------- the shipped data set
def test_shipped_data_matches_its_meta_and_keeps_sources():
    """The data set as issue 48 asks for it: at least 250 runs of at least 25 sources, 100 of them from
    stacks released in 2025-2026 (the run's `released`, else its source's), and every source kept."""
    data = shipped_yaml(default_runs_path().read_text())
    assert len(data["runs"]) == data["meta"]["n_runs"] >= 250
    assert len({r["source"] for r in data["runs"]}) == data["meta"]["n_sources"] == len(data["sources"]) >= 25
    released = [str(r.get("released") or data["sources"][r["source"]].get("released") or "") for r in data["runs"]]
    assert sum(d[:4] in ("2025", "2026") for d in released) >= 100


# ---------------------------------------------------------------- parsers
@pytest.mark.parametrize(
    "text, expected",
    [("FP8-CS", "fp8"), ("FP8-CS (FP8-MX)", "fp8"), ("Float8 linears + torch.compile", "fp8"),
     ("FP8 GEMMs (E4M3, tile 1x128 / block 128x128), BF16 optimizer moments", "fp8"),
     ("fp16 (loss-scale 8192)", "bf16"), ("mixed precision", "bf16"), ("bf16 (fp8: false)", "bf16"),
     ("BF16/FP8 (torchao float8 linears)", "fp8"), ("(float8)", "fp8"), ("BF16", "bf16"), ("bf16 + torch.compile", "bf16"), (None, None)],
)
def test_precision_strings(text, expected):
    assert parse_precision(text) == expected


def test_unknown_precision_is_a_one_line_error():
    with pytest.raises(BandwiseError, match="int4"):
        parse_precision("int4")


@pytest.mark.parametrize(
    "text, expected",
    [("remat_policy=full", "full"), ("remat_policy=minimal", "selective"), ("selective + SP", "selective"),
     ("full (--activations-checkpoint-method uniform)", "full"), ("no", "none"),
     ("none for 8K sequences ('without activation checkpointing')", "none"), (None, None)],
)
def test_recompute_strings(text, expected):
    assert parse_recompute(text) == expected


def test_schedule_from_layers_per_virtual_stage():
    # Narayanan 145B: 80 layers, pp 8, 5 layers per virtual stage -> 2 stages per rank
    assert parse_schedule("interleaved 1F1B, --num-layers-per-virtual-pipeline-stage 5", 8, None, 80) == ("Interleaved1F1B", 2)
    assert parse_schedule(None, 4, 10, 40) == ("Interleaved1F1B", 10)  # NeMo's vpp column
    assert parse_schedule("DualPipe (bidirectional)", 16, None, 61) == ("DualPipeV", 2)
    assert parse_schedule("interleaved (PTD-P)", 12, None, 96) == ("Interleaved1F1B", None)  # v left to the search
    assert parse_schedule(None, 12, None, 70) == (None, None)


def test_maxtext_scale_rule_worked_example():
    """scale 32: k=5, b,r = 1,2 -> heads, mlp x 2^2, emb x 2^2, layers x 2 (MaxText pyconfig get_individual_scales)."""
    assert maxtext_dims(32) == {"hidden": 2560 * 4, "heads": 8 * 4, "ffn": 8192 * 4, "layers": 32, "head_dim": 256, "vocab": 32768}
    # scale 16: k=4, b,r = 1,1 -> heads, mlp x 4, emb x 2
    assert maxtext_dims(16)["hidden"] == 5120 and maxtext_dims(16)["ffn"] == 32768
    with pytest.raises(BandwiseError, match="power of two"):
        maxtext_dims(24)


def test_maxtext_runs_follow_the_scale_rule():
    case = convert(shipped_run("maxtext_v5p_128b_1x256"))
    assert (case.model.hidden, case.model.heads, case.model.ffn, case.model.layers) == (10240, 64, 65536, 64)
    assert not case.model.gated_mlp and case.model.tied_embeddings
    bad = shipped_run("maxtext_v5p_128b_1x256")
    bad["model"]["hidden"] = 12288
    with pytest.raises(BandwiseError, match="scale rule"):
        convert(bad)


# ---------------------------------------------------------------- conversion
def test_maxtext_fsdp_within_slice_and_dp_over_dcn():
    case = convert(shipped_run("maxtext_v5e_128b_4x256"))
    f = case.fixed
    assert (f["tp"], f["dp_shard"], f["dp_replicate"], f["cp"], f["pp"]) == (16, 16, 4, 1, 1)
    assert f["tp"] * f["dp_shard"] * f["dp_replicate"] == case.devices == 1024
    assert case.cluster.levels[0].size == 256 and case.cluster.levels[0].torus_dims == (16, 16)
    assert case.cluster.levels[1].name == "dcn"
    # micro-batch per data-parallel rank = per-chip batch x TP chips
    assert f["micro_batch"] == 1 * 16


def test_stated_network_builds_the_cluster():
    bloom = convert(shipped_run("bloom_176b_384_a100"))  # Omni-Path, 4 x 100 Gb/s per 8-GPU node
    assert bloom.cluster.levels[1].bandwidth == pytest.approx(4 * 100e9 / 8 / 8)
    ds = convert(shipped_run("deepseek_v3_2048_h800"))  # NVLink 160 GB/s stated
    assert ds.cluster.levels[0].bandwidth == pytest.approx(160e9)
    assert "interconnect" not in ds.completed


@pytest.mark.parametrize(
    "text, per_gpu",
    [
        ("InfiniBand 50 GB/s per GPU (400 Gb/s), full IB interconnect", 50e9),  # bytes: GB/s
        ("400 Gb/s RDMA per GPU", 50e9),  # bits: Gb/s
        ("8x 200 Gb/s HDR InfiniBand per node", 8 * 200e9 / 8 / 8),
        ("not stated (DGX H100 reference design: 8x400Gb/s IB)", None),
    ],
)
def test_network_units_are_read_case_sensitively(text, per_gpu):
    from bandwise.plan.runs import per_gpu_network

    got = per_gpu_network(text, 8)
    assert got == (pytest.approx(per_gpu) if per_gpu else None)


def test_expert_parallelism_carved_from_zero1_data_parallelism():
    """DeepSeek-V3 Sec. 3.2: PP16, EP64 over 8 nodes, ZeRO-1 DP: no FSDP stand-in any more."""
    case = convert(shipped_run("deepseek_v3_2048_h800"), published.SOURCES)
    assert (case.fixed["dp_shard"], case.fixed["dp_replicate"], case.fixed["zero_stage"], case.fixed["ep"]) == (1, 128, 1, 64)
    est = predict(case).estimate
    assert est.breakdown["fsdp"] == 0.0 and est.comm_total_s["fsdp"] == 0.0


def test_torchtitan_pipeline_defaults_reproduce_the_schedule_ratio():
    """TorchTitan's H100 Table 5 (405B, PP8, local batch 32): Interleaved 1F1B 128 vs 1F1B 100 TPS/GPU.
    With its default of pp micro-batches and 2 stages per rank, the predicted ratio must agree."""
    one, inter = (predict(convert(shipped_run(f"torchtitan_h100_t5_405b_{k}"), published.SOURCES)) for k in ("1f1b", "interleaved"))
    assert one.strategy.microbatches == inter.strategy.microbatches == 8 and inter.strategy.virtual_stages == 2
    assert inter.predicted / one.predicted == pytest.approx(128 / 100, rel=0.05)


def test_torchtitan_selective_ac_costs_about_half_a_forward():
    """TorchTitan's A100 table: Llama 2 13B on 64 GPUs, no AC 2162 WPS vs op-level selective AC 1904
    (-12%); Megatron-style selective recomputation alone would cost almost nothing."""
    noac, sel = (predict(convert(shipped_run(f"torchtitan_a100x64_llama2_13b_{k}"), published.SOURCES)) for k in ("noac", "sel_op"))
    assert sel.engine == "torchtitan@2024" and "engine: torchtitan@2024" in sel.notes  # TorchTitan's op-level policy is its engine's
    assert sel.predicted / noac.predicted == pytest.approx(1904 / 2162, abs=0.03)


def test_fp8_and_what_a_run_states_are_recorded():
    case = convert(shipped_run("torchtitan_h100_t4_70b_2d_asynctp"))
    assert case.fixed["precision"] == "fp8" and case.overlap["tp"] is True and "async_tp" in case.stated.names
    assert case.cluster.device.hbm_bytes == 95 * 2**30  # as the device reports it (TorchTitan: "95 GiB memory")
    local = convert(shipped_run("narayanan2021_t1_145B"))
    assert local.overlap["dp"] is False and local.fixed["virtual_stages"] == 2


def test_deepseek_v3_runs_carry_their_mtp_module_and_balanced_layout():
    """The MTP block sits beside the output head; DeepSeek places whole layers to balance that rank
    (its engine's behaviour), and Megatron-Bridge's 61 layers need a layout, which balances it: the
    bridge run is priced exactly as the balanced split, its even-layered Llama run as the even one."""
    from dataclasses import replace

    from bandwise.cost.step import estimate

    ds = convert(shipped_run("deepseek_v3_2048_h800"), published.SOURCES)
    assert ds.model.mtp_depth == 1 and ds.engine == "hai-llm" and priced(ds).balanced_stages
    for rid, uneven in (("mbridge_b200_deepseekv3_2511", True), ("mbridge_h100_llama3_70b_2511", False)):
        case = convert(shipped_run(rid), published.SOURCES)
        res = predict(case)
        s, params = res.strategy, priced(case)
        assert params.balanced_when_uneven and (case.model.layers % (s.pp * s.virtual_stages) != 0) == uneven
        as_balanced = estimate(case.model, case.cluster, s, replace(params, balanced_when_uneven=False, balanced_stages=uneven))
        assert res.estimate.tokens_per_s_per_device == pytest.approx(as_balanced.tokens_per_s_per_device, rel=1e-12)


def test_megatron_runs_complete_only_equal_whole_layer_stages():
    """Megatron-Core without a layout needs num_layers % pp == 0 and (num_layers // pp) % vp == 0:
    the 119B model (92 layers on 4 ranks, 23 each) cannot interleave, the 70B one (84 on 2) can in 2, 3 or 6."""
    from bandwise.plan.validate import _completions

    for rid, allowed in (("megatron_h100_gpt_119B", {1}), ("megatron_h100_gpt_70B", {1, 2, 3, 6})):
        case = convert(shipped_run(rid), published.SOURCES)
        assert get_engine(case.engine).stages == "layout"
        assert {c["virtual_stages"] for c in _completions(case)} == allowed
    # an engine that splits as evenly as layers go (torch.distributed.pipelining) keeps every count
    case = convert(shipped_run("megatron_h100_gpt_119B"), published.SOURCES, engine_override="torchtitan")
    assert {c["virtual_stages"] for c in _completions(case)} > {1}


def test_completion_stays_inside_the_engines_layouts():
    """Megatron has no ZeRO-2 (its distributed optimizer is ZeRO-1) and runs 1F1B or interleaved: a run
    that leaves both unstated is completed among those only."""
    from bandwise.plan.validate import _completions

    case = convert(shipped_run("nemo2407_h100_llama2-7b_8gpu"), published.SOURCES)
    got = _completions(case)
    assert {c["zero_stage"] for c in got} <= {0, 1} and {c["schedule"] for c in got} <= {"1F1B", "Interleaved1F1B"}
    assert predict(case).strategy.zero_stage in (0, 1)


def test_null_fields_are_completed_by_search_and_marked():
    run = shipped_run("nemo2407_h100_llama2-7b_8gpu")
    case = convert(run)
    assert {"recompute", "zero_stage"} <= set(case.completed)
    result = predict(case)
    assert result.reason is None and result.strategy is not None
    assert result.strategy.recompute in ("none", "selective", "full")
    assert set(result.completed_fields) == set(case.completed)
    # the completion is the fastest fitting one: pinning any other recompute is not faster
    for rec in ("none", "selective", "full"):
        pinned = copy.deepcopy(run)
        pinned["parallelism"]["recompute"] = rec
        other = predict(convert(pinned))
        if other.estimate.fits:
            assert other.predicted <= result.predicted * (1 + 1e-9)


def test_unstated_layout_is_searched_within_the_device_count():
    case = convert(shipped_run("megatron_h100_gpt175b_strong_96gpu"))
    assert {"tp", "pp", "dp_replicate", "dp_shard"} <= set(case.completed)
    assert case.fixed["cp"] == 1  # the source lists no context parallelism


def test_seq_padding_rescales_tokens():
    case = convert(shipped_run("palm_540b_6144_tpuv4"))
    assert case.fixed["tp"] == 12 and case.model.seq_len % 12 == 0
    assert case.token_scale == pytest.approx(2048 / case.model.seq_len)


def test_unpredictable_runs_are_listed_with_a_reason_and_counted():
    broken = shipped_run("korthikanti2022_22B")
    del broken["model"]["hidden"]
    good = shipped_run("korthikanti2022_175B")
    results = run_all([broken, good])
    assert len(results) == 2
    assert results[0].predicted is None and "hidden" in results[0].reason
    assert results[1].predicted is not None
    doc = report_dict(results)
    assert set(doc) == {"runs", "by_source", "by_engine", "median_abs_error", "p90_abs_error", "first_sight", "fit"}
    assert doc["by_source"]["korthikanti2022"]["count"] == 2 and doc["by_source"]["korthikanti2022"]["predicted"] == 1
    assert sum(doc["fit"].values()) == 1 and [r["fit"] for r in doc["runs"]] == [None, results[1].fit]  # the unpriced run has none


# ---------------------------------------------------------------- statistics
def test_summary_against_numpy():
    errors = [0.05, -0.2, 0.1, -0.01, 0.3]
    rs = [RunResult(id=str(i), source="a" if i < 3 else "b", quality="direct", target=100.0, predicted=100.0 * (1 + e)) for i, e in enumerate(errors)]
    s = summarize(rs)
    abs_err = np.abs(errors)
    assert s.median_abs_error == pytest.approx(np.median(abs_err))
    assert s.p90_abs_error == pytest.approx(np.percentile(abs_err, 90))
    assert by_source(rs)["a"].max_abs_error == pytest.approx(0.2)
    assert by_source(rs)["b"].median_abs_error == pytest.approx(np.median([0.01, 0.3]))


# ---------------------------------------------------------------- qualitative results of the literature
def test_palm_540b_without_pp_within_10_percent():
    r = predict(convert(shipped_run("palm_540b_6144_tpuv4"), published.SOURCES))
    assert r.strategy.pp == 1
    assert abs(r.error) <= 0.10


def test_narayanan_zero3_degrades_with_scale_while_ptd_holds():
    """Narayanan et al. 2021 Table 2: ZeRO-3 falls 144 -> 44 TFLOP/s/GPU from 384 to 1536 GPUs; PTD-P holds."""
    z = [predict(convert(shipped_run(f"narayanan2021_t2_zero3_174B_{n}gpu"), published.SOURCES)).predicted for n in (384, 1536)]
    p = [predict(convert(shipped_run(f"narayanan2021_t2_ptd_174B_{n}gpu"), published.SOURCES)).predicted for n in (384, 1536)]
    assert z[1] / z[0] < 0.5 and p[1] / p[0] > 0.85


# ---------------------------------------------------------------- regression guard on the achieved accuracy
# Achieved with the cost model of 2026-11-21 (benchmarks/RESULTS.md, "Validation") on all 133 runs:
# median |error| 6.3 %, p90 20.8 %, per-source medians below. A physics change that makes any of
# these worse by more than the margin fails; improvements pass (then tighten here: Korthikanti
# 10.3 % -> 7.6 % with the reduction fills of 2026-11-26; with attention's fall-off at short
# sequences, 2026-11-26: Megatron H100 9.8 -> 8.7 %, TorchTitan 10.8 -> 8.7 %, NeMo 4.4 -> 3.5 %,
# Llama 3 9.7 -> 9.2 %, while Megatron-Bridge moved 7.8 -> 8.3 %, inside its margin). With the
# frameworks' own code, 2026-11-26: Megatron's asynchronous TP backward, the score traffic of its fused
# attention kernels counted kernel by kernel, DeepSpeed's bf16 and Megatron-LM 2021's autograd gradient
# accumulation: median 6.7 -> 5.7 %, Korthikanti 7.6 -> 2.4 %, Narayanan 4.8 -> 3.0 %, NeMo 3.5 -> 2.7 %,
# BLOOM 14.2 -> 7.4 % (with its ALiBi bias written into the scores). OPT moved 12.5 -> 14.2 %, past its margin: its one approximate row (an "up to"
# figure) is over-predicted by more once attention moves what metaseq's vendored Megatron kernels move
# (checked against torch's own kernels in test_cost_terms), so its guard follows the evidence.
# One path since 2026-11-27 (issue 36): every run priced as its engine runs it, as `plan --engine E`
# prices it, with what the run states of its own job applied (TP overlap, async TP, torch.compile) and
# its unstated fields completed inside the engine's layouts (Megatron: ZeRO-0/1 only, 1F1B or
# interleaved). Against the switched path before (5.7 % / 21.0 %): median 6.1 %, p90 22.0 %;
# Megatron-Bridge 8.5 -> 13.3 % (its Llama 3.1 405B and B200 DeepSeek-V3 rows complete to ZeRO-1, which
# needs more memory than the ZeRO-2 they took before), Megatron H100 8.7 -> 10.5 % (the same stated TP
# overlap, now with stage rules from the engine). RESULTS.md, "Engines, first class", has the table.
GUARD_OVERALL = {"median": 0.061, "p90": 0.220}
GUARD_SOURCES = {
    "maxtext_tpu_tables": 0.059, "palm2022": 0.027, "korthikanti2022": 0.024, "narayanan2021_sc21": 0.030,
    "llama3_2024": 0.092, "megatron_bridge_perf": 0.133, "nemo_2407": 0.027, "megatron_h100_2024": 0.105, "torchtitan": 0.087,
    "opt175b": 0.142, "deepseek_v3": 0.012, "bloom176b": 0.074,
}
MARGIN = 0.03
# The runs added with a first sight (2026-12-06: 497 runs of 32 new sources and new rows of two shipped
# ones) as this version predicts them, beside their first sight (benchmarks/RESULTS.md, "First sight").
# A change that refuses more of them, or predicts them worse by more than the margin, fails.
# 2026-12-06, TPU7x/B300/V100 presets and fp4/int8 GEMMs: 14 refused runs priced (5 B300, 4 V100, 3 NVFP4,
# 2 int8); the 402 runs priced before keep their predictions (median 18.7%, p90 73.2%); the new ones
# (two V100 1.3B rows at +167% and +257%, v6e int8 at +91%) move the whole set's median and p90 up.
# 2026-12-06, MaxText's expert axis read as FSDP over fsdp x expert: 24 DeepSeek-V3 runs on MI355X that priced
# at 1.27 TB ("nothing fits") fit, and are over-predicted by more; MaxText's capacity factor takes some of it
# back (benchmarks/RESULTS.md, "MaxText's expert axis and its capacity factor"): p90 76.5% -> 78.9%.
# 2026-12-06, after the remat policies, host offload, ZeRO-2 and stated virtual stages, MaxText's expert axis,
# the capacity factor, FSDP2's copies, bucket latencies and MoE host syncs: 30 of the 497 refused now (95 at
# first sight), median 17.9%, p90 68.9% on the 467 priced.
# 2026-12-06, the Blackwell and CDNA GEMM fractions from one measured matmul table, scaled from the H100's
# checked product (benchmarks/RESULTS.md, "Blackwell and CDNA GEMM fractions"): median 17.9% -> 17.7%,
# p90 68.9% -> 64.0% (MI355X and MI300X runs down; B200 fp8 runs up, their measured fp8 being nearer bf16).
# 2026-12-06, the TorchTitan NVFP4 doc's GPU read from the message of the commit that added it (GB200): its 6
# runs price (BF16 +6.5% / -4.0%, MXFP8 +24.6% / +19.8%, NVFP4 +68.9% / +75.0%); 24 refused, each naming what
# is not priced (benchmarks/RESULTS.md, "Refused runs priced (third pass)"): p90 64.0% -> 64.2%.
# Then TPU7x's host link (the scaling book's per-TPU PCIe figure): the 10 MaxText TPU7x runs that offload
# to the host price, 14 refused. The link costs them 0-14%; MaxText MoE on TPU7x is over-predicted
# (DeepSeek-V3 +73..+80%, gpt-oss +155%, Qwen3 +51%), which moves the set: median 17.7% -> 17.9%, p90
# 64.2% -> 68.9%, with the 473 runs priced before unchanged.
# Then each engine's own floor on micro-batches (benchmarks/RESULTS.md, "Fewer micro-batches than stages
# (third pass)"): Megatron-Core's 1F1B has none, so nanotron's bench run of one micro-batch through PP2 prices,
# at +217% like its 64-node siblings; 13 refused, the 483 priced before unchanged: p90 68.9% -> 69.2%.
# Then a routed MoE layer's `mlpwo` priced as the backward residual it is in MaxText's sparse_matmul (top_k·h
# per token; benchmarks/RESULTS.md, "MaxText MoE on TPU7x (third pass)"): the two gpt-oss TPU7x rows that
# offload it go from +155% to -21%, p90 68.9% -> 68.1%; the guard follows the improvement. Both together:
# 13 refused, median 17.9%, p90 68.7%.
# 2026-12-06, GB300's GEMM fractions from its silicon's measurement on the B300 board, torchao's per-micro-batch weight
# casts and TorchTitan's plain TP under rowwise float8 (benchmarks/RESULTS.md, "Signed biases by engine and device
# (third pass)"): median 17.7% unchanged, p90 64.0% -> 63.4% (the async-TP rowwise runs, +58-110% -> +37-77%).
# All of this third pass together: 13 refused, median 17.9%, p90 65.5%. Then nanotron as its own engine and a
# stated ZeRO-0 read (p90 64.2%), and GB200 at the 184.3 GiB its device reports (benchmarks/RESULTS.md,
# "TorchTitan on GB200: what the step holds"): GB200 runs that state no recompute now fit without it and
# are priced faster, so the median rises 17.9% -> 18.0% (worse, kept: the capacity is the device's).
GUARD_FIRST_SIGHT = {"refused": 13, "median": 0.181, "p90": 0.642}


@pytest.fixture(scope="module")
def all_results():
    return run_all(published.RUNS, sources=published.SOURCES)


@pytest.fixture(scope="module")
def guarded_results(all_results):
    """The runs the model was adjusted on (no first sight): the regression guard's set."""
    return [r for r in all_results if r.first_sight is None]


def test_first_sight_runs_do_not_regress(all_results):
    seen = [r for r in all_results if r.first_sight is not None]
    assert len(seen) == len(published.FIRST_SIGHT) and len(published.IN_SAMPLE) + len(seen) == len(published.RUNS)
    assert sum(r.reason is not None for r in seen) <= GUARD_FIRST_SIGHT["refused"]
    s = summarize(seen)
    assert s.median_abs_error <= GUARD_FIRST_SIGHT["median"] + MARGIN
    assert s.p90_abs_error <= GUARD_FIRST_SIGHT["p90"] + MARGIN


def test_one_micro_batch_through_two_stages_is_priced_with_the_closed_form_bubble(all_results):
    """nanotron's bench run (GBS 256 over DP128 x MBS 2: one micro-batch through PP2) ran: nanotron's 1F1B
    asserts only m >= pp - 1 (engine.py at c2528430); priced as its source's engine, nanotron, whose search
    keeps torch's floor (m >= pp), the stated layout is still the run's.
    At m = 1 its stages run one after the other: idle / busy is (p - 1) / m = 1 with equal stages (less
    where the busiest stage is the larger), and GPipe, whose bubble is (p - 1)/(m + p - 1) at any m
    (Huang et al. 2019), prices the same step."""
    from bandwise.cost.step import estimate

    r = next(r for r in all_results if r.id == "nanotron_bench_1p34b_64n")
    assert r.reason is None and r.engine == "nanotron"
    s = r.strategy
    assert (s.pp, s.microbatches, s.schedule) == (2, 1, "1F1B")
    t = r.estimate.breakdown
    busy = t["compute"] + t["recompute"] + t["tp"] + t["ep"] + t["cp"] + t["fsdp"] + t["contention"]
    assert 0 < t["bubble"] <= busy
    case = convert(shipped_run(r.id), published.SOURCES)
    gpipe = estimate(case.model, case.cluster, s.replace(schedule="GPipe"), priced(case))
    assert t["bubble"] == pytest.approx(gpipe.breakdown["bubble"], rel=1e-9)
    assert r.estimate.step_time_s == pytest.approx(gpipe.step_time_s, rel=1e-9)


def test_a_refused_shipped_run_names_what_is_not_priced_in_one_line(all_results):
    """Issue 48's Fit acceptance: a run that ran is priced, or its one-line reason says what is not priced."""
    for r in (r for r in all_results if r.reason is not None):
        assert "\n" not in r.reason and "not priced: " in r.reason and len(r.reason) < 400, (r.id, r.reason)


def test_accuracy_does_not_regress(guarded_results):
    assert all(r.reason is None for r in guarded_results), [r.reason for r in guarded_results if r.reason]
    s = summarize(guarded_results)
    assert s.median_abs_error <= GUARD_OVERALL["median"] + MARGIN
    assert s.p90_abs_error <= GUARD_OVERALL["p90"] + MARGIN
    per = by_source(guarded_results)
    for name, median in GUARD_SOURCES.items():
        assert per[name].median_abs_error <= median + MARGIN, (name, per[name].median_abs_error)


# Calculon's own validation (Korthikanti et al. 2022, Table 5: 22B / 175B / 530B / 1T, full and
# selective recomputation), step-time error per case as Calculon itself predicts it: its
# `llm-validation` layouts run by benchmarks/peers_calculon.py on 2026-11-26 (RESULTS.md, "Side by
# side with Calculon"): mean |error| 3.7 %, worst -8.9 %. bandwise's validate path must do no worse on
# what the paper measures: each layout's step (the worst case) and each model's speed-up of sequence
# parallelism with selective recomputation over full recomputation (the mean error of that ratio).
# The mean step error is not compared: bandwise's full-recomputation rows ran 2-4 % fast until the
# norms that every TP rank runs whole without sequence parallelism were priced (Table 4), and that
# error had cancelled the same amount in the mean against the selective rows' +1..+8 %.
CALCULON_ERRORS = (-0.017, 0.033, -0.006, -0.008, 0.017, -0.089, -0.046, -0.076)


def test_the_korthikanti_layouts_are_predicted_no_worse_than_calculon():
    import importlib.util

    spec = importlib.util.spec_from_file_location("peers_calculon", Path(__file__).resolve().parents[2] / "benchmarks" / "peers_calculon.py")
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    cases = peers.bandwise_cases()
    sources = cases.pop("_sources")
    errors = []
    for c in cases.values():
        step_s, _ = peers.predict_step(c["run"], sources, sp=c["sp"])
        errors.append(step_s / c["step_s"] - 1)
    assert len(errors) == len(CALCULON_ERRORS) == 8
    assert max(map(abs, errors)) <= max(map(abs, CALCULON_ERRORS))

    def speedup_errors(errs):  # (full, seqsel) per model: predicted / profiled speed-up - 1
        return [(1 + full) / (1 + seqsel) - 1 for full, seqsel in zip(errs[0::2], errs[1::2])]

    ours, theirs = speedup_errors(errors), speedup_errors(CALCULON_ERRORS)
    assert sum(map(abs, ours)) / 4 <= sum(map(abs, theirs)) / 4, (ours, theirs)


def test_nothing_is_keyed_to_a_source_name():
    """One path: what an engine does is engine data and what a run states is read from its fields, so
    no source of the data set is named in the code that converts and predicts runs."""
    import bandwise.plan.runs as runs_module
    import bandwise.plan.validate as validate_module

    readers = sorted(Path(runs_module.__file__).parent.glob("run_*.py"))
    assert len(readers) >= 5, readers  # fields, hardware, model, layout, stated
    code = "".join(p.read_text() for p in [Path(runs_module.__file__), Path(validate_module.__file__), *readers])
    named = [src for src in published.SOURCES if f'"{src}"' in code or f"'{src}'" in code]
    assert not named, named
    assert not hasattr(runs_module, "PARAM_SWITCHES") and not hasattr(runs_module, "SWITCHES")


def test_a_run_that_states_compile_is_priced_as_plan_compiled():
    """`precision: ... torch.compile` prices the run as `plan --engine E --compiled` (`cli.options.cost_params`)."""
    from bandwise.cli.options import cost_params

    case = convert(shipped_run("torchtitan_h100_t1_fsdp_compile"), published.SOURCES)
    assert case.stated.compiled and "compiled" in case.stated.names
    flags = cost_params(DEFAULT_PARAMS.headroom, None, False, case.engine, case.cluster.device)
    assert priced(case) == flags
    eager = convert(shipped_run("torchtitan_h100_t1_fsdp"), published.SOURCES)
    assert not eager.stated.compiled and priced(eager).eager_elementwise


@pytest.mark.parametrize("run_id, key, switch", [
    ("mbridge_h100_qwen3_30b_a3b_2511", "moe_a2a_overlap", "overlap_ep"),  # plan --overlap-ep
    ("mbridge_h100_llama3_70b_2511", "tp_comm_overlap", "overlap_tp"),  # plan --overlap-tp
])
def test_a_run_that_states_an_overlap_is_priced_as_the_plan_flag(run_id, key, switch):
    """A recipe's `moe_a2a_overlap` / `tp_comm_overlap` prices the run as `plan --overlap-ep` / `--overlap-tp`
    do: the Strategy's `overlap_ep` / `overlap_tp` switched on (`plan.search` sets them from the flags), the
    same layout otherwise, estimated with the same parameters; stating it moves the prediction."""
    from bandwise.cost.step import estimate

    case = convert(shipped_run(run_id), published.SOURCES)
    assert key in case.stated.names
    res = predict(case)
    assert getattr(res.strategy, switch) is True
    assert res.predicted == pytest.approx(estimate(case.model, case.cluster, res.strategy, priced(case)).tokens_per_s_per_device * case.token_scale, rel=1e-12)
    plain = shipped_run(run_id)
    del plain["parallelism"][key]
    plain_case = convert(plain, published.SOURCES)
    unstated = predict(plain_case)
    assert key not in plain_case.stated.names and unstated.strategy == res.strategy.replace(**{switch: False})
    assert res.predicted > unstated.predicted * 1.001


def test_a_run_that_states_its_recompute_modules_is_priced_with_them():
    """Megatron-Bridge's DeepSeek-V3 B200 recipe re-runs only MLA's up-projections (recompute_modules=[mla_up_proj]):
    the run is priced with that module set in place of its engine's `selective_modules` ([core_attn]) and
    nothing else changed; it drops the up-projections' outputs and re-runs their GEMMs."""
    from dataclasses import replace

    from bandwise.cost.step import estimate

    case = convert(shipped_run("mbridge_b200_deepseekv3_2511"), published.SOURCES)
    assert case.stated.selective_modules == ("mla_up_proj",) and "recompute_modules" in case.stated.names
    plain_run = shipped_run("mbridge_b200_deepseekv3_2511")
    del plain_run["parallelism"]["recompute_modules"]
    plain = convert(plain_run, published.SOURCES)
    assert plain.stated.selective_modules is None and priced(plain).selective_modules == ("core_attn",)
    assert priced(case) == replace(priced(plain), selective_modules=("mla_up_proj",))
    strategy = predict(case).strategy
    assert strategy.recompute == "selective"
    mods, default = (estimate(case.model, case.cluster, strategy, priced(c)) for c in (case, plain))
    assert mods.memory_gib["activations"] < default.memory_gib["activations"]
    assert mods.tokens_per_s_per_device < default.tokens_per_s_per_device


@pytest.mark.parametrize("change, match", [
    ({"recompute_modules": ["mla_up_proj", "moe"]}, "moe: not priced"),
    ({"recompute_modules": "mla_up_proj"}, "write a list"),
    ({"recompute": "full"}, "needs recompute: selective"),
])
def test_a_recompute_module_set_the_cost_model_cannot_price_is_refused(change, match):
    run = shipped_run("mbridge_b200_deepseekv3_2511")
    run["parallelism"].update(change)
    with pytest.raises(BandwiseError, match=match):
        convert(run, published.SOURCES)


def test_accuracy_meets_the_issue_targets(guarded_results):
    """The acceptance lines themselves: median <= 10 %, p90 <= 25 %, no source above 15 %."""
    s = summarize(guarded_results)
    assert len(guarded_results) == len(published.IN_SAMPLE)
    assert s.median_abs_error <= 0.10 and s.p90_abs_error <= 0.25
    worst = max(by_source(guarded_results).items(), key=lambda kv: kv[1].median_abs_error)
    assert worst[1].median_abs_error <= 0.15, worst


# ---------------------------------------------------------------- the command line
def test_cli_json_has_exactly_the_issue_keys(capsys):
    assert exit_code(["validate", "--source", "korthikanti2022", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"runs", "by_source", "by_engine", "median_abs_error", "p90_abs_error", "first_sight", "fit"}
    assert len(doc["runs"]) == 5
    for run in doc["runs"]:
        assert {"id", "source", "predicted_tokens_per_s_per_device", "target_tokens_per_s_per_device", "error", "completed_fields"} <= set(run)
        assert run["error"] == pytest.approx(run["predicted_tokens_per_s_per_device"] / run["target_tokens_per_s_per_device"] - 1)


def test_cli_human_tables_and_plot(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # a run id unfolded, whatever terminal (or test worker) this runs in
    png = tmp_path / "parity.png"
    assert exit_code(["validate", "--source", "palm2022", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "palm_540b_6144_tpuv4" in out and "Per source" in out and "direct+derived" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_lists_what_runs_state_one_line_each_with_its_runs(capsys, monkeypatch):
    """The human report ends with each stated setting validate applied, beside how many of the runs state
    it, as the JSON's per-run notes count them."""
    from bandwise.plan.run_stated import STATED

    assert exit_code(["validate", "--source", "titan_asynctp_2506", "--json"]) == 0
    notes = [n for r in json.loads(capsys.readouterr().out)["runs"] for n in r["notes"]]
    counts = {k: notes.count(f"stated: {text}") for k, text in STATED.items() if f"stated: {text}" in notes}
    assert len(counts) >= 2
    monkeypatch.setenv("COLUMNS", "1000")  # each setting on one line
    assert exit_code(["validate", "--source", "titan_asynctp_2506"]) == 0
    out = capsys.readouterr().out.splitlines()
    for k, n in counts.items():
        assert sum(line.strip() == f"{n} {STATED[k]}" for line in out) == 1, STATED[k]


def test_cli_runs_file_and_bad_source(tmp_path, capsys):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"sources": {}, "runs": [shipped_run("maxtext_v4_22b_1x128")]}))
    assert exit_code(["validate", "--runs", str(path), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 1
    assert exit_code(["validate", "--source", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and len(err.strip().splitlines()) <= 2
    for path, what in ((tmp_path, "a directory"), (tmp_path / "absent.yaml", "no such file")):
        assert exit_code(["validate", "--runs", str(path)]) == 2
        err = capsys.readouterr().err
        assert what in err and len(err.strip().splitlines()) == 1


def test_the_shipped_error_bands_are_what_validate_measures_now(all_results):
    """plan, estimate and compare print data/error_bands.json; it must be what the shipped runs and
    today's cost model give (regenerate: bandwise validate --write-bands src/bandwise/data/error_bands.json)."""
    from bandwise.plan.bands import (
        compute_bands,
        compute_ranking,
        shipped_bands,
        shipped_ranking,
    )

    assert compute_bands(all_results) == shipped_bands()
    assert compute_ranking(all_results) == shipped_ranking()


def test_ranking_counts_pairs_of_one_job_and_the_error_of_their_ratio():
    """Two layouts of one model on one device count: measured 100 vs 80 (ratio 1.25). Predicted 90 vs
    60 (1.5: ordered, ratio off by +20%); a third layout measured 101 against the first (a tie within
    1%: its ratio error counts, its order does not); another source's run never pairs."""
    from bandwise.plan.bands import compute_ranking

    def run(rid, target, predicted, source="s", tp=1):
        return RunResult(id=rid, source=source, quality="direct", target=target, predicted=predicted, model="m", device="h100-sxm",
                         devices=8, strategy=Strategy(tp=tp, dp_shard=8 // tp))

    got = compute_ranking([run("a", 100, 90), run("b", 80, 60, tp=2), run("c", 101, 99, tp=4), run("d", 50, 500, source="t")])
    # pairs: a-b ratio 1.25 vs 1.5 (+20%, ordered); a-c 0.990 vs 0.909 (tie); b-c 0.792 vs 0.606 (ordered, -23.5%)
    assert got["pairs"] == 3 and got["ordered_pairs"] == 2 and got["ordered_as_measured"] == 1.0
    errs = sorted([abs(1.5 / 1.25 - 1), abs((90 / 99) / (100 / 101) - 1), abs((60 / 99) / (80 / 101) - 1)])
    assert got["median_ratio_error"] == pytest.approx(errs[1], abs=1e-4)


def test_a_band_line_says_how_many_runs_which_side_and_where_it_stops(monkeypatch):
    from bandwise.plan import bands

    monkeypatch.setattr(bands, "shipped_bands", lambda: {
        "h100/dense": {"runs": 41, "median_signed_error": 0.0947, "p90_abs_error": 0.2159, "largest_run_devices": 16384},
        "megatron/h100/dense": {"runs": 26, "median_signed_error": 0.004, "p90_abs_error": 0.18, "largest_run_devices": 16384},
        "h800/moe": {"runs": 1, "median_signed_error": 0.0193, "p90_abs_error": 0.0193, "largest_run_devices": 2048},
        "tpu-v5p/dense": {"runs": 16, "median_signed_error": -0.0057, "p90_abs_error": 0.21, "largest_run_devices": 6144},
    })
    assert (bands.band_line("h100-sxm", False, 64, "megatron@bridge")
            == "validated in-sample against 26 published dense runs on h100 priced as megatron (the model was adjusted on them; "
               "fewer than 5 at first sight): over-predicted by 0% median, 90% within ±18%")
    assert bands.band_line("h100-sxm", False, 64, "pax") == ("validated in-sample against 41 published dense runs on h100 (the model was adjusted "
                                                               "on them; fewer than 5 at first sight): over-predicted by 9% median, "
                                                               "90% within ±22% (none priced as pax: every engine's runs)")
    assert "under-predicted by 1% median" in bands.band_line("tpu-v5p", False, 256, "maxtext")
    assert "none of them ran on as many devices (6,144 at most, this is 8,960)" in bands.band_line("tpu-v5p", False, 8960, "maxtext")
    assert "too few runs for a spread" in bands.band_line("h800-sxm", True, 2048, "megatron")
    assert bands.band_line("h100-sxm-96g-500w", False, 8, "torchtitan").startswith("validated in-sample against 41")  # TorchTitan's variant is an h100
    assert bands.band_line("gb300", True, 64, "megatron").startswith("not validated: no published moe run on gb300")
    assert bands.band_dict("h100-sxm", False, 64, "megatron")["engine_band"] is True
    assert bands.band_dict("h100-sxm", False, 64, "megatron")["first_sight"] is False


def test_a_band_comes_from_first_sight_errors_where_five_exist(monkeypatch):
    """The engine's own first-sight errors stand in for the in-sample ones once there are
    MIN_RUNS_FOR_SPREAD of them; with fewer the in-sample band is printed and says so."""
    from bandwise.plan import bands

    first = {"runs": 5, "median_signed_error": 0.31, "p90_abs_error": 0.55}
    monkeypatch.setattr(bands, "shipped_bands", lambda: {
        "torchtitan/h100/dense": {"runs": 12, "median_signed_error": 0.027, "p90_abs_error": 0.1, "largest_run_devices": 512,
                                  "first_sight": first},
        "torchtitan/a100/dense": {"runs": 6, "median_signed_error": -0.02, "p90_abs_error": 0.05, "largest_run_devices": 64,
                                  "first_sight": {**first, "runs": 4}},
    })
    line = bands.band_line("h100-sxm", False, 64, "torchtitan")
    assert line == "validated at first sight against 5 published dense runs on h100 priced as torchtitan: over-predicted by 31% median, 90% within ±55%"
    assert bands.band_dict("h100-sxm", False, 64, "torchtitan")["first_sight"] is True
    assert bands.band_line("a100-sxm-80g", False, 64, "torchtitan").startswith("validated in-sample against 6 published dense runs")

def test_plan_and_estimate_print_the_band(capsys):
    assert exit_code(["plan", "--model", "llama3-8b", "--devices", "64", "--global-batch", "256"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the line wraps at the terminal's width
    assert "tokens/s and MFU validated at first sight against" in out and "published dense runs on h100" in out
    assert exit_code(["estimate", "--model", "llama3-8b", "--dp-shard", "8", "--global-batch", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["validation"]["family"] == "h100"


def test_write_bands_writes_the_runs_it_was_given_or_says_why_not(tmp_path, capsys):
    path = tmp_path / "bands.json"
    assert exit_code(["validate", "--source", "palm2022", "--write-bands", str(path)]) == 0
    assert json.loads(path.read_text())["bands"].keys() == {"tpu-v4/dense", "pax/tpu-v4/dense"}
    assert json.loads(path.read_text())["bands"]["tpu-v4/dense"]["runs"] == 1
    capsys.readouterr()
    assert exit_code(["validate", "--source", "palm2022", "--write-bands", str(tmp_path / "no" / "bands.json")]) == 2
    err = capsys.readouterr().err
    assert "cannot write the error bands" in err and len(err.strip().splitlines()) == 1


def test_llm_foundrys_runs_are_all_predicted_and_carry_the_first_sight_they_had_held_out(capsys):
    """llm-foundry's MPT runs on H100 (77) and A100 (139) were held out from 2026-11-26 and shipped on 2026-12-07
    with the predictions first made for them (1c66278, d79c53a): every one is predicted, and their first-sight
    figures are those RESULTS.md recorded then (H100 23.6% / 87.5%, A100 7.8% / 37.5%, median / p90)."""
    assert exit_code(["validate", "--source", "llmfoundry_mpt", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(r["reason"] is None and r["error"] is not None for r in doc["runs"])
    for chip, count, median, p90 in (("h100", 77, 0.236, 0.875), ("a100", 139, 0.078, 0.375)):
        first = [r["first_sight"]["error"] for r in doc["runs"] if r["id"].startswith(f"llmfoundry_{chip}")]
        assert len(first) == count and None not in first
        assert np.median(np.abs(first)) == pytest.approx(median, abs=2e-3)  # the records keep four figures
        assert np.percentile(np.abs(first), 90) == pytest.approx(p90, abs=5e-3)


def test_a_run_that_states_its_attention_kernel_is_priced_as_plan_attention(tmp_path, capsys):
    """`attention:` in a user's runs file is `plan --attention` (`api.inputs.pricing`): each kernel's price over the
    engine's, named in the run's notes; an unknown kernel is a one-line error naming the value and the choices."""
    from bandwise.api.inputs import cost_params
    from bandwise.plan.run_stated import STATED

    run = shipped_run("mds_rebase_gpt_2p7b_8a100_fa2")
    tokens = {}
    for kernel in ("fa2", "fa1", "triton", "materialized"):
        # bf16: the run's own fp16 is a statement of its optimizer's (`fp16_autograd_accumulation`), not of plan's flags
        stated = {**copy.deepcopy(run), "id": f"user_{kernel}", "attention": kernel, "precision": "bf16"}
        case = convert(stated, published.SOURCES)
        assert priced(case) == cost_params(DEFAULT_PARAMS.headroom, kernel, None, case.engine, case.cluster.device), kernel
        path = tmp_path / f"{kernel}.yaml"
        path.write_text(yaml.safe_dump({"sources": {"mds_rebase_2307": published.SOURCES["mds_rebase_2307"]}, "runs": [stated]}))
        assert exit_code(["validate", "--runs", str(path), "--json"]) == 0
        (res,) = json.loads(capsys.readouterr().out)["runs"]
        assert f"stated: {STATED['attention']}" in res["notes"]
        tokens[kernel] = res["predicted_tokens_per_s_per_device"]
    # the Triton kernel is priced at FlashAttention 1.x's rate, which its docstring says it slightly trails (`FA2_OVER_TRITON`),
    # and this run's heads of 80 at the 128 its tiles compute (`params.padded_head_dim`): slower than FlashAttention 1.x here
    assert tokens["fa2"] > tokens["fa1"] > tokens["triton"] > tokens["materialized"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"sources": {}, "runs": [{**copy.deepcopy(run), "attention": "fa3"}]}))
    assert exit_code(["validate", "--runs", str(bad), "--json"]) == 0  # a run that cannot be read is reported, not fatal
    (res,) = json.loads(capsys.readouterr().out)["runs"]
    assert "attention 'fa3'" in res["reason"] and "fa1" in res["reason"] and res["predicted_tokens_per_s_per_device"] is None


def test_an_fp16_deepspeed_run_accumulates_its_gradients_through_autograd():
    """DeepSpeed's bf16 optimizer (18 bytes a parameter a micro-batch) exists only under bf16 (runtime/engine.py,
    `_configure_optimizer`); a run that states fp16 adds each micro-batch's gradient into the fp16 `param.grad` in
    place, 2 + 2 read and 2 written, the first micro-batch's kept. Only DeepSpeed's fp16 runs change: the same run
    in bf16, and the same fp16 statement on an engine that fuses the accumulation into its GEMMs, keep their price;
    the priced step is faster by the accumulation bytes it no longer moves."""
    from dataclasses import replace as dc_replace

    from bandwise.cost.params import AUTOGRAD_ACCUMULATION_BYTES
    from bandwise.cost.step import estimate

    run = shipped_run("bloom_prequel_h12288_l96_nh64_dp8tp1pp48_mbs1_gbs2048_L818")
    assert run["precision"] == "fp16"
    fp16 = convert(run, published.SOURCES)
    bf16 = convert({**copy.deepcopy(run), "precision": "bf16"}, published.SOURCES)
    p16, pbf = priced(fp16), priced(bf16)
    assert (p16.grad_accumulation_bytes, p16.grad_accumulation_skips_first) == (AUTOGRAD_ACCUMULATION_BYTES, True)
    assert (pbf.grad_accumulation_bytes, pbf.grad_accumulation_skips_first) == (18, False)
    assert "fp16" in fp16.stated.names and "fp16" not in bf16.stated.names
    assert fp16.stated.precision == bf16.stated.precision == "bf16"  # one peak for both
    s = predict(fp16).strategy
    t16, tbf = (estimate(fp16.model, fp16.cluster, s, p).step_time_s for p in (p16, pbf))
    assert t16 < tbf
    # nothing else moves: pricing bf16's accumulation bytes on the fp16 run gives the bf16 run's step exactly
    assert estimate(fp16.model, fp16.cluster, s, dc_replace(p16, grad_accumulation_bytes=18, grad_accumulation_skips_first=False)).step_time_s \
        == pytest.approx(tbf, rel=1e-12)
    # an engine that fuses the accumulation keeps its price under a stated fp16
    mega16, megabf = (priced(convert({**copy.deepcopy(run), "precision": p}, published.SOURCES, engine_override="megatron"))
                      for p in ("fp16", "bf16"))
    assert (mega16.grad_accumulation_bytes, mega16.grad_accumulation_skips_first) == \
        (megabf.grad_accumulation_bytes, megabf.grad_accumulation_skips_first)


@pytest.mark.parametrize("text, fp16", [("fp16", True), ("FP16 mixed precision", True), ("float16", True), ("bf16", False),
                                        ("bfloat16", False), ("bf16 (fp16 all-reduce)", False), ("mixed precision", False)])
def test_a_precision_says_fp16_only_outside_its_asides_and_not_beside_bf16(text, fp16):
    """fp16 and bf16 parse alike (one peak); `says_fp16` tells them apart as the source wrote it, its parentheses aside."""
    from bandwise.plan.run_fields import says_fp16

    assert parse_precision(text) == "bf16" and says_fp16(text) is fp16


def test_a_composer_pure_run_reduces_in_bf16_and_keeps_fp32_shards():
    """Composer's FSDP mixed precision 'PURE' sets reduce_dtype to the precision (`get_mixed_precision`), and FSDP casts
    each reduced shard back to its fp32 flat parameter: 2 bytes a gradient reduce-scattered, 4 kept. The same row in
    DEFAULT keeps the engine's fp32 reduction; a stated `grad_reduce` is the run's own word over PURE."""
    from bandwise.cost.step import estimate

    run = shipped_run("llmfoundry_a100_80gb_bf16_mpt70b_seq2048_32gpu_mb2")
    assert "mixed precision PURE" in run["precision"]
    pure = convert(run, published.SOURCES)
    default = convert({**copy.deepcopy(run), "precision": "bf16 (amp_bf16)"}, published.SOURCES)
    stated = convert({**copy.deepcopy(run), "grad_reduce": "fp32"}, published.SOURCES)
    pp, pd, ps = priced(pure), priced(default), priced(stated)
    assert "fsdp_pure" in pure.stated.names and "fsdp_pure" not in default.stated.names
    assert (pp.grad_reduce_bytes, pp.sharded_grad_bytes) == (2, 4)
    assert pd.grad_reduce_bytes == 4 and ps.grad_reduce_bytes == 4
    s = predict(pure).strategy
    t_pure, t_default = (estimate(pure.model, pure.cluster, s, p) for p in (pp, pd))
    assert t_pure.breakdown["fsdp"] <= t_default.breakdown["fsdp"] and t_pure.comm_total_s["fsdp"] < t_default.comm_total_s["fsdp"]


def test_a_run_that_fits_nowhere_names_its_least_memory_layout_and_its_terms():
    """Where a layout that ran is said not to fit, the note names the completion priced and its memory terms,
    largest first, which add up to the peak it gives (the issue's "find the memory term that overstates")."""
    import re

    run = shipped_run("megatron_h100_gpt_70B")  # restated on one node of 8 H100s: 70B with its Adam states cannot fit
    run["hardware"]["count"] = 8
    run["parallelism"].update(tp=8, pp=1, dp=1, pp_schedule=None, global_batch_seqs=8, global_batch_tokens=None)
    res = predict(convert(run, published.SOURCES))
    note = next(n for n in res.notes if n.startswith("memory: nothing fits"))
    assert res.strategy.describe() in note
    peak = float(re.search(r"needs ([\d.]+) GiB", note).group(1))
    terms = [(name, float(gib)) for name, gib in re.findall(r"(\w+) (-?[\d.]+)(?:,|\))", note.split("GiB (", 1)[1])]
    assert [g for _, g in terms] == sorted((g for _, g in terms), reverse=True) and len(terms) >= 3
    assert sum(g for _, g in terms) == pytest.approx(peak, abs=0.05 * len(terms))
    assert peak == pytest.approx(res.estimate.memory_gib_per_device, abs=0.05)
