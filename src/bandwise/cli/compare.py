"""`bandwise compare`: parse arguments, plan one model on each cluster, print or draw."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from bandwise import api
from bandwise.cli.options import (
    ATTENTION,
    CALIBRATION,
    EAGER,
    ENGINE,
    EXHAUSTIVE,
    GLOBAL_BATCH,
    GLOBAL_BATCH_TOKENS,
    FP8_RECIPE,
    GRAD_REDUCE,
    HEADROOM,
    JSON_OUT,
    OVERLAP_EP,
    OVERLAP_TP,
    PRECISION,
    PRICE,
    SEQ_LEN,
    STEPS,
    THRESHOLD_OPT,
    TOKENS,
    command_line,
    devices_option,
    model_option,
)
from bandwise.cli.points import (
    HELP_WORDS,
    header,
    narrowed_lines,
    points_table,
    run_with_bar,
)
from bandwise.files import check_destinations, write_text_atomic
from bandwise.plan.run_budget import frontier, run_ask
from bandwise.plan.sweep import Point
from bandwise.report.output import Output
from bandwise.report.plots import compare_chart
from bandwise.report.run import runs_table
from bandwise.report.tables import min_width

DEFAULT_CLUSTERS = "h100,h800,gb200-nvl72,tpu-v5p"

COMPARE_HELP = """Plan one model on several clusters: per cluster the best layout, the best layout without pipeline
parallelism (PP), the verdict with its reason, and the dominant exposed cost (the
largest communication term not hidden behind compute, with its link and ms per step) of the best
layout without PP, which is what a pipeline would have to remove.

The verdict is the one `bandwise plan` gives (see `bandwise plan --help`): PP is not needed when the
best layout without PP is within --threshold of the best overall, in tokens/s per device; a cluster
where nothing fits has no verdict ("nothing fits").
"""


def _point_line(p: Point) -> str:
    dom = p.dominant.describe() if p.dominant else "none exposed"
    return f"[b]{p.label}[/b]: {p.verdict.reason}; dominant exposed cost without PP: {dom}"


def compare(
    ctx: typer.Context,
    model: str = model_option("deepseek-v3"),
    devices: int = devices_option(2048),
    clusters: str = typer.Option(DEFAULT_CLUSTERS, "--clusters", "-c", help="Cluster presets or cluster files, comma-separated."),
    engine: str | None = ENGINE,
    seq_len: int | None = SEQ_LEN,
    global_batch: int | None = GLOBAL_BATCH,
    global_batch_tokens: int | None = GLOBAL_BATCH_TOKENS,
    precision: str = PRECISION,
    threshold: float = THRESHOLD_OPT,
    headroom: float = HEADROOM,
    overlap_tp: bool = OVERLAP_TP,
    overlap_ep: bool = OVERLAP_EP,
    attention: str = ATTENTION,
    eager: bool = EAGER,
    grad_reduce: str | None = GRAD_REDUCE,
    fp8_recipe: str | None = FP8_RECIPE,
    jobs: int = typer.Option(1, "--jobs", "-j", help="Plan this many points at once in worker processes."),
    png: Path | None = typer.Option(None, "--png", help="Also draw the grouped bar chart to this PNG file."),
    html_out: Path | None = typer.Option(None, "--html", help="Also write the result as one self-contained HTML page (the chart inline; opens offline) to this file."),
    exhaustive: bool = EXHAUSTIVE,
    json_out: bool = JSON_OUT,
    tokens: str | None = TOKENS,
    steps: int | None = STEPS,
    price: str | None = PRICE,
    calibration: Path | None = CALIBRATION,
) -> None:
    out = Output(json_mode=json_out)
    names = [c.strip() for c in clusters.split(",") if c.strip()]
    asked = {"engine": engine, "seq_len": seq_len, "global_batch": global_batch, "global_batch_tokens": global_batch_tokens, "precision": precision,
             "threshold": threshold, "headroom": headroom, "overlap_tp": overlap_tp, "overlap_ep": overlap_ep, "attention": attention, "eager": eager, "grad_reduce": grad_reduce, "fp8_recipe": fp8_recipe,
             "jobs": jobs, "exhaustive": exhaustive, "tokens": tokens, "steps": steps, "price": price, "calibration": calibration}
    run_ask(tokens, steps, price)  # refuse before the bar draws
    check_destinations((png, "the chart"), (html_out, "the HTML page"))
    api.planning.compare_inputs(model, clusters, devices, **{k: v for k, v in asked.items() if k not in ("tokens", "steps", "price")})
    held: list[api.CompareResult] = []

    def run(done: Callable[[Point], None]) -> list[Point]:
        held.append(api.compare(model, clusters, devices, on_point=done, **asked))
        return held[0].points

    points = run_with_bar(out, names, f"{model} on {len(names)} clusters", run)
    compared = held[0]
    inputs = compared.inputs
    if png is not None:
        compare_chart(points, inputs, str(png))
    if html_out is not None:
        from bandwise.api.pictures import (
            compare_html,  # the page's modules load only where a page is asked for
        )

        write_text_atomic(html_out, compare_html(compared, command_line(ctx)), what="the HTML page")
    validation = compared.validation
    if json_out:
        out.emit_json({**compared.to_dict(), **({"png": str(png)} if png else {}), **({"html": str(html_out)} if html_out else {})})
        return
    header(out, inputs, ", ".join(names))
    table = points_table(points, "Best layout with and without pipeline parallelism", "cluster")
    out.print(table, min_width=min_width(table))
    for p in points:
        out.print(_point_line(p))
    for name, v in validation.items():
        out.print(f"{name}: tokens/s and MFU {v['line']}")
    if compared.runs is not None:
        runs = runs_table(list(compared.runs.items()), frontier(compared.runs), "cluster")
        out.print(runs, min_width=min_width(runs))
    narrowed_lines(out, points)
    if png is not None:
        out.print(f"chart written to {png}")
    if html_out is not None:
        out.print(f"page written to {html_out}")


def register(app: typer.Typer) -> None:
    app.command("compare", help=COMPARE_HELP + HELP_WORDS)(compare)
