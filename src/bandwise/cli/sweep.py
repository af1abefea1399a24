"""`bandwise sweep`: parse arguments, re-plan one model while one interconnect quantity changes, print or draw."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from bandwise import api
from bandwise.api.devices_sweep import PREFIX, sweep_devices
from bandwise.errors import BandwiseError
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
from bandwise.plan.run_budget import frontier
from bandwise.plan.sweep import VARY_KINDS, Point, SweepResult, parse_vary, vary_cluster
from bandwise.report.output import Output
from bandwise.report.plots import run_frontier_chart, sweep_chart
from bandwise.report.run import runs_table
from bandwise.report.tables import min_width
from bandwise.specs.registry import get_cluster

SWEEP_HELP = """Re-plan one model while one interconnect quantity of a base cluster changes, and show where PP stops
paying off.

--vary scale-up-size=8,16,36,72,144 sets the size of the scale-up domain (level 0, the NVLink
domain: 8 on HGX H100, 72 on GB200 NVL72); GPU base clusters only.
--vary scale-out-bandwidth=25,50,100,200,400 sets the scale-out network (level 1: InfiniBand, or
DCN between TPU slices) in GB/s per device per direction (50 = one 400 Gb/s NIC per GPU).
--vary devices=1024,2048,4096 --tokens 15T plans the whole run at each device count: days, device-hours,
cost and goodput (a larger job fails more often), and marks the time/cost frontier: where adding
devices stops paying.

Each point is an exhaustive search with and without PP. The crossover is the smallest swept value
from which on the verdict is "PP not needed" at every larger value too: the best layout without PP
is within --threshold of the best overall there, exactly as `bandwise plan` decides.
"""


def sweep(
    ctx: typer.Context,
    vary: str | None = typer.Option(None, "--vary", help="scale-up-size=8,16,36,72,144, scale-out-bandwidth=25,50,100,200,400 (GB/s per device) or devices=1024,2048,4096."),
    model: str = model_option("deepseek-v3"),
    devices: str = typer.Option("2048", "--devices", "-n", help="Number of accelerators; several, comma-separated, sweep the device count (as --vary devices=...)."),
    base_cluster: str = typer.Option("h100", "--base-cluster", "-c", help="Cluster preset or file whose level is varied."),
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
    png: Path | None = typer.Option(None, "--png", help="Also draw MFU against the varied quantity, and the exposed communication by dim, to this PNG file."),
    html_out: Path | None = typer.Option(None, "--html", help="Also write the result as one self-contained HTML page (the chart inline; opens offline) to this file."),
    exhaustive: bool = EXHAUSTIVE,
    json_out: bool = JSON_OUT,
    tokens: str | None = TOKENS,
    steps: int | None = STEPS,
    price: str | None = PRICE,
    calibration: Path | None = CALIBRATION,
) -> None:
    out = Output(json_mode=json_out)
    vary, count = _what_varies(vary, devices)
    check_destinations((png, "the chart"), (html_out, "the HTML page"))  # before the points are planned
    if vary.startswith(PREFIX):
        # each point is a `bandwise plan`: what plan does not take is refused, not dropped
        if overlap_ep:
            raise BandwiseError(f"--overlap-ep is not taken by --vary {vary.strip()}, whose points are priced as `bandwise plan` prices them; drop it")
        _sweep_devices(out, vary.strip(), model, base_cluster, png, json_out, html_out, command_line(ctx),
                       tokens=tokens, steps=steps, price=price, engine=engine, seq_len=seq_len, global_batch=global_batch,
                       global_batch_tokens=global_batch_tokens, precision=precision, threshold=threshold, headroom=headroom,
                       overlap_tp=overlap_tp, attention=attention, eager=eager, grad_reduce=grad_reduce, fp8_recipe=fp8_recipe,
                       exhaustive=exhaustive, calibration=calibration)
        return
    spec = parse_vary(vary)
    base = get_cluster(base_cluster)
    labels = [vary_cluster(base, spec.kind, v).name for v in spec.values]
    asked = {"base_cluster": base, "engine": engine, "seq_len": seq_len, "global_batch": global_batch, "global_batch_tokens": global_batch_tokens,
             "precision": precision, "threshold": threshold, "headroom": headroom, "overlap_tp": overlap_tp, "overlap_ep": overlap_ep,
             "attention": attention, "eager": eager, "grad_reduce": grad_reduce, "fp8_recipe": fp8_recipe, "exhaustive": exhaustive,
             "tokens": tokens, "steps": steps, "price": price, "calibration": calibration}
    held: list[api.SweepOutcome] = []

    def run(done: Callable[[Point], None]) -> list[Point]:
        held.append(api.sweep(vary, model, count, on_point=done, **asked))
        return held[0].points

    run_with_bar(out, labels, f"{len(labels)} points", run)
    inputs, result = held[0].inputs, held[0].result
    if png is not None:
        sweep_chart(result, inputs, str(png))
    if html_out is not None:
        from bandwise.api.pictures import (
            sweep_html,  # the page's modules load only where a page is asked for
        )

        write_text_atomic(html_out, sweep_html(held[0], command_line(ctx)), what="the HTML page")
    if json_out:
        out.emit_json({**held[0].to_dict(), **({"png": str(png)} if png else {}), **({"html": str(html_out)} if html_out else {})})
        return
    header(out, inputs, f"{base.name}, {spec.kind} varied")
    table = points_table(result.points, VARY_KINDS[spec.kind].capitalize(), spec.kind)
    out.print(table, min_width=min_width(table))
    for p in sorted(result.points, key=lambda p: p.value):
        out.print(f"[b]{p.value:g}[/b]: dominant exposed cost without PP: {p.dominant.describe() if p.dominant else 'none exposed'}")
    out.print(_crossover_line(result))
    runs = held[0].runs
    if runs is not None:
        by_value = [(f"{p.value:g}", runs[p.label]) for p in sorted(result.points, key=lambda p: p.value)]
        on = {f"{p.value:g}" for p in result.points if p.label in frontier(runs)}
        table = runs_table(by_value, on, spec.kind)
        out.print(table, min_width=min_width(table))
    narrowed_lines(out, result.points[:1])
    if png is not None:
        out.print(f"chart written to {png}")
    if html_out is not None:
        out.print(f"page written to {html_out}")


def _what_varies(vary: str | None, devices: str) -> tuple[str, int]:
    """(what to vary, the device count of an interconnect sweep): several --devices are `--vary devices=...`."""
    counts = devices.strip()
    if "," in counts:
        if vary is not None:
            raise BandwiseError(f"--devices {counts!r} sweeps the device count; --vary {vary!r} varies another quantity: give one of them")
        return PREFIX + counts, 0
    if vary is None:
        raise BandwiseError("nothing to vary: give --vary scale-up-size=..., --vary scale-out-bandwidth=..., or several --devices (1024,2048,4096)")
    if not counts.isdigit() or int(counts) < 1:
        raise BandwiseError(f"--devices {counts!r} is not a device count; write a positive whole number, or several separated by commas")
    return vary.strip(), int(counts)


def _sweep_devices(out: Output, vary: str, model: str, base_cluster: str, png: Path | None, json_out: bool, html_out: Path | None,
                   command: str, **kw) -> None:
    """`--vary devices=...`: the whole run at each device count, and where adding devices stops paying."""
    swept = sweep_devices(vary, model, base_cluster, **kw)
    runs = swept.runs
    on = frontier(runs)
    if png is not None:
        first = swept.plans[0]
        run_frontier_chart(list(runs), list(runs.values()), on, f"{first.model.name} on {first.cluster.name}: days against cost", str(png))
    if html_out is not None:
        from bandwise.api.devices_sweep import devices_html  # the page's modules load only where a page is asked for

        write_text_atomic(html_out, devices_html(swept, command), what="the HTML page")
    if json_out:
        out.emit_json({**swept.to_dict(), **({"png": str(png)} if png else {}), **({"html": str(html_out)} if html_out else {})})
        return
    table = runs_table(list(runs.items()), on, "devices", marginal=True)
    out.print(table, min_width=min_width(table))
    for n, p in zip(swept.counts, swept.plans):
        out.print(f"[b]{n:,}[/b]: {p.best.strategy.describe() if p.best else 'nothing fits'}")
    if png is not None:
        out.print(f"chart written to {png}")
    if html_out is not None:
        out.print(f"page written to {html_out}")


def _crossover_line(result: SweepResult) -> str:
    x, pts = result.crossover, sorted(result.points, key=lambda p: p.value)
    kind = result.vary.kind
    if x is None:
        last = pts[-1]
        state = "nothing fits" if last.verdict.needs_pp is None else "PP still pays off"
        return f"[b]no crossover[/b]: {state} at {kind}={last.value:g}: {last.verdict.reason}"
    at = next(p for p in pts if p.value == x)
    if at is pts[0]:
        return f"[b]no crossover in range[/b]: PP is not needed from the smallest value, {kind}={x:g}: {at.verdict.reason}"
    below = pts[pts.index(at) - 1]
    state = "nothing fits" if below.verdict.needs_pp is None else "PP still pays off"
    return (
        f"[b]crossover at {kind}={x:g}[/b]: PP stops paying off there ({at.verdict.reason}); "
        f"at {below.value:g} {state} ({below.verdict.reason})"
    )


def register(app: typer.Typer) -> None:
    app.command("sweep", help=SWEEP_HELP + HELP_WORDS)(sweep)
