"""Compare clusters, or sweep one interconnect quantity: where does pipeline parallelism stop paying off?

Each point (a cluster, or the base cluster with one level changed) is one exhaustive search
(`plan.search.search`), which keeps the best layout overall and the best without PP in the same
pass, and one verdict (`plan.verdict.decide`) with the same threshold `bandwise plan` uses.

Definitions, shared by the table, the JSON and the plot:

- MFU gap: best MFU minus best-without-PP MFU, in percentage points. (The verdict compares
  tokens/s per device; at a fixed model and device both give the same ranking.)
- Dominant exposed cost of a layout: the largest exposed-communication term of its step
  breakdown (tp, cp, ep, fsdp, dp or pp, the share not hidden behind compute), named with the
  outermost link its group crosses (`verdict.group_link`) and its milliseconds per step.
- Crossover of a sweep: the smallest swept value from which on the verdict is "PP not needed"
  at every larger swept value too (a point where nothing fits has no verdict and is not counted), i.e. where the best layout without PP comes within the
  threshold of the best overall and stays there. It is None when PP still pays off at the
  largest value; it is the first value when PP never pays off in the range. Taking the start of
  the last run (not the first "not needed" point) keeps the answer honest when a domain size
  that does not divide the job (36 of 2048, say) makes the verdict flip back once.

The sweep shares across points what does not depend on the interconnect: the pipeline-schedule
simulations are cached per process by `cost.pipeline`, and with `jobs > 1` the points after the
first are searched in worker processes forked once the first has warmed that cache (each search
is single-threaded numpy, so on a machine with idle cores the points run side by side).
"""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from bandwise.cost.calibrated import calibrated_params
from bandwise.cost.params import DEFAULT_PARAMS, CostParams
from bandwise.cost.profiles import Pricing
from bandwise.errors import BandwiseError
from bandwise.plan.advice import no_valid_layout, valid_count
from bandwise.plan.search import (
    SEARCH_ROWS,
    Layout,
    NetworkSearch,
    SearchResult,
    search,
)
from bandwise.plan.verdict import TERM_WORDS, THRESHOLD, Verdict, decide, group_link, ms
from bandwise.specs.calibration import Calibration
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec

COMM_DIMS = ("tp", "cp", "ep", "fsdp", "dp", "pp")
"""Breakdown terms that are exposed communication (`Estimate.exposed_comm_s` sums the same)."""

MAX_SWEEP_VALUES = 16
"""Values one sweep takes: each costs up to 0.16 s after the shared enumeration (cold schedule cache,
a narrowed search: benchmarks/RESULTS.md, "Bounded time"), so 16 keep the answer within 10 s."""

VARY_KINDS = {
    "scale-up-size": "devices in the scale-up domain (level 0)",
    "scale-out-bandwidth": "scale-out bandwidth, GB/s per device per direction (level 1)",
}


@dataclass(kw_only=True, slots=True)
class ExposedCost:
    """One exposed-communication term of a layout's step."""

    dim: str
    """Breakdown term: tp, cp, ep, fsdp, dp or pp."""
    link: str
    """Outermost level the dim's group crosses, e.g. 'infiniband (50 GB/s per device)'."""
    seconds: float
    """Exposed seconds per step."""
    share: float
    """Share of the step time."""

    def describe(self) -> str:
        return f"{TERM_WORDS[self.dim]} over {self.link}: {ms(self.seconds)}/step ({self.share:.0%})"

    def to_dict(self) -> dict[str, Any]:
        return {"dim": self.dim, "collective": TERM_WORDS[self.dim], "link": self.link, "ms_per_step": self.seconds * 1e3, "share_of_step": self.share}


def dominant_exposed(layout: Layout | None, cluster: Cluster) -> ExposedCost | None:
    """The largest exposed-communication term of the layout's step, or None when nothing is exposed."""
    if layout is None:
        return None
    b = layout.estimate.breakdown
    dim = max(COMM_DIMS, key=lambda d: b.get(d, 0.0))
    seconds = b.get(dim, 0.0)
    if seconds <= 0.0:
        return None
    link = group_link(cluster, layout.strategy, dim)
    return ExposedCost(dim=dim, link=link, seconds=seconds, share=seconds / layout.estimate.step_time_s)


@dataclass(kw_only=True, slots=True)
class Point:
    """One cluster (or one swept value) planned with and without PP."""

    label: str
    value: float | None
    """The swept value (None in a comparison)."""
    cluster: Cluster
    result: SearchResult
    verdict: Verdict
    engine: str | None = None
    """The engine the point is priced as (its label); None where no engine was named (a bare `PlanInputs`)."""

    @property
    def best(self) -> Layout | None:
        return self.result.best

    @property
    def best_without_pp(self) -> Layout | None:
        return self.result.best_without_pp

    @property
    def mfu_gap(self) -> float | None:
        """Best MFU minus best-without-PP MFU (a fraction; None when one side has no fitting layout)."""
        if self.best is None or self.best_without_pp is None:
            return None
        return self.best.estimate.mfu - self.best_without_pp.estimate.mfu

    @property
    def dominant(self) -> ExposedCost | None:
        """Dominant exposed cost of the best layout without PP: what a pipeline would have to remove."""
        return dominant_exposed(self.best_without_pp, self.cluster)

    @property
    def dominant_best(self) -> ExposedCost | None:
        return dominant_exposed(self.best, self.cluster)

    def exposed_ms(self, which: str) -> dict[str, float]:
        """Exposed communication per dim in ms per step, of 'best' or 'best_without_pp'."""
        lay = self.best if which == "best" else self.best_without_pp
        return {d: lay.estimate.breakdown.get(d, 0.0) * 1e3 for d in COMM_DIMS} if lay else {}

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.label,
            "value": self.value,
            "engine": self.engine,
            "searched": self.result.searched,
            "fitting": self.result.fitting,
            "seconds": self.result.seconds,
            "narrowed": self.result.extra.get("narrowed"),
            "best": self.best,
            "best_without_pp": self.best_without_pp,
            "mfu_best": self.best.estimate.mfu if self.best else None,
            "mfu_without_pp": self.best_without_pp.estimate.mfu if self.best_without_pp else None,
            "mfu_gap": self.mfu_gap,
            "verdict": {"needs_pp": self.verdict.needs_pp, "gain": self.verdict.gain, "reason": self.verdict.reason},
            "dominant_exposed": self.dominant,
            "dominant_exposed_best": self.dominant_best,
        }


@dataclass(kw_only=True, slots=True)
class PlanInputs:
    """What every point of a comparison or sweep shares."""

    model: ModelSpec
    devices: int
    global_batch: int
    threshold: float = THRESHOLD
    precisions: tuple[str, ...] = ("bf16",)
    overlap: dict[str, bool] = field(default_factory=dict)
    params: CostParams = DEFAULT_PARAMS
    """The parameters where no device is known; each point prices with `pricing.on(its device)`."""
    pricing: Pricing | None = None
    max_rows: int | None = SEARCH_ROWS
    """Candidate rows past which a point's search is narrowed (`search.search`); None: exhaustive."""
    calibration: Calibration | None = None
    """Measured factors (`cost.calibrated`): applied to the points on the device they were measured on."""
    pricing_by_cluster: dict[str, Pricing] = field(default_factory=dict)
    """Per cluster name, a pricing other than `pricing`: where no engine was named, a cluster of another
    platform is priced as that platform's engine (a TPU beside GPUs: `registry.engine_for`)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.threshold) and 0 <= self.threshold < 1):
            raise BandwiseError(f"--threshold={self.threshold} must be a fraction in [0, 1)")

    def pricing_of(self, cluster: Cluster | None = None) -> Pricing | None:
        """How `cluster`'s points are priced (its own pricing where it has one, else `pricing`)."""
        return self.pricing_by_cluster.get(cluster.name, self.pricing) if cluster is not None else self.pricing

    def search_space(self, cluster: Cluster | None = None) -> dict[str, tuple]:
        """The layouts the engine of `cluster`'s points can run (`Engine.search_space`)."""
        pricing = self.pricing_of(cluster)
        return pricing.engine.search_space() if pricing is not None else {}

    def params_on(self, cluster: Cluster) -> CostParams:
        pricing = self.pricing_of(cluster)
        params = pricing.on(cluster.device) if pricing is not None else self.params
        cal = self.calibration
        return calibrated_params(params, cal) if cal is not None and cal.device == cluster.device.name else params

    def engine_label(self, cluster: Cluster | None = None) -> str | None:
        pricing = self.pricing_of(cluster)
        return pricing.engine.label if pricing is not None else None


def plan_point(inputs: PlanInputs, cluster: Cluster, label: str, value: float | None = None, progress: Callable[[int], None] | None = None) -> Point:
    """One exhaustive search with PP allowed (it also keeps the best without PP) and its verdict."""
    result = search(
        inputs.model, cluster, inputs.devices, inputs.global_batch, top=1,
        precisions=inputs.precisions, overlap=inputs.overlap, params=inputs.params_on(cluster), progress=progress, max_rows=inputs.max_rows,
        **inputs.search_space(cluster),
    )
    if result.searched == 0:
        raise BandwiseError(no_valid_layout(inputs.model, inputs.devices, inputs.global_batch, precisions=inputs.precisions))
    return Point(label=label, value=value, cluster=cluster, result=result, verdict=decide(result, cluster, inputs.threshold),
                 engine=inputs.engine_label(cluster))


def _plan_task(args: tuple[PlanInputs, Cluster, str, float | None]) -> Point:
    return plan_point(*args)


def _run(inputs: PlanInputs, tasks: list[tuple[Cluster, str, float | None]], jobs: int, on_point: Callable[[Point], None] | None) -> list[Point]:
    if not isinstance(jobs, int) or jobs < 1:
        raise BandwiseError(f"--jobs={jobs!r} must be a positive integer")
    for cluster, _, _ in tasks:
        cluster.check_devices(inputs.devices)
    points: list[Point] = []
    if jobs == 1 or len(tasks) == 1:
        for cluster, label, value in tasks:
            points.append(plan_point(inputs, cluster, label, value))
            if on_point:
                on_point(points[-1])
        return points
    # The first point runs here, so that workers forked afterwards inherit its warm
    # pipeline-simulation cache instead of each re-simulating every schedule.
    points.append(plan_point(inputs, *tasks[0]))
    if on_point:
        on_point(points[-1])
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks) - 1)) as pool:
        for point in pool.map(_plan_task, [(inputs, *t) for t in tasks[1:]]):
            points.append(point)
            if on_point:
                on_point(point)
    return points


def compare(inputs: PlanInputs, clusters: list[Cluster], *, jobs: int = 1, on_point: Callable[[Point], None] | None = None) -> list[Point]:
    """Plan the same model and device count on each cluster."""
    if not clusters:
        raise BandwiseError("--clusters is empty; give cluster presets separated by commas, e.g. h100,gb200-nvl72")
    return _run(inputs, [(c, c.name, None) for c in clusters], jobs, on_point)


@dataclass(kw_only=True, slots=True)
class Vary:
    kind: str
    """'scale-up-size' or 'scale-out-bandwidth'."""
    values: tuple[float, ...]
    """Ascending; devices for scale-up-size, GB/s per device per direction for scale-out-bandwidth."""


def parse_vary(text: str) -> Vary:
    """'scale-up-size=8,16,72' -> Vary('scale-up-size', (8, 16, 72)); every mistake is one line."""
    kind, sep, rest = (text or "").partition("=")
    kind = kind.strip()
    if not sep or kind not in VARY_KINDS:
        raise BandwiseError(f"--vary {text!r}: expected scale-up-size=8,16,72 or scale-out-bandwidth=25,50,100 (GB/s per device)")
    items = [v.strip() for v in rest.split(",") if v.strip()]
    if not items:
        raise BandwiseError(f"--vary {text!r}: give at least one value after '=', e.g. {kind}=8,72")
    values: list[float] = []
    for item in items:
        try:
            v = float(item)
        except ValueError:
            raise BandwiseError(f"--vary {kind}: {item!r} is not a number") from None
        if not (math.isfinite(v) and v > 0):
            raise BandwiseError(f"--vary {kind}: {item!r} must be a positive number")
        if kind == "scale-up-size" and v != int(v):
            raise BandwiseError(f"--vary scale-up-size: {item!r} must be a whole number of devices")
        values.append(v)
    if len(set(values)) != len(values):
        raise BandwiseError(f"--vary {kind}: values repeat ({rest}); give each value once")
    if len(values) > MAX_SWEEP_VALUES:
        raise BandwiseError(f"--vary {kind}: {len(values)} values are past the bound of {MAX_SWEEP_VALUES}; sweep at most {MAX_SWEEP_VALUES} at once")
    return Vary(kind=kind, values=tuple(sorted(values)))


def vary_cluster(base: Cluster, kind: str, value: float) -> Cluster:
    """The base cluster with level 0's size or level 1's bandwidth set to `value`."""
    if kind == "scale-up-size":
        if base.levels[0].is_torus:
            raise BandwiseError(
                f"--vary scale-up-size needs a GPU cluster with a switched scale-up domain; {base.name}'s level 0 is a torus "
                f"({base.levels[0].name}); use --base-cluster h100 or vary scale-out-bandwidth"
            )
        if len(base.levels) < 2:
            raise BandwiseError(f"--vary scale-up-size: cluster {base.name} has a single level, nothing lies outside its scale-up domain")
        changed = base.with_level(0, size=int(value))
        label = f"{base.name} {base.levels[0].name} x{int(value)}"
    elif kind == "scale-out-bandwidth":
        if len(base.levels) < 2:
            raise BandwiseError(f"--vary scale-out-bandwidth: cluster {base.name} has no scale-out level (level 1)")
        changed = base.with_level(1, bandwidth=value * 1e9)
        label = f"{base.name} {base.levels[1].name} {value:g} GB/s"
    else:
        raise BandwiseError(f"--vary {kind!r}: expected one of {', '.join(VARY_KINDS)}")
    return replace(changed, name=label)


@dataclass(kw_only=True, slots=True)
class SweepResult:
    base: Cluster
    vary: Vary
    points: list[Point]

    @property
    def crossover(self) -> float | None:
        return crossover(self.points)

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_cluster": self.base.name,
            "vary": self.vary.kind,
            "unit": VARY_KINDS[self.vary.kind],
            "values": list(self.vary.values),
            "crossover": self.crossover,
            "points": self.points,
        }


def crossover(points: list[Point]) -> float | None:
    """Smallest swept value from which on every point's verdict is 'PP not needed' (see the module docstring)."""
    ordered = sorted(points, key=lambda p: p.value)
    found: float | None = None
    for p in reversed(ordered):
        if p.verdict.needs_pp is not False:  # PP needed, or no verdict (nothing fits)
            break
        found = p.value
    return found


def sweep(inputs: PlanInputs, base: Cluster, vary: Vary, *, on_point: Callable[[Point], None] | None = None) -> SweepResult:
    """Re-plan at each value of the varied quantity, with and without PP.

    Every point varies only the interconnect of one device, so one `NetworkSearch` enumerates
    the candidates once and answers each point exhaustively by evaluating them in order of their
    compute-only lower bound; one process answers a few dozen points in seconds.
    """
    clusters = [vary_cluster(base, vary.kind, v) for v in vary.values]
    for cluster in clusters:
        cluster.check_devices(inputs.devices)
    if not valid_count(inputs.model, inputs.devices, inputs.global_batch, {}, precisions=inputs.precisions):
        raise BandwiseError(no_valid_layout(inputs.model, inputs.devices, inputs.global_batch, precisions=inputs.precisions))
    shared = NetworkSearch(
        inputs.model, base, inputs.devices, inputs.global_batch, top=1,
        precisions=inputs.precisions, overlap=inputs.overlap, params=inputs.params_on(base), max_rows=inputs.max_rows,
        **inputs.search_space(base),
    )
    points = []
    for cluster, value in zip(clusters, vary.values):
        result = shared.search(cluster)
        points.append(Point(label=cluster.name, value=value, cluster=cluster, result=result, verdict=decide(result, cluster, inputs.threshold),
                            engine=inputs.engine_label(base)))
        if on_point:
            on_point(points[-1])
    return SweepResult(base=base, vary=vary, points=points)
