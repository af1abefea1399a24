"""Fit a calibration from measured runs: the factors the runs can identify, and no more.

Each run is a `plan.runs.Case` (a layout of known degrees on a cluster, priced as its engine) with
its measured tokens/s per device. The fit works in log space, where a factor is a shift:

- one run identifies one factor: the stack's speed, every term's factor at one value (`gemm`,
  `attention`, `elementwise`, `host_gap` and each level's bandwidth), solved so that the plan
  reproduces the run. A throughput cannot tell the terms apart; scaling compute alone would amplify
  the run's error onto runs whose compute weighs more (on the shipped runs it did: p90 22.8% against
  19.2% for the uniform factor, benchmarks/RESULTS.md, "Calibration");
- several runs identify more: each factor whose terms weigh differently across them, apart from the
  speed. The candidates are the bandwidth of the outermost level they cross (several scales across the
  network), attention (several sequence lengths) and the memory-bound kernels and host gaps (several
  micro-batches). `identify` takes them greedily, most independent first. A factor must move some run
  by `MIN_SENSITIVITY`, its Jacobian column must stand `MIN_ANGLE` off the span of those taken, and
  there is at most one factor per run. `fit_runs` solves for them by least squares (Gauss-Newton on
  log(predicted / measured), the Jacobian by finite differences; Nocedal & Wright, Numerical
  Optimization, Sec. 10.3). The file names which factors were fitted apart, and why each of the others
  was not.
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
from bandwise.specs.calibration import BANDWIDTH, FACTOR_RANGE, TERM_FACTORS, Calibration, Factor, clamped, factor_range
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


def _trial(case: Case, speed: float, level: str | None = None, bandwidth: float = 1.0, levels: tuple[str, ...] = (),
           apart: dict[str, float] | None = None) -> Calibration:
    """Every term and each of `levels` at `speed`; `level`'s bandwidth `bandwidth` times faster again, and
    each factor of `apart` its value times faster again."""
    rel = dict(apart or {})
    if level is not None:
        rel[BANDWIDTH + level] = bandwidth
    # a step of the search stays inside what a file may hold
    fs = [Factor(name=n, value=clamped(n, speed * rel.get(n, 1.0))) for n in TERM_FACTORS]
    fs += [Factor(name=BANDWIDTH + lv.name, value=clamped(BANDWIDTH + lv.name, speed * rel.get(BANDWIDTH + lv.name, 1.0)))
           for lv in case.cluster.levels if lv.name in levels or BANDWIDTH + lv.name in rel]
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
    speed = min(max(math.exp(x1), FACTOR_RANGE[0]), FACTOR_RANGE[1])  # exp(log(100)) is 100.00000000000004
    return speed, errors(speed)


def _describe(runs: list[Measured], errors0: list[float]) -> str:
    return "; ".join(f"{m.case.id}: {m.tokens_per_s_per_device:,.0f} tok/s/device measured, "
                     f"{m.tokens_per_s_per_device * math.exp(e):,.0f} modelled" for m, e in zip(runs, errors0))


APART = ("attention", "elementwise", "host_gap")
"""Term factors that runs can tell apart from the stack's speed where those terms weigh differently in them
(several sequence lengths for attention; micro-batches for the memory-bound kernels and host gaps), beside
the bandwidth of the outermost level the runs cross."""


def fit_runs(runs: list[Measured], params: CostParams = DEFAULT_PARAMS, *, evidence: str = "", name: str = "",
             spare: int = 0) -> Calibration:
    """The calibration the runs identify (module docstring): the stack's speed, and apart from it each
    factor the runs tell apart, no more of them than the runs less `spare` (`identify`). Levels no run
    crosses keep their datasheet figure and are named so."""
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
    candidates = [*((BANDWIDTH + levels[-1],) if levels else ()), *APART] if len(runs) > 1 else []
    chosen, why_not = identify(runs, params, levels, candidates, np.array(errors0), spare)
    if not chosen:
        speed, errs = fit_speed(runs, levels, params)
        apart: dict[str, float] = {}
        how = f"{len(runs)} run(s), one factor for the stack" + (f"; {why_not}" if why_not else "")
    else:
        while True:
            x = _gauss_newton(runs, params, chosen, levels, np.array(errors0))
            speed, apart = math.exp(x[0]), {n: math.exp(v) for n, v in zip(chosen, x[1:])}
            # a factor the fit drives to the edge of what a file may hold is not pinned by the runs (they
            # would take it further): it goes back to the stack's speed and the rest are fitted again
            edge = [n for n, v in apart.items() if not factor_range(n)[0] * 1.01 < speed * v < factor_range(n)[1] / 1.01]
            if edge:
                chosen = [n for n in chosen if n not in edge]
                why_not = "; ".join([*(f"{n} not fitted apart: the fit drove it past [{factor_range(n)[0]:g}, {factor_range(n)[1]:g}]" for n in edge),
                                     *([why_not] if why_not else [])])
            if not edge or not chosen:
                break
        apart = {n: v for n, v in apart.items() if n in chosen}
        if not chosen:
            speed, _ = fit_speed(runs, levels, params)
        errs = [_log_error(m, _trial(m.case, speed, levels=levels, apart=apart), params) for m in runs]
        how = (f"{len(runs)} runs by least squares in log space, the stack's speed" + (f" and {', '.join(chosen)} apart from it" if chosen else "")
               + (f"; {why_not}" if why_not else ""))
    residual = float(np.sqrt(np.mean(np.square(errs))))
    evidence = f"{evidence}; {described}" if evidence else described
    together = [n for n in (*TERM_FACTORS, *(BANDWIDTH + n for n in levels)) if n not in apart]
    factors = [Factor(name=n, value=speed, fitted_from=how, residual=residual, confounded_with=tuple(c for c in together if c != n))
               for n in together]
    factors += [Factor(name=n, value=clamped(n, speed * v), fitted_from=how, residual=residual) for n, v in apart.items()]
    return Calibration(device=devices[0], engine=engines[0], factors=tuple(factors), name=name, evidence=evidence,
                       levels_measured=tuple(dict.fromkeys([*levels, *(n[len(BANDWIDTH):] for n in apart if n.startswith(BANDWIDTH))])),
                       levels_datasheet=datasheet)


def identify(runs: list[Measured], params: CostParams, levels: tuple[str, ...], candidates: list[str], r: np.ndarray,
             spare: int = 0) -> tuple[list[str], str]:
    """The candidates the runs tell apart from the stack's speed, most independent first, and why the others are not.

    Columns of the Jacobian of the runs' log errors in each factor's log (finite differences at STEP): a
    candidate is taken while it moves some run by MIN_SENSITIVITY per e-fold and its column stands
    MIN_ANGLE off the span of the speed's and those taken, at most one factor per run in all, less `spare`
    (runs left over to measure the fit's residual by)."""
    if not candidates:
        return [], ""
    def column(apart: dict[str, float] | None, speed: float = 1.0) -> np.ndarray:
        return (np.array([_log_error(m, _trial(m.case, speed, levels=levels, apart=apart), params) for m in runs]) - r) / STEP

    cols = {"": column(None, math.exp(STEP))}
    cols.update({n: column({n: math.exp(STEP)}) for n in candidates})
    chosen: list[str] = []
    notes: dict[str, str] = {}
    while len(chosen) + 1 < len(runs) - spare:
        basis, _ = np.linalg.qr(np.stack([cols[""], *(cols[n] for n in chosen)], axis=1))
        best, best_off = None, 0.0
        for n in candidates:
            if n in chosen:
                continue
            c = cols[n]
            off = c - basis @ (basis.T @ c)
            angle = math.asin(min(1.0, float(np.linalg.norm(off)) / max(float(np.linalg.norm(c)), 1e-12)))
            if float(np.max(np.abs(c))) < MIN_SENSITIVITY:
                notes[n] = f"{n} not fitted apart: it moves no run's throughput by {MIN_SENSITIVITY:.0%} per e-fold"
            elif angle < MIN_ANGLE:
                notes[n] = f"{n} not fitted apart: it moves the runs alike, so it reads as the stack's speed"
            elif float(np.linalg.norm(off)) > best_off:
                best, best_off = n, float(np.linalg.norm(off))
        if best is None:
            break
        chosen.append(best)
        notes.pop(best, None)
    left = [n for n in candidates if n not in chosen and n not in notes]
    why = [notes[n] for n in candidates if n in notes] + ([f"{', '.join(left)} not fitted apart: no more factors than runs"] if left else [])
    return chosen, "; ".join(why)


def _gauss_newton(runs: list[Measured], params: CostParams, chosen: list[str], levels: tuple[str, ...], r: np.ndarray) -> np.ndarray:
    """(log speed, log of each chosen factor over the speed) from zeros; a step that raises the error is halved."""
    def residuals(v: np.ndarray) -> np.ndarray:
        apart = {n: math.exp(x) for n, x in zip(chosen, v[1:])}
        return np.array([_log_error(m, _trial(m.case, math.exp(v[0]), levels=levels, apart=apart), params) for m in runs])

    k = 1 + len(chosen)
    x = np.zeros(k)
    for _ in range(8):
        J = np.stack([(residuals(x + STEP * e) - r) / STEP for e in np.eye(k)], axis=1)
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
