"""`bandwise schedule`: simulate one pipeline schedule, print its timeline and per-rank figures."""

from __future__ import annotations

import typer

from bandwise.cost.pipeline import PipelineSpec, simulate
from bandwise.errors import BandwiseError
from bandwise.report import glossary
from bandwise.report.output import Output
from bandwise.report.tables import min_width, plain_table
from bandwise.report.timeline import gantt, text_rows
from bandwise.specs.strategy import SCHEDULES, SINGLE_STAGE

MAX_PASSES = 1 << 16
"""Most stage passes (p·v·m) one timeline may hold: this command records and draws every action,
2.6-2.9 s for 65,536 on two cores (`bandwise schedule --stages 8 --microbatches 8192 --json`, three runs). The planner simulates larger m without a timeline and extrapolates
(`cost.pipeline.pipeline_summary`)."""


def schedule(
    name: str = typer.Option("1F1B", "--schedule", help=f"One of: {', '.join(SCHEDULES)}."),
    stages: int = typer.Option(4, "--stages", help="Pipeline ranks p."),
    microbatches: int = typer.Option(8, "--microbatches", help=f"Micro-batches per step m (p·v·m at most {MAX_PASSES:,})."),
    virtual: int = typer.Option(0, "--virtual", help="Stages per rank v (default 1 for GPipe/1F1B, else 2)."),
    f: float = typer.Option(1.0, "--f", help="Forward time of one micro-batch through one stage."),
    b: float = typer.Option(1.0, "--b", help="Backward-for-input time (a fused backward takes b + w)."),
    w: float = typer.Option(1.0, "--w", help="Backward-for-weights time."),
    latency: float = typer.Option(0.0, "--latency", help="Point-to-point transfer time between ranks."),
    activation_bytes: float = typer.Option(0.0, "--activation-bytes", help="Saved bytes of one micro-batch through one stage (adds peak bytes)."),
    kept_for_w: float = typer.Option(1.0, "--kept-for-w", help="Share of activations held from I until W (split-backward schedules)."),
    head_scale: float = typer.Option(1.0, "--head-scale", help="The last stage's F, B and W over the others' (it also runs the output head and the loss)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of the timeline."),
    png: str = typer.Option("", "--png", help="Also draw a Gantt chart to this PNG (needs matplotlib)."),
    width: int = typer.Option(0, "--width", help="Characters for the text timeline (default: the terminal's width)."),
) -> None:
    out = Output(json_mode=json_out)
    width = width if width > 0 else max(20, out.console.width - len("rank  0 |") - 1)
    known = {s.lower(): s for s in SCHEDULES}
    name = known.get(name.lower(), name)
    v = virtual or (1 if name in SINGLE_STAGE else 2)
    if stages > 0 and microbatches > 0 and v > 0 and stages * v * microbatches > MAX_PASSES:
        raise BandwiseError(f"--stages {stages} x --virtual {v} x --microbatches {microbatches} = {stages * v * microbatches:,} stage passes, "
                            f"past the {MAX_PASSES:,} a drawn timeline holds; use fewer micro-batches (the bubble share settles after a few times p)")
    if not (head_scale > 0 and head_scale != float("inf")):
        raise BandwiseError(f"--head-scale {head_scale}: give the last stage's time over the others' as a number > 0 (1: alike)")
    scale = None if head_scale == 1.0 or stages <= 0 or v <= 0 else (1.0,) * (stages * v - 1) + (head_scale,)
    spec = PipelineSpec(schedule=name, stages=stages, microbatches=microbatches, virtual=v, f=f, b=b, w=w, latency=latency, kept_for_w=kept_for_w,
                        stage_scale=scale)
    t = simulate(spec, activation_bytes=activation_bytes if activation_bytes > 0 else None)
    if png:
        gantt(t, png)
    if json_out:
        out.emit_json(t.to_dict())
        return
    title = (f"{name}  p={stages} m={microbatches}" + (f" v={v}" if v > 1 else "") + f"  (F={f:g} B={b:g} W={w:g}"
             + (f", last stage x{head_scale:g}" if scale else "") + "; F forward, B backward, I/W split backward, . idle)")
    out.print(title)
    for row in text_rows(t, width):
        out.print(row)
    cols: dict[str, list[str]] = {k: [] for k in ("rank", "stages", "busy", "idle", "peak in-flight") + (("peak bytes",) if t.peak_bytes else ())}
    for r in range(stages):
        cells = [str(r), ",".join(map(str, t.stage_of_rank[r])), f"{t.busy[r]:g}", f"{t.rank_bubble[r]:.1%}", f"{t.peak_inflight[r]:.3g}"]
        cells += [f"{t.peak_bytes[r]:.4g}"] if t.peak_bytes else []
        for k, cell in zip(cols, cells):
            cols[k].append(cell)
    table = plain_table(f"makespan {t.makespan:g}, bubble {t.bubble_fraction:.1%}", cols, (), glossary.SCHEDULE)
    out.print(table, min_width=min_width(table))
    if png:
        out.print(f"Gantt chart written to {png}")


def register(app: typer.Typer) -> None:
    app.command("schedule", help=f"Simulate a pipeline schedule: per-rank order, timeline, bubble and in-flight activations.\n\n{glossary.SCHEDULE}")(schedule)
