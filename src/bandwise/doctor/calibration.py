"""A calibration from a trace of a known layout: each compute class's factor, fitted so the plan of that
layout spends what the trace measured in it (`doctor trace --calibrate`, `bandwise calibrate TRACE`).

For each class of `cost.calibrated.CLASS_FACTORS` the factor is the modelled over the measured ms
(GEMMs, attention, memory-bound kernels, and the idle time as the host gap between kernels), updated
a few times because the classes share the step (a faster GEMM leaves less to hide an idle gap behind).
A class the trace shows none of, or the model prices at zero, is left out and named. Communication
levels stay the datasheet's unless the trace's exposed collectives are fitted, which a trace of one
device has none of.
"""

from __future__ import annotations

import math

from bandwise.cost.calibrated import CLASS_FACTORS, calibrated_params, class_seconds
from bandwise.cost.params import CostParams
from bandwise.doctor.measured import StepClasses, median_classes
from bandwise.specs.calibration import FACTOR_RANGE, Calibration, Factor
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy

ROUNDS = 6
"""Updates of the factors: each moves every class to its measured time given the others."""
WORDS = {"gemm": "GEMMs", "attention": "attention", "elementwise": "memory-bound kernels", "host_gap": "idle (host gaps)"}


def fit_trace(measured: StepClasses, model: ModelSpec, cluster: Cluster, strategy: Strategy, params: CostParams, *,
              engine: str | None, evidence: str) -> Calibration:
    """The factors that make the plan of `strategy` spend what `measured` spent in each class."""
    want = {k: v / 1e3 for k, v in measured.by_factor().items()}
    values = {k: 1.0 for k in CLASS_FACTORS}
    lo, hi = FACTOR_RANGE

    def current() -> Calibration:
        return Calibration(device=cluster.device.name, factors=tuple(Factor(name=k, value=v) for k, v in values.items()))

    skipped: dict[str, str] = {}
    model0 = class_seconds(model, cluster, strategy, params)
    for _ in range(ROUNDS):
        model_s = class_seconds(model, cluster, strategy, calibrated_params(params, current()))
        for k in CLASS_FACTORS:
            if want[k] <= 0 or model_s[k] <= 0:
                skipped[k] = "the trace shows none" if want[k] <= 0 else "the plan prices none"
                continue
            values[k] = min(max(values[k] * model_s[k] / want[k], lo), hi)
    model_s = class_seconds(model, cluster, strategy, calibrated_params(params, current()))
    factors = []
    for k in CLASS_FACTORS:
        if k in skipped:
            continue
        resid = abs(math.log(model_s[k] / want[k])) if model_s[k] > 0 else None
        factors.append(Factor(name=k, value=values[k], residual=resid,
                              fitted_from=f"{WORDS[k]}: {want[k] * 1e3:.2f} ms a step measured, {model0[k] * 1e3:.2f} ms modelled "
                                          f"from the device's figures"))
    levels = tuple(lv.name for lv in cluster.levels)
    note = "; ".join(f"{WORDS[k]} not fitted: {why}" for k, why in skipped.items())
    return Calibration(device=cluster.device.name, engine=engine, factors=tuple(factors), name=f"trace of {strategy.describe()}",
                       evidence=evidence + (f"; {note}" if note else "") + "; collectives not fitted: every level keeps its datasheet bandwidth",
                       levels_datasheet=levels)


def calibrate_analyses(analyses: list[dict], model: ModelSpec, cluster: Cluster, strategy: Strategy, params: CostParams, *,
                       engine: str | None, names: list[str]) -> Calibration:
    """`fit_trace` on the median rank of the traces' analyses (`trace.analyze_for_report`)."""
    ranks = [StepClasses.of(a["signals"], where=n) for a, n in zip(analyses, names)]
    measured = ranks[0] if len(ranks) == 1 else median_classes(ranks)
    where = names[0] if len(names) == 1 else f"{len(names)} traces ({names[0]}, ...)"
    return fit_trace(measured, model, cluster, strategy, params, engine=engine,
                     evidence=f"trace {where} of {strategy.describe()}: {measured.step_ms:.2f} ms a step")
