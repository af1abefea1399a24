"""The doctor half of the Python API: `diagnose(trace_or_dir, ...)`, what `bandwise doctor trace` does.

A trace is a PyTorch profiler (Kineto) chrome trace, `.json` or `.json.gz`; a directory stands for
the traces directly inside it, one per rank. With `strategy`, `model` and `cluster` the measured
step is set beside the planner's prediction for that layout, term by term (`doctor.against_plan`).
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bandwise.api.inputs import calibration_of, cost_params, model_spec
from bandwise.cost.calibrated import calibrated
from bandwise.api.results import DoctorResult
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.results import Estimate
from bandwise.cost.step import estimate
from bandwise.doctor.against_plan import compare
from bandwise.doctor.ranks import RankRow, rank_rows, straggler
from bandwise.doctor.report import merge
from bandwise.doctor.rules import MIN_STEPS, Diagnosis
from bandwise.doctor.rules import diagnose as diagnose_one
from bandwise.doctor.signals import signals_from_trace
from bandwise.errors import BandwiseError
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.calibration import Calibration
from bandwise.specs.registry import engine_for, get_cluster, get_engine
from bandwise.specs.strategy import Strategy

MAX_MB = 65536
"""Decompressed megabytes a trace may reach before it is refused (`--max-mb`)."""


def diagnose(
    traces: str | Path | list[str | Path],
    *,
    strategy: Strategy | None = None,
    model: str | ModelSpec | None = None,
    cluster: str | Cluster | None = None,
    seq_len: int | None = None,
    engine: str | None = None,
    attention: str | None = None,
    eager: bool | None = None,
    grad_reduce: str | None = None,
    bf16: bool | None = None,
    max_mb: int = MAX_MB,
    jobs: int = 0,
    calibration: str | Path | Calibration | None = None,
) -> DoctorResult:
    """Read profiler traces (one per rank, or a directory of them): per-step breakdown, findings
    sorted by expected gain with their fixes, the per-rank table; with `strategy` (and the job's
    `model` and `cluster`), the measured terms against the plan's."""
    if max_mb < 1:
        raise BandwiseError(f"--max-mb={max_mb} must be >= 1")
    if jobs < 0:
        raise BandwiseError(f"--jobs={jobs} must be >= 0 (0: one per core)")
    if calibration is not None and strategy is None:  # checked before any trace is read
        raise BandwiseError("--calibration prices the plan the traces are set against: add --strategy plan.json with --model and --cluster")
    planned = priced(strategy, model, cluster, seq_len, attention, eager, engine, grad_reduce, calibration) if strategy is not None else None
    paths = expand_trace_paths([Path(p) for p in (traces if isinstance(traces, list) else [traces])])
    diagnoses, names, analyses = [], [], []
    for p, a in zip(paths, read_traces(paths, max_mb << 20, jobs)):
        diagnoses.append(diagnose_one(signals_from_trace(a["signals"], bf16_available=bf16), a["breakdown"]))
        names.append(p.name)
        analyses.append(a)
    d = merge(diagnoses, names)
    rows = rank_rows(analyses, names)
    add_ranks(d, rows)
    if planned is not None:
        add_plan(d, rows, {n: a for n, a in zip(names, analyses)}, *planned)
        cal = calibration_of(calibration)
        if cal is not None and isinstance(d.signals.get("against_plan"), dict):
            d.signals["against_plan"]["calibration"] = cal.label  # the plan's header names what priced it
    title = f"bandwise doctor: {len(paths)} trace(s)" if len(paths) > 1 else f"bandwise doctor: {paths[0].name}"
    return DoctorResult(diagnosis=d, traces=[str(p) for p in paths], title=title, analyses=dict(zip(names, analyses)))


def priced(s: Strategy, model: str | ModelSpec | None, cluster: str | Cluster | None, seq_len: int | None,
           attention: str | None = None, eager: bool | None = None, engine: str | None = None,
           grad_reduce: str | None = None, calibration: str | Path | Calibration | None = None) -> tuple[Any, ...]:
    """(strategy, model, cluster, estimate): the layout priced as `plan` and `estimate` price it (with
    `calibration`'s factors, `cost.calibrated`)."""
    if model is None or cluster is None:
        raise BandwiseError("--strategy needs the job's --model and --cluster to price the layout, e.g. --model llama3-8b --cluster h100")
    spec = model_spec(model, seq_len)
    clus = cluster if isinstance(cluster, Cluster) else get_cluster(cluster)
    clus.check_devices(s.world_size)
    s.check(s.world_size, spec)
    engine = engine_for(clus.device, engine)
    params = cost_params(DEFAULT_PARAMS.headroom, attention, eager, engine, clus.device, grad_reduce)
    clus, params = calibrated(clus, params, calibration_of(calibration), get_engine(engine).label)
    return s, spec, clus, estimate(spec, clus, s, params)


def read_traces(paths: list[Path], max_bytes: int, jobs: int) -> list[dict]:
    """Each trace's analysis (signals, breakdown, per-step rows), several ranks at once in worker
    processes: the parse is CPU-bound Python, one core each, and each process keeps only its own
    trace's intervals."""
    # the trace parsers load only where a trace is read: at the top they cost every command ~25 ms of start-up
    from bandwise.doctor.trace import analyze_for_report

    workers = min(len(paths), jobs or os.cpu_count() or 1)
    if workers <= 1:
        return [analyze_for_report(p, max_bytes) for p in paths]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(analyze_for_report, paths, [max_bytes] * len(paths)))


def add_plan(d: Diagnosis, rows: list[RankRow], analyses: dict[str, dict], s: Strategy, spec: ModelSpec, clus: Cluster, est: Estimate) -> None:
    """The measured step beside the plan's, term by term (`doctor.against_plan`)."""
    if not rows:
        d.missing.append("against the plan (no rank has GPU steps)")
        return
    comm = [analyses[r.name]["signals"].get("comm_exposed_ms") or {} for r in rows]
    terms = compare(rows, comm, s, est)
    d.signals["against_plan"] = {
        "strategy": s.describe(), "model": spec.name, "cluster": clus.name, "ranks_traced": len(rows), "world_size": s.world_size,
        "terms": [t.to_dict() for t in terms],
    }


def add_ranks(d: Diagnosis, rows: list[RankRow]) -> None:
    """Several ranks: the per-rank table, and the straggler finding where one rank holds the others back."""
    if len(rows) < 2:
        return
    d.signals["per_rank"] = [r.to_dict() for r in rows]
    if min(r.steps for r in rows) < MIN_STEPS:  # as for every other finding: too few steps, no verdict
        d.missing.append(f"straggler (every rank needs >= {MIN_STEPS} steps)")
        return
    found = straggler(rows)
    if found is not None:
        d.findings.append(found)
        d.findings.sort(key=lambda f: -(f.expected_speedup or 1.0))


TRACE_SUFFIXES = (".json", ".json.gz")


def expand_trace_paths(paths: list[Path]) -> list[Path]:
    """A directory stands for the trace files directly inside it (one per rank, as
    torch.profiler.tensorboard_trace_handler writes them)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise BandwiseError(f"directory {p} holds no .json or .json.gz trace files; pass the folder torch.profiler wrote, or the files themselves")
            out += found
        else:
            out.append(p)
    return out


def calibrate_trace(
    traces: str | Path | list[str | Path] | None = None,
    *,
    strategy: Strategy,
    model: str | ModelSpec,
    cluster: str | Cluster,
    seq_len: int | None = None,
    engine: str | None = None,
    attention: str | None = None,
    eager: bool | None = None,
    grad_reduce: str | None = None,
    max_mb: int = MAX_MB,
    jobs: int = 0,
    diagnosed: DoctorResult | None = None,
) -> Calibration:
    """A calibration from profiler traces of a known layout (`doctor.calibration`): each compute class's
    factor so that the plan of `strategy` spends what the traces measured. `diagnosed`: the result of
    `diagnose` on the same traces, read again from it (`doctor trace --calibrate`)."""
    from bandwise.doctor.calibration import calibrate_analyses

    s, spec, clus, _ = priced(strategy, model, cluster, seq_len, attention, eager, engine, grad_reduce)
    engine = engine_for(clus.device, engine)
    params = cost_params(DEFAULT_PARAMS.headroom, attention, eager, engine, clus.device, grad_reduce)
    if diagnosed is None:
        if traces is None:
            raise BandwiseError("calibrate: give the trace files or a directory of them")
        paths = expand_trace_paths([Path(p) for p in (traces if isinstance(traces, list) else [traces])])
        analyses, names = read_traces(paths, max_mb << 20, jobs), [p.name for p in paths]
    else:
        names, analyses = list(diagnosed.analyses), list(diagnosed.analyses.values())
    return calibrate_analyses(analyses, spec, clus, s, params, engine=get_engine(engine).label, names=names)
