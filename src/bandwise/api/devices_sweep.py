"""`sweep --vary devices=1024,2048,...`: one model's whole run planned at each device count, in days
and cost, with the goodput a larger job loses; where adding devices stops paying is where the
time/cost frontier ends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bandwise.api.planning import plan
from bandwise.api.results import PlanResult, runs_dict
from bandwise.errors import BandwiseError
from bandwise.plan.run_budget import run_ask
from bandwise.plan.sweep import MAX_SWEEP_VALUES
from bandwise.report.output import plain

PREFIX = "devices="


def parse_counts(vary: str) -> list[int]:
    """'devices=1024,2048' -> [1024, 2048]; every mistake one line."""
    items = [v.strip() for v in vary.removeprefix(PREFIX).split(",") if v.strip()]
    if not items or not all(v.isdigit() and int(v) > 0 for v in items):
        raise BandwiseError(f"--vary {vary!r}: expected devices=1024,2048,4096 (whole numbers of devices)")
    counts = sorted({int(v) for v in items})
    if len(counts) != len(items):
        raise BandwiseError(f"--vary {vary!r}: a device count repeats; give each once")
    if len(counts) > MAX_SWEEP_VALUES:
        raise BandwiseError(f"--vary {vary!r}: {len(counts)} counts are past the bound of {MAX_SWEEP_VALUES}")
    return counts


@dataclass(kw_only=True, slots=True)
class DevicesSweep:
    """Each device count planned and its best layout priced for the same run."""

    counts: list[int]
    plans: list[PlanResult]

    @property
    def runs(self) -> dict[str, Any]:
        return {str(n): p.run for n, p in zip(self.counts, self.plans)}

    def to_dict(self) -> dict[str, Any]:
        first = self.plans[0]
        return plain({"model": first.model.name, "cluster": first.cluster.name, "engine": first.engine.label, "vary": "devices",
                      "values": self.counts,
                      "points": [{"devices": n, "best": p.best, "verdict": {"needs_pp": p.needs_pp, "reason": p.reason}}
                                 for n, p in zip(self.counts, self.plans)],
                      **runs_dict(self.runs)})


def sweep_devices(vary: str, model: Any, base_cluster: Any, *, tokens: Any = None, steps: int | None = None, price: Any = None,
                  **plan_kw: Any) -> DevicesSweep:
    """Plan `model` on `base_cluster` at each device count of `vary` and price the run (`tokens` or `steps`)."""
    counts = parse_counts(vary)
    if run_ask(tokens, steps, price) is None:
        raise BandwiseError(f"--vary {vary}: a sweep over device counts compares whole runs; add --tokens (e.g. 15T) or --steps")
    plans = [plan(model, base_cluster, n, tokens=tokens, steps=steps, price=price, top=1, must_fit=False, **plan_kw) for n in counts]
    return DevicesSweep(counts=counts, plans=plans)


def devices_html(swept: DevicesSweep, command: str) -> str:
    """The page of `sweep --vary devices=... --html` (`report.points_page.devices_page`)."""
    from bandwise.plan.run_budget import frontier
    from bandwise.report.plots import run_frontier_figure
    from bandwise.report.points_page import devices_page

    runs, first = swept.runs, swept.plans[0]
    fig = run_frontier_figure(list(runs), list(runs.values()), frontier(runs), f"{first.model.name} on {first.cluster.name}: days against cost")
    names = [p.best.strategy.describe() if p.best else "" for p in swept.plans]
    return devices_page(swept.to_dict(), names, fig, command)
