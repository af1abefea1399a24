"""Calibration: the file's reader, the one place factors apply, and the fit from measured runs against
planted factors (the runs' "measurements" made by the model under known factors, which the fit must recover)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import yaml

from bandwise import api
from bandwise.cost.calibrated import calibrated, datasheet_levels
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.step import estimate
from bandwise.errors import BandwiseError
from bandwise.plan.calibrate import Measured, fit_runs, measured_runs, predict_calibrated, reached
from bandwise.specs.calibration import Calibration, Factor, calibration_from_dict, load_calibration
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

ZERO3 = ["narayanan2021_t2_zero3_174B_384gpu", "narayanan2021_t2_zero3_174B_768gpu", "narayanan2021_t2_zero3_174B_1536gpu"]
"""Narayanan et al. 2021's ZeRO-3 runs of one model at three scales: the data-parallel collectives cross
InfiniBand and weigh differently at each scale, so a network factor is told apart from the stack's speed."""


def _doc(**over):
    doc = {"format": 1, "device": "h100-sxm", "engine": None, "factors": {"gemm": {"value": 0.5}}}
    doc.update(over)
    return doc


@pytest.mark.parametrize("doc, words", [
    (_doc(extra=1), "unknown field(s) extra"),
    (_doc(format=2), "format=2"),
    ({"format": 1, "factors": {}}, "missing field device"),
    (_doc(factors={"gemmm": 0.5}), "not a factor bandwise applies"),
    (_doc(factors={"gemm": -1}), "value=-1"),
    (_doc(factors={"gemm": {"value": 1e9}}), "value=1000000000.0"),
    (_doc(factors={"gemm": {"value": 0.5, "colour": 1}}), "unknown field(s) colour"),
    (_doc(factors={"gemm": "fast"}), "expected a number or a mapping"),
    (_doc(factors=[1, 2]), "must map each factor"),
    (_doc(device=""), "device=''"),
    ([1, 2], "expected a mapping"),
])
def test_a_bad_calibration_is_one_line_naming_the_value(doc, words):
    with pytest.raises(BandwiseError) as err:
        calibration_from_dict(doc)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_file_round_trips(tmp_path):
    cal = Calibration(device="h100-sxm", engine="megatron", factors=(Factor(name="gemm", value=0.8, fitted_from="a run", residual=0.0,
                                                                           confounded_with=("attention",)),
                                                                    Factor(name="bandwidth.infiniband", value=0.5)),
                      levels_measured=("infiniband",), levels_datasheet=("nvlink",))
    path = tmp_path / "cal.yaml"
    path.write_text(cal.to_yaml())
    back = load_calibration(path)
    assert back.to_dict() == cal.to_dict() and back.path == str(path)


def test_factors_apply_where_the_cluster_and_pricing_are_resolved():
    """A level's bandwidth factor divides its collective's time: the closed form of a bandwidth-bound ring."""
    cluster = get_cluster("h100")
    cal = Calibration(device="h100-sxm", factors=(Factor(name="bandwidth.infiniband", value=0.5), Factor(name="gemm", value=0.8)))
    clus, params = calibrated(cluster, DEFAULT_PARAMS, cal)
    assert clus.levels[1].bandwidth == pytest.approx(cluster.levels[1].bandwidth / 2) and clus.levels[0].bandwidth == cluster.levels[0].bandwidth
    assert params.gemm_scale == 0.8 and params.attention_scale == 1.0
    assert datasheet_levels(cal, cluster) == ["nvlink"]
    # the data-parallel all-reduce of 16 replicas on two nodes: reduce-scatter over NVLink, all-reduce over
    # InfiniBand, all-gather over NVLink. With latency zeroed its time is A + B / f for an InfiniBand factor f,
    # so t(1/4) - t(1/2) = 2 (t(1/2) - t(1)), and B > 0
    model = get_model("llama3-8b")
    s = Strategy(dp_replicate=16, micro_batch=1, global_batch=16, overlap_dp=False)
    flat = cluster.with_level(0, latency=0.0).with_level(1, latency=0.0)

    def dp(f: float) -> float:
        clus, _ = calibrated(flat, DEFAULT_PARAMS, Calibration(device="h100-sxm", factors=(Factor(name="bandwidth.infiniband", value=f),)))
        return estimate(model, clus, s).comm_total_s["dp"]

    t1, t2, t4 = dp(1.0), dp(0.5), dp(0.25)
    assert t2 > t1 and t4 - t2 == pytest.approx(2 * (t2 - t1), rel=1e-6)


def test_a_calibration_is_refused_on_another_device_or_engine():
    cal = Calibration(device="tpu-v5p", factors=(Factor(name="gemm", value=0.8),))
    with pytest.raises(BandwiseError, match="measured on tpu-v5p"):
        calibrated(get_cluster("h100"), DEFAULT_PARAMS, cal)
    cal = Calibration(device="h100-sxm", engine="maxtext", factors=(Factor(name="gemm", value=0.8),))
    with pytest.raises(BandwiseError, match="use --engine maxtext"):
        calibrated(get_cluster("h100"), DEFAULT_PARAMS, cal, "megatron")
    cal = Calibration(device="h100-sxm", factors=(Factor(name="bandwidth.ici", value=0.8),))
    with pytest.raises(BandwiseError, match="not levels of cluster"):
        calibrated(get_cluster("h100"), DEFAULT_PARAMS, cal)


def test_one_run_fits_one_factor_that_reproduces_it_and_names_what_it_cannot_tell_apart():
    run = measured_runs(None, ["torchtitan_h100_t1_fsdp"])  # 8 GPUs: inside one NVLink domain
    cal = fit_runs(run)
    assert abs(predict_calibrated(run[0].case, cal).error) < 1e-3
    assert {f.value for f in cal.factors} == {cal.value("gemm")}
    assert "bandwidth.nvlink" in cal.by_name["gemm"].confounded_with
    assert cal.levels_measured == ("nvlink",) and cal.levels_datasheet == ("infiniband",)


def test_a_run_beyond_the_factor_range_is_fitted_at_the_range_edge_not_refused():
    """A measured speed no factor in the range reaches (1,000x the model's) is fitted at the edge, 100, and the
    calibration is written; exp(log(100)) is 100.00000000000004, which the file's range check refused."""
    run = measured_runs(None, ["torchtitan_h100_t1_fsdp"])[0]
    cal = fit_runs([Measured(case=run.case, tokens_per_s_per_device=run.tokens_per_s_per_device * 1000)])
    assert cal.value("gemm") == 100.0
    assert calibration_from_dict(yaml.safe_load(cal.to_yaml())).value("gemm") == 100.0


def test_runs_at_several_scales_recover_a_planted_network_factor():
    runs = measured_runs(None, ZERO3)
    assert reached(runs)[-1] == "infiniband"
    planted = Calibration(device=runs[0].case.cluster.device.name,
                          factors=(*(Factor(name=n, value=0.9) for n in ("gemm", "attention", "elementwise", "host_gap")),
                                   Factor(name="bandwidth.nvlink", value=0.9), Factor(name="bandwidth.infiniband", value=0.9 * 0.4)))
    measured = [Measured(case=m.case, tokens_per_s_per_device=predict_calibrated(m.case, planted).predicted) for m in runs]
    cal = fit_runs(measured)
    assert cal.value("gemm") == pytest.approx(0.9, rel=0.05)
    assert cal.value("bandwidth.infiniband") == pytest.approx(0.36, rel=0.1)
    assert cal.by_name["bandwidth.infiniband"].confounded_with == ()
    assert max(abs(predict_calibrated(m.case, cal).predicted / m.tokens_per_s_per_device - 1) for m in measured) < 0.01


def test_runs_of_one_device_and_engine_only():
    with pytest.raises(BandwiseError, match="one device and one engine"):
        fit_runs(measured_runs(None, ["torchtitan_h100_t1_fsdp", "maxtext_v5p_32b_1x128"]))


def test_plan_and_validate_say_they_are_calibrated(tmp_path):
    cal = Calibration(device="h100-sxm", factors=(Factor(name="gemm", value=0.5), Factor(name="bandwidth.nvlink", value=0.5)))
    path = tmp_path / "cal.yaml"
    path.write_text(cal.to_yaml())
    plain = api.estimate("llama3-8b", "h100", dp_shard=8, micro_batch=1, global_batch=8)
    slow = api.estimate("llama3-8b", "h100", dp_shard=8, micro_batch=1, global_batch=8, calibration=path)
    assert slow.layout.estimate.tokens_per_s_per_device < 0.75 * plain.layout.estimate.tokens_per_s_per_device
    doc = slow.to_dict()["calibration"]
    assert doc["levels_datasheet"] == ["infiniband"] and doc["file"] == str(path)
    assert "calibration" not in plain.to_dict()


def test_cli_calibrate_then_validate(tmp_path):
    out = tmp_path / "cal.yaml"
    cli = [sys.executable, "-m", "bandwise"]
    res = subprocess.run([*cli, "calibrate", "--run", "maxtext_v5p_64b_1x128", "--out", str(out), "--runs",
                          str(__import__("bandwise.plan.runs", fromlist=["x"]).default_runs_path())], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert yaml.safe_load(out.read_text())["device"] == "tpu-v5p"
    res = subprocess.run([*cli, "validate", "--source", "maxtext_tpu_tables", "--calibration", str(out), "--json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    doc = __import__("json").loads(res.stdout)
    one = next(r for r in doc["runs"] if r["id"] == "maxtext_v5p_64b_1x128")
    assert math.isclose(one["error"], 0.0, abs_tol=1e-3)
    bad = subprocess.run([*cli, "plan", "--calibration", str(tmp_path / "missing.yaml")], capture_output=True, text=True)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "no such file" in bad.stderr


def test_compare_applies_a_calibration_to_the_clusters_of_its_device_only(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text(Calibration(device="h100-sxm", factors=(Factor(name="gemm", value=0.5), Factor(name="attention", value=0.5))).to_yaml())
    kw = dict(devices=8, global_batch=8, engine="megatron")
    plain = api.compare("llama3-8b", "h100,a100-80g", **kw)
    slow = api.compare("llama3-8b", "h100,a100-80g", calibration=path, **kw)
    mfu = lambda r: [p.best.estimate.mfu for p in r.points]  # noqa: E731
    assert mfu(slow)[0] < 0.8 * mfu(plain)[0] and mfu(slow)[1] == mfu(plain)[1]
    assert slow.to_dict()["calibration"]["file"] == str(path)
    with pytest.raises(BandwiseError, match="none of the clusters"):
        api.compare("llama3-8b", "a100-80g", calibration=path, **kw)


def test_a_calibration_folded_into_cluster_and_engine_files_prices_as_the_file_does(tmp_path):
    from bandwise.cost.calibrated import folded_cluster, folded_engine
    from bandwise.specs.hardware import cluster_to_file_dict
    from bandwise.specs.registry import get_engine

    cal = Calibration(device="h100-sxm", engine="megatron", factors=(
        Factor(name="gemm", value=0.9), Factor(name="attention", value=0.7), Factor(name="elementwise", value=0.6),
        Factor(name="host_gap", value=0.5), Factor(name="bandwidth.infiniband", value=0.4)))
    (tmp_path / "cal.yaml").write_text(cal.to_yaml())
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster_to_file_dict(folded_cluster(get_cluster("h100"), cal))))
    (tmp_path / "engine.yaml").write_text(yaml.safe_dump(folded_engine(get_engine("megatron"), get_cluster("h100").device, cal).to_dict()))
    s = Strategy(dp_replicate=2, dp_shard=8, micro_batch=1, global_batch=16)
    with_file = api.estimate("llama3-8b", "h100", strategy=s, engine="megatron", calibration=tmp_path / "cal.yaml")
    folded = api.estimate("llama3-8b", str(tmp_path / "cluster.yaml"), strategy=s, engine=str(tmp_path / "engine.yaml"))
    assert folded.layout.estimate.step_time_s == pytest.approx(with_file.layout.estimate.step_time_s, rel=1e-9)
    with pytest.raises(BandwiseError, match="past 1"):
        folded_cluster(get_cluster("h100"), Calibration(device="h100-sxm", factors=(Factor(name="gemm", value=1.5),)))


def test_the_page_shows_each_factor_against_its_preset():
    import re

    from bandwise.cost.calibrated import preset_figures
    from bandwise.report.calibration_page import calibration_page

    cal = Calibration(device="h100-sxm", factors=(Factor(name="gemm", value=0.9, residual=0.01), Factor(name="host_gap", value=0.5),
                                                  Factor(name="bandwidth.infiniband", value=0.4)))
    cluster = get_cluster("h100")
    figures = preset_figures(cal, cluster, DEFAULT_PARAMS)
    assert figures["gemm"][2] == pytest.approx(cluster.device.gemm_efficiency * 0.9)
    assert figures["host_gap"][2] == pytest.approx(DEFAULT_PARAMS.kernel_gap_s / 0.5)
    assert figures["bandwidth.infiniband"][2] == pytest.approx(cluster.levels[1].effective_bandwidth * 0.4)  # what the plan prices
    html = calibration_page(cal.to_dict(), figures)
    shown = dict(re.findall(r'data-json="factors\.([^"]+)\.value" data-value="([^"]+)"', html))
    assert {k: float(v) for k, v in shown.items()} == {f.name: f.value for f in cal.factors}
    assert "<svg" in html


@pytest.mark.parametrize("args, words", [
    ((), "calibrate needs evidence"),
    (("--runs", "x.yaml", "--bench"), "one kind of evidence"),
    (("--runs", "NOSUCH.yaml"), "no such file"),
    (("--run", "no-such-run", "--runs", "SHIPPED"), "--run 'no-such-run'"),
    (("--bench", "--cluster", "h100"), "run it under torchrun"),
    (("trace.json", "--model", "debug"), "needs the job's layout"),
    (("--runs", "log.txt", "--strategy", "plan.json"), "needs the job's --model"),
    (("trace.json", "--strategy", "plan.json"), "needs the job's --model"),
])
def test_calibrate_refuses_bad_input_in_one_line(capsys, args, words):
    from entry import in_process

    from bandwise.plan.runs import default_runs_path

    args = tuple(str(default_runs_path()) if a == "SHIPPED" else a for a in args)
    res = in_process(capsys, "calibrate", *args)
    assert res.returncode == 2 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


LONGSEQ = ["mds_longseq_gpt30b_tp32_2k_new", "mds_longseq_gpt30b_tp32_8k_new", "mds_longseq_gpt30b_tp32_32k_new", "mds_longseq_gpt30b_tp32_128k_new"]


def test_runs_at_several_sequence_lengths_tell_attention_apart_and_say_so():
    """DeepSpeed-Ulysses' GPT 30B at 2k to 128k tokens, "measured" by the model under a planted stack speed 0.9
    and attention at half of it: attention's share grows with the sequence, so the runs identify it apart
    from the speed; one of the runs alone identifies the speed only."""
    runs = measured_runs(None, LONGSEQ)
    planted = Calibration(device=runs[0].case.cluster.device.name,
                          factors=(*(Factor(name=n, value=0.9) for n in ("gemm", "elementwise", "host_gap")), Factor(name="attention", value=0.45),
                                   *(Factor(name=f"bandwidth.{lv}", value=0.9) for lv in reached(runs))))
    measured = [Measured(case=m.case, tokens_per_s_per_device=predict_calibrated(m.case, planted).predicted) for m in runs]
    cal = fit_runs(measured)
    assert cal.value("attention") == pytest.approx(0.45, rel=0.1), cal.to_dict()
    assert cal.value("gemm") == pytest.approx(0.9, rel=0.1)
    assert cal.by_name["attention"].confounded_with == () and "attention" not in cal.by_name["gemm"].confounded_with
    assert max(abs(predict_calibrated(m.case, cal).predicted / m.tokens_per_s_per_device - 1) for m in measured) < 0.02
    one = fit_runs(measured[:1])
    assert "attention" in one.by_name["gemm"].confounded_with and one.value("attention") == one.value("gemm")


def test_train_dry_run_prices_its_layout_under_a_calibration(tmp_path, capsys):
    """`train --dry-run --calibration`: the planner's step of the layout as the trainer runs it moves with the
    factors and says which file; a training run (no --dry-run) refuses the option in one line."""
    from bandwise.cli.dry_run import planner_time
    from bandwise.cli.main import main

    cal = Calibration(device="h100-sxm", factors=(Factor(name="gemm", value=0.5),))
    s = Strategy(dp_shard=8, micro_batch=1, global_batch=8)
    spec = get_model("llama3-8b")
    plain, slow = planner_time(spec, s, "h100", None), planner_time(spec, s, "h100", cal)
    assert slow["step_s"] > 1.3 * plain["step_s"] and "calibration" not in plain and "gemm x0.5" in slow["calibration"]
    path = tmp_path / "cal.yaml"
    path.write_text(cal.to_yaml())
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", "debug", "--steps", "1", "--calibration", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "--dry-run" in err
