"""`bandwise plan`: parse arguments, search the layouts, print the best and the verdict on PP."""

from __future__ import annotations

from typing import Any

import typer
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from bandwise.cli.options import (
    ATTENTION,
    EAGER,
    EMIT,
    ENGINE,
    EXHAUSTIVE,
    GLOBAL_BATCH,
    GLOBAL_BATCH_TOKENS,
    HEADROOM,
    JSON_OUT,
    OVERLAP_TP,
    PRECISION,
    SEQ_LEN,
    THRESHOLD_OPT,
    check_emit,
    cost_params,
    devices_option,
    did_you_mean,
    fraction,
    model_option,
    model_spec,
    precisions_of,
)
from bandwise.cli.points import priced_as
from bandwise.errors import BandwiseError, NothingFits
from bandwise.export import EMIT_POOL, export_searched
from bandwise.plan.advice import no_valid_layout
from bandwise.plan.bands import band_dict, band_line
from bandwise.plan.inputs import global_batch_of
from bandwise.plan.search import (
    FIXABLE,
    SEARCH_ROWS,
    Layout,
    distinct,
    narrowed_note,
    search,
)
from bandwise.plan.verdict import decide, recommended, suggest_fit
from bandwise.report import glossary
from bandwise.report.output import Output
from bandwise.report.tables import breakdown, layouts_table, min_width, short_count
from bandwise.specs.registry import get_cluster, get_engine
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


MAX_TOP = 1000
"""Layouts `plan` lists at most: the search keeps 20 x --top candidates to collapse near-duplicates,
and each listed layout is a table row (`--top 1048576` took 13.7 s at a million devices)."""


def plan(
    model: str = model_option("llama3-70b"),
    cluster: str = typer.Option("h100", "--cluster", "-c", help="Cluster preset (bandwise clusters) or a cluster file."),
    engine: str = ENGINE,
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
    overlap_tp: bool = OVERLAP_TP,
    exhaustive: bool = EXHAUSTIVE,
    json_out: bool = JSON_OUT,
    emit: str | None = EMIT,
    pick: int | None = typer.Option(None, "--pick", help="With --emit: the layout in row PICK of the table (default: the recommended one)."),
) -> None:
    out = Output(json_mode=json_out)
    emit = check_emit(emit, json_out, engine)
    if pick is not None and emit is None:
        raise BandwiseError("--pick chooses the layout --emit exports; add --emit (the --engine's job), or --emit torchtitan, megatron or maxtext")
    spec = model_spec(model, seq_len)
    clus = get_cluster(cluster)
    clus.check_devices(devices)
    if not 1 <= top <= MAX_TOP:
        raise BandwiseError(f"--top={top} must be between 1 and {MAX_TOP}")
    if pick is not None and not 1 <= pick <= top:
        raise BandwiseError(f"--pick {pick}: the table lists rows 1 to {top}; use one of them (or a larger --top)")
    gb = global_batch_of(spec, global_batch, global_batch_tokens, devices)
    precisions = precisions_of(precision)
    params = cost_params(headroom, attention, eager, engine, clus.device)
    # a pool deep enough that collapsing near-duplicates still leaves `top` distinct layouts
    pool = top if all_layouts else max(20 * top, 100)
    if emit:  # deep enough to find the best layout the engine can express when it cannot express the plan
        pool = max(pool, EMIT_POOL)
    kw = dict(top=pool, allow_pp=not no_pp, fixed=_parse_fix(fix), precisions=precisions, overlap={"tp": overlap_tp}, params=params,
              max_rows=None if exhaustive else SEARCH_ROWS, **get_engine(engine).search_space())  # only what the engine can run
    if json_out or emit:
        result = search(spec, clus, devices, gb, **kw)
    else:
        with Progress(TextColumn("searching layouts"), BarColumn(), TextColumn("{task.completed:,} candidates"), TimeElapsedColumn(), transient=True, console=out.console) as bar:
            task = bar.add_task("search", total=None)
            result = search(spec, clus, devices, gb, progress=lambda k: bar.advance(task, k), **kw)
    listed, hidden = _listed(result.top, top, all_layouts)
    if result.searched == 0:
        raise BandwiseError(no_valid_layout(spec, devices, gb, kw["fixed"], allow_pp=not no_pp, precisions=precisions))
    verdict = decide(result, clus, fraction("--threshold", threshold))
    chosen = recommended(result, verdict)
    if chosen is None:
        verdict.reason += "; " + suggest_fit(spec, clus, devices, gb, allow_pp=not no_pp, fixed=kw["fixed"], precisions=precisions, overlap=kw["overlap"], params=params)
    if json_out and not emit:
        out.emit_json(
            {
                "searched": result.searched,
                "fitting": result.fitting,
                "seconds": result.seconds,
                "narrowed": result.extra.get("narrowed"),
                "best": chosen,
                "best_without_pp": result.best_without_pp,
                "verdict": {"needs_pp": verdict.needs_pp, "reason": verdict.reason},
                "validation": band_dict(clus.device.name, spec.is_moe, devices),
                "engine": get_engine(engine).label,
                "top": listed,
            }
        )
    elif not emit:
        out.print(
            f"[b]{spec.name}[/b] ({short_count(spec.total_params)} parameters, {short_count(spec.active_nonembedding_params)} active) "
            f"on [b]{devices} x {clus.name}[/b] ({clus.device.name}), seq {spec.seq_len}, "
            f"global batch {gb} sequences = {short_count(gb * spec.seq_len, tokens=True)} tokens"
        )
        out.print(priced_as(get_engine(engine)))
        out.print(f"searched {result.searched:,} valid layouts in {result.seconds:.2f} s; {result.fitting:,} fit in {result.capacity_gib:.1f} GiB per device")
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
        typer.echo(job.text, nl=False)
        return
    if json_out:
        return
    table = layouts_table(listed, f"Top {len(listed)} layouts by tokens/s per device", wide=wide, hidden=hidden)
    out.print(table, min_width=min_width(table))
    head = {True: "PP needed", False: "PP not needed", None: "no verdict on PP"}[verdict.needs_pp]
    style = {True: "red", False: "green", None: "yellow"}[verdict.needs_pp]
    out.print(Panel(verdict.reason, title=f"verdict: {head}", title_align="left", border_style=style))
    out.print(breakdown(chosen.estimate, f"recommended: {chosen.strategy.describe()}"))
    out.print(f"tokens/s and MFU {band_line(clus.device.name, spec.is_moe, devices)}")
    out.print(Text(glossary.RECOMMENDED, style="dim"))


def _listed(ranked: list[Layout], top: int, all_layouts: bool) -> tuple[list[Layout], int]:
    """The first `top` layouts, near-duplicates collapsed unless --all; and how many were hidden among them."""
    if all_layouts:
        return ranked[:top], 0
    kept = distinct(ranked)[0][:top]
    last = next((i for i, lay in enumerate(ranked) if lay is kept[-1]), -1) if kept else -1
    return kept, last + 1 - len(kept)


def register(app: typer.Typer) -> None:
    words = f"\n\n{glossary.RECOMMENDED}\n\n[b]Words[/b]: {glossary.LAYOUT}\n\n{glossary.PLAN_COLUMNS} {glossary.PLAN_WIDE_COLUMNS}\n\n{glossary.BREAKDOWN}"
    app.command("plan", help=PLAN_HELP + words)(plan)
