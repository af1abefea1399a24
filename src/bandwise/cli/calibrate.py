"""`bandwise calibrate`: fit the factors that traces, measured runs or collective benchmarks identify, and write them as a calibration file."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from bandwise.api.calibrating import calibrate as calibrate_evidence
from bandwise.api.calibrating import write_files
from bandwise.cli.options import EAGER
from bandwise.cli.train import load_strategy
from bandwise.errors import BandwiseError
from bandwise.report.output import Output
from bandwise.specs.calibration import Calibration

HELP = """Fit a calibration from traces, runs or collectives you measured.

Traces (TRACE ... --strategy plan.json --model M --cluster C): each compute class the doctor measures
(GEMMs, attention, memory-bound kernels, idle time as host gaps) gets the factor that makes the plan of
that layout spend what the trace spent in it.

Runs (--runs FILE): tokens/s per device of known layouts on your cluster, in the published_runs schema
that `bandwise validate --runs` reads (--run ID picks runs of it); or one job's own log with its layout
(--runs LOG --strategy plan.json --model M --cluster C): bandwise train's metrics JSONL, TorchTitan's
step lines (tps) or Megatron-LM's iteration lines (elapsed time per iteration).

One run identifies one factor, the stack's speed: every term (GEMM, attention, element-wise, host
gaps and the bandwidth of each level the run crosses) at one value, which the file says are
confounded. Several runs also identify each factor whose term weighs differently across them (the
outermost level's bandwidth across scales, attention across sequence lengths, memory-bound kernels
and host gaps across micro-batches), no more factors than runs, by least squares in log space; the
file says which were fitted apart and why the others were not. Levels no run crosses keep their
datasheet bandwidth, and plans made with the file say so.

--bench, under torchrun, times the collectives at each level of --cluster that the job's ranks reach
and writes each level's bandwidth factor (measured over the cost model's time for the same group);
levels the job does not reach stay the datasheet's.

The file (--out) is read by plan, estimate and validate (--calibration) and by the Python API.
"""


def _factors_table(cal: Calibration) -> Table:
    t = Table(title=f"Calibration of {cal.device}{' under ' + cal.engine if cal.engine else ''} (factor = measured / modelled speed)")
    for col in ("factor", "value", "residual", "fitted from", "confounded with"):
        t.add_column(col, justify="right" if col in ("value", "residual") else "left", overflow="fold")
    for f in cal.factors:
        t.add_row(f.name, f"{f.value:.3f}", "-" if f.residual is None else f"{f.residual:.1%}", f.fitted_from, ", ".join(f.confounded_with) or "-")
    return t


def calibrate(
    traces: list[Path] = typer.Argument(None, help="Profiler traces of a job of known layout (.json or .json.gz, one per rank, or a directory), with --strategy, --model and --cluster."),
    strategy: str | None = typer.Option(None, "--strategy", help="With traces or a log (--runs LOG): the job's layout, `bandwise plan --json` or `estimate --json` output."),
    model: str | None = typer.Option(None, "--model", "-m", help="With traces or a log: the model the job trains (preset or config.json)."),
    eager: bool = EAGER,
    runs: Path | None = typer.Option(None, "--runs", help="Measured runs, a YAML file in the published_runs schema (validate --runs); with --strategy and --model, one job's log: bandwise train's metrics JSONL, TorchTitan's or Megatron-LM's log lines."),
    run: list[str] = typer.Option(None, "--run", help="Only this run of the file (repeat for several); default: every run."),
    engine: str | None = typer.Option(None, "--engine", "-e", help="Price every run as this engine, not as the engine each run's source names."),
    bench: bool = typer.Option(False, "--bench", help="Time all-gather, reduce-scatter, all-reduce and all-to-all at each level of --cluster the job's ranks reach (run under torchrun: gloo on CPUs, NCCL on GPUs)."),
    cluster: str = typer.Option("h100", "--cluster", "-c", help="With --bench: the cluster preset or file whose levels the job's ranks sit on."),
    out_path: Path | None = typer.Option(None, "--out", "-o", help="Write the calibration file here (YAML)."),
    write_cluster: Path | None = typer.Option(None, "--write-cluster", help="Also write the cluster with the calibration folded in (levels' bandwidth, GEMM and attention efficiencies): a file --cluster reads."),
    write_engine: Path | None = typer.Option(None, "--write-engine", help="Also write the engine with the calibration folded in (memory-bound kernels' HBM efficiency, host gaps on this device): a file --engine reads."),
    json_out: bool = typer.Option(False, "--json", help="Print the calibration as one JSON document."),
    html_out: Path | None = typer.Option(None, "--html", help="Also write a page showing each factor against the preset figure it scales."),
) -> None:
    out = Output(json_mode=json_out)
    if strategy is not None and model is None:  # before the layout's file is read
        raise BandwiseError("calibrate with --strategy needs the job's --model and --cluster (traces, or --runs LOG)")
    done = calibrate_evidence(traces or None, runs=runs, run_ids=list(run or []) or None, model=model, cluster=cluster, engine=engine,
                              eager=eager, bench=bench, strategy=None if strategy is None else load_strategy(strategy, None))
    if done is None:  # a bench rank other than 0: rank 0 writes and prints
        return
    cal = done.calibration
    write_files(done, out=out_path, cluster=write_cluster, engine=write_engine, html=html_out)
    if json_out:
        out.emit_json(cal.to_dict())
        return
    out.print(_factors_table(cal))
    out.print(f"evidence: {cal.evidence}")
    out.print(f"measured levels: {', '.join(cal.levels_measured) or 'none'}; from the datasheet: {', '.join(cal.levels_datasheet) or 'none'}")
    if out_path is not None:
        out.print(f"calibration written to {out_path}; use it with --calibration {out_path}")
    if html_out is not None:
        out.print(f"page written to {html_out}")
    for path, what, flag in ((write_cluster, "cluster", "--cluster"), (write_engine, "engine", "--engine")):
        if path is not None:
            out.print(f"calibrated {what} written to {path}; use it with {flag} {path}")


def register(app: typer.Typer) -> None:
    app.command("calibrate", help=HELP)(calibrate)
