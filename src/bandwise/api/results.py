"""What the Python API returns: typed records over the planner's own results.

Each wraps the internal objects it was built from (a `SearchResult`, `Point`s, `RunResult`s, a
`Diagnosis`) and adds nothing to their figures; `to_dict()` is the document the matching command's
`--json` prints, as plain JSON values (numpy scalars as floats, non-finite floats as None), so
`json.loads(cli_stdout) == result.to_dict()` up to a search's own run time (`seconds`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bandwise.cost.calibrated import calibration_dict
from bandwise.cost.params import CostParams
from bandwise.cost.run import RunCost
from bandwise.cost.profiles import pricing_dict
from bandwise.doctor.rules import Diagnosis
from bandwise.plan.bands import band_dict
from bandwise.plan.run_budget import frontier
from bandwise.plan.search import Layout, SearchResult
from bandwise.plan.sweep import PlanInputs, Point, SweepResult
from bandwise.plan.validate import RunResult, report_dict
from bandwise.plan.verdict import Verdict
from bandwise.report.output import plain
from bandwise.specs.calibration import Calibration
from bandwise.specs.engine import Engine
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import DEFAULT_ENGINE
from bandwise.specs.strategy import Strategy

VERDICT_WORDS = {True: "PP needed", False: "PP not needed", None: "no verdict on PP"}
"""The verdict's heading, as `plan` prints it."""


@dataclass(kw_only=True, slots=True)
class PlanResult:
    """`bandwise.plan(...)`: the search, the verdict on pipeline parallelism and the recommended layout."""

    model: ModelSpec
    cluster: Cluster
    devices: int
    global_batch: int
    engine: Engine
    params: CostParams
    """The cost parameters every layout was priced with, on this cluster's device."""
    search: SearchResult
    decision: Verdict
    best: Layout | None
    """The recommended layout (`plan.verdict.recommended`): None when nothing fits."""
    top: list[Layout]
    """The listed layouts, best first (near-duplicates collapsed unless `all_layouts`)."""
    hidden: int = 0
    """Near-duplicates collapsed among the listed ones."""
    search_options: dict[str, Any] = field(default_factory=dict)
    """The keyword arguments the search ran with (`plan.search.search`), to search again alike."""
    run: RunCost | None = None
    """The recommended layout priced as a whole run (`tokens` or `steps`); None when none was asked or nothing fits."""
    calibration: Calibration | None = None
    """The measured factors the plan was priced with (`cost.calibrated`); `cluster` and `params` have them applied."""

    @property
    def needs_pp(self) -> bool | None:
        return self.decision.needs_pp

    @property
    def reason(self) -> str:
        return self.decision.reason

    @property
    def verdict(self) -> str:
        """The verdict in words: 'PP not needed: ...', 'PP needed: ...' or 'no verdict on PP: ...'."""
        return f"{VERDICT_WORDS[self.decision.needs_pp]}: {self.decision.reason}"

    @property
    def best_without_pp(self) -> Layout | None:
        return self.search.best_without_pp

    @property
    def validation(self) -> dict[str, Any]:
        """The validated error of this engine, device family and model kind (`plan.bands`)."""
        return band_dict(self.cluster.device.name, self.model.is_moe, self.devices, self.engine.label)

    def to_dict(self) -> dict[str, Any]:
        """`bandwise plan --json`."""
        r = self.search
        return plain({
            "searched": r.searched,
            "fitting": r.fitting,
            "seconds": r.seconds,
            "narrowed": r.extra.get("narrowed"),
            "best": self.best,
            "best_without_pp": r.best_without_pp,
            "verdict": {"needs_pp": self.decision.needs_pp, "reason": self.decision.reason},
            "validation": self.validation,
            "engine": self.engine.label,
            "pricing": pricing_dict(self.engine, self.params),
            **({"calibration": calibration_dict(self.calibration, self.cluster)} if self.calibration else {}),
            "top": self.top,
            **({"run": self.run.to_dict()} if self.run is not None else {}),
        })


@dataclass(kw_only=True, slots=True)
class EstimateResult:
    """`bandwise.estimate(...)`: one layout priced."""

    model: ModelSpec
    cluster: Cluster
    devices: int
    engine: Engine
    params: CostParams
    layout: Layout
    run: RunCost | None = None
    """The layout priced as a whole run (`tokens` or `steps`), or None."""
    calibration: Calibration | None = None
    """The measured factors the layout was priced with; `cluster` and `params` have them applied."""

    @property
    def strategy(self) -> Strategy:
        return self.layout.strategy

    @property
    def engine_cannot(self) -> str | None:
        """What of this layout the engine does not run as priced (its schedules, ZeRO stages and
        `layouts` rules, `specs.engine_rules`), or None: the search would not have listed it."""
        s, e = self.strategy, self.engine
        if e.zero_stages is not None and s.dp_shard == 1 and s.zero_stage not in e.zero_stages:
            return f"ZeRO-{s.zero_stage} (it runs ZeRO {', '.join(map(str, e.zero_stages))})"
        if e.schedules is not None and s.pp > 1 and s.schedule not in e.schedules:
            return f"the {s.schedule} schedule (it runs {', '.join(e.schedules)})"
        return e.rules.why(s, self.model)

    def to_dict(self) -> dict[str, Any]:
        """`bandwise estimate --json`."""
        validation = band_dict(self.cluster.device.name, self.model.is_moe, self.devices, self.engine.label)
        run = {"run": self.run.to_dict()} if self.run is not None else {}
        return plain({**self.layout.to_dict(), "validation": validation, "engine": self.engine.label,
                      "pricing": pricing_dict(self.engine, self.params), **run,
                      **({"calibration": calibration_dict(self.calibration, self.cluster)} if self.calibration else {})})


def runs_dict(runs: dict[str, RunCost | None] | None) -> dict[str, Any]:
    """The `runs` of a comparison or sweep, by label, and the labels on their time/cost frontier."""
    if runs is None:
        return {}
    return {"runs": {k: None if r is None else r.to_dict() for k, r in runs.items()}, "frontier": sorted(frontier(runs))}


def _common(inputs: PlanInputs) -> dict[str, Any]:
    """The fields every point of a comparison or sweep shares."""
    engine = inputs.pricing.engine.label if inputs.pricing else None
    # the recipe as stated or the engine's; a cluster's own device may still change an engine default it applies to
    recipe = inputs.params.fp8_recipe if "fp8" in inputs.precisions else None
    cal = inputs.calibration
    return {"model": inputs.model.name, "devices": inputs.devices, "global_batch": inputs.global_batch, "threshold": inputs.threshold,
            "engine": engine, "fp8_recipe": recipe,
            **({"calibration": {"label": cal.label, "file": cal.path or None, "device": cal.device,
                                "factors": {f.name: f.value for f in cal.factors}}} if cal is not None else {})}


@dataclass(kw_only=True, slots=True)
class CompareResult:
    """`bandwise.compare(...)`: one model planned on each cluster."""

    inputs: PlanInputs
    clusters: list[Cluster]
    points: list[Point]
    runs: dict[str, RunCost | None] | None = None
    """Each cluster's best layout priced as a whole run, by label; None when no run was asked."""

    @property
    def validation(self) -> dict[str, dict[str, Any]]:
        return {c.name: band_dict(c.device.name, self.inputs.model.is_moe, self.inputs.devices, self.inputs.engine_label(c) or DEFAULT_ENGINE)
                for c in self.clusters}

    def to_dict(self) -> dict[str, Any]:
        """`bandwise compare --json` (without its `png`, which only the command writes)."""
        return plain({**_common(self.inputs), "clusters": self.points, "validation": self.validation, **runs_dict(self.runs)})


@dataclass(kw_only=True, slots=True)
class SweepOutcome:
    """`bandwise.sweep(...)`: one model re-planned while one interconnect quantity changes."""

    inputs: PlanInputs
    result: SweepResult
    runs: dict[str, RunCost | None] | None = None
    """Each point's best layout priced as a whole run, by label; None when no run was asked."""

    @property
    def points(self) -> list[Point]:
        return self.result.points

    @property
    def crossover(self) -> float | None:
        return self.result.crossover

    def to_dict(self) -> dict[str, Any]:
        """`bandwise sweep --json` (without its `png`)."""
        return plain({**_common(self.inputs), **self.result.to_dict(), **runs_dict(self.runs)})


@dataclass(kw_only=True, slots=True)
class ValidateResult:
    """`bandwise.validate(...)`: published runs predicted, with the error per run."""

    runs: list[RunResult]

    def to_dict(self) -> dict[str, Any]:
        """`bandwise validate --json`."""
        return plain(report_dict(self.runs))


@dataclass(kw_only=True, slots=True)
class DoctorResult:
    """`bandwise.diagnose(...)`: what a trace (or a job's folder of rank traces) says about the step."""

    diagnosis: Diagnosis
    traces: list[str]
    title: str
    analyses: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each trace's own analysis by file name (`doctor.trace.analyze_for_report`): its signals,
    breakdown and per-step rows, for the report's per-rank and per-step views."""

    @property
    def findings(self) -> list[Any]:
        return self.diagnosis.findings

    @property
    def breakdown(self) -> dict[str, float]:
        return self.diagnosis.breakdown

    def to_dict(self) -> dict[str, Any]:
        """`bandwise doctor trace --json`."""
        return plain({**self.diagnosis.to_dict(), "traces": self.traces})
