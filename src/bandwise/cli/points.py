"""What `compare` and `sweep` both print for their planned points: progress, table, header, notes."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Group
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from bandwise.cost.params import GRAD_REDUCE, CostParams, grad_reduce_name
from bandwise.plan.search import Layout, narrowed_note
from bandwise.plan.sweep import PlanInputs, Point
from bandwise.report import glossary
from bandwise.report.output import Output
from bandwise.report.tables import plain_table
from bandwise.specs.engine import Engine


def _progress(out: Output, what: str) -> Progress:
    return Progress(
        TextColumn(f"planning {what}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
        TimeElapsedColumn(), transient=True, console=out.console, disable=out.json_mode,
    )


def run_with_bar(out: Output, labels: list[str], what: str, run: Callable[[Callable[[Point], None]], list[Point]]) -> list[Point]:
    """`run(done)` under a progress bar that `done(point)` advances, labelled with the next point."""
    with _progress(out, what) as bar:
        task = bar.add_task(labels[0] if labels else "", total=len(labels))

        finished = [0]

        def done(p: Point) -> None:  # points finish in order (`plan.sweep._run`)
            finished[0] += 1
            k = finished[0]
            bar.update(task, advance=1, description=labels[k] if k < len(labels) else "")

        return run(done)


def _layout(lay: Layout | None) -> tuple[str, str]:
    if lay is None:
        return "none fits", "-"
    return lay.strategy.describe(), f"{lay.estimate.mfu:.1%}"


VERDICT_CELL = {True: "PP needed", False: "PP not needed", None: "nothing fits"}


def points_table(points: list[Point], title: str, first: str) -> Group:
    """One row per point, narrow enough for 80 columns; the dominant exposed cost goes in the lines below."""
    cols: dict[str, list[str]] = {first: [], "best layout": [], "MFU": [], "best without PP": [], "MFU ": [], "verdict": []}
    for p in points:
        verdict = VERDICT_CELL[p.verdict.needs_pp] + (f" ({p.verdict.gain:+.1%})" if p.verdict.gain is not None else "")
        first_cell = p.label if p.value is None else f"{p.value:g}"
        for k, cell in zip(cols, (first_cell, *_layout(p.best), *_layout(p.best_without_pp), verdict)):
            cols[k].append(cell)
    return plain_table(title, cols, (first, "best layout", "best without PP", "verdict"), f"{glossary.COMPARE} {glossary.LAYOUT}")


def narrowed_lines(out: Output, points: list[Point]) -> None:
    """How narrowed searches were done, once per distinct way (clusters of one device count share it)."""
    notes: dict[str, list[str]] = {}
    for p in points:
        if "narrowed" in p.result.extra:
            notes.setdefault(narrowed_note(p.result.extra["narrowed"]), []).append(p.label)
    for note, labels in notes.items():
        out.print(f"[b]{', '.join(labels)}[/b]: {note}" if len(points) > 1 else note)


def priced_as(engine: Engine, params: CostParams | None = None, fp8: bool = False) -> str:
    """The line under every planning header that says which software the figures assume, the
    attention kernel where it is not the chip's current fused one (the engine's or `--attention`), the
    gradient dtype where it is not fp32 (`--grad-reduce`), and the float8 recipe where fp8 is priced
    (`--fp8-recipe`)."""
    line = f"priced as [b]{engine.label}[/b] runs it: {engine.title} (bandwise engines --show {engine.name}; --engine to change)"
    kernel = None if params is None else params.attention if params.flash_attention else "materialized"
    if kernel not in (None, "flash"):
        line += f"; attention [b]{kernel}[/b] (--attention)"
    if params is not None and params.grad_reduce_bytes != GRAD_REDUCE["fp32"]:
        line += f"; gradients kept and reduced in [b]{grad_reduce_name(params.grad_reduce_bytes)}[/b] (--grad-reduce)"
    if params is not None and fp8:
        line += f"; fp8 GEMMs scaled [b]{params.fp8_recipe}[/b] (--fp8-recipe)"
    return line


def header(out: Output, inputs: PlanInputs, where: str) -> None:
    m = inputs.model
    out.print(
        f"[b]{m.name}[/b] on [b]{inputs.devices}[/b] devices of {where}, seq {m.seq_len}, global batch {inputs.global_batch} "
        f"sequences = {inputs.global_batch * m.seq_len / 1e6:.1f}M tokens; a point's verdict is 'PP not needed' when its best "
        f"layout without PP is within {inputs.threshold:.0%} of its best"
    )
    if inputs.pricing:
        out.print(priced_as(inputs.pricing.engine, inputs.params, "fp8" in inputs.precisions))
    for name, other in inputs.pricing_by_cluster.items():
        out.print(f"[b]{name}[/b] priced as [b]{other.engine.label}[/b] runs it: the engine of its platform, where no --engine is named "
                  f"(bandwise engines --show {other.engine.name})")
    if inputs.calibration is not None:
        out.print(f"calibrated by {inputs.calibration.label}: applied to the {inputs.calibration.device} points; "
                  f"levels it did not measure keep their datasheet bandwidth")


HELP_WORDS = f"\n\n[b]Words[/b]: {glossary.COMPARE}\n\n{glossary.LAYOUT}"
"""The words under both commands' --help."""
