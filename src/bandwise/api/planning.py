"""The planning half of the Python API: what `plan`, `estimate`, `compare`, `sweep` and `validate` do,
as functions with the commands' defaults and the commands' checks, returning typed results.

Arguments are named as the commands' options are (`--global-batch` is `global_batch`); a model and a
cluster are a preset's name, a file's path, or an already loaded `ModelSpec` / `Cluster`. Bad input
raises the `BandwiseError` whose message the command prints as its one line; `plan` raises
`NothingFits` when no layout fits in memory unless `must_fit=False`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bandwise.api.inputs import (
    calibration_of,
    cost_params,
    fraction,
    model_spec,
    plan_inputs,
    precisions_of,
)
from bandwise.api.results import (
    CompareResult,
    EstimateResult,
    PlanResult,
    SweepOutcome,
    ValidateResult,
)
from bandwise.cost.calibrated import calibrated
from bandwise.cost.step import estimate as estimate_one
from bandwise.errors import BandwiseError, NothingFits
from bandwise.plan.advice import no_valid_layout
from bandwise.plan.inputs import global_batch_of
from bandwise.plan.run_budget import price_run, run_ask
from bandwise.plan.search import SEARCH_ROWS, Layout, distinct, search
from bandwise.plan.sweep import PlanInputs, Point, parse_vary
from bandwise.plan.sweep import compare as compare_clusters
from bandwise.plan.sweep import sweep as sweep_points
from bandwise.plan.validate import load_runs, run_all
from bandwise.plan.verdict import THRESHOLD, decide, recommended, suggest_fit
from bandwise.specs.calibration import Calibration
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import DEFAULT_ENGINE, engine_for, get_cluster, get_engine
from bandwise.specs.strategy import Strategy

MAX_TOP = 1000
"""Layouts `plan` lists at most: the search keeps 20 x `top` candidates to collapse near-duplicates,
and each listed layout is a table row (`--top 1048576` took 13.7 s at a million devices)."""


def load_model(model: str | ModelSpec, seq_len: int | None = None) -> ModelSpec:
    """A model preset's name (`bandwise models`), a config.json or model file, or a `ModelSpec`;
    `seq_len` overrides its training sequence length."""
    return model_spec(model, seq_len)


def load_cluster(cluster: str | Cluster) -> Cluster:
    """A cluster preset's name (`bandwise clusters`), a cluster file, or a `Cluster`."""
    if not isinstance(cluster, (str, Cluster)):
        raise BandwiseError(f"cluster={cluster!r}: give a preset's name (bandwise clusters), a cluster file's path or a Cluster")
    return cluster if isinstance(cluster, Cluster) else get_cluster(cluster)


def listed(ranked: list[Layout], top: int, all_layouts: bool) -> tuple[list[Layout], int]:
    """The first `top` layouts, near-duplicates collapsed unless `all_layouts`; and how many were hidden among them."""
    if all_layouts:
        return ranked[:top], 0
    kept = distinct(ranked)[0][:top]
    last = next((i for i, lay in enumerate(ranked) if lay is kept[-1]), -1) if kept else -1
    return kept, last + 1 - len(kept)


def plan(
    model: str | ModelSpec = "llama3-70b",
    cluster: str | Cluster = "h100",
    devices: int = 64,
    *,
    engine: str | None = None,
    seq_len: int | None = None,
    global_batch: int | None = None,
    global_batch_tokens: int | None = None,
    top: int = 10,
    all_layouts: bool = False,
    allow_pp: bool = True,
    fix: dict[str, Any] | None = None,
    precision: str = "bf16",
    threshold: float = THRESHOLD,
    headroom: float = 0.1,
    attention: str | None = None,
    eager: bool | None = None,
    grad_reduce: str | None = None,
    fp8_recipe: str | None = None,
    overlap_tp: bool = False,
    exhaustive: bool = False,
    pool: int | None = None,
    progress: Callable[[int], None] | None = None,
    must_fit: bool = True,
    tokens: str | float | None = None,
    steps: int | None = None,
    price: str | float | None = None,
    calibration: str | Path | Calibration | None = None,
) -> PlanResult:
    """Search every valid layout, rank those that fit by tokens/s per device, and decide whether
    pipeline parallelism is worth it (`bandwise plan --help` says how). `fix` pins fields
    ({"tp": 1, "schedule": "1F1B"}); `pool`: how many ranked layouts the search keeps (default
    enough that `top` remain after collapsing near-duplicates). `attention`, `eager` and `grad_reduce`
    ('fp32' or 'bf16': Megatron-LM's --grad-reduce-in-bf16, `cost.params.GRAD_REDUCE`) state the job's
    kernels, fusion and gradient dtype over the engine's, as in `estimate`, `compare` and `sweep`; `fp8_recipe`
    how its fp8 GEMMs are scaled (`cost.fp8.FP8_RECIPES`), over the engine's. `tokens` ('15T') or `steps`,
    with `price` per device-hour, price the recommended layout as a whole run (`cost.run`). `calibration`: a file of measured factors
    (`bandwise calibrate`) applied to the cluster and the pricing. `engine`: the engine priced (None: the cluster's
    platform's, `registry.engine_for`); one that does not train on the cluster's chips is a `BandwiseError`."""
    ask = run_ask(tokens, steps, price)
    spec = model_spec(model, seq_len)
    clus = load_cluster(cluster)
    clus.check_devices(devices)
    engine = engine_for(clus.device, engine)
    cal = calibration_of(calibration)
    if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= MAX_TOP:
        raise BandwiseError(f"--top={top!r} must be a whole number between 1 and {MAX_TOP}")
    gb = global_batch_of(spec, global_batch, global_batch_tokens, devices)
    precisions = precisions_of(precision)
    threshold = fraction("--threshold", threshold)  # before the search: a bad value costs no search
    params = cost_params(headroom, attention, eager, engine, clus.device, grad_reduce, fp8_recipe)
    clus, params = calibrated(clus, params, cal, get_engine(engine).label)
    if pool is None:  # a pool deep enough that collapsing near-duplicates still leaves `top` distinct layouts
        pool = top if all_layouts else max(20 * top, 100)
    kw = dict(top=pool, allow_pp=allow_pp, fixed=dict(fix or {}), precisions=precisions, overlap={"tp": overlap_tp}, params=params,
              max_rows=None if exhaustive else SEARCH_ROWS, **get_engine(engine).search_space())  # only what the engine can run
    result = search(spec, clus, devices, gb, progress=progress, **kw)
    shown, hidden = listed(result.top, top, all_layouts)
    if result.searched == 0:
        raise BandwiseError(no_valid_layout(spec, devices, gb, kw["fixed"], allow_pp=allow_pp, precisions=precisions))
    verdict = decide(result, clus, threshold)
    chosen = recommended(result, verdict)
    if chosen is None:
        # searched in the engine's own space, as the plan was: the advice names a layout the engine runs
        verdict.reason += "; " + suggest_fit(spec, clus, devices, gb, allow_pp=allow_pp, fixed=kw["fixed"], precisions=precisions,
                                             overlap=kw["overlap"], params=params, **get_engine(engine).search_space())
        if must_fit:
            raise NothingFits(verdict.reason)
    run = price_run(ask, spec, clus, devices, chosen, params) if ask and chosen else None
    return PlanResult(model=spec, cluster=clus, devices=devices, global_batch=gb, engine=get_engine(engine), params=params, search=result,
                      decision=verdict, best=chosen, top=shown, hidden=hidden, search_options=kw, run=run, calibration=cal)


def estimate(
    model: str | ModelSpec = "llama3-70b",
    cluster: str | Cluster = "h100",
    devices: int | None = None,
    *,
    strategy: Strategy | None = None,
    engine: str | None = None,
    seq_len: int | None = None,
    headroom: float = 0.1,
    attention: str | None = None,
    eager: bool | None = None,
    grad_reduce: str | None = None,
    fp8_recipe: str | None = None,
    tokens: str | float | None = None,
    steps: int | None = None,
    price: str | float | None = None,
    calibration: str | Path | Calibration | None = None,
    **degrees: Any,
) -> EstimateResult:
    """Price one layout: a `Strategy`, or its fields as keywords (dp_shard=8, tp=8, micro_batch=1,
    global_batch=512, ...: `Strategy`'s names); `devices` defaults to the product of the degrees;
    `tokens` or `steps`, with `price`, price it as a whole run; `engine` as in `plan`."""
    ask = run_ask(tokens, steps, price)
    spec = model_spec(model, seq_len)
    clus = load_cluster(cluster)
    if strategy is None:
        strategy = Strategy(**degrees)
    elif degrees:
        raise BandwiseError(f"give a strategy or its fields ({', '.join(degrees)}), not both")
    n = strategy.world_size if devices is None else devices
    clus.check_devices(n)
    strategy.check(n, spec)
    engine = engine_for(clus.device, engine)
    params = cost_params(headroom, attention, eager, engine, clus.device, grad_reduce, fp8_recipe)
    cal = calibration_of(calibration)
    clus, params = calibrated(clus, params, cal, get_engine(engine).label)
    layout = Layout(strategy=strategy, estimate=estimate_one(spec, clus, strategy, params))
    run = price_run(ask, spec, clus, n, layout, params) if ask else None
    return EstimateResult(model=spec, cluster=clus, devices=n, engine=get_engine(engine), params=params, layout=layout, run=run,
                          calibration=cal)


def compare(
    model: str | ModelSpec = "deepseek-v3",
    clusters: str | list[str | Cluster] = "h100,h800,gb200-nvl72,tpu-v5p",
    devices: int = 2048,
    *,
    engine: str | None = None,
    seq_len: int | None = None,
    global_batch: int | None = None,
    global_batch_tokens: int | None = None,
    precision: str = "bf16",
    threshold: float = THRESHOLD,
    headroom: float = 0.1,
    overlap_tp: bool = False,
    overlap_ep: bool = False,
    attention: str | None = None,
    eager: bool | None = None,
    grad_reduce: str | None = None,
    fp8_recipe: str | None = None,
    jobs: int = 1,
    exhaustive: bool = False,
    on_point: Callable[[Point], None] | None = None,
    tokens: str | float | None = None,
    steps: int | None = None,
    price: str | float | None = None,
    calibration: str | Path | Calibration | None = None,
) -> CompareResult:
    """Plan one model on each cluster (comma-separated names, or a list of names and `Cluster`s); `tokens`
    or `steps`, with `price`, price each cluster's best layout as a whole run; `calibration` applies to the
    clusters of the device it was measured on, the others keep their datasheet figures. A named `engine` must
    train on every cluster; with none, each cluster is priced as its own platform's (`Point.engine` says which)."""
    ask = run_ask(tokens, steps, price)
    inputs, cl = compare_inputs(model, clusters, devices, engine=engine, seq_len=seq_len, global_batch=global_batch,
                                global_batch_tokens=global_batch_tokens, precision=precision, threshold=threshold, headroom=headroom,
                                overlap_tp=overlap_tp, overlap_ep=overlap_ep, attention=attention, eager=eager, grad_reduce=grad_reduce, jobs=jobs,
                                exhaustive=exhaustive, fp8_recipe=fp8_recipe, calibration=calibration)
    points = compare_clusters(inputs, cl, jobs=jobs, on_point=on_point)
    return CompareResult(inputs=inputs, clusters=cl, points=points, runs=_point_runs(ask, inputs, points))


def _point_runs(ask: Any, inputs: PlanInputs, points: list[Point]) -> dict[str, Any] | None:
    """Each point's best layout priced as the asked run (None where nothing fits); None when no run was asked."""
    if ask is None:
        return None
    return {p.label: price_run(ask, inputs.model, p.cluster, inputs.devices, p.best, inputs.params_on(p.cluster)) if p.best else None
            for p in points}


def compare_inputs(model: str | ModelSpec, clusters: str | list[str | Cluster], devices: int, *, engine: str | None, seq_len: int | None,
                   global_batch: int | None, global_batch_tokens: int | None, precision: str, threshold: float, headroom: float,
                   overlap_tp: bool, overlap_ep: bool, attention: str | None, eager: bool | None, jobs: int,
                   exhaustive: bool, grad_reduce: str | None = None, fp8_recipe: str | None = None,
                   calibration: str | Path | Calibration | None = None) -> tuple[PlanInputs, list[Cluster]]:
    """`compare`'s inputs, every one checked before any planning starts (the command draws its bar after)."""
    names = [c.strip() for c in clusters.split(",") if c.strip()] if isinstance(clusters, str) else list(clusters)
    # the clusters share one command's bound on candidates
    per_search = None if exhaustive else SEARCH_ROWS // max(1, len(names))
    args = (model, devices, seq_len, global_batch, global_batch_tokens, precision, threshold, headroom, overlap_tp, overlap_ep, per_search,
            attention, eager)
    inputs = plan_inputs(*args, engine or DEFAULT_ENGINE, grad_reduce, fp8_recipe)
    if jobs < 1:
        raise BandwiseError(f"--jobs={jobs} must be a positive integer")
    keys = [n if isinstance(n, str) else n.name for n in names]
    if len(set(keys)) != len(keys):
        raise BandwiseError(f"--clusters {','.join(keys)!r}: a cluster repeats; give each once")
    if not names:
        raise BandwiseError("--clusters is empty; give cluster presets separated by commas, e.g. h100,gb200-nvl72")
    cl = [load_cluster(c) for c in names]
    for c in cl:
        c.check_devices(inputs.devices)
    # each cluster priced as the named engine, which must train on every one of them, or, where none is
    # named, as its own platform's (GPUs as Megatron-Core, TPUs as MaxText: `registry.engine_for`)
    engines = {c.name: engine_for(c.device, engine) for c in cl}
    engine = engines[cl[0].name]
    inputs = plan_inputs(*args, engine, grad_reduce, fp8_recipe)  # the header's engine: the first cluster's
    inputs = replace(inputs, pricing_by_cluster={name: replace(inputs.pricing, engine=get_engine(e)) for name, e in engines.items()
                                                 if e != engine})
    cal = calibration_of(calibration)
    if cal is not None:
        if not any(c.device.name == cal.device for c in cl):
            raise BandwiseError(f"--calibration {cal.path or cal.name!r} was measured on {cal.device}, which none of the clusters has; "
                                f"add a {cal.device} cluster or drop --calibration")
        cl = [calibrated(c, inputs.params_on(c), cal, inputs.engine_label(c))[0] if c.device.name == cal.device else c for c in cl]
        inputs = replace(inputs, calibration=cal)
    return inputs, cl


def sweep(
    vary: str,
    model: str | ModelSpec = "deepseek-v3",
    devices: int = 2048,
    *,
    base_cluster: str | Cluster = "h100",
    engine: str | None = None,
    seq_len: int | None = None,
    global_batch: int | None = None,
    global_batch_tokens: int | None = None,
    precision: str = "bf16",
    threshold: float = THRESHOLD,
    headroom: float = 0.1,
    overlap_tp: bool = False,
    overlap_ep: bool = False,
    attention: str | None = None,
    eager: bool | None = None,
    grad_reduce: str | None = None,
    fp8_recipe: str | None = None,
    exhaustive: bool = False,
    on_point: Callable[[Point], None] | None = None,
    tokens: str | float | None = None,
    steps: int | None = None,
    price: str | float | None = None,
    calibration: str | Path | Calibration | None = None,
) -> SweepOutcome:
    """Re-plan one model while one interconnect quantity of a base cluster changes
    (`vary="scale-up-size=8,16,72"` or `"scale-out-bandwidth=25,50,100"`, GB/s per device); `tokens` or
    `steps`, with `price`, price each point's best layout as a whole run; `calibration` applies to the base cluster (a
    swept bandwidth is the value swept, not calibrated); `engine` as in `plan`, for the base cluster."""
    ask = run_ask(tokens, steps, price)
    spec = parse_vary(vary)
    base = load_cluster(base_cluster)
    engine = engine_for(base.device, engine)
    cal = calibration_of(calibration)
    # the shared enumeration holds its candidates in memory and each value searches them again: half the bound
    inputs = plan_inputs(model, devices, seq_len, global_batch, global_batch_tokens, precision, threshold, headroom, overlap_tp, overlap_ep,
                     None if exhaustive else SEARCH_ROWS // 2, attention, eager, engine, grad_reduce, fp8_recipe)
    base.check_devices(inputs.devices)
    if cal is not None:
        base = calibrated(base, inputs.params, cal, get_engine(engine).label)[0]
        inputs = replace(inputs, calibration=cal)
    result = sweep_points(inputs, base, spec, on_point=on_point)
    return SweepOutcome(inputs=inputs, result=result, runs=_point_runs(ask, inputs, result.points))


def validate(
    runs: str | Path | None = None,
    *,
    source: str | None = None,
    engine: str | None = None,
    calibration: str | Path | Calibration | None = None,
) -> ValidateResult:
    """Predict published training runs (the shipped ones, or a YAML file in their schema), each as
    `plan --engine E` predicts it (E its source's engine, or `engine` for all), and report the error per run.
    `calibration` applies to the runs of the device and engine it was measured on."""
    if engine is not None:
        get_engine(engine)  # a name that is no engine is one line, not a reason on every run
    cal = calibration_of(calibration)
    data, sources = load_runs(None if runs is None else Path(runs))
    return ValidateResult(runs=run_all(data, source, sources=sources, engine=engine, calibration=cal))


__all__ = ["MAX_TOP", "compare", "estimate", "listed", "load_cluster", "load_model", "plan", "sweep", "validate"]
