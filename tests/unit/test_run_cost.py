"""A whole run's time, cost, energy and goodput: Daly's closed forms against a brute-force simulation
of failures and checkpoints, the run's figures against their closed forms, and Llama 3's statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bandwise.cost.results import Estimate
from bandwise.cost.run import (
    checkpoint_bytes,
    daly_interval,
    ettr,
    goodput,
    job_mttf_s,
    run_cost,
    young_interval,
)
from bandwise.errors import BandwiseError
from bandwise.plan.run_budget import frontier, run_ask
from bandwise.specs.operations import LLAMA3_FAILURE_RATE, Operations, operations_from_dict
from bandwise.specs.registry import get_cluster
from bandwise.specs.units import parse_price, parse_tokens


def simulate(work: float, tau: float, delta: float, restart: float, mttf: float, rng: np.random.Generator) -> float:
    """Wall seconds to finish `work`: a checkpoint of `delta` after each `tau` of work; an interruption
    (exponential, mean `mttf`) loses the work since the last checkpoint and needs `restart` seconds
    free of interruptions before work goes on. Walked event by event, no formula used."""
    t, done, fail = 0.0, 0.0, rng.exponential(mttf)
    while done < work:
        seg = min(tau, work - done)
        if t + seg + delta <= fail:
            t += seg + delta
            done += seg
            continue
        t, fail = fail, fail + rng.exponential(mttf)
        while t + restart > fail:  # interrupted while restarting: start the restart again
            t, fail = fail, fail + rng.exponential(mttf)
        t += restart
    return t


def test_daly_ettr_matches_a_simulation_of_failures_and_checkpoints():
    rng = np.random.default_rng(7)
    mttf, delta, restart, work = 1.0, 0.01, 0.05, 3000.0
    tau = daly_interval(delta, mttf)
    simulated = work / simulate(work, tau, delta, restart, mttf, rng)
    # ~3,500 interruptions: the simulated ratio's spread is well under 0.5%
    assert simulated == pytest.approx(ettr(tau, delta, restart, mttf), rel=0.01)


def test_daly_interval_is_where_a_brute_force_search_of_simulated_runs_peaks():
    rng = np.random.default_rng(11)
    mttf, delta, restart, work = 1.0, 0.02, 0.05, 2000.0
    grid = np.linspace(0.05, 0.6, 12)
    best = max(work / simulate(work, t, delta, restart, mttf, rng) for t in grid)
    at_daly = work / simulate(work, daly_interval(delta, mttf), delta, restart, mttf, rng)
    assert at_daly >= best - 0.01
    # and on the exact expectation, no interval on a fine grid beats Daly's by more than 0.1%
    fine = np.linspace(0.01, 1.0, 2000)
    assert max(ettr(t, delta, restart, mttf) for t in fine) <= ettr(daly_interval(delta, mttf), delta, restart, mttf) * 1.001


def test_daly_reduces_to_young_when_checkpoints_are_short_and_caps_at_mttf():
    assert daly_interval(1.0, 1e6) == pytest.approx(young_interval(1.0, 1e6), rel=2e-3)
    assert daly_interval(5.0, 2.0) == 2.0
    assert daly_interval(1.0, math.inf) == math.inf and ettr(math.inf, 1.0, 1.0, math.inf) == 1.0


def test_llama3_interruption_statistics_and_effective_training_time():
    # Dubey et al. 2024, Sec. 3.3.4: 419 unexpected interruptions in 54 days on 16,384 H100s
    assert 54 * 86400 / job_mttf_s(LLAMA3_FAILURE_RATE, 16_384) == pytest.approx(419)
    # ... and "higher than 90% effective training time" for 405B: its bf16 weights, fp32 master and moments
    state = checkpoint_bytes(405.9e9, 4)
    big = goodput(16_384, state, 128, Operations())
    assert 0.90 < big.ettr < 0.95
    # a 1,024-GPU job barely sees failures: 16 times the MTTF
    small = goodput(1_024, state, 8, Operations())
    assert small.mttf_s == pytest.approx(16 * big.mttf_s) and small.ettr > 0.97


def _estimate(step: float = 2.0, compute: float = 1.5) -> Estimate:
    breakdown = dict.fromkeys(("compute", "recompute", "contention", "bubble", "tp", "cp", "ep", "fsdp", "dp", "pp", "optimizer"), 0.0)
    breakdown.update(compute=compute, dp=step - compute)
    return Estimate(step_time_s=step, tokens_per_s_per_device=1.0, mfu=0.4, hfu=0.4, memory_gib_per_device=10.0, fits=True, breakdown=breakdown)


def test_run_figures_match_their_closed_forms():
    cluster = get_cluster("h100")
    ops = Operations(price_per_device_hour=2.5, pue=1.2, host_power_w_per_device=300.0, network_power_w_per_device=50.0, carbon_g_per_kwh=400.0)
    est, devices, per_step, state = _estimate(), 1024, 4 * 2**20, 1e12
    run = run_cost(est, device=cluster.device, devices=devices, tokens_per_step=per_step, state_bytes=state, dp_replicate=1, ops=ops, tokens=15e12)
    steps = math.ceil(15e12 / per_step)
    assert run.steps == steps
    mttf = 3600 / (LLAMA3_FAILURE_RATE * devices)
    delta = max(state / 2e12, state / devices / ops.host_copy_bytes_per_s)
    tau = math.sqrt(2 * delta * mttf) * (1 + math.sqrt(delta / (2 * mttf)) / 3 + delta / (2 * mttf) / 9) - delta
    e = tau / (mttf * math.exp(600 / mttf) * (math.exp((tau + delta) / mttf) - 1))
    wall = steps * 2.0 / e
    assert run.wall_s == pytest.approx(wall) and run.days == pytest.approx(wall / 86400)
    assert run.device_hours == pytest.approx(wall * devices / 3600)
    assert run.cost == pytest.approx(wall * devices / 3600 * 2.5)
    curve = cluster.device.power_curve
    watts = curve.static_w + (curve.rated_w - curve.static_w) * 0.75  # busy 1.5 s of a 2 s step
    assert run.device_power_w == pytest.approx(watts)
    kwh = (watts + 350.0) * devices * 1.2 * wall / 3.6e6
    assert run.energy_kwh == pytest.approx(kwh) and run.carbon_t == pytest.approx(kwh * 400 / 1e6)
    by_steps = run_cost(est, device=cluster.device, devices=devices, tokens_per_step=per_step, state_bytes=state, dp_replicate=1, ops=ops, steps=10)
    assert by_steps.tokens == 10 * per_step and by_steps.train_s == 20.0


def test_a_device_without_a_power_curve_has_no_energy_unless_its_file_gives_watts():
    tpu = get_cluster("tpu-v5p")
    kw = dict(devices=256, tokens_per_step=2**20, state_bytes=1e11, dp_replicate=1, tokens=1e12)
    assert run_cost(_estimate(), device=tpu.device, ops=Operations(), **kw).energy_kwh is None
    assert run_cost(_estimate(), device=tpu.device, ops=Operations(device_power_w=400.0), **kw).energy_kwh > 0


def test_async_checkpoint_stalls_only_for_the_host_copy():
    sync = goodput(1024, 1e13, 1, Operations())
    asynchronous = goodput(1024, 1e13, 1, Operations(checkpoint_async=True))
    assert sync.checkpoint_s == pytest.approx(5.0)
    assert asynchronous.checkpoint_s == pytest.approx(1e13 / 1024 / Operations().host_copy_bytes_per_s)
    assert asynchronous.ettr > sync.ettr


@pytest.mark.parametrize(("text", "value"), [("15T", 15e12), ("1.5e13", 1.5e13), ("400B", 4e11), ("2,000,000", 2e6), ("15 T tokens", 15e12),
                                             ("3.5k", 3500.0), (1e9, 1e9)])
def test_token_counts_read_as_people_write_them(text, value):
    assert parse_tokens(text) == value


@pytest.mark.parametrize(("text", "value"), [("$2.10/h", 2.10), ("2.1", 2.1), ("$2/GPU-hour", 2.0), ("1.85 /hr", 1.85), ("$3/device-hour", 3.0)])
def test_prices_read_as_people_write_them(text, value):
    assert parse_price(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["-15T", "0", "15X", "abc", "inf", "1e19", ""])
def test_bad_token_counts_are_one_line_errors(text):
    with pytest.raises(BandwiseError, match="--tokens"):
        parse_tokens(text)


@pytest.mark.parametrize("text", ["0", "$0/h", "-2", "2 EUR", "2/day", "nan"])
def test_bad_prices_are_one_line_errors(text):
    with pytest.raises(BandwiseError, match="--price"):
        parse_price(text)


def test_run_ask_refuses_a_price_without_a_run_and_two_lengths():
    assert run_ask() is None
    with pytest.raises(BandwiseError, match="--tokens"):
        run_ask(price="2")
    with pytest.raises(BandwiseError, match="give one"):
        run_ask(tokens="1T", steps=10)
    with pytest.raises(BandwiseError, match="--steps"):
        run_ask(steps=0)


@pytest.mark.parametrize(("field", "value", "match"), [("pue", 0.9, "pue"), ("price_per_device_hour", 0, "price"),
                                                        ("failure_rate_per_device_hour", -1, "failure_rate"), ("restart_s", "x", "restart_s")])
def test_bad_operations_fields_name_themselves(field, value, match):
    with pytest.raises(BandwiseError, match=match):
        operations_from_dict({field: value}, "cluster 'x'")
    with pytest.raises(BandwiseError, match="unknown field"):
        operations_from_dict({"pue_ratio": 1.2}, "cluster 'x'")


def test_frontier_keeps_runs_no_other_beats_in_both_time_and_cost():
    cluster = get_cluster("h100")
    kw = dict(device=cluster.device, tokens_per_step=2**22, state_bytes=1e12, dp_replicate=1, tokens=1e12)
    fast = run_cost(_estimate(1.0, 0.9), devices=2048, ops=Operations(price_per_device_hour=4.0), **kw)
    cheap = run_cost(_estimate(2.0, 1.9), devices=1024, ops=Operations(price_per_device_hour=1.0), **kw)
    worse = run_cost(_estimate(2.0, 1.9), devices=1024, ops=Operations(price_per_device_hour=5.0), **kw)
    assert frontier({"fast": fast, "cheap": cheap, "worse": worse, "none": None}) == {"fast", "cheap"}
