"""`bandwise whole-runs`: published whole training runs predicted stage by stage, against their published device-hours."""

from __future__ import annotations

from pathlib import Path

import typer

from bandwise.api.whole_runs import whole_runs as predict
from bandwise.cli.options import JSON_OUT
from bandwise.plan.whole_runs import WholeRunPrediction, load_whole_runs
from bandwise.report.output import Output
from bandwise.report.run import hours
from bandwise.report.tables import min_width, plain_table

WHOLE_RUNS_HELP = """Predict published whole training runs stage by stage (batch ramp, main phase, long-context extension,
annealing): each stage planned as `bandwise plan` plans it (or priced in its published layout), for the
stage's tokens, with the cluster's default goodput (failures, checkpoints, restarts); set against the
device-hours and energy their authors published. Nothing is fitted to these runs.

[b]Columns[/b]: published and predicted device-hours; gap = predicted / published - 1; at pub. rate: the
prediction with each stage at its published throughput where there is one (the gap left is goodput,
stages and what is not modelled); ETTR: effective training time ratio; days: predicted wall-clock.
"""


def _cell(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _table(preds: list[WholeRunPrediction]):
    cols: dict[str, list[str]] = {"run": [], "devices": [], "published": [], "predicted": [], "gap": [], "at pub. rate": [], "ETTR": [],
                                  "days": [], "MWh pred.": [], "MWh pub.": []}
    for p in preds:
        r = p.run
        rate = p.at_published_rate
        pub = r.published.device_hours if r.published else None
        cells = [r.id, f"{r.devices:,}{'?' if 'assumed' in r.devices_note else ''}", "-" if pub is None else hours(pub),
                 "-" if p.device_hours is None else hours(p.device_hours), _cell(p.gap, "+.0%"),
                 "-" if rate is None or pub is None else f"{hours(rate)} ({rate / pub - 1:+.0%})", _cell(p.ettr, ".1%"),
                 _cell(p.days, ".0f"), _cell(p.energy_mwh, ",.0f"), _cell(r.published.energy_mwh if r.published else None, ",.0f")]
        for k, c in zip(cols, cells):
            cols[k].append(c)
    words = "devices: ? where the count is not published but assumed; MWh pred.: facility energy, '-' where the device has no power curve."
    return plain_table("Whole runs: predicted against published device-hours", cols, ("run",), words)


def whole_runs(
    only: str | None = typer.Option(None, "--only", help="Comma-separated run ids (default: every shipped run)."),
    run_file: Path | None = typer.Option(None, "--file", help="A run file of your own in the schema of src/bandwise/data/whole_runs.yaml: "
                                         "each run's model, cluster, devices and stages (published device-hours optional)."),
    stages: bool = typer.Option(False, "--stages", help="Also list each run's stages: layout, tokens, days, device-hours."),
    json_out: bool = JSON_OUT,
) -> None:
    out = Output(json_mode=json_out)
    preds = predict(only, path=run_file)
    if json_out:
        _, sources = load_whole_runs(run_file)
        cited = sorted({s for p in preds for s in p.run.sources})
        out.emit_json({"runs": [p.to_dict() for p in preds], "sources": {k: sources[k] for k in cited}})
        return
    table = _table(preds)
    out.print(table, min_width=min_width(table))
    for p in preds:
        pub = p.run.published
        said = f"published {pub.what}; goodput: {pub.goodput}" if pub else "no published figures"
        out.print(f"[b]{p.run.id}[/b]: {said}; devices: {p.run.devices_note or 'as given'}")
        if stages:
            for s in p.stages:
                run = s.run
                figures = "nothing fits" if run is None else (f"{run.tokens / 1e9:,.1f}B tokens, {run.step_time_s:.2f} s/step, {run.days:.1f} days, "
                                                               f"{hours(run.device_hours)} device-h, ETTR {run.goodput.ettr:.1%}")
                out.print(f"  {s.stage.name}: seq {s.stage.seq_len:,}, {s.layout}: {figures}{'; ' + s.stage.note if s.stage.note else ''}")


def register(app: typer.Typer) -> None:
    app.command("whole-runs", help=WHOLE_RUNS_HELP)(whole_runs)
