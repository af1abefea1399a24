"""Predict published training runs and measure the error: the planner's error bar.

`plan.runs.convert` turns each run into a `Case`; `predict` estimates the case directly when every
parallel degree is pinned (trying every value of the fields the source leaves null) and otherwise
lets `plan.search` complete the null fields with the best fitting value, recording which fields it
completed. One `CostParams` serves every run; nothing here is fitted per run or per source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bandwise.cost.fp8 import check_device, fp8_recipe
from bandwise.cost.calibrated import calibrated_cluster, calibrated_params
from bandwise.cost.memory import GIB
from bandwise.cost.params import DEFAULT_PARAMS, CostParams
from bandwise.cost.profiles import params_for
from bandwise.cost.results import Estimate
from bandwise.cost.step import estimates
from bandwise.errors import BandwiseError
from bandwise.files import save_figure
from bandwise.plan.bands import engine_name, family, kind
from bandwise.plan.first_sight import FirstSight, first_sight_of
from bandwise.plan.runs import (  # noqa: F401  (re-exported: the validation API in one place)
    MEMORY_BASES,
    STATED,
    Case,
    convert,
    default_runs_path,
    engine_of,
    finite,
    load_runs,
    maxtext_dims,
    parse_precision,
    parse_recompute,
    parse_schedule,
)
from bandwise.plan.search import search
from bandwise.specs.calibration import Calibration
from bandwise.specs.model import clip
from bandwise.specs.registry import DEFAULT_ENGINE, get_engine
from bandwise.specs.schedules import PAIRED
from bandwise.specs.strategy import Strategy


@dataclass(kw_only=True, slots=True)
class RunResult:
    id: str
    source: str
    quality: str
    target: float
    predicted: float | None = None
    engine: str = ""
    """The engine the run was priced as (its source's, or the run's own)."""
    model: str = ""
    completed_fields: list[str] = field(default_factory=list)
    reason: str | None = None
    """Why the run could not be predicted (None when it was)."""
    strategy: Strategy | None = None
    estimate: Estimate | None = None
    notes: list[str] = field(default_factory=list)
    memory_published_gib: float | None = None
    """Per-device memory the source publishes (None where it gives none)."""
    memory_predicted_gib: float | None = None
    """The predicted terms that the published figure measures (`MEMORY_BASES`)."""
    memory_basis: str | None = None
    device: str | None = None
    """The device the run was predicted on (its preset's, or the run's stated variant)."""
    moe: bool | None = None
    devices: int | None = None
    fp8_recipe: str | None = None
    """The float8 recipe the run was priced with (None where it ran no fp8)."""
    first_sight: FirstSight | None = None
    """What was predicted for the run before anything was changed for it (`plan.first_sight`); None
    for runs added before first sights were recorded."""

    @property
    def error(self) -> float | None:
        """Signed relative error: predicted / target - 1."""
        return None if self.predicted is None else self.predicted / self.target - 1.0

    @property
    def first_sight_error(self) -> float | None:
        """The signed error of the first-sight prediction; None where there was none."""
        fs = self.first_sight
        return None if fs is None or fs.predicted is None else fs.predicted / self.target - 1.0

    @property
    def fit(self) -> str | None:
        """'fits' (within the headroom), 'tight' (above it, within the device: `Estimate.tight`) or 'nothing fits'
        (above the device); None where the run was not priced."""
        if self.estimate is None:
            return None
        return "fits" if self.estimate.fits else "tight" if self.estimate.tight else "nothing fits"

    @property
    def memory_error(self) -> float | None:
        """Signed relative error of the memory: predicted / published - 1."""
        if self.memory_published_gib is None or self.memory_predicted_gib is None:
            return None
        return self.memory_predicted_gib / self.memory_published_gib - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "predicted_tokens_per_s_per_device": self.predicted,
            "target_tokens_per_s_per_device": self.target,
            "error": self.error,
            "completed_fields": self.completed_fields,
            "quality": self.quality,
            "reason": self.reason,
            "fit": self.fit,
            "layout": self.strategy.describe() if self.strategy else None,
            "fp8_recipe": self.fp8_recipe,
            "notes": self.notes,
            "memory_published_gib": self.memory_published_gib,
            "memory_predicted_gib": self.memory_predicted_gib,
            "memory_error": self.memory_error,
            "memory_basis": self.memory_basis,
            "first_sight": None if self.first_sight is None else {
                "predicted_tokens_per_s_per_device": self.first_sight.predicted, "error": self.first_sight_error,
                "reason": self.first_sight.reason, "commit": self.first_sight.commit, "date": self.first_sight.date},
        }


# ------------------------------------------------------------------------------------------
# prediction
# ------------------------------------------------------------------------------------------
DEGREES = ("dp_replicate", "dp_shard", "tp", "cp", "pp", "ep")
VIRTUAL_CHOICES = (2, 3, 4, 6, 8)


def _completions(case: Case) -> list[dict[str, Any]]:
    """Every value of the unstated non-degree fields (ZeRO stage, micro-batch, recompute, schedule)
    that the run's engine can run (its `layouts`)."""
    f = case.fixed
    engine = get_engine(case.engine)
    dp = f["dp_replicate"] * f["dp_shard"]
    per_rank = case.global_batch // dp
    zeros = [f["zero_stage"]] if "zero_stage" in f else ([z for z in engine.zero_stages or (0, 1, 2)] if f["dp_shard"] == 1 else [0])
    mbs = [f["micro_batch"]] if "micro_batch" in f else [b for b in (1 << i for i in range(12)) if b <= per_rank and per_rank % b == 0]
    recs = [f["recompute"]] if "recompute" in f else ["none", "selective", "full"]
    if f["pp"] == 1:
        scheds = [("1F1B", 1)]
    elif "schedule" in f and "virtual_stages" in f:
        scheds = [(f["schedule"], f["virtual_stages"])]
    elif "schedule" in f:
        scheds = [(f["schedule"], 1)] if f["schedule"] in ("1F1B", "GPipe") else [(f["schedule"], v) for v in VIRTUAL_CHOICES]
    else:
        scheds = [("1F1B", 1)] + [("Interleaved1F1B", v) for v in VIRTUAL_CHOICES]
    if engine.schedules is not None and "schedule" not in f:
        scheds = [(sc, v) for sc, v in scheds if sc in engine.schedules] or scheds
    if engine.stages in ("equal", "layout") and "virtual_stages" not in f:
        # a job that states no layout ran the engine's equal whole-layer stages; layers not dividing
        # over the stated pp at all mean a layout the source does not give, so nothing is ruled out
        L, pp = case.model.layers, f["pp"]
        scheds = [(sc, v) for sc, v in scheds if L % pp == 0 and (L // pp) % v == 0] or scheds
    return [dict(zero_stage=z, micro_batch=b, recompute=r, schedule=sc, virtual_stages=v)
            for z in zeros for b in mbs for r in recs for sc, v in scheds]


def _strategy(case: Case, fields: dict[str, Any]) -> Strategy:
    f = {**case.fixed, **fields}
    return Strategy(
        **{k: f[k] for k in DEGREES}, zero_stage=f["zero_stage"], micro_batch=f["micro_batch"], global_batch=case.global_batch,
        schedule=f["schedule"], virtual_stages=f["virtual_stages"], recompute=f["recompute"], precision=f["precision"],
        overlap_dp=case.overlap.get("dp", True), overlap_fsdp=case.overlap.get("fsdp", True), overlap_tp=case.overlap.get("tp", False),
        # a schedule that pairs micro-batches hides the expert all-to-all behind another (DeepSeek-V3 report,
        # Sec. 3.2.1), where the engine runs it so (`LayoutRules.paired_hides_ep`)
        overlap_ep=case.overlap.get("ep", f["schedule"] in PAIRED and get_engine(case.engine).rules.paired_hides_ep),
    )


def _complete(case: Case, params: CostParams, res: RunResult) -> tuple[Strategy, Estimate] | None:
    """Stated degrees: try every completion of the other fields, keep the fastest that fits.

    Where no completion fits by the cost model's memory, the run still ran, so the completion
    that needs the least memory is predicted and the run is flagged. Where none is valid at all,
    `res.reason` says so with the first rule a completion broke.
    """
    valid, refused = [], []
    rules = get_engine(case.engine).rules
    for fields in _completions(case):
        strategy = _strategy(case, fields)
        try:
            strategy.check(case.devices, case.model)
        except BandwiseError as exc:
            refused.append(str(exc))
            continue
        valid.append(strategy)
    # every valid completion in one evaluation of the cost model: the same figures as one `estimate` each
    scored = list(zip(valid, estimates(case.model, case.cluster, valid, params)))
    runnable = [rules.why(strategy, case.model) is None for strategy in valid]
    if any(runnable):  # completions the engine can run; a stated layout it cannot is still the run's
        scored = [s for s, ok in zip(scored, runnable) if ok]
    if not scored:
        res.reason = ("not priced: no valid completion of the stated layout (" + ", ".join(f"{k}={case.fixed[k]}" for k in DEGREES) + ")"
                      + (f": {refused[0]}" if refused else ""))
        return None
    fitting = [s for s in scored if s[1].fits]
    if fitting:
        return max(fitting, key=lambda s: s[1].tokens_per_s_per_device)
    strategy, est = min(scored, key=lambda s: s[1].memory_gib_per_device)
    unpriced = "; not priced: " + ", ".join(case.stated.unpriced) if case.stated.unpriced else ""
    # its terms, largest first: where a layout that ran is said not to fit, the one to look at
    terms = ", ".join(f"{name} {gib:.1f}" for name, gib in sorted(est.memory_gib.items(), key=lambda kv: -kv[1]) if abs(gib) >= 0.05)
    if est.tight:  # above the headroom, within the device (`Estimate.tight`)
        res.notes.append(f"memory: tight: no completion fits within the headroom; the least-memory one ({strategy.describe()}) needs "
                         f"{est.memory_gib_per_device:.1f} GiB ({terms}), {est.memory_gib_per_device / est.device_gib:.1%} of the device's "
                         f"{est.device_gib:.1f} GiB{unpriced}")
    else:
        res.notes.append(f"memory: nothing fits by the cost model; least-memory completion ({strategy.describe()}) needs "
                         f"{est.memory_gib_per_device:.1f} GiB ({terms}) of the device's {est.device_gib:.1f} GiB{unpriced}")
    return strategy, est


def priced(case: Case, params: CostParams = DEFAULT_PARAMS) -> CostParams:
    """The parameters a run is priced with: its engine's behaviours on its device, with what the run states
    of its job set over them (`run_stated.Stated.apply`), as `plan`'s flags would (`api.inputs.pricing`)."""
    return case.stated.apply(params_for(get_engine(case.engine), case.cluster.device, params))


def predict(case: Case, params: CostParams = DEFAULT_PARAMS) -> RunResult:
    """Estimate the stated layout, completing the null fields; a run that cannot be modelled gets a reason."""
    params = priced(case, params)
    res = RunResult(id=case.id, source=case.source, quality=case.quality, target=case.target,
                    completed_fields=list(case.completed), engine=case.engine, model=case.model.name,
                    notes=case.assumptions + [f"engine: {case.engine}"] + [f"stated: {STATED[s]}" for s in case.stated.names],
                    device=case.cluster.device.name, moe=case.model.is_moe, devices=case.devices,
                    fp8_recipe=params.fp8_recipe if case.fixed["precision"] == "fp8" else None)
    try:
        if res.fp8_recipe is not None:
            check_device(fp8_recipe(res.fp8_recipe), case.cluster.device.name)
        if all(k in case.fixed for k in DEGREES):
            found = _complete(case, params, res)
            if found is None:  # `_complete` gave the reason
                return res
            res.strategy, res.estimate = found
        else:
            space = get_engine(case.engine).search_space()
            best, smallest = _search_completion(case, params, space)
            if best is None and "rules" in space:  # what the run states breaks the engine's rules: it is still the run's
                best, smallest = _search_completion(case, params, {k: v for k, v in space.items() if k != "rules"})
            if best is None:
                res.reason = (f"no layout under the stated constraints fits: the smallest needs {smallest:.1f} GiB per device"
                              if math.isfinite(smallest) else "no valid layout under the stated constraints")
                return res
            res.strategy, res.estimate = best.strategy, best.estimate
        res.predicted = res.estimate.tokens_per_s_per_device * case.token_scale
        if case.memory is not None:
            res.memory_published_gib, res.memory_basis = case.memory.gib, case.memory.basis
            res.memory_predicted_gib = comparable_memory_gib(res.estimate, case.memory.basis, params)
    except BandwiseError as exc:
        res.reason = str(exc)
    return res


def _search_completion(case: Case, params: CostParams, space: dict[str, Any]) -> tuple[Any, float]:
    """(the best layout the search completes the stated fields to, or None; the least memory any needs)."""
    best, smallest = None, math.inf
    for sched in case.schedules:
        fixed = dict(case.fixed)
        if "schedule" not in fixed:
            fixed["schedule"] = sched
        result = search(case.model, case.cluster, case.devices, case.global_batch, top=1, fixed=fixed,
                        precisions=(case.fixed["precision"],), overlap=case.overlap, params=params, **space)
        smallest = min(smallest, result.min_memory_gib)
        if result.best and (best is None or result.best.estimate.tokens_per_s_per_device > best.estimate.tokens_per_s_per_device):
            best = result.best
    return best, smallest


def comparable_memory_gib(est: Estimate, basis: str, params: CostParams) -> float:
    """The predicted per-device GiB that a published figure of this basis measures (`MEMORY_BASES`)."""
    g = est.memory_gib
    if basis == "states_and_activations":
        return g["params"] + g["grads_optimizer"] + g["grads_not_at_peak"] + g["activations"]
    if basis == "reserved_peak":
        return est.memory_gib_per_device - params.reserved_bytes / GIB
    raise ValueError(f"memory basis {basis!r}: not known; use one of {', '.join(MEMORY_BASES)}")


def predict_with(case: Case, params: CostParams = DEFAULT_PARAMS, calibration: Calibration | None = None) -> RunResult:
    """`predict`, with the calibration's factors where it was measured on the run's device under its engine
    (`cost.calibrated`); a run on another stack is predicted uncalibrated, and its notes say which."""
    if calibration is None:
        return predict(case, params)
    if calibration.device != case.cluster.device.name or calibration.engine not in (None, case.engine):
        res = predict(case, params)
        res.notes.append(f"not calibrated: {calibration.label} was measured on {calibration.device} under {calibration.engine or 'any engine'}")
        return res
    levels = {lv.name for lv in case.cluster.levels}
    cal = Calibration(device=calibration.device, engine=calibration.engine, name=calibration.name, path=calibration.path,
                      factors=tuple(f for f in calibration.factors if not f.name.startswith("bandwidth.") or f.name[10:] in levels))
    res = predict(replace(case, cluster=calibrated_cluster(case.cluster, cal)), calibrated_params(params, cal))
    res.notes.append(f"calibrated by {calibration.label}")
    return res


def run_all(runs: list[dict[str, Any]], source: str | None = None, params: CostParams = DEFAULT_PARAMS,
            sources: dict[str, Any] | None = None, engine: str | None = None, calibration: Calibration | None = None) -> list[RunResult]:
    """Convert and predict every run (of one source if given), each priced as its engine (`engine`:
    every run as that one), as `plan --engine E` predicts it (`runs.convert`); conversion failures
    carry the reason. `calibration` applies to the runs of its device and engine (`predict_with`)."""
    if source is not None:
        known = sorted({str(r.get("source")) for r in runs})
        if source not in known:
            raise BandwiseError(f"--source {source!r}: no run has this source; known: {clip(', '.join(known), 400)}")
        runs = [r for r in runs if r.get("source") == source]
    results = []
    for run in runs:
        try:
            case = convert(run, sources, engine_override=engine)
        except BandwiseError as exc:
            tgt = finite((run.get("target") or {}).get("tokens_per_sec_per_device"))
            res = RunResult(id=str(run.get("id")), source=str(run.get("source")), quality=str((run.get("target") or {}).get("quality")),
                            target=math.nan if tgt is None else tgt, reason=str(exc), engine=_engine_or_blank(run, sources, engine))
        else:
            res = predict_with(case, params, calibration)
        res.first_sight = first_sight_of(run)
        results.append(res)
    return results


def _engine_or_blank(run: dict[str, Any], sources: dict[str, Any] | None, engine: str | None) -> str:
    """The engine a refused run would have been priced as, or '' where that is what refused it."""
    try:
        return engine_of(run, sources, engine) or DEFAULT_ENGINE
    except BandwiseError:
        return ""


# ------------------------------------------------------------------------------------------
# statistics
# ------------------------------------------------------------------------------------------
@dataclass(kw_only=True, slots=True)
class Summary:
    count: int
    predicted: int
    median_abs_error: float | None
    p90_abs_error: float | None
    max_abs_error: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "predicted": self.predicted, "median_abs_error": self.median_abs_error,
                "p90_abs_error": self.p90_abs_error, "max_abs_error": self.max_abs_error}


def summarize(results: list[RunResult]) -> Summary:
    errs = np.array([abs(r.error) for r in results if r.error is not None])
    if not len(errs):
        return Summary(count=len(results), predicted=0, median_abs_error=None, p90_abs_error=None, max_abs_error=None)
    return Summary(count=len(results), predicted=len(errs), median_abs_error=float(np.median(errs)),
                   p90_abs_error=float(np.percentile(errs, 90)), max_abs_error=float(errs.max()))


def by_source(results: list[RunResult]) -> dict[str, Summary]:
    names = sorted({r.source for r in results})
    return {n: summarize([r for r in results if r.source == n]) for n in names}


def by_engine(results: list[RunResult]) -> dict[str, dict[str, Any]]:
    """Per engine x device x dense/MoE: the count, the median |error| and the signed median error
    (where the prediction leans, which an engine's behaviours should bring to zero)."""
    groups: dict[str, list[RunResult]] = {}
    for r in results:
        groups.setdefault(f"{r.engine.split('@')[0]} / {r.device} / {'moe' if r.moe else 'dense'}", []).append(r)
    out = {}
    for key in sorted(groups):
        rs = groups[key]
        signed = [r.error for r in rs if r.error is not None]
        out[key] = {**summarize(rs).to_dict(), "median_error": float(np.median(signed)) if signed else None}
    return out


def by_quality(results: list[RunResult]) -> dict[str, Summary]:
    """All runs, direct+derived (targets not resting on an assumption), and each quality alone."""
    out = {"all": summarize(results), "direct+derived": summarize([r for r in results if r.quality in ("direct", "derived")])}
    for q in sorted({r.quality for r in results}):
        out[q] = summarize([r for r in results if r.quality == q])
    return out


def first_sight_summary(results: list[RunResult]) -> dict[str, Any]:
    """The out-of-sample figure: over the runs with a first-sight record, how many were predicted at
    first sight and how many refused, and the median, p90 and signed median of the first-sight error,
    beside the same runs' current error; overall and per engine x device family x dense/MoE."""
    def stats(rs: list[RunResult]) -> dict[str, Any]:
        first = [r.first_sight_error for r in rs if r.first_sight_error is not None]
        now = [r.error for r in rs if r.error is not None]
        def of(errs: list[float]) -> dict[str, Any]:
            if not errs:
                return {"predicted": 0, "median_abs_error": None, "p90_abs_error": None, "median_signed_error": None}
            a = np.abs(errs)
            return {"predicted": len(errs), "median_abs_error": float(np.median(a)), "p90_abs_error": float(np.percentile(a, 90)),
                    "median_signed_error": float(np.median(errs))}
        return {"runs": len(rs), "refused": len(rs) - len(first), "refused_now": len(rs) - len(now), "first_sight": of(first), "now": of(now)}

    seen = [r for r in results if r.first_sight is not None]
    groups: dict[str, list[RunResult]] = {}
    for r in seen:
        groups.setdefault(engine_group(r), []).append(r)
    return {**stats(seen), "by_engine": {k: stats(groups[k]) for k in sorted(groups)}}


def engine_group(r: RunResult) -> str:
    """'engine / family / kind' of a run: its engine without the version, its device family, dense or MoE."""
    return f"{engine_name(r.engine)} / {family(r.device) if r.device else '?'} / {'?' if r.moe is None else kind(r.moe)}"


def fit_counts(results: list[RunResult]) -> dict[str, int]:
    """Priced runs by `RunResult.fit`: how many fit, are tight, and fit nothing."""
    return {k: sum(r.fit == k for r in results) for k in ("fits", "tight", "nothing fits")}


def report_dict(results: list[RunResult]) -> dict[str, Any]:
    """The `--json` document: runs, by_source, by_engine, median_abs_error, p90_abs_error, first_sight, fit."""
    overall = summarize(results)
    return {
        "fit": fit_counts(results),
        "runs": [r.to_dict() for r in results],
        "by_source": {k: v.to_dict() for k, v in by_source(results).items()},
        "by_engine": by_engine(results),
        "median_abs_error": overall.median_abs_error,
        "p90_abs_error": overall.p90_abs_error,
        "first_sight": first_sight_summary(results),
    }


def parity_plot(results: list[RunResult], path: str | Path) -> None:
    """Predicted against target tokens/s per device, log axes, one colour per source, ±10% bands."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BandwiseError("--plot needs matplotlib: pip install 'bandwise[plot]'") from None
    done = [r for r in results if r.predicted is not None]
    if not done:
        raise BandwiseError("--plot: no run was predicted, nothing to draw")
    fig, ax = plt.subplots(figsize=(8, 7), dpi=120)
    values = [v for r in done for v in (r.predicted, r.target)]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    line = np.geomspace(lo, hi, 50)
    ax.plot(line, line, color="black", lw=1)
    ax.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.25, label="±10%")
    ax.plot(line, line * 1.25, color="grey", lw=0.6, ls="--", label="±25%")
    ax.plot(line, line * 0.75, color="grey", lw=0.6, ls="--")
    cmap = plt.get_cmap("tab20")
    for i, name in enumerate(sorted({r.source for r in done})):
        rs = [r for r in done if r.source == name]
        ax.scatter([r.target for r in rs], [r.predicted for r in rs], s=18, color=cmap(i % 20), label=f"{name} ({len(rs)})", zorder=3)
    overall = summarize(results)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="published tokens/s per device",
           ylabel="predicted tokens/s per device",
           title=f"bandwise validate: {overall.predicted} runs, median |err| {overall.median_abs_error:.1%}, p90 {overall.p90_abs_error:.1%}")
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    try:
        save_figure(fig, path, what="the parity plot")
    finally:
        plt.close(fig)
