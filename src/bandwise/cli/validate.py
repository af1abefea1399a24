"""`bandwise validate`: predict published training runs and report the error per run and per source."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from bandwise import api
from bandwise.plan.bands import write_bands as write_error_bands
from bandwise.plan.validate import (
    MEMORY_BASES,
    STATED,
    RunResult,
    Summary,
    by_engine,
    by_quality,
    by_source,
    first_sight_summary,
    fit_counts,
    parity_plot,
)
from bandwise.report.output import Output
from bandwise.report.tables import plain_table

HELP = """Predict tokens/s per device for published training runs (the shipped ones by default) and
report the signed error per run, |error| per source, and the median and p90 over all runs; beside
them, for the runs that carry one, the first-sight error: what was predicted before anything was
changed for the run's source (the out-of-sample figure).

Each run is predicted as `plan --engine E` predicts it, E the engine its source names (--engine: one
for every run): its model, cluster and layout as its source states them, what it states of its own
job (a flag it ran with) applied, and the fields it leaves null (micro-batch, recomputation, ZeRO
stage, schedule, ...) taking the engine's default where it has one, otherwise completed with the
fastest value that fits the engine's layouts, and listed as completed. Nothing is fitted per run or
per source.

--memory adds the per-device memory that sources publish (TorchTitan's peak reserved GiB, Korthikanti
et al. 2022 Figure 1) against the predicted terms that figure measures; --json always carries it.
"""


def _pct(x: float | None, signed: bool = False) -> str:
    return "-" if x is None else f"{x:+.1%}" if signed else f"{x:.1%}"


def _runs_table(results: list[RunResult]) -> Table:
    t = Table(title="Runs (error = predicted / target - 1)")
    for col in ("id", "source", "q", "target tok/s", "predicted", "error", "layout", "completed"):
        t.add_column(col, justify="right" if col in ("target tok/s", "predicted", "error") else "left", overflow="fold")
    for r in results:
        t.add_row(
            r.id, r.source, r.quality[:3], f"{r.target:,.1f}", "-" if r.predicted is None else f"{r.predicted:,.1f}",
            _pct(r.error, signed=True) if r.reason is None else f"[red]{r.reason}[/red]",
            r.strategy.describe() if r.strategy else "-", ", ".join(r.completed_fields) or "-",
        )
    return t


def _memory_table(results: list[RunResult]) -> Table:
    t = Table(title="Memory per device where the source publishes it (error = predicted / published - 1)")
    for col in ("id", "published GiB", "predicted GiB", "error", "basis", "layout"):
        t.add_column(col, justify="right" if col in ("published GiB", "predicted GiB", "error") else "left", overflow="fold")
    for r in results:
        if r.memory_published_gib is None:
            continue
        t.add_row(r.id, f"{r.memory_published_gib:.1f}", "-" if r.memory_predicted_gib is None else f"{r.memory_predicted_gib:.1f}",
                  _pct(r.memory_error, signed=True), r.memory_basis or "-", r.strategy.describe() if r.strategy else "-")
    return t


def _summary_table(title: str, rows: dict[str, Summary], p90: bool = False) -> Table:
    t = Table(title=title)
    cols = ("", "count", "predicted", "median |err|") + (("p90 |err|",) if p90 else ()) + ("max |err|",)
    for c in cols:
        t.add_column(c, justify="left" if c == "" else "right")
    for name, s in rows.items():
        row = [name, str(s.count), str(s.predicted), _pct(s.median_abs_error)]
        row += [_pct(s.p90_abs_error)] if p90 else []
        t.add_row(*row, _pct(s.max_abs_error))
    return t


def _engine_table(groups: dict) -> object:
    cols: dict[str, list[str]] = {k: [] for k in ("engine / device / kind", "runs", "median |err|", "signed median")}
    pct = lambda x: "-" if x is None else f"{x:+.1%}" if x < 0 or x > 0 else "0.0%"  # noqa: E731
    for key, g in groups.items():
        for k, cell in zip(cols, (key, str(g["predicted"]), "-" if g["median_abs_error"] is None else f"{g['median_abs_error']:.1%}", pct(g["median_error"]))):
            cols[k].append(cell)
    return plain_table("Per engine", cols, ("engine / device / kind",), "signed median: where the engine's predictions lean (+: over-predicted)")


def _stated_table(results: list[RunResult], used: list[str]) -> Table:
    """What runs state of their own jobs and validate applies, one line each with how many runs state it."""
    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", no_wrap=True)
    table.add_column()
    for k in used:
        table.add_row(str(sum(f"stated: {STATED[k]}" in r.notes for r in results)), STATED[k])
    table.title, table.title_justify = "What runs state of their own jobs, applied (runs stating it)", "left"
    return table


def _first_sight_table(doc: dict) -> object:
    """The first-sight error per engine / family / kind beside the same runs' current error."""
    cols: dict[str, list[str]] = {k: [] for k in ("engine / family / kind", "runs", "refused", "first |err|", "first p90", "first signed",
                                                   "refused now", "now |err|", "now p90")}
    pct = lambda x, signed=False: "-" if x is None else (f"{x:+.1%}" if signed else f"{x:.1%}")  # noqa: E731
    for key, g in [*doc["by_engine"].items(), ("all", doc)]:
        first, now = g["first_sight"], g["now"]
        for k, cell in zip(cols, (key, str(g["runs"]), str(g["refused"]), pct(first["median_abs_error"]), pct(first["p90_abs_error"]),
                                  pct(first["median_signed_error"], True), str(g["refused_now"]), pct(now["median_abs_error"]),
                                  pct(now["p90_abs_error"]))):
            cols[k].append(cell)
    return plain_table("First sight (out of sample)", cols, ("engine / family / kind",),
                       "first: what was predicted before anything was changed for the run's source; now: this version on the same runs")


def validate(
    runs: Path | None = typer.Option(None, "--runs", help="A YAML file in the published_runs schema (default: the shipped runs)."),
    source: str | None = typer.Option(None, "--source", help="Only the runs of this source (e.g. maxtext_tpu_tables)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document: runs, by_source, median_abs_error, p90_abs_error."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a parity plot (predicted vs target, log axes, ±10% bands) to this PNG."),
    memory: bool = typer.Option(False, "--memory", help="Also print predicted against published memory per device, where the source gives it."),
    write_bands: Path | None = typer.Option(None, "--write-bands", help="Write the error per engine, device family and model kind, which plan, estimate and compare print, to this JSON file (the package ships src/bandwise/data/error_bands.json)."),
    engine: str | None = typer.Option(None, "--engine", "-e", help="Price every run as this engine (bandwise engines), not as the engine each run's source names."),
    calibration: Path | None = typer.Option(None, "--calibration", help="A calibration file (bandwise calibrate): applied to the runs of the device and engine it was measured on; the others are predicted uncalibrated."),
) -> None:
    out = Output(json_mode=json_out)
    checked = api.validate(runs, source=source, engine=engine, calibration=calibration)
    results = checked.runs
    if plot is not None:
        parity_plot(results, plot)
    if write_bands is not None:
        write_error_bands(results, write_bands)
    if json_out:
        out.emit_json(checked.to_dict())
        return
    if calibration is not None:
        calibrated = sum(any(n.startswith("calibrated by") for n in r.notes) for r in results)
        out.print(f"calibrated by {calibration}: {calibrated} of {len(results)} runs are on its device and engine")
    out.print(_runs_table(results))
    out.print(_summary_table("Per source", by_source(results)))
    out.print(_engine_table(by_engine(results)))
    out.print(_summary_table("Overall", by_quality(results), p90=True))
    first = first_sight_summary(results)
    if first["runs"]:
        out.print(_first_sight_table(first))
    if memory:
        out.print(_memory_table(results))
        used_bases = sorted({r.memory_basis for r in results if r.memory_basis})
        for b in used_bases:
            out.print(f"{b}: {MEMORY_BASES[b]}")
    failed = [r for r in results if r.reason is not None]
    out.print(f"{len(results) - len(failed)} of {len(results)} runs predicted; {len(failed)} could not be predicted (reason in the error column)")
    fit = fit_counts(results)
    if fit["tight"] or fit["nothing fits"]:
        out.print(f"memory: {fit['tight']} priced runs are tight (their peak above the headroom, within the device) and "
                  f"{fit['nothing fits']} fit nothing (above the device); the notes of each say how much")
    used = sorted({k for r in results for k in STATED if f"stated: {STATED[k]}" in r.notes})
    if used:
        out.print(_stated_table(results, used))
    if plot is not None:
        out.print(f"parity plot written to {plot}")
    if write_bands is not None:
        out.print(f"error bands written to {write_bands}")


def register(app: typer.Typer) -> None:
    app.command("validate", help=HELP)(validate)
