"""Fit a calibration from measured runs: the factors the runs can identify, and no more.

Each run is a `plan.runs.Case` (a layout of known degrees on a cluster, priced as its engine) with
its measured tokens/s per device. The fit works in log space, where a factor is a shift:

- one run identifies one factor: the stack's speed, every term's factor at one value (`gemm`,
  `attention`, `elementwise`, `host_gap` and each level's bandwidth), solved so that the plan
  reproduces the run. A throughput cannot tell the terms apart; scaling compute alone would amplify
  the run's error onto runs whose compute weighs more (on the shipped runs it did: p90 22.8% against
  19.2% for the uniform factor, benchmarks/RESULTS.md, "Calibration");
- runs whose communication weighs differently (several scales across the network) identify a second,
  the bandwidth of the outermost level they cross relative to the rest, by least squares
  (Gauss-Newton on log(predicted / measured), the Jacobian by finite differences; Nocedal & Wright,
  Numerical Optimization, Sec. 10.3). Where the Jacobian's two columns are too alike (their angle
  under `MIN_ANGLE`) or the bandwidth moves no run by `MIN_SENSITIVITY`, only the speed is fitted
  and the bandwidth is named as not identified.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bandwise.cost.params import DEFAULT_PARAMS, CostParams
from bandwise.errors import BandwiseError
from bandwise.plan.run_logs import logged_case
from bandwise.plan.runs import Case, convert, load_runs
from bandwise.plan.validate import RunResult, predict_with
from bandwise.specs.calibration import BANDWIDTH, FACTOR_RANGE, TERM_FACTORS, Calibration, Factor
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec, clip
from bandwise.specs.strategy import Strategy

MIN_SENSITIVITY = 0.02
"""Least d log(tokens/s) / d log(bandwidth) over the runs for a bandwidth factor to be fitted: below it
a 2x error in the bandwidth moves no run's throughput by 1.4%, less than a measurement's noise."""
MIN_ANGLE = math.radians(3.0)
"""Least angle between the Jacobian's columns of the stack's speed (every run moves alike) and of the
level's bandwidth: closer, the runs cannot tell a slow network from a slow stack (their difference
would be fitted to noise)."""
STEP = 0.05
"""Log-space step of the finite differences (a 5% change of a factor)."""
TOLERANCE = 1e-4
"""|log(predicted / measured)| at which a one-run fit stops (0.01%)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Measured:
    """One measured run: the planner's inputs and what the run reached."""

    case: Case
    tokens_per_s_per_device: float


def predict_calibrated(case: Case, cal: Calibration | None, params: CostParams = DEFAULT_PARAMS) -> RunResult:
    """`validate.predict` of the run with the calibration's factors applied to its cluster and parameters."""
    return predict_with(case, params, cal)


def _trial(case: Case, speed: float, level: str | None = None, bandwidth: float = 1.0, levels: tuple[str, ...] = ()) -> Calibration:
    """Every term and each of `levels` at `speed`, and `level`'s bandwidth `bandwidth` times faster again."""
    lo, hi = FACTOR_RANGE  # a step of the search stays inside what a file may hold
    bound = lambda x: min(max(x, lo), hi)  # noqa: E731
    fs = [Factor(name=n, value=bound(speed)) for n in TERM_FACTORS]
    fs += [Factor(name=BANDWIDTH + lv.name, value=bound(speed * (bandwidth if lv.name == level else 1.0))) for lv in case.cluster.levels
           if lv.name in levels or lv.name == level]
    return Calibration(device=case.cluster.device.name, factors=tuple(fs))


def _log_error(m: Measured, cal: Calibration, params: CostParams) -> float:
    res = predict_calibrated(m.case, cal, params)
    if res.predicted is None:
        raise BandwiseError(f"run {m.case.id}: the plan cannot price it ({res.reason}); drop it from the runs to calibrate from")
    return math.log(res.predicted / m.tokens_per_s_per_device)


def reached(runs: list[Measured]) -> list[str]:
    """The topology levels the runs' groups cross, innermost first: every level up to the outermost any run spans."""
    deepest, names = -1, []
    for m in runs:
        levels, below = m.case.cluster.placed(m.case.devices).levels, 1
        names = names or [lv.name for lv in m.case.cluster.levels]
        for i, lv in enumerate(levels):
            if m.case.devices <= below:
                break
            deepest = max(deepest, i)
            if lv.size == 0:
                break
            below *= lv.size
    return names[:deepest + 1]


def fit_speed(runs: list[Measured], levels: tuple[str, ...], params: CostParams = DEFAULT_PARAMS, level: str | None = None,
              bandwidth: float = 1.0) -> tuple[float, list[float]]:
    """The stack's speed factor that zeroes the mean log error of `runs` (secant in log space), and the runs' log errors there."""
    def errors(c: float) -> list[float]:
        return [_log_error(m, _trial(m.case, c, level, bandwidth, levels), params) for m in runs]

    x0, r0 = 0.0, float(np.mean(errors(1.0)))
    x1 = -r0  # throughput is about proportional to the stack's speed: the first secant point
    r1 = float(np.mean(errors(math.exp(x1))))
    for _ in range(8):
        if abs(r1) < TOLERANCE or r1 == r0:
            break
        x0, x1, r0 = x1, float(np.clip(x1 - r1 * (x1 - x0) / (r1 - r0), math.log(FACTOR_RANGE[0]), math.log(FACTOR_RANGE[1]))), r1
        r1 = float(np.mean(errors(math.exp(x1))))
    return math.exp(x1), errors(math.exp(x1))


def _describe(runs: list[Measured], errors0: list[float]) -> str:
    return "; ".join(f"{m.case.id}: {m.tokens_per_s_per_device:,.0f} tok/s/device measured, "
                     f"{m.tokens_per_s_per_device * math.exp(e):,.0f} modelled" for m, e in zip(runs, errors0))


def fit_runs(runs: list[Measured], params: CostParams = DEFAULT_PARAMS, *, evidence: str = "", name: str = "") -> Calibration:
    """The calibration the runs identify (module docstring): the stack's speed, and the outermost
    level's bandwidth apart from it where the runs tell the two apart. Levels no run crosses keep
    their datasheet figure and are named so."""
    if not runs:
        raise BandwiseError("calibrate: no run to fit from; give at least one measured run of a known layout")
    devices = sorted({m.case.cluster.device.name for m in runs})
    engines = sorted({m.case.engine for m in runs})
    if len(devices) > 1 or len(engines) > 1:
        raise BandwiseError(f"calibrate: the runs are on {', '.join(devices)} under {', '.join(engines)}; a calibration is of one device "
                            f"and one engine: pick the runs of one (--run ID)")
    levels = tuple(reached(runs))
    names = [lv.name for lv in runs[0].case.cluster.levels]
    datasheet = tuple(n for n in names if n not in levels)
    errors0 = [_log_error(m, _trial(m.case, 1.0), params) for m in runs]
    described = _describe(runs, errors0)
    level = levels[-1] if len(runs) > 1 and levels else None
    why_not, x, bandwidth = "", None, 1.0
    if level is not None:
        sens = np.array([(_log_error(m, _trial(m.case, 1.0, level, math.exp(STEP)), params) - e) / STEP for m, e in zip(runs, errors0)])
        # the speed shifts every run alike (a column of ones): the bandwidth is seen only through how
        # differently it moves the runs, the part of its column off the ones
        centred = sens - sens.mean()
        angle = math.asin(min(1.0, float(np.linalg.norm(centred)) / max(float(np.linalg.norm(sens)), 1e-12)))
        if float(np.max(np.abs(sens))) < MIN_SENSITIVITY:
            why_not = f"bandwidth.{level} not fitted apart: it moves no run's throughput by {MIN_SENSITIVITY:.0%} per e-fold"
        elif angle < MIN_ANGLE:
            why_not = f"bandwidth.{level} not fitted apart: the runs' communication weighs alike, so a slow network reads as a slow stack"
        else:
            x = _gauss_newton(runs, params, level, levels, np.array(errors0))
    if x is None:
        speed, errs = fit_speed(runs, levels, params)
        how = f"{len(runs)} run(s), one factor for the stack" + (f"; {why_not}" if why_not else "")
    else:
        speed, bandwidth = math.exp(x[0]), math.exp(x[1])
        errs = [_log_error(m, _trial(m.case, speed, level, bandwidth, levels), params) for m in runs]
        how = f"{len(runs)} runs by least squares in log space, the stack's speed and bandwidth.{level} apart from it"
    residual = float(np.sqrt(np.mean(np.square(errs))))
    evidence = f"{evidence}; {described}" if evidence else described
    together = [*TERM_FACTORS, *(BANDWIDTH + n for n in levels if n != level or x is None)]
    factors = [Factor(name=n, value=speed, fitted_from=how, residual=residual, confounded_with=tuple(c for c in together if c != n))
               for n in together]
    if x is not None:
        factors.append(Factor(name=BANDWIDTH + level, value=speed * bandwidth, fitted_from=how, residual=residual))
    return Calibration(device=devices[0], engine=engines[0], factors=tuple(factors), name=name, evidence=evidence,
                       levels_measured=levels, levels_datasheet=datasheet)


def _gauss_newton(runs: list[Measured], params: CostParams, level: str, levels: tuple[str, ...], r: np.ndarray) -> np.ndarray:
    """(log speed, log bandwidth of `level` over the speed) from (0, 0); a step that raises the error is halved."""
    def residuals(v: np.ndarray) -> np.ndarray:
        return np.array([_log_error(m, _trial(m.case, math.exp(v[0]), level, math.exp(v[1]), levels), params) for m in runs])

    x = np.zeros(2)
    for _ in range(8):
        J = np.stack([(residuals(x + STEP * e) - r) / STEP for e in np.eye(2)], axis=1)
        step, *_ = np.linalg.lstsq(J, -r, rcond=None)
        for _ in range(5):
            trial = np.clip(x + step, math.log(FACTOR_RANGE[0]), math.log(FACTOR_RANGE[1]))
            rt = residuals(trial)
            if rt @ rt < r @ r:
                break
            step = step / 2
        else:
            break
        done = float(np.max(np.abs(trial - x))) < 1e-3
        x, r = trial, rt
        if done:
            break
    return x


def measured_runs(path: str | Path | None, run_ids: list[str] | None = None, engine: str | None = None) -> list[Measured]:
    """The runs of a file in the published_runs schema (`validate --runs`), those named by `run_ids` or
    all, each as a layout with its measured tokens/s per device; a run that names no known layout is a one-line error."""
    data, sources = load_runs(None if path is None else Path(path))
    if run_ids:
        known = {str(r.get("id")) for r in data}
        missing = [r for r in run_ids if r not in known]
        if missing:
            raise BandwiseError(f"--run {missing[0]!r}: no run of that id in the runs file; known: {clip(', '.join(sorted(known)), 300)}")
        data = [r for r in data if str(r.get("id")) in run_ids]
    if not data:
        raise BandwiseError("calibrate: the runs file holds no run; give at least one measured run of a known layout")
    out = []
    for run in data:
        case = convert(run, sources, engine_override=engine)
        out.append(Measured(case=case, tokens_per_s_per_device=case.target))
    return out


def calibrate_runs(path: str | Path | None, run_ids: list[str] | None = None, engine: str | None = None,
                   params: CostParams = DEFAULT_PARAMS) -> Calibration:
    """`bandwise calibrate --runs FILE [--run ID ...]`: the factors the runs identify (`fit_runs`)."""
    runs = measured_runs(path, run_ids, engine)
    where = "the shipped published runs" if path is None else f"runs file {Path(path).name}"
    return fit_runs(runs, params, evidence=f"{where}: {', '.join(m.case.id for m in runs)}", name=f"calibrated from {where}")


def calibrate_log(path: str | Path, strategy: Strategy, model: ModelSpec, cluster: Cluster, engine: str,
                  params: CostParams = DEFAULT_PARAMS) -> Calibration:
    """`bandwise calibrate --runs LOG --strategy plan.json --model M --cluster C`: one run of a known layout,
    its throughput read from the job's own log (`plan.run_logs`), one factor for the stack."""
    case, run = logged_case(path, strategy, model, cluster, engine)
    return fit_runs([Measured(case=case, tokens_per_s_per_device=run.tokens_per_s_per_device)], params,
                    evidence=f"{Path(path).name} ({run.format}, median of {run.measurements} steps)", name=f"calibrated from {Path(path).name}")
