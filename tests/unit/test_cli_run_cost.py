"""`--tokens` on the planning commands: the time, cost and energy columns and the JSON against the
closed forms of a run, and bad input as one line."""

from __future__ import annotations

import math

import pytest
from entry import in_process, json_of

from bandwise.specs.operations import LLAMA3_FAILURE_RATE

SMALL = ("-m", "llama3-8b", "-n", "16", "--global-batch-tokens", str(2**20))


def _closed_form(run: dict, devices: int, price: float) -> None:
    """days, device-hours, cost and energy from the step, the goodput and the power, by hand."""
    steps = math.ceil(run["tokens"] / run["tokens_per_step"])
    assert run["steps"] == steps
    g = run["goodput"]
    mttf = 3600 / (LLAMA3_FAILURE_RATE * devices)
    assert g["mttf_s"] == pytest.approx(mttf)
    d, tau, restart = g["checkpoint_s"], g["interval_s"], g["restart_s"]
    ettr = tau / (mttf * math.exp(restart / mttf) * math.expm1((tau + d) / mttf))
    wall = steps * run["step_time_s"] / ettr
    assert run["days"] == pytest.approx(wall / 86400)
    assert run["device_hours"] == pytest.approx(wall * devices / 3600)
    assert run["cost"] == pytest.approx(wall * devices / 3600 * price)
    if run["device_power_w"] is not None:  # PUE 1.1, 575 W of host per device, no network by default
        assert run["energy_kwh"] == pytest.approx((run["device_power_w"] + 575) * devices * 1.1 * wall / 3.6e6)


def test_plan_and_estimate_json_carry_the_run(capsys):
    doc = json_of(capsys, "plan", *SMALL, "--tokens", "1T", "--price", "$2.10/h", "--json")
    _closed_form(doc["run"], 16, 2.10)
    est = json_of(capsys, "estimate", "-m", "llama3-8b", "--dp-shard", "16", "--global-batch", "128", "--steps", "1000", "--price", "3", "--json")
    assert est["run"]["steps"] == 1000 and est["run"]["tokens"] == 1000 * 128 * 8192
    _closed_form(est["run"], 16, 3.0)


def test_compare_prints_time_cost_and_energy_columns_that_match_its_json(capsys):
    args = ("compare", *SMALL, "-c", "h100,h200", "--tokens", "2T", "--price", "2")
    doc = json_of(capsys, *args, "--json")
    for name in ("h100", "h200"):
        _closed_form(doc["runs"][name], 16, 2.0)
    fastest = min(doc["runs"], key=lambda k: doc["runs"][k]["wall_s"])
    assert fastest in doc["frontier"]
    text = in_process(capsys, *args).stdout
    assert "days" in text and "device-h" in text and "MWh" in text
    row = [line for line in text.splitlines() if line.startswith("h100")][-1]  # the run table comes after the layouts
    assert f"{doc['runs']['h100']['days']:.1f}" in row


def test_sweep_prices_each_point(capsys):
    doc = json_of(capsys, "sweep", "--vary", "scale-out-bandwidth=25,50", *SMALL, "--tokens", "1T", "--price", "2", "--json")
    assert len(doc["runs"]) == 2
    for run in doc["runs"].values():
        _closed_form(run, 16, 2.0)


@pytest.mark.parametrize(("args", "words"), [
    (("--tokens=-15T",), "above zero"), (("--tokens", "15X"), "units"), (("--tokens", "1T", "--price", "0"), "above zero"),
    (("--price", "2"), "--tokens"), (("--tokens", "1T", "--price", "2 EUR"), "price per device-hour"),
])
def test_bad_run_input_is_one_line(capsys, args, words):
    result = in_process(capsys, "plan", *SMALL, *args)
    assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_cluster_file_with_pue_below_one_is_one_line(capsys, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("device: h100-sxm\nlevels:\n  - {name: nvlink, size: 8, bandwidth_bytes_per_s: 450.0e+9, latency_s: 3.4e-6}\n"
                    "  - {name: ib, size: 0, bandwidth_bytes_per_s: 50.0e+9, latency_s: 14.0e-6}\noperations: {pue: 0.95}\n")
    result = in_process(capsys, "plan", *SMALL, "-c", str(path), "--tokens", "1T")
    assert result.returncode == 2 and "pue=0.95" in result.stderr


def test_a_cluster_file_price_is_used_and_round_trips(capsys, tmp_path):
    from bandwise.specs.registry import cluster_file_text, get_cluster

    path = tmp_path / "priced.yaml"
    base = cluster_file_text(get_cluster("h100"))
    path.write_text(base + "operations:\n  price_per_device_hour: 2.5\n  pue: 1.3\n")
    doc = json_of(capsys, "plan", *SMALL, "-c", str(path), "--tokens", "1T", "--json")
    assert doc["run"]["price_per_device_hour"] == 2.5
    again = get_cluster(str(path))
    assert "price_per_device_hour: 2.5" in cluster_file_text(again)


def test_an_exported_job_states_the_run_predicted_time(capsys):
    doc = json_of(capsys, "plan", *SMALL, "-e", "torchtitan", "--tokens", "1T", "--json")
    job = in_process(capsys, "plan", *SMALL, "-e", "torchtitan", "--tokens", "1T", "--emit").stdout
    line = job.splitlines()[1]
    assert line.startswith("# run:") and f"{doc['run']['days']:.1f} days predicted" in line
    assert "# run:" not in in_process(capsys, "plan", *SMALL, "--emit", "torchtitan").stdout


def test_doctor_turns_each_finding_gain_into_hours_and_money(capsys):
    from pathlib import Path

    traces = str(Path(__file__).parents[1] / "data" / "traces" / "resnet50-dataloader")
    doc = json_of(capsys, "doctor", "trace", traces, "--tokens", "1T", "--tokens-per-step", str(2**22), "--devices", "8", "--price", "2", "--json")
    step_s = max(r["step_ms"] for r in doc["signals"]["per_rank"]) / 1e3
    hours = math.ceil(1e12 / 2**22) * step_s / 3600
    assert doc["run"]["hours"] == pytest.approx(hours)
    speedups = {f["id"]: f["expected_speedup"] for f in doc["findings"] if f["expected_speedup"]}
    assert speedups and {g["finding"] for g in doc["run"]["gains"]} == set(speedups)
    for g in doc["run"]["gains"]:
        saved = hours * (1 - 1 / speedups[g["finding"]])
        assert g["hours_saved"] == pytest.approx(saved) and g["money_saved"] == pytest.approx(saved * 8 * 2)
    bad = in_process(capsys, "doctor", "trace", traces, "--price", "2")
    assert bad.returncode == 2 and "--tokens" in bad.stderr


def test_sweep_over_device_counts_prices_each_and_marks_the_frontier(capsys):
    doc = json_of(capsys, "sweep", "--vary", "devices=16,32", "-m", "llama3-8b", "--global-batch-tokens", str(2**21), "--tokens", "1T",
                  "--price", "2", "--json")
    assert doc["values"] == [16, 32] and set(doc["runs"]) == {"16", "32"}
    for n in (16, 32):
        _closed_form(doc["runs"][str(n)], n, 2.0)
    fastest = min(doc["runs"], key=lambda k: doc["runs"][k]["wall_s"])
    cheapest = min(doc["runs"], key=lambda k: doc["runs"][k]["cost"])
    assert {fastest, cheapest} <= set(doc["frontier"])
    bad = in_process(capsys, "sweep", "--vary", "devices=16,32", "-m", "llama3-8b")
    assert bad.returncode == 2 and "--tokens" in bad.stderr
    bad = in_process(capsys, "sweep", "--vary", "devices=16,x", "-m", "llama3-8b", "--tokens", "1T")
    assert bad.returncode == 2 and "whole numbers" in bad.stderr


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_a_device_sweep_point_is_the_plan_of_that_count_with_every_option(recipe, capsys):
    """Each point of `--vary devices=...` is `bandwise plan` at that count with the same options, the float8
    recipe among them; what plan does not take (--overlap-ep) is refused in one line, not dropped."""
    args = ("-m", "llama3-8b", "--global-batch-tokens", str(2**21), "--tokens", "1T", "--precision", "fp8", "--fp8-recipe", recipe, "--json")
    swept = json_of(capsys, "sweep", "--vary", "devices=16", *args)
    planned = json_of(capsys, "plan", "--devices", "16", *args)
    assert swept["runs"]["16"]["wall_s"] == pytest.approx(planned["run"]["wall_s"])
    bad = in_process(capsys, "sweep", "--vary", "devices=16", *args[:-1], "--overlap-ep")
    assert bad.returncode == 2 and "--overlap-ep" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_several_devices_sweep_the_device_count_as_vary_devices(capsys):
    """`sweep --devices 16,32 --tokens ...` is `--vary devices=16,32`, as people write it; a bad count or both at
    once is one line."""
    args = ("-m", "llama3-8b", "--global-batch-tokens", str(2**21), "--tokens", "1T", "--price", "2", "--json")
    assert json_of(capsys, "sweep", "--devices", "16,32", *args) == json_of(capsys, "sweep", "--vary", "devices=16,32", *args)
    for argv, words in ((("--devices", "16,32", "--vary", "scale-up-size=8,16"), "give one of them"),
                        (("--devices", "sixteen", "--vary", "scale-up-size=8,16"), "is not a device count"),
                        (("--devices", "16"), "nothing to vary")):
        bad = in_process(capsys, "sweep", "-m", "llama3-8b", *argv)
        assert bad.returncode == 2 and words in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
