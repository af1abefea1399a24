"""A calibration from a trace of a known layout: each compute class's factor, fitted so the plan of that
layout spends what the trace measured in it (`doctor trace --calibrate`, `bandwise calibrate TRACE`).

For each class of `cost.calibrated.CLASS_FACTORS` the factor is the modelled over the measured ms
(GEMMs, attention, memory-bound kernels, and the idle time as the host gap between kernels), updated
a few times because the classes share the step (a faster GEMM leaves less to hide an idle gap behind).
A class the trace shows none of, or the model prices at zero, is left out and named. Each kind of
collective the layout runs fits the bandwidth of the outermost level its dimensions cross, from its
exposed time (where the plan exposes some of it too); levels no exposed collective reaches, and all
of them for a trace of one device, stay the datasheet's.
"""

from __future__ import annotations

import math

from bandwise.cost.calibrated import CLASS_FACTORS, calibrated_cluster, calibrated_params, class_seconds
from bandwise.cost.params import CostParams
from bandwise.cost.step import estimate
from bandwise.doctor.against_plan import collective_groups
from bandwise.doctor.measured import StepClasses, median_classes
from bandwise.plan.verdict import group_level
from bandwise.specs.calibration import BANDWIDTH, FACTOR_RANGE, Calibration, Factor
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

    def current() -> Calibration:
        return Calibration(device=cluster.device.name, factors=tuple(Factor(name=k, value=v) for k, v in values.items())
                           + tuple(Factor(name=BANDWIDTH + lv, value=v) for lv, v in bandwidth.items()))

    skipped: dict[str, str] = {}
    model0 = class_seconds(model, cluster, strategy, params)
    exposed0 = estimate(model, cluster, strategy, params).breakdown
    for _ in range(ROUNDS):
        cal = current()
        clus, pars = calibrated_cluster(cluster, cal), calibrated_params(params, cal)
        model_s = class_seconds(model, clus, strategy, pars)
        for k in CLASS_FACTORS:
            if want[k] <= 0 or model_s[k] <= 0:
                skipped[k] = "the trace shows none" if want[k] <= 0 else "the plan prices none"
                continue
            values[k] = min(max(values[k] * model_s[k] / want[k], lo), hi)
        b = estimate(model, clus, strategy, pars).breakdown
        for kinds, dims, level, exposed in groups:
            predicted = sum(b.get(d, 0.0) for d in dims)
            if exposed > 0 and predicted > 0:  # exposed time goes about as 1 / bandwidth once nothing hides it
                bandwidth[level] = min(max(bandwidth[level] * predicted / exposed, lo), hi)
    cal = current()
    clus, pars = calibrated_cluster(cluster, cal), calibrated_params(params, cal)
    model_s = class_seconds(model, clus, strategy, pars)
    b = estimate(model, clus, strategy, pars).breakdown
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
    levels = tuple(lv.name for lv in cluster.levels)
    return Calibration(device=cluster.device.name, engine=engine, factors=tuple(factors), name=f"trace of {strategy.describe()}",
                       evidence=evidence + "".join(f"; {n}" for n in notes), levels_measured=tuple(fitted_levels),
                       levels_datasheet=tuple(n for n in levels if n not in fitted_levels))


def calibrate_analyses(analyses: list[dict], model: ModelSpec, cluster: Cluster, strategy: Strategy, params: CostParams, *,
                       engine: str | None, names: list[str]) -> Calibration:
    """`fit_trace` on the median rank of the traces' analyses (`trace.analyze_for_report`)."""
    ranks = [StepClasses.of(a["signals"], where=n) for a, n in zip(analyses, names)]
    measured = ranks[0] if len(ranks) == 1 else median_classes(ranks)
    where = f"trace {names[0]}" if len(names) == 1 else f"{len(names)} traces ({names[0]}, ...; the median rank)"
    return fit_trace(measured, model, cluster, strategy, params, engine=engine,
                     evidence=f"{where} of {strategy.describe()}: {measured.step_ms:.2f} ms a step")
