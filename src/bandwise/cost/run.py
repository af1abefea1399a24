"""A step priced as a whole run: time, device-hours, money, energy, and the goodput lost to failures.

Goodput (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps",
Future Generation Computer Systems 22(3)): interruptions arrive at random, at a job rate of
devices x the per-device rate (mean time to interruption M); the job writes a checkpoint of δ seconds
after every τ seconds of work; an interruption loses the work since the last checkpoint and costs a
restart of R seconds, which an interruption may itself cut short. A segment of τ + δ then takes

    E = M · e^(R/M) · (e^((τ+δ)/M) - 1)

in expectation, exactly, and the effective training time ratio (ETTR, Kokolis et al. 2024, arXiv
2410.21680) is τ / E. The interval that maximises it is close to Daly's

    τ = sqrt(2δM) · (1 + sqrt(δ/2M)/3 + (δ/2M)/9) - δ     for δ < 2M, else τ = M

which is Young's sqrt(2δM) (Young 1974, CACM 17(9)) to first order. Both are checked against a
simulation of failures and checkpoints in tests/unit/test_run_cost.py.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from bandwise.cost.flops import BF16
from bandwise.cost.memory import MASTER_WEIGHT_BYTES
from bandwise.cost.results import Estimate
from bandwise.errors import BandwiseError
from bandwise.specs.hardware import Device
from bandwise.specs.operations import Operations

BUSY_TERMS = ("compute", "recompute", "contention", "optimizer")
"""Step-time terms during which the device's compute units run kernels; in the others (exposed
communication, pipeline bubble) they wait, and the device draws its static power."""


def job_mttf_s(rate_per_device_hour: float, devices: int) -> float:
    """Mean seconds between interruptions of a job on `devices` devices (inf at a zero rate)."""
    rate = rate_per_device_hour * devices / 3600.0
    return math.inf if rate == 0 else 1.0 / rate


def daly_interval(checkpoint_s: float, mttf_s: float) -> float:
    """Daly's higher-order optimum seconds of work between checkpoints; inf without failures."""
    if math.isinf(mttf_s):
        return math.inf
    if checkpoint_s >= 2 * mttf_s:
        return mttf_s
    x = checkpoint_s / (2 * mttf_s)
    return math.sqrt(2 * checkpoint_s * mttf_s) * (1 + math.sqrt(x) / 3 + x / 9) - checkpoint_s


def young_interval(checkpoint_s: float, mttf_s: float) -> float:
    """Young's first-order interval, sqrt(2δM)."""
    return math.sqrt(2 * checkpoint_s * mttf_s)


def segment_s(interval_s: float, checkpoint_s: float, restart_s: float, mttf_s: float) -> float:
    """Expected wall seconds to get `interval_s` of work and its checkpoint done (Daly's exact expectation)."""
    if math.isinf(mttf_s):
        return interval_s + checkpoint_s
    return mttf_s * math.exp(restart_s / mttf_s) * math.expm1((interval_s + checkpoint_s) / mttf_s)


def ettr(interval_s: float, checkpoint_s: float, restart_s: float, mttf_s: float) -> float:
    """Effective training time ratio: useful seconds over wall seconds."""
    if math.isinf(interval_s):
        return 1.0
    return interval_s / segment_s(interval_s, checkpoint_s, restart_s, mttf_s)


def checkpoint_bytes(total_params: float, moment_bytes: float) -> float:
    """One copy of the training state a checkpoint writes: bf16 weights, the fp32 master copy and
    two Adam moments (the memory model's model states, ZeRO Sec. 3.1, less the gradients)."""
    return total_params * (BF16 + MASTER_WEIGHT_BYTES + 2 * moment_bytes)


@dataclass(kw_only=True, slots=True, frozen=True)
class Goodput:
    """What a job of this size loses to interruptions, checkpoints and restarts."""

    mttf_s: float
    """Mean seconds between the job's interruptions."""
    checkpoint_bytes: float
    checkpoint_s: float
    """Seconds training stalls for each checkpoint."""
    interval_s: float
    """Seconds of work between checkpoints (Daly's optimum)."""
    restart_s: float
    ettr: float
    """Effective training time ratio: useful over wall time."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def goodput(devices: int, state_bytes: float, dp_replicate: int, ops: Operations) -> Goodput:
    """The goodput of a job on `devices` devices holding `state_bytes` of training state.

    A synchronous checkpoint stalls until storage has it all (state / the storage's bandwidth) or,
    if slower, until each device's share has crossed to its host; an asynchronous one stalls only for
    that copy (the write to storage then lags it, which this leaves out: a failure in that window loses
    one interval more). Each model replica holds the whole state, so a device's share is state · dp_replicate / devices."""
    share = state_bytes * max(dp_replicate, 1) / devices
    copy_s = share / ops.host_copy_bytes_per_s
    delta = copy_s if ops.checkpoint_async else max(copy_s, state_bytes / ops.checkpoint_write_bytes_per_s)
    mttf = job_mttf_s(ops.failure_rate_per_device_hour, devices)
    tau = daly_interval(delta, mttf)
    return Goodput(mttf_s=mttf, checkpoint_bytes=state_bytes, checkpoint_s=delta, interval_s=tau, restart_s=ops.restart_s,
                   ettr=ettr(tau, delta, ops.restart_s, mttf))


def busy_share(est: Estimate) -> float:
    """Share of the step in which the device's compute units run (`BUSY_TERMS`)."""
    if est.step_time_s <= 0:
        return 0.0
    return min(1.0, sum(est.breakdown.get(k, 0.0) for k in BUSY_TERMS) / est.step_time_s)


def device_power(device: Device, est: Estimate, ops: Operations) -> tuple[float | None, str]:
    """Average watts per device while training, and where the figure comes from.

    Under its power limit a chip running GEMMs draws that limit (its clock falls to hold it); with
    its compute units idle it draws the curve's static watts (`PowerCurve`: power is linear in the
    busy SMs, intercept static_w). Over a step it draws static_w + (rated_w - static_w) x the busy share."""
    if ops.device_power_w is not None:
        return ops.device_power_w, "the cluster file's device_power_w"
    curve = device.power_curve
    if curve is None:
        return None, f"{device.name} has no power curve; give operations.device_power_w in a cluster file"
    share = busy_share(est)
    return curve.static_w + (curve.rated_w - curve.static_w) * share, f"the power curve at a busy share of {share:.0%}"


@dataclass(kw_only=True, slots=True, frozen=True)
class RunCost:
    """One layout's step, repeated for a whole run."""

    tokens: float
    steps: int
    tokens_per_step: float
    step_time_s: float
    devices: int
    train_s: float
    """Seconds of steps alone: steps x step time."""
    goodput: Goodput
    wall_s: float
    """Seconds from start to end: train_s / ETTR."""
    device_hours: float
    price_per_device_hour: float | None
    cost: float | None
    device_power_w: float | None
    power_source: str
    facility_power_w: float | None
    """Watts the whole job draws at the wall of the facility: (device + host + network) x devices x PUE."""
    energy_kwh: float | None
    carbon_t: float | None
    """Tonnes of CO2-equivalent, where the cluster gives its grid's g/kWh."""

    @property
    def days(self) -> float:
        return self.wall_s / 86400.0

    @property
    def interruptions(self) -> float:
        """Expected interruptions over the run."""
        return 0.0 if math.isinf(self.goodput.mttf_s) else self.wall_s / self.goodput.mttf_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "days": self.days, "interruptions": self.interruptions}


def run_cost(est: Estimate, *, device: Device, devices: int, tokens_per_step: float, state_bytes: float, dp_replicate: int,
             ops: Operations, tokens: float | None = None, steps: int | None = None, price: float | None = None) -> RunCost:
    """`tokens` (or `steps`) trained at `est`'s step: wall time, device-hours, cost and energy.

    steps = ceil(tokens / tokens per step); wall = steps x step time / ETTR; device-hours = wall x
    devices; cost = device-hours x price (`price`, else the cluster's); energy = wall x devices x
    (device + host + network watts) x PUE, every wall second at the training step's power."""
    if (tokens is None) == (steps is None):
        raise BandwiseError("give the run's length once: --tokens (e.g. 15T) or --steps")
    if steps is not None:
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise BandwiseError(f"--steps={steps!r} must be a positive whole number")
        tokens = steps * tokens_per_step
    else:
        steps = math.ceil(tokens / tokens_per_step)
    gp = goodput(devices, state_bytes, dp_replicate, ops)
    train_s = steps * est.step_time_s
    wall_s = train_s / gp.ettr
    device_hours = wall_s * devices / 3600.0
    price = price if price is not None else ops.price_per_device_hour
    watts, source = device_power(device, est, ops)
    facility = None if watts is None else (watts + ops.host_power_w_per_device + ops.network_power_w_per_device) * devices * ops.pue
    energy = None if facility is None else facility * wall_s / 3.6e6
    carbon = None if energy is None or ops.carbon_g_per_kwh is None else energy * ops.carbon_g_per_kwh / 1e6
    return RunCost(tokens=float(tokens), steps=steps, tokens_per_step=tokens_per_step, step_time_s=est.step_time_s, devices=devices,
                   train_s=train_s, goodput=gp, wall_s=wall_s, device_hours=device_hours, price_per_device_hour=price,
                   cost=None if price is None else device_hours * price, device_power_w=watts, power_source=source,
                   facility_power_w=facility, energy_kwh=energy, carbon_t=carbon)


@dataclass(kw_only=True, slots=True, frozen=True)
class Gain:
    """What a fix with a measured step-throughput gain saves over a whole run at the measured step."""

    finding: str
    speedup: float
    hours_saved: float
    """Wall-clock hours: run hours x (1 - 1 / speedup)."""
    device_hours_saved: float
    money_saved: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_gains(speedups: dict[str, float], *, step_s: float, tokens: float, tokens_per_step: float, devices: int,
              price: float | None) -> tuple[float, list[Gain]]:
    """The run's hours at the measured `step_s`, and each finding's saving: a fix that makes the step
    `speedup` times faster shortens every step, so the run by 1 - 1/speedup of its time (goodput aside)."""
    if not (step_s > 0 and tokens_per_step > 0):
        raise BandwiseError("the trace measured no step time, or the tokens per step are unknown: give --tokens-per-step, or --strategy")
    hours = math.ceil(tokens / tokens_per_step) * step_s / 3600
    gains = []
    for finding, s in speedups.items():
        saved = hours * (1 - 1 / s)
        gains.append(Gain(finding=finding, speedup=s, hours_saved=saved, device_hours_saved=saved * devices,
                          money_saved=None if price is None else saved * devices * price))
    return hours, gains
