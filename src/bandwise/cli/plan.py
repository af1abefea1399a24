"""`bandwise plan`: parse arguments, search the layouts, print the best and the verdict on PP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from bandwise import api
from bandwise.api.pictures import draw
from bandwise.api.planning import MAX_TOP
from bandwise.cost.calibrated import calibration_line
from bandwise.cli.options import (
    ATTENTION,
    CALIBRATION,
    EAGER,
    EMIT,
    ENGINE,
    EXHAUSTIVE,
    GLOBAL_BATCH,
    GLOBAL_BATCH_TOKENS,
    FP8_RECIPE,
    GRAD_REDUCE,
    HEADROOM,
    JSON_OUT,
    OVERLAP_TP,
    PRECISION,
    PRICE,
    SEQ_LEN,
    STEPS,
    THRESHOLD_OPT,
    TOKENS,
    command_line,
    devices_option,
    did_you_mean,
    engine_and_emit,
    model_option,
)
from bandwise.cli.points import priced_as
from bandwise.cost.memory import GIB
from bandwise.errors import BandwiseError, NothingFits
from bandwise.export import EMIT_POOL, export_searched
from bandwise.export.common import with_run
from bandwise.files import check_destinations
from bandwise.plan.bands import band_line
from bandwise.plan.run_budget import price_run, run_ask
from bandwise.plan.search import (
    FIXABLE,
    Layout,
    narrowed_note,
)
from bandwise.report import glossary
from bandwise.report.output import Output
from bandwise.report.run import run_lines
from bandwise.report.tables import breakdown, layouts_table, min_width, short_count
from bandwise.specs.registry import get_engine
from bandwise.specs.strategy import PRECISIONS, RECOMPUTE, SCHEDULES

PLAN_HELP = """Find the parallel layout with the most tokens/s per device that fits in memory, and say whether
pipeline parallelism (PP) is worth it.

Every valid layout is searched (data/FSDP, tensor, context, pipeline with all seven schedules,
expert parallelism, micro-batch, ZeRO stage, recomputation); layouts that need more than
(1 - headroom) of device memory are dropped; the rest are ranked by tokens/s per device.

[b]MFU[/b] is model FLOPs per token x tokens/s / (devices x dense peak FLOP/s of the training dtype),
with model FLOPs per token = 6 x active non-embedding parameters + 6 x the output projection +
attention 12 x layers x heads x head_dim x seq (PaLM's convention; a sliding-window layer counts the
mean keys a query attends to in place of seq). Recomputation is not counted
(that is HFU). Peaks are dense datasheet peaks, not the 2:4-sparse ones.

[b]Verdict[/b]: PP is [i]not needed[/i] when the best layout without PP is within --threshold (3%) of the
best layout with it; otherwise the verdict names what PP buys, in milliseconds per step: the
communication it avoids (and over which link), the recomputation it avoids, or the memory that
does not fit without it. There is no verdict when only one side was searched (--no-pp, --fix pp=...).

[b]Exit codes[/b]: 0 a plan; 2 bad input (one line naming the value and the fix); 3 nothing fits in
memory (the line says what would fit; --json still prints the document).
"""


def _parse_fix(text: str | None) -> dict[str, Any]:
    """'tp=1,ep=64,schedule=1F1B' -> {'tp': 1, 'ep': 64, 'schedule': '1F1B'}."""
    fixed: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in FIXABLE:
            raise BandwiseError(f"--fix {item!r}: expected name=value with name one of {', '.join(FIXABLE)}{did_you_mean(key, FIXABLE)}")
        choices = {"schedule": SCHEDULES, "recompute": RECOMPUTE, "precision": PRECISIONS}.get(key)
        if choices:
            if value not in choices:
                raise BandwiseError(f"--fix {key}={value!r}: valid values are {', '.join(choices)}{did_you_mean(value, choices)}")
            fixed[key] = value
        else:
            try:
                fixed[key] = int(value)
            except ValueError:
                raise BandwiseError(f"--fix {key}={value!r}: expected an integer") from None
            if fixed[key] < (0 if key == "zero_stage" else 1):
                raise BandwiseError(f"--fix {key}={value}: must be >= {0 if key == 'zero_stage' else 1}")
    return fixed


def plan(
    model: str = model_option("llama3-70b"),
    cluster: str = typer.Option("h100", "--cluster", "-c", help="Cluster preset (bandwise clusters) or a cluster file."),
    engine: str | None = ENGINE,
    devices: int = devices_option(64),
    seq_len: int | None = SEQ_LEN,
    global_batch: int | None = GLOBAL_BATCH,
    global_batch_tokens: int | None = GLOBAL_BATCH_TOKENS,
    top: int = typer.Option(10, "--top", help=f"How many layouts to list (at most {MAX_TOP})."),
    wide: bool = typer.Option(False, "--wide", help="More columns: step time, micro-batches, HFU, bubble, precision."),
    all_layouts: bool = typer.Option(False, "--all", help="List near-duplicates too (same degrees, within 1% of a listed layout)."),
    no_pp: bool = typer.Option(False, "--no-pp", help="Search only layouts without pipeline parallelism."),
    fix: str | None = typer.Option(None, "--fix", help="Pin fields, e.g. tp=1,ep=64,schedule=1F1B."),
    precision: str = PRECISION,
    threshold: float = THRESHOLD_OPT,
    headroom: float = HEADROOM,
    attention: str = ATTENTION,
    eager: bool = EAGER,
    grad_reduce: str | None = GRAD_REDUCE,
    fp8_recipe: str | None = FP8_RECIPE,
    overlap_tp: bool = OVERLAP_TP,
    exhaustive: bool = EXHAUSTIVE,
    json_out: bool = JSON_OUT,
    emit: str | None = EMIT,
    pick: int | None = typer.Option(None, "--pick", help="With --emit: the layout in row PICK of the table (default: the recommended one)."),
    html_out: Path | None = typer.Option(None, "--html", help="Also write the plan as one self-contained HTML page (charts inline; opens offline) to this file."),
    png: Path | None = typer.Option(None, "--png", help="Also draw the layout space and the top layouts' step time and memory to this PNG."),
    calibration: Path | None = CALIBRATION,
    ctx: typer.Context = typer.Option(None, hidden=True),
    tokens: str | None = TOKENS,
    steps: int | None = STEPS,
    price: str | None = PRICE,
) -> None:
    out = Output(json_mode=json_out)
    engine, emit = engine_and_emit(cluster, engine, emit, json_out)
    check_destinations((html_out, "the HTML page"), (png, "the plan picture"))  # before the search, not after it
    if pick is not None and emit is None:
        raise BandwiseError("--pick chooses the layout --emit exports; add --emit (the --engine's job), or --emit torchtitan, megatron or maxtext")
    if pick is not None and not 1 <= pick <= top:
        raise BandwiseError(f"--pick {pick}: the table lists rows 1 to {top}; use one of them (or a larger --top)")
    # a pool deep enough that collapsing near-duplicates still leaves `top` distinct layouts
    pool = top if all_layouts else max(20 * top, 100)
    if emit:  # deep enough to find the best layout the engine can express when it cannot express the plan
        pool = max(pool, EMIT_POOL)
    asked: dict[str, Any] = {
        "engine": engine, "seq_len": seq_len, "global_batch": global_batch, "global_batch_tokens": global_batch_tokens, "top": top,
        "all_layouts": all_layouts, "allow_pp": not no_pp, "fix": _parse_fix(fix), "precision": precision, "threshold": threshold,
        "headroom": headroom, "attention": attention, "eager": eager, "grad_reduce": grad_reduce, "fp8_recipe": fp8_recipe, "overlap_tp": overlap_tp, "exhaustive": exhaustive, "pool": pool,
        "must_fit": False, "tokens": tokens, "steps": steps, "price": price, "calibration": calibration,
    }
    if json_out or emit:
        planned = api.plan(model, cluster, devices, **asked)
    else:
        bar = Progress(TextColumn("searching layouts"), BarColumn(), TextColumn("{task.completed:,} candidates"), TimeElapsedColumn(), transient=True, console=out.console)
        task = bar.add_task("search", total=None)
        # the bar starts with the search: an input the API refuses before it prints its line alone
        started: list[bool] = []

        def advance(k: int) -> None:
            if not started:
                bar.start()
                started.append(True)
            bar.advance(task, k)

        try:
            planned = api.plan(model, cluster, devices, progress=advance, **asked)
        finally:
            if started:
                bar.stop()
    spec, clus, gb, params, kw = planned.model, planned.cluster, planned.global_batch, planned.params, planned.search_options
    result, verdict, chosen, listed, hidden = planned.search, planned.decision, planned.best, planned.top, planned.hidden
    if html_out or png:  # drawn before a layout that fits is asked for: a page shows why nothing fits too
        draw(planned, html_out, png, command_line(ctx))
    if json_out and not emit:
        out.emit_json(planned.to_dict())
    elif not emit:
        out.print(
            f"[b]{spec.name}[/b] ({short_count(spec.total_params)} parameters, {short_count(spec.active_nonembedding_params)} active) "
            f"on [b]{devices} x {clus.name}[/b] ({clus.device.name}), seq {spec.seq_len}, "
            f"global batch {gb} sequences = {short_count(gb * spec.seq_len, tokens=True)} tokens"
        )
        out.print(priced_as(get_engine(engine), params, "fp8" in planned.search_options["precisions"]))
        if planned.calibration is not None:
            out.print(calibration_line(planned.calibration, clus))
        fit = f"fit in {result.capacity_gib:.1f} GiB per device"
        if params.persistent_state:  # `CostParams.persistent_state`: the headroom is on what a step allocates and frees
            fit = (f"fit in {clus.device.hbm_bytes / GIB:.1f} GiB per device, {params.headroom:.0%} of what each step allocates and "
                   "frees kept free (the state the engine keeps from step to step needs none)")
        out.print(f"searched {result.searched:,} valid layouts in {result.seconds:.2f} s; {result.fitting:,} {fit}")
        if "narrowed" in result.extra:
            out.print(narrowed_note(result.extra["narrowed"]))
    if chosen is None:
        raise NothingFits(verdict.reason)
    if emit:
        if pick is not None and pick > len(listed):
            raise BandwiseError(f"--pick {pick}: only {len(listed)} layouts are listed; use 1 to {len(listed)}")
        picked = listed[pick - 1] if pick else chosen
        search_kw = {k: v for k, v in kw.items() if k != "params"}
        job = export_searched(emit, spec, clus, devices, gb, result, picked, params, exact=pick is not None, model_source=model, **search_kw)
        ask = run_ask(tokens, steps, price)
        ran = Layout(strategy=job.strategy, estimate=job.estimate or picked.estimate)
        typer.echo(with_run(job.text, price_run(ask, spec, clus, devices, ran, params) if ask else None), nl=False)
        return
    if json_out:
        return
    table = layouts_table(listed, f"Top {len(listed)} layouts by tokens/s per device", wide=wide, hidden=hidden)
    out.print(table, min_width=min_width(table))
    head = {True: "PP needed", False: "PP not needed", None: "no verdict on PP"}[verdict.needs_pp]
    style = {True: "red", False: "green", None: "yellow"}[verdict.needs_pp]
    out.print(Panel(verdict.reason, title=f"verdict: {head}", title_align="left", border_style=style))
    out.print(breakdown(chosen.estimate, f"recommended: {chosen.strategy.describe()}"))
    out.print(f"tokens/s and MFU {band_line(clus.device.name, spec.is_moe, devices, get_engine(engine).label)}")
    for line in run_lines(planned.run) if planned.run else ():
        out.print(line)
    out.print(Text(glossary.RECOMMENDED, style="dim"))
    for path, what in ((html_out, "HTML page"), (png, "picture")):
        if path:
            out.print(f"{what} written to {path}")


def register(app: typer.Typer) -> None:
    words = f"\n\n{glossary.RECOMMENDED}\n\n[b]Words[/b]: {glossary.LAYOUT}\n\n{glossary.PLAN_COLUMNS} {glossary.PLAN_WIDE_COLUMNS}\n\n{glossary.BREAKDOWN}"
    app.command("plan", help=PLAN_HELP + words)(plan)
