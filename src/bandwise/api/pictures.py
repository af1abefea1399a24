"""A plan as a page or a picture: `plan_html` and `plan_png` (what `plan --html` and `--png` write);
a doctor's report as a page: `doctor_html` (what `doctor trace --html` writes); a comparison and a
sweep as pages: `compare_html` and `sweep_html`."""

from __future__ import annotations

from pathlib import Path

from bandwise.api.results import CompareResult, DoctorResult, PlanResult, SweepOutcome
from bandwise.cost.pipeline import PipelineSpec, Timeline, simulate
from bandwise.errors import BandwiseError
from bandwise.files import write_text_atomic
from bandwise.plan.space import LayoutSpace, layout_space
from bandwise.plan.sweep import Point
from bandwise.report.doctor_page import doctor_page
from bandwise.report.html import esc, value
from bandwise.report.plan_page import plan_page, plan_picture
from bandwise.report.plots import compare_figure, sweep_figure
from bandwise.report.points_page import points_page
from bandwise.specs.strategy import Strategy

DRAWN_MICROBATCHES = 2
"""Micro-batches per pipeline stage a drawn timeline shows at most: the ramp-up and ramp-down (the
bubble) are whole, and the steady state only repeats."""


def space_of(result: PlanResult) -> LayoutSpace:
    """Every candidate the plan's search walked (`plan.space`)."""
    return layout_space(result.model, result.cluster, result.devices, result.global_batch, result.search, result.search_options)


def heading(result: PlanResult) -> str:
    m = result.model
    return (f"{m.name} on {result.devices} x {result.cluster.name} ({result.cluster.device.name}), seq {m.seq_len}, "
            f"global batch {result.global_batch} sequences")


def timeline_of(s: Strategy, microbatches: int) -> tuple[Timeline | None, str]:
    """The schedule of `s` simulated in units of one stage's forward (backward twice that), and a note."""
    if s.pp == 1:
        return None, "The recommended layout does not pipeline."
    shown = min(microbatches, DRAWN_MICROBATCHES * s.pp)
    try:
        t = simulate(PipelineSpec(schedule=s.schedule, stages=s.pp, microbatches=shown, virtual=s.virtual_stages))
    except (BandwiseError, ValueError) as exc:
        return None, f"no timeline drawn for {s.schedule} with {shown} micro-batches: {exc}"
    note = (f"{s.schedule} over {s.pp} stages, {shown} of the step's {microbatches} micro-batches drawn (the steady state repeats); "
            "time in units of one stage's forward, a backward taking twice that.") if shown < microbatches else (
            f"{s.schedule} over {s.pp} stages and {microbatches} micro-batches; time in units of one stage's forward, a backward taking twice that.")
    return t, note


def plan_html(result: PlanResult, command: str, space: LayoutSpace | None = None) -> str:
    """The page: verdict, layout space, step and memory by term, the recommended layout's pipeline."""
    space = space or space_of(result)
    t, note = timeline_of(result.best.strategy, result.best.estimate.microbatches) if result.best else (None, "")
    return plan_page(result.to_dict(), space, heading(result), command, result.cluster.device.hbm_bytes / 2**30, result.best,
                     result.best_without_pp, result.top, t, note)


def write_plan_html(result: PlanResult, path: str | Path, command: str) -> None:
    write_text_atomic(path, plan_html(result, command), what="the HTML page")


def plan_png(result: PlanResult, path: str | Path, space: LayoutSpace | None = None) -> None:
    """The layout space, and the step and memory of the top layouts, in one PNG."""
    plan_picture(str(path), space or space_of(result), heading(result), result.cluster.device.hbm_bytes / 2**30, result.best,
                 result.best_without_pp, result.top)


def draw(result: PlanResult, html: str | Path | None, png: str | Path | None, command: str) -> None:
    """Write the page and the picture asked for, from one walk of the layout space."""
    space = space_of(result)
    if html:
        write_text_atomic(html, plan_html(result, command, space), what="the HTML page")
    if png:
        plan_png(result, png, space)


def doctor_html(result: DoctorResult, command: str) -> str:
    """The page: breakdown, step timeline, kernel classes, findings, ranks and the plan's terms."""
    return doctor_page(result.to_dict(), result.title, command, result.analyses)


def write_doctor_html(result: DoctorResult, path: str | Path, command: str) -> None:
    write_text_atomic(path, doctor_html(result, command), what="the HTML report")


def _names(points: list[Point]) -> list[tuple[str, str]]:
    return [(p.best.strategy.describe() if p.best else "", p.best_without_pp.strategy.describe() if p.best_without_pp else "") for p in points]


def compare_html(result: CompareResult, command: str) -> str:
    """The page of `compare --html`: the chart of `--png`, each cluster's verdict and layouts."""
    m = result.inputs.model
    heading = f"{m.name} on {result.inputs.devices} devices of {len(result.points)} clusters, seq {m.seq_len}"
    return points_page(result.to_dict(), "clusters", _names(result.points), heading, compare_figure(result.points, result.inputs), command)


def sweep_html(outcome: SweepOutcome, command: str) -> str:
    """The page of `sweep --html`: the chart of `--png`, each value's verdict and layouts, the crossover."""
    m, r = outcome.inputs.model, outcome.result
    heading = f"{m.name} on {outcome.inputs.devices} devices, {r.base.name} with its {r.vary.kind} varied"
    doc = outcome.to_dict()
    return points_page(doc, "points", _names(outcome.points), heading, sweep_figure(r, outcome.inputs), command, value_line(doc))


def value_line(doc: dict) -> str:
    """The crossover as a figure of the document."""
    x = doc["crossover"]
    unit = esc(doc["unit"])
    return (f"No crossover: PP still pays off, or nothing fits, at the largest value ({unit})." if x is None
            else f"Crossover at {value('crossover', x, format(x, 'g'))}: PP is not needed from there on ({unit}).")
