"""`bandwise estimate`: parse one layout's degrees, call the cost model, print its step and memory."""

from __future__ import annotations

from pathlib import Path

import typer

from bandwise import api
from bandwise.cli.options import (
    ATTENTION,
    CALIBRATION,
    EAGER,
    EMIT,
    ENGINE,
    FP8_RECIPE,
    GRAD_REDUCE,
    PRICE,
    STEPS,
    TOKENS,
    engine_and_emit,
    model_option,
)
from bandwise.cli.points import priced_as
from bandwise.cost.calibrated import calibration_line
from bandwise.export import export
from bandwise.export.common import with_run
from bandwise.plan.bands import band_line
from bandwise.plan.run_budget import price_run, run_ask
from bandwise.plan.search import Layout
from bandwise.report import glossary
from bandwise.report.output import Output
from bandwise.report.run import run_lines
from bandwise.report.tables import breakdown, short_count
from bandwise.specs.strategy import SCHEDULES, Strategy

ESTIMATE_HELP = "Estimate one layout: step time split into compute, exposed communication per dim, bubble and optimizer; memory; MFU."


def estimate(
    model: str = model_option("llama3-70b"),
    cluster: str = typer.Option("h100", "--cluster", "-c", help="Cluster preset or a cluster file."),
    engine: str | None = ENGINE,
    devices: int | None = typer.Option(None, "--devices", "-n", help="Accelerators (default: the product of the degrees; at most 1,048,576)."),
    seq_len: int | None = typer.Option(None, "--seq-len"),
    dp_replicate: int = typer.Option(1, "--dp-replicate"),
    dp_shard: int = typer.Option(1, "--dp-shard"),
    tp: int = typer.Option(1, "--tp"),
    cp: int = typer.Option(1, "--cp"),
    pp: int = typer.Option(1, "--pp"),
    ep: int = typer.Option(1, "--ep"),
    zero: int = typer.Option(0, "--zero", help="ZeRO stage of replicated DP (0-2); dp_shard > 1 is ZeRO-3."),
    schedule: str = typer.Option("1F1B", "--schedule", help=f"One of {', '.join(SCHEDULES)}."),
    virtual_stages: int = typer.Option(1, "--virtual-stages"),
    micro_batch: int = typer.Option(1, "--micro-batch"),
    global_batch: int | None = typer.Option(None, "--global-batch", help="Sequences per step (default: dp x micro-batch)."),
    recompute: str = typer.Option("none", "--recompute", help="none, selective or full."),
    precision: str = typer.Option("bf16", "--precision"),
    overlap_tp: bool = typer.Option(False, "--overlap-tp"),
    overlap_ep: bool = typer.Option(False, "--overlap-ep"),
    headroom: float = typer.Option(0.1, "--headroom"),
    attention: str = ATTENTION,
    eager: bool = EAGER,
    grad_reduce: str | None = GRAD_REDUCE,
    fp8_recipe: str | None = FP8_RECIPE,
    json_out: bool = typer.Option(False, "--json", help="Print one JSON layout {strategy, estimate}."),
    emit: str | None = EMIT,
    tokens: str | None = TOKENS,
    steps: int | None = STEPS,
    price: str | None = PRICE,
    calibration: Path | None = CALIBRATION,
) -> None:
    out = Output(json_mode=json_out)
    engine, emit = engine_and_emit(cluster, engine, emit, json_out)
    strategy = Strategy(
        dp_replicate=dp_replicate, dp_shard=dp_shard, tp=tp, cp=cp, pp=pp, ep=ep, zero_stage=zero, schedule=schedule,
        virtual_stages=virtual_stages, micro_batch=micro_batch, global_batch=global_batch or 0, recompute=recompute,
        precision=precision, overlap_tp=overlap_tp, overlap_ep=overlap_ep,
    )
    priced = api.estimate(model, cluster, devices, strategy=strategy, engine=engine, seq_len=seq_len, headroom=headroom, attention=attention, eager=eager,
                          grad_reduce=grad_reduce, fp8_recipe=fp8_recipe, tokens=tokens, steps=steps, price=price, calibration=calibration)
    spec, clus, n, est, params = priced.model, priced.cluster, priced.devices, priced.layout.estimate, priced.params
    if emit:
        job = export(emit, spec, clus, strategy, n, est, params, model_source=model)
        ask = run_ask(tokens, steps, price)
        ran = Layout(strategy=job.strategy, estimate=job.estimate or est)
        typer.echo(with_run(job.text, price_run(ask, spec, clus, n, ran, params) if ask else None), nl=False)
        return
    if json_out:
        out.emit_json(priced.to_dict())
        return
    out.print(f"[b]{spec.name}[/b] ({short_count(spec.total_params)} parameters) on [b]{n} x {clus.name}[/b]: {strategy.describe()}, micro-batch {micro_batch}, {strategy.effective_global_batch} sequences per step")
    out.print(priced_as(priced.engine, params, strategy.precision == "fp8"))
    if priced.calibration is not None:
        out.print(calibration_line(priced.calibration, clus))
    if priced.engine_cannot:
        out.print(f"[yellow]{priced.engine.label} does not run this layout as priced: {priced.engine_cannot}; "
                  f"`bandwise plan --engine {priced.engine.label}` lists only layouts it runs[/yellow]")
    out.print(breakdown(est, "estimate"))
    out.print(f"tokens/s and MFU {band_line(clus.device.name, spec.is_moe, n, priced.engine.label)}")
    for line in run_lines(priced.run) if priced.run else ():
        out.print(line)


def register(app: typer.Typer) -> None:
    app.command("estimate", help=f"{ESTIMATE_HELP}\n\n[b]Words[/b]: {glossary.LAYOUT}\n\n{glossary.BREAKDOWN}")(estimate)
