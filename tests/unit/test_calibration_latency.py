"""The collectives' latency apart from their bandwidth: the gradient norm's scalar all-reduces priced for an
engine that runs one per tensor, FSDP under a pipeline gathered once a step, and a trace fit that reads the
level's latency from the former and its bandwidth from FSDP's gathers (`doctor.calibration`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bandwise.cost.calibrated import calibrated, class_seconds
from bandwise.cost.profiles import params_for
from bandwise.cost.step import estimate
from bandwise.cost.terms.grad_norm import root_tensors, tensors_per_layer
from bandwise.doctor.calibration import fit_trace
from bandwise.doctor.measured import StepClasses
from bandwise.specs.calibration import Calibration, Factor
from bandwise.specs.hardware import Cluster, Level
from bandwise.specs.registry import get_cluster, get_engine, get_model
from bandwise.specs.strategy import Strategy

BATCH = dict(global_batch=8, micro_batch=2, overlap_fsdp=False, overlap_dp=False)


def _cluster() -> Cluster:
    """One level of 4 ranks, as `bandwise train` measures a CPU job (runtime.compare.runtime_cluster)."""
    base = get_cluster("h100")
    return Cluster(name="flat-x4", device=base.device, levels=(Level(name="job", size=4, bandwidth=1e9, latency=1e-3, source="test"),), source="test")


@pytest.mark.parametrize("name", ["debug", "debug-moe"])
def test_the_norm_counts_the_tensors_torch_builds(name):
    """The term's tensor count is the trainer's own model's: torch's parameters() of runtime.model.Transformer."""
    torch = pytest.importorskip("torch")
    from bandwise.runtime.model import Transformer

    spec = get_model(name)
    with torch.device("meta"):
        model = Transformer(spec)
    assert spec.layers * tensors_per_layer(spec) + root_tensors(spec) == pytest.approx(sum(1 for _ in model.parameters()))


def test_the_norm_is_one_scalar_all_reduce_per_tensor_over_the_shard_group():
    """FSDP4 on one level: each of the tensors costs an all-reduce of no bytes, 2 (d - 1) latencies
    (cost.comm.all_reduce_time); an engine that reduces the norm once prices none."""
    spec, clus = get_model("debug"), _cluster()
    s = Strategy(dp_shard=4, **BATCH)
    per_tensor = params_for(get_engine("bandwise"), clus.device)
    assert per_tensor.norm_all_reduces_per_tensor == 1
    none = replace(per_tensor, norm_all_reduces_per_tensor=0.0)
    added = estimate(spec, clus, s, per_tensor).step_time_s - estimate(spec, clus, s, none).step_time_s
    tensors = spec.layers * tensors_per_layer(spec) + root_tensors(spec)
    assert added == pytest.approx(tensors * 2 * 3 * 1e-3, rel=1e-6)


def test_fsdp_under_a_pipeline_gathers_once_a_step():
    """A stage kept gathered over its micro-batches (fsdp_pp_unsharded) pays its FSDP collectives once a
    step: twice the micro-batches leave the term as it was; resharded per micro-batch it doubles."""
    spec, clus = get_model("debug"), _cluster()
    params = params_for(get_engine("bandwise"), clus.device)
    one, two = (Strategy(dp_shard=2, pp=2, **{**BATCH, "global_batch": g}) for g in (8, 16))
    kept = [estimate(spec, clus, s, params).breakdown["fsdp"] for s in (one, two)]
    assert kept[0] > 0 and kept[1] == pytest.approx(kept[0], rel=1e-9)
    per_mb = replace(params, fsdp_pp_unsharded=False)
    resharded = [estimate(spec, clus, s, per_mb).breakdown["fsdp"] for s in (one, two)]
    assert resharded[1] == pytest.approx(2 * resharded[0], rel=1e-9)
    assert kept[0] < resharded[0]


def test_a_trace_fit_reads_latency_and_bandwidth_apart():
    """Classes planted with the level's latency 3x slower and its bandwidth at 0.4: the scalar all-reduces
    give the latency, FSDP's gathers the bandwidth; a bandwidth factor alone could not match both."""
    spec, clus = get_model("debug"), _cluster()
    s = Strategy(dp_shard=4, **BATCH)
    params = params_for(get_engine("bandwise"), clus.device)
    truth = Calibration(device=clus.device.name, factors=(Factor(name="latency.job", value=1 / 3), Factor(name="bandwidth.job", value=0.4)))
    c2, p2 = calibrated(clus, params, truth)
    b = estimate(spec, c2, s, p2).breakdown
    cls = class_seconds(spec, c2, s, p2)
    norm = b["dp"]
    measured = StepClasses(step_ms=estimate(spec, c2, s, p2).step_time_s * 1e3, gemm_ms=cls["gemm"] * 1e3, attention_ms=cls["attention"] * 1e3,
                           memory_ms=cls["elementwise"] * 1e3,
                           comm_exposed_ms={"all_gather": b["fsdp"] * 1e3 / 2, "reduce_scatter": b["fsdp"] * 1e3 / 2, "all_reduce": norm * 1e3})
    cal = fit_trace(measured, spec, clus, s, params, engine="bandwise", evidence="planted")
    assert cal.value("latency.job") == pytest.approx(1 / 3, rel=0.05), cal.to_dict()
    assert cal.value("bandwidth.job") == pytest.approx(0.4, rel=0.05), cal.to_dict()
    c3, p3 = calibrated(clus, params, cal)
    for other in (Strategy(dp_shard=2, pp=2, **BATCH), Strategy(dp_replicate=2, dp_shard=2, **BATCH)):
        assert estimate(spec, c3, other, p3).step_time_s == pytest.approx(estimate(spec, c2, other, p2).step_time_s, rel=0.05)
