"""`bandwise doctor run|trace|tune-loader`: parse arguments, call bandwise.doctor, print.

`doctor.tune` imports torch, so `tune-loader` imports it only when it runs: the other commands
work without torch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import typer
from rich.table import Table

from bandwise import api
from bandwise.api.pictures import write_doctor_html
from bandwise.cli.options import ATTENTION, EAGER, GRAD_REDUCE, command_line
from bandwise.cli.train import load_strategy
from bandwise.cost.run import run_gains
from bandwise.doctor.live import watch
from bandwise.doctor.ranks import input_straggler, live_rows
from bandwise.doctor.report import merge, print_report, to_json
from bandwise.doctor.rules import MIN_STEPS, diagnose
from bandwise.doctor.signals import signals_from_live
from bandwise.errors import BandwiseError
from bandwise.files import write_text_atomic
from bandwise.report.doctor_page import doctor_page
from bandwise.report.output import Output, plain
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy
from bandwise.specs.units import parse_price, parse_tokens

doctor_app = typer.Typer(help="Find why the accelerator is idle: measure a loop or read a profiler trace, name the bottleneck, the fix and its expected gain.", no_args_is_help=True)

JSON_OPT = typer.Option(False, "--json", help="Print one JSON document: steps, breakdown, findings, missing.")
HTML_OPT = typer.Option(None, "--html", help="Also write the report as one self-contained HTML page (charts inline; opens offline) to this file.")


@doctor_app.command("trace")
def trace(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(..., help="Kineto chrome traces (.json or .json.gz), one per rank, or a directory holding them."),
    json_out: bool = JSON_OPT,
    html_out: Path = HTML_OPT,
    bf16: bool = typer.Option(None, "--bf16/--no-bf16", help="Declare whether the traced device runs bf16 natively (default: from the trace's GPU compute capability; unknown for CPU traces)."),
    max_mb: int = typer.Option(65536, "--max-mb", help="Refuse traces that decompress to more than this many MB."),
    jobs: int = typer.Option(0, "--jobs", "-j", help="Read this many rank traces at once, one process each (default: one per core, at most one per trace)."),
    strategy: str = typer.Option(None, "--strategy", help="Set the traces against this layout's plan: `bandwise plan --json` or `estimate --json` output (with --model and --cluster)."),
    pick: int = typer.Option(None, "--pick", help="With --strategy: row N of the plan's table (top\\[N-1] of its JSON) instead of its best."),
    model: str = typer.Option(None, "--model", "-m", help="With --strategy: the model the job trains (preset or config.json)."),
    cluster: str = typer.Option(None, "--cluster", "-c", help="With --strategy: the cluster it runs on (preset or cluster file)."),
    seq_len: int = typer.Option(None, "--seq-len", help="With --strategy: the training sequence length (default: the model's)."),
    engine: str = typer.Option(None, "--engine", "-e", help="With --strategy: the engine the job runs (default: megatron; bandwise engines)."),
    attention: str = ATTENTION,
    eager: bool = EAGER,
    grad_reduce: str | None = GRAD_REDUCE,
    tokens: str = typer.Option(None, "--tokens", help="Turn each finding's gain into hours and money over a run of this many tokens (15T) at the measured step."),
    price: str = typer.Option(None, "--price", help="With --tokens: money per device-hour ($2.10/h)."),
    tokens_per_step: int = typer.Option(None, "--tokens-per-step", help="With --tokens: tokens per optimizer step (default: the --strategy's global batch x sequence length)."),
    devices: int = typer.Option(None, "--devices", "-n", help="With --tokens: devices of the job (default: the --strategy's)."),
    calibration: Path = typer.Option(None, "--calibration", help="With --strategy: price the plan with this calibration file (bandwise calibrate)."),
    calibrate: Path = typer.Option(None, "--calibrate", help="With --strategy: also write a calibration file fitted from the traces in the same pass (bandwise calibrate TRACE)."),
) -> None:
    """Analyse PyTorch profiler traces: per-step breakdown, findings sorted by expected gain, fixes.

    With --strategy, --model and --cluster the measured step is set beside the planner's prediction
    for that layout, term by term, and the terms off by more than 20% are named."""
    if max_mb < 1:
        raise BandwiseError(f"--max-mb={max_mb} must be >= 1")
    if jobs < 0:
        raise BandwiseError(f"--jobs={jobs} must be >= 0 (0: one per core)")
    loaded = _plan_for(strategy, pick, model, cluster, seq_len, attention, eager, engine, grad_reduce)
    asked = _run_for(tokens, price, tokens_per_step, devices, loaded, model, seq_len)
    out = Output(json_mode=json_out)
    found = api.diagnose(paths, strategy=loaded, model=model, cluster=cluster, seq_len=seq_len, engine=engine, attention=attention, eager=eager,
                         grad_reduce=grad_reduce,
                         bf16=bf16, max_mb=max_mb, jobs=jobs, calibration=calibration)
    d, title = found.diagnosis, found.title
    if calibrate is not None:
        if loaded is None:
            raise BandwiseError("--calibrate fits the plan of the traces' layout: add --strategy plan.json with --model and --cluster")
        cal = api.doctoring.calibrate_trace(strategy=loaded, model=model, cluster=cluster, seq_len=seq_len, engine=engine, attention=attention,
                                            eager=eager, grad_reduce=grad_reduce, diagnosed=found)
        write_text_atomic(calibrate, cal.to_yaml(), what="the calibration")
    if html_out:
        write_doctor_html(found, html_out, command_line(ctx))
    gains = None if asked is None else run_gains({f.id: f.expected_speedup for f in d.findings if f.expected_speedup},
                                                 step_s=_step_s(d.signals), **asked)
    if json_out:
        extra = {} if gains is None else {"run": {"hours": gains[0], **{k: v for k, v in asked.items()},
                                                  "gains": [g.to_dict() for g in gains[1]]}}
        out.emit_json({**found.to_dict(), **extra})
    else:
        print_report(out, d, title)
        for g in [] if gains is None else gains[1]:
            money = f", {g.money_saved:,.0f} in money at {asked['price']:g} per device-hour" if g.money_saved is not None else ""
            out.print(f"[b]{g.finding}[/b] ({g.speedup:.2f}x) over the {asked['tokens']:.3g}-token run ({gains[0]:,.0f} h at the measured "
                      f"step): saves {g.hours_saved:,.0f} h ({g.hours_saved / 24:,.1f} days), {g.device_hours_saved:,.0f} device-hours{money}")
        if calibration is not None:
            out.print(f"the plan set against the traces was priced with the calibration {calibration}")
        if html_out:
            out.print(f"HTML report: {html_out}")
        if calibrate is not None:
            out.print(f"calibration written to {calibrate}: {cal.label}")


def _plan_for(strategy: str | None, pick: int | None, model: str | None, cluster: str | None, seq_len: int | None,
              attention: str | None = None, eager: bool | None = None, engine: str | None = None,
              grad_reduce: str | None = None) -> Strategy | None:
    """The layout of --strategy, or None; the flags that need it say so. `api.diagnose` prices it
    with --model and --cluster (and --attention, --eager and --grad-reduce, as `plan` and `estimate` do)."""
    if strategy is None:
        if any(v is not None for v in (pick, model, cluster, seq_len, attention, eager, engine, grad_reduce)):
            raise BandwiseError("--pick, --model, --cluster, --seq-len, --engine, --attention, --eager and --grad-reduce set a trace "
                                "against a plan: add --strategy plan.json")
        return None
    if model is None or cluster is None:
        raise BandwiseError("--strategy needs the job's --model and --cluster to price the layout, e.g. --model llama3-8b --cluster h100")
    return load_strategy(strategy, pick)


def _step_s(signals: dict) -> float:
    """The measured step in seconds: one trace's median, or the slowest rank's, which every rank waits for."""
    ranks = [r.get("step_ms") or 0 for r in signals.get("per_rank") or []]
    return (signals.get("step_ms") or max(ranks, default=0)) / 1e3


def _run_for(tokens: str | None, price: str | None, tokens_per_step: int | None, devices: int | None, loaded: Strategy | None,
             model: str | None, seq_len: int | None) -> dict | None:
    """`run_gains`' keywords for --tokens, or None; the flags that need --tokens say so."""
    if tokens is None:
        if any(v is not None for v in (price, tokens_per_step, devices)):
            raise BandwiseError("--price, --tokens-per-step and --devices price a run: add --tokens (e.g. 15T)")
        return None
    if loaded is not None:
        seq = seq_len or get_model(model).seq_len
        tokens_per_step = tokens_per_step or loaded.effective_global_batch * seq
        devices = devices or loaded.world_size
    if tokens_per_step is None or devices is None:
        raise BandwiseError("--tokens needs the job's --tokens-per-step and --devices (or a --strategy that gives both)")
    if tokens_per_step < 1 or devices < 1:
        raise BandwiseError(f"--tokens-per-step={tokens_per_step} and --devices={devices} must be positive")
    return {"tokens": parse_tokens(tokens), "tokens_per_step": tokens_per_step, "devices": devices,
            "price": None if price is None else parse_price(price)}


@doctor_app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    command: list[str] = typer.Argument(..., help="The training command after --, e.g. -- python train.py --lr 3e-4"),
    json_out: bool = JSON_OPT,
    html_out: Path = HTML_OPT,
    global_batch: int = typer.Option(None, "--global-batch", help="Global batch to keep when suggesting a larger micro-batch."),
    model: str = typer.Option(None, "--model", help="Model preset or config file: FLOPs per token for MFU (else counted with FlopCounterMode)."),
    cluster: str = typer.Option(None, "--cluster", help="Cluster preset or file whose device's dense peak is the MFU denominator."),
    precision: str = typer.Option("bf16", "--precision", help="Which peak of the device to use for MFU."),
) -> None:
    """Run an unmodified `python` training script with the monitor hooked in, then report.

    The script's output and exit code are its own; with --json its stdout goes to stderr so that
    stdout holds only the report.
    """
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise BandwiseError("doctor run: give the training command after --, e.g. bandwise doctor run -- python train.py")
    launcher = torchrun_split(argv)
    if launcher is not None:
        return _run_torchrun(*launcher, json_out=json_out, html_out=html_out, global_batch=global_batch, model=model, cluster=cluster,
                             precision=precision)
    if Path(argv[0]).name.startswith("python"):
        argv = argv[1:]
    elif not argv[0].endswith(".py"):
        raise BandwiseError(f"doctor run: {argv[0]!r} is not a python or torchrun command; run the script as `python script.py ...` or `torchrun ... script.py ...`")
    if not argv:
        raise BandwiseError("doctor run: no script given after python")
    if argv[0] != "-m" and not Path(argv[0]).is_file():
        raise BandwiseError(f"doctor run: script {argv[0]!r} not found; give the path of the training script, e.g. bandwise doctor run -- python train.py")
    out = Output(json_mode=json_out)
    with tempfile.TemporaryDirectory(prefix="bandwise-doctor-") as tmp:
        records_path = Path(tmp) / "records.json"
        env = {**os.environ, "BANDWISE_DOCTOR_OUT": str(records_path), **_mfu_env(model, cluster, precision)}
        proc = subprocess.run([sys.executable, "-m", "bandwise.doctor._bootstrap", *argv], env=env, stdout=sys.stderr if json_out else None)
        if not records_path.exists():
            raise BandwiseError(f"doctor run: the script exited with code {proc.returncode} before any step was recorded")
        data = json.loads(records_path.read_text())
    summary = data["summary"]
    if proc.returncode and not data["records"]:
        raise BandwiseError(f"doctor run: the script exited with code {proc.returncode} before any step was recorded (its own error is above)")
    d = diagnose(signals_from_live(summary, global_batch=global_batch), summary["breakdown"])
    title = f"bandwise doctor: {' '.join(argv)}"
    doc = to_json(d, {"exit_code": proc.returncode, "medians": summary["medians"]})
    if html_out:
        _write_page(html_out, doc, title, f"bandwise doctor run -- {' '.join(command[1:] if command[:1] == ['--'] else command)}")
    if json_out:
        out.emit_json(doc)
    else:
        print_report(out, d, title)
    if proc.returncode:
        raise typer.Exit(proc.returncode)


def _write_page(path: Path, doc: dict, title: str, command: str) -> None:
    """The report as the page `doctor trace --html` writes, from the document `--json` prints."""
    write_text_atomic(path, doctor_page(plain(doc), title, command), what="the HTML report")


def _mfu_env(model: str | None, cluster: str | None, precision: str) -> dict[str, str]:
    env = {}
    if model:
        env["BANDWISE_DOCTOR_FLOPS_PER_TOKEN"] = repr(get_model(model).model_flops_per_token())
    if cluster:
        env["BANDWISE_DOCTOR_PEAK_FLOPS"] = repr(get_cluster(cluster).device.peak(precision))
    return env


def torchrun_split(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """(the launcher with its options, the script and its arguments) of a torchrun command
    (`torchrun ...` or `python -m torch.distributed.run ...`), or None for any other command. The
    script is the first argument ending in .py; `-m module` after the options is a module."""
    if Path(argv[0]).name == "torchrun":
        head, rest = argv[:1], argv[1:]
    elif Path(argv[0]).name.startswith("python") and argv[1:3] == ["-m", "torch.distributed.run"]:
        head, rest = argv[:3], argv[3:]
    else:
        return None
    for i, a in enumerate(rest):
        if a.endswith(".py"):
            return head + rest[:i], rest[i:]
        if a in ("-m", "--module") and i + 1 < len(rest):
            return head + rest[:i], ["-m", *rest[i + 1:]]
    raise BandwiseError(f"doctor run: no training script in {' '.join(argv)!r}; give it as `torchrun ... train.py ...`")


RANK_FILE = re.compile(r"rank-(\d+)\.json$")
"""A rank's final records (its running summary, `rank-N.live.json`, is not one)."""


def _run_torchrun(launcher: list[str], script: list[str], *, json_out: bool, html_out: Path | None, global_batch: int | None,
                  model: str | None, cluster: str | None, precision: str) -> None:
    """Every rank runs the script under the monitor and writes its own records. While torchrun runs,
    this process reads the ranks' running summaries and names a straggler as soon as the rule finds
    one (`doctor/live.py`); after it returns, it reads the final records: each rank's diagnosis,
    their merge, the per-rank table and the rank whose input pipeline holds the others back."""
    if script[0] != "-m" and not Path(script[0]).is_file():
        raise BandwiseError(f"doctor run: script {script[0]!r} not found; give the path of the training script")
    out = Output(json_mode=json_out)
    with tempfile.TemporaryDirectory(prefix="bandwise-doctor-") as tmp:
        env = {**os.environ, "BANDWISE_DOCTOR_OUT_DIR": tmp, **_mfu_env(model, cluster, precision)}
        body = script[1:] if script[0] == "-m" else script
        cmd = [*launcher, "-m", "bandwise.doctor._bootstrap", *(["-m"] if script[0] == "-m" else []), *body]
        try:
            proc = subprocess.Popen(cmd, env=env, stdout=sys.stderr if json_out else None)
        except FileNotFoundError:
            raise BandwiseError(f"doctor run: {launcher[0]!r} not found; install torch in this environment or give its path, "
                                f"e.g. -- python -m torch.distributed.run ...") from None
        with proc:
            live = watch(proc, Path(tmp), lambda line: print(line, file=sys.stderr, flush=True))
        files = {int(m.group(1)): f for f in Path(tmp).iterdir() if (m := RANK_FILE.match(f.name))}
        if not files:
            raise BandwiseError(f"doctor run: torchrun exited with code {proc.returncode} before any rank recorded a step")
        data = {r: json.loads(files[r].read_text()) for r in sorted(files)}
    names = [f"rank {r}" for r in data]
    diagnoses = [diagnose(signals_from_live(d["summary"], global_batch=global_batch), d["summary"]["breakdown"]) for d in data.values()]
    merged = merge(diagnoses, names)
    rows = live_rows(data)
    if len(rows) > 1:
        merged.signals["per_rank_live"] = [r.to_dict() for r in rows]
        if min(r.steps for r in rows) >= MIN_STEPS:
            found = input_straggler(rows)
            if found is not None:
                merged.findings.append(found[1])
                merged.findings.sort(key=lambda f: -(f.expected_speedup or 1.0))
    title = f"bandwise doctor: {' '.join([*launcher, *script])} ({len(data)} rank(s))"
    doc = to_json(merged, {"exit_code": proc.returncode, "ranks": len(data), "live": live})
    if html_out:
        _write_page(html_out, doc, title, f"bandwise doctor run -- {' '.join([*launcher, *script])}")
    if json_out:
        out.emit_json(doc)
    else:
        print_report(out, merged, title)
    if proc.returncode:
        raise typer.Exit(proc.returncode)


@doctor_app.command("tune-loader")
def tune_loader(
    dataset: str = typer.Option(..., "--dataset", help="FILE.py:NAME or MODULE:NAME: a map-style Dataset, or a function returning one."),
    batch_size: int = typer.Option(..., "--batch-size", help="Batch size to load with."),
    batches: int = typer.Option(20, "--batches", help="Batches read per setting (two epochs of half each)."),
    workers: str = typer.Option(None, "--workers", help="Comma-separated num_workers values (default: 0,2,4,2x cores up to 8)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Measure the dataset's throughput across DataLoader settings and print the best."""
    from bandwise.doctor.tune import LoaderSetting, default_grid, load_object
    from bandwise.doctor.tune import tune_loader as run_tune

    if batch_size < 1:
        raise BandwiseError(f"--batch-size={batch_size} must be >= 1")
    grid = default_grid()
    if workers:
        try:
            wanted = {int(w) for w in workers.split(",")}
        except ValueError:
            raise BandwiseError(f"--workers={workers!r}: give comma-separated integers, e.g. 0,2,4") from None
        if any(w < 0 for w in wanted):
            raise BandwiseError(f"--workers={workers!r}: worker counts must be >= 0")
        grid = [s for s in grid if s.num_workers in wanted] + [
            LoaderSetting(num_workers=w, prefetch_factor=4, persistent_workers=True) for w in sorted(wanted) if w not in {s.num_workers for s in grid}
        ]
    out = Output(json_mode=json_out)
    ds = load_object(dataset)
    results = run_tune(ds, batch_size=batch_size, grid=grid, batches=batches, progress=None if json_out else lambda s: out.print(f"[dim]measuring {s.describe()}[/dim]"))
    base = max((r["samples_per_s"] for r in results if r["setting"]["num_workers"] == 0), default=None)
    if json_out:
        out.emit_json({"best": results[0], "baseline_samples_per_s": base, "results": results})
        return
    table = Table(title=f"DataLoader settings, batch {batch_size}, best first")
    for col in ("setting", "samples/s", "vs num_workers=0"):
        table.add_column(col, justify="left" if col == "setting" else "right")
    for r in results:
        table.add_row(r["describe"], f"{r['samples_per_s']:.1f}", f"{r['samples_per_s'] / base:.2f}x" if base else "-")
    out.print(table)
    out.print(f"best: {results[0]['describe']}")


def register(app: typer.Typer) -> None:
    app.add_typer(doctor_app, name="doctor")
