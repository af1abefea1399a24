"""A calibration from a trace of a known layout: each compute class's factor, fitted so the plan of that
layout spends what the trace measured in it (`doctor trace --calibrate`, `bandwise calibrate TRACE`).

For each class of `cost.calibrated.CLASS_FACTORS` the factor is the modelled over the measured ms
(GEMMs, attention, memory-bound kernels, and the idle time as the host gap between kernels), updated
a few times because the classes share the step (a faster GEMM leaves less to hide an idle gap behind).
A class the trace shows none of, or the model prices at zero, is left out and named. Each kind of
collective the layout runs fits the bandwidth of the outermost level its dimensions cross, from its
exposed time (where the plan exposes some of it too); levels no exposed collective reaches, and all
of them for a trace of one device, stay the datasheet's.

A collective's time is its level's latency per step plus its bytes over the bandwidth (`cost.comm`), and
one exposed time cannot say which of the two is slow. Where the engine reduces the gradient norm one
tensor at a time (`CostParams.norm_all_reduces_per_tensor`, `cost.terms.grad_norm`), the trace holds
all-reduces of a scalar that no other group of the layout runs: latency alone. Their exposed time fits
the level's latency (`latency.<level>`), and the groups that move bytes fit its bandwidth given that
latency: two collectives of different sizes, two factors, each transferring to layouts whose
collectives count and weigh differently (a gloo all-reduce of 4 bytes took 1.4 ms on the 2-core
container and one of 738 KB 7 ms: latency is not a rounding error there, benchmarks/RESULTS.md,
"Calibrate (third pass)").
"""

from __future__ import annotations

import math
from dataclasses import replace

from bandwise.cost.calibrated import CLASS_FACTORS, calibrated_cluster, calibrated_params, class_seconds
from bandwise.cost.params import CostParams
from bandwise.cost.step import estimate
from bandwise.doctor.against_plan import collective_groups
from bandwise.doctor.measured import StepClasses, median_classes
from bandwise.plan.verdict import group_level
from bandwise.specs.calibration import BANDWIDTH, FACTOR_RANGE, LATENCY, Calibration, Factor, clamped
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy

ROUNDS = 6
"""Updates of the factors: each moves every class to its measured time given the others."""
WORDS = {"gemm": "GEMMs", "attention": "attention", "elementwise": "memory-bound kernels", "host_gap": "idle (host gaps)"}


def fit_trace(measured: StepClasses, model: ModelSpec, cluster: Cluster, strategy: Strategy, params: CostParams, *,
              engine: str | None, evidence: str) -> Calibration:
    """The factors that make the plan of `strategy` spend what `measured` spent in each class, and in each
    kind of collective the layout runs (`against_plan.collective_groups`): the exposed time of a group
    fits the bandwidth of the outermost level its dims cross (`plan.verdict.group_level`)."""
    want = {k: v / 1e3 for k, v in measured.by_factor().items()}
    values = {k: 1.0 for k in CLASS_FACTORS}
    lo, hi = FACTOR_RANGE
    groups = []  # (kinds, dims, level, measured seconds exposed)
    for kinds, dims in collective_groups(strategy, params).items():
        exposed = sum(measured.comm_exposed_ms.get(k, 0.0) for k in kinds) / 1e3
        levels = [group_level(cluster, strategy, d) for d in dims]
        level = max(levels, key=lambda lv: [x.name for x in cluster.levels].index(lv.name)).name
        groups.append((kinds, dims, level, exposed))
    bandwidth = {g[2]: 1.0 for g in groups if g[3] > 0}
    norm_level, norm_exposed = _norm_group(measured, cluster, strategy, params, groups)
    latency = {norm_level: 1.0} if norm_level is not None else {}

    def current() -> Calibration:
        return Calibration(device=cluster.device.name, factors=tuple(Factor(name=k, value=v) for k, v in values.items())
                           + tuple(Factor(name=BANDWIDTH + lv, value=v) for lv, v in bandwidth.items())
                           + tuple(Factor(name=LATENCY + lv, value=v) for lv, v in latency.items()))

    skipped: dict[str, str] = {}
    model0 = class_seconds(model, cluster, strategy, params)
    exposed0 = _group_terms(model, cluster, strategy, params)
    for _ in range(ROUNDS):
        cal = current()
        clus, pars = calibrated_cluster(cluster, cal), calibrated_params(params, cal)
        model_s = class_seconds(model, clus, strategy, pars)
        for k in CLASS_FACTORS:
            if want[k] <= 0 or model_s[k] <= 0:
                skipped[k] = "the trace shows none" if want[k] <= 0 else "the plan prices none"
                continue
            values[k] = clamped(k, values[k] * model_s[k] / want[k])
        if norm_level is not None:  # latency alone: it goes as 1 / the factor
            predicted = _norm_seconds(model, clus, strategy, pars)
            if predicted > 0:
                latency[norm_level] = min(max(latency[norm_level] * predicted / norm_exposed, lo), hi)
                cal = current()
                clus = calibrated_cluster(cluster, cal)
        b = _group_terms(model, clus, strategy, pars)
        for kinds, dims, level, exposed in groups:
            predicted = sum(b.get(d, 0.0) for d in dims)
            if exposed > 0 and predicted > 0:
                # the bytes' share goes as 1 / bandwidth, the latency's not at all: doubling the bandwidth
                # takes half the bytes' share away, T_bytes = 2 (T(f) - T(2f))
                faster = calibrated_cluster(cluster, _with(current(), BANDWIDTH + level, 2 * bandwidth[level]))
                moved = 2 * (predicted - sum(_group_terms(model, faster, strategy, pars).get(d, 0.0) for d in dims))
                fixed = predicted - moved
                ratio = moved / (exposed - fixed) if moved > 0 and exposed > fixed else predicted / exposed
                bandwidth[level] = min(max(bandwidth[level] * ratio, lo), hi)
    cal = current()
    clus, pars = calibrated_cluster(cluster, cal), calibrated_params(params, cal)
    model_s = class_seconds(model, clus, strategy, pars)
    b = _group_terms(model, clus, strategy, pars)
    factors = []
    for k in CLASS_FACTORS:
        if k in skipped:
            continue
        resid = abs(math.log(model_s[k] / want[k])) if model_s[k] > 0 else None
        factors.append(Factor(name=k, value=values[k], residual=resid,
                              fitted_from=f"{WORDS[k]}: {want[k] * 1e3:.2f} ms a step measured, {model0[k] * 1e3:.2f} ms modelled "
                                          f"from the device's figures"))
    notes = [f"{WORDS[k]} not fitted: {why}" for k, why in skipped.items()]
    fitted_levels = []
    for kinds, dims, level, exposed in groups:
        words = "/".join(k.replace("_", "-") for k in kinds) + f" of {', '.join(d.upper() for d in dims)}"
        predicted = sum(b.get(d, 0.0) for d in dims)
        if exposed <= 0:
            notes.append(f"{words} over {level}: none exposed in the trace, the level's bandwidth not read from it")
        elif predicted <= 0:
            notes.append(f"{words} over {level}: {exposed * 1e3:.2f} ms exposed, which the plan hides entirely; not fitted")
            bandwidth.pop(level, None)
        elif level not in fitted_levels:
            fitted_levels.append(level)
            factors.append(Factor(name=BANDWIDTH + level, value=bandwidth[level], residual=abs(math.log(predicted / exposed)),
                                  fitted_from=f"{words}: {exposed * 1e3:.2f} ms a step exposed, "
                                              f"{sum(exposed0.get(d, 0.0) for d in dims) * 1e3:.2f} ms modelled from the datasheet"))
    for level in fitted_levels:  # a level's factor reaches the collectives the trace did not time there
        read = sorted({k for kinds, _, lv, exposed in groups if lv == level and exposed > 0 for k in kinds})
        notes.append(f"bandwidth.{level} read from {'/'.join(k.replace('_', '-') for k in read)} only: every other collective "
                     f"over {level} takes the same factor unmeasured")
    if norm_level is not None:
        predicted = _norm_seconds(model, clus, strategy, pars)
        if predicted > 0:
            factors.append(Factor(name=LATENCY + norm_level, value=latency[norm_level], residual=abs(math.log(predicted / norm_exposed)),
                                  fitted_from=f"the gradient norm's scalar all-reduces: {norm_exposed * 1e3:.2f} ms a step exposed, "
                                              f"{_norm_seconds(model, cluster, strategy, params) * 1e3:.2f} ms modelled from the cluster's latency"))
            if norm_level not in fitted_levels:
                fitted_levels.append(norm_level)
        else:
            notes.append("the gradient norm's all-reduces: the plan prices none; latency not fitted")
    levels = tuple(lv.name for lv in cluster.levels)
    return Calibration(device=cluster.device.name, engine=engine, factors=tuple(factors), name=f"trace of {strategy.describe()}",
                       evidence=evidence + "".join(f"; {n}" for n in notes), levels_measured=tuple(fitted_levels),
                       levels_datasheet=tuple(n for n in levels if n not in fitted_levels))


def _with(cal: Calibration, name: str, value: float) -> Calibration:
    """`cal` with one factor set to `value`."""
    return Calibration(device=cal.device, factors=tuple(f for f in cal.factors if f.name != name) + (Factor(name=name, value=value),))


def _group_terms(model: ModelSpec, cluster: Cluster, strategy: Strategy, params: CostParams) -> dict[str, float]:
    """The plan's breakdown with the gradient norm's all-reduces taken out of `dp`: they are fitted apart."""
    b = dict(estimate(model, cluster, strategy, params).breakdown)
    b["dp"] = max(0.0, b.get("dp", 0.0) - _norm_seconds(model, cluster, strategy, params))
    return b


def _norm_seconds(model: ModelSpec, cluster: Cluster, strategy: Strategy, params: CostParams) -> float:
    """Seconds a step the plan spends in the gradient norm's all-reduces (`cost.terms.grad_norm`)."""
    if params.norm_all_reduces_per_tensor <= 0:
        return 0.0
    none = replace(params, norm_all_reduces_per_tensor=0.0)
    return max(0.0, estimate(model, cluster, strategy, params).step_time_s - estimate(model, cluster, strategy, none).step_time_s)


def _norm_group(measured: StepClasses, cluster: Cluster, strategy: Strategy, params: CostParams,
                groups: list) -> tuple[str | None, float]:
    """(the level whose latency the norm's all-reduces fit, their exposed seconds a step), or (None, 0) where
    the engine runs none, another group of the layout runs all-reduces too, or the trace shows none."""
    exposed = measured.comm_exposed_ms.get("all_reduce", 0.0) / 1e3
    if params.norm_all_reduces_per_tensor <= 0 or exposed <= 0 or any("all_reduce" in g[0] for g in groups):
        return None, 0.0
    dims = [d for d, n in (("fsdp", strategy.dp_shard * strategy.cp), ("tp", strategy.tp)) if n > 1]
    if not dims:
        return None, 0.0
    names = [x.name for x in cluster.levels]
    level = max((group_level(cluster, strategy, d) for d in dims), key=lambda lv: names.index(lv.name)).name
    return level, exposed


def calibrate_analyses(analyses: list[dict], model: ModelSpec, cluster: Cluster, strategy: Strategy, params: CostParams, *,
                       engine: str | None, names: list[str]) -> Calibration:
    """`fit_trace` on the median rank of the traces' analyses (`trace.analyze_for_report`)."""
    ranks = [StepClasses.of(a["signals"], where=n) for a, n in zip(analyses, names)]
    measured = ranks[0] if len(ranks) == 1 else median_classes(ranks)
    where = f"trace {names[0]}" if len(names) == 1 else f"{len(names)} traces ({names[0]}, ...; the median rank)"
    return fit_trace(measured, model, cluster, strategy, params, engine=engine,
                     evidence=f"{where} of {strategy.describe()}: {measured.step_ms:.2f} ms a step")
