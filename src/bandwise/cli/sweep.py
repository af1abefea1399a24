"""`bandwise compare` and `bandwise sweep`: parse arguments, plan each point, print or draw."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.console import Group

from bandwise.cli.options import (
    ATTENTION,
    EAGER,
    EXHAUSTIVE,
    GLOBAL_BATCH,
    GLOBAL_BATCH_TOKENS,
    HEADROOM,
    JSON_OUT,
    OVERLAP_EP,
    OVERLAP_TP,
    PRECISION,
    SEQ_LEN,
    THRESHOLD_OPT,
    cost_params,
    fraction,
    model_spec,
    precisions_of,
)
from bandwise.errors import BandwiseError
from bandwise.plan.inputs import global_batch_of
from bandwise.plan.bands import band_dict
from bandwise.plan.search import SEARCH_ROWS, Layout, narrowed_note
from bandwise.plan.sweep import VARY_KINDS, PlanInputs, Point, SweepResult, compare as compare_clusters, parse_vary, sweep as sweep_points, vary_cluster
from bandwise.report import glossary
from bandwise.report.output import Output
from bandwise.report.tables import min_width, plain_table
from bandwise.specs.registry import get_cluster

DEFAULT_CLUSTERS = "h100,h800,gb200-nvl72,tpu-v5p"

COMPARE_HELP = """Plan one model on several clusters: per cluster the best layout, the best layout without pipeline
parallelism (PP), the verdict with its reason, and the dominant exposed cost (the
largest communication term not hidden behind compute, with its link and ms per step) of the best
layout without PP, which is what a pipeline would have to remove.

The verdict is the one `bandwise plan` gives (see `bandwise plan --help`): PP is not needed when the
best layout without PP is within --threshold of the best overall, in tokens/s per device; a cluster
where nothing fits has no verdict ("nothing fits").
"""

SWEEP_HELP = """Re-plan one model while one interconnect quantity of a base cluster changes, and show where PP stops
paying off.

--vary scale-up-size=8,16,36,72,144 sets the size of the scale-up domain (level 0, the NVLink
domain: 8 on HGX H100, 72 on GB200 NVL72); GPU base clusters only.
--vary scale-out-bandwidth=25,50,100,200,400 sets the scale-out network (level 1: InfiniBand, or
DCN between TPU slices) in GB/s per device per direction (50 = one 400 Gb/s NIC per GPU).

Each point is an exhaustive search with and without PP. The crossover is the smallest swept value
from which on the verdict is "PP not needed" at every larger value too: the best layout without PP
is within --threshold of the best overall there, exactly as `bandwise plan` decides.
"""


def _inputs(model: str, devices: int, seq_len: int | None, global_batch: int | None, global_batch_tokens: int | None,
            precision: str, threshold: float, headroom: float, overlap_tp: bool, overlap_ep: bool,
            max_rows: int | None = SEARCH_ROWS, attention: str = "flash", eager: bool = False) -> PlanInputs:
    spec = model_spec(model, seq_len)
    if not isinstance(devices, int) or devices < 1:
        raise BandwiseError(f"devices={devices!r} must be a positive integer")
    precisions = precisions_of(precision)
    return PlanInputs(
        model=spec,
        devices=devices,
        global_batch=global_batch_of(spec, global_batch, global_batch_tokens, devices),
        threshold=fraction("--threshold", threshold),
        precisions=precisions,
        overlap={"tp": overlap_tp, "ep": overlap_ep},
        params=cost_params(headroom, attention, eager),
        max_rows=max_rows,
    )


def _check_jobs(jobs: int) -> None:
    if jobs < 1:
        raise BandwiseError(f"--jobs={jobs} must be a positive integer")


def _progress(out: Output, what: str) -> Progress:
    return Progress(
        TextColumn(f"planning {what}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
        TimeElapsedColumn(), transient=True, console=out.console, disable=out.json_mode,
    )


def _run_with_bar(out: Output, labels: list[str], what: str, run) -> list[Point]:  # noqa: ANN001
    with _progress(out, what) as bar:
        task = bar.add_task(labels[0] if labels else "", total=len(labels))

        def done(p: Point) -> None:
            k = labels.index(p.label) + 1
            bar.update(task, advance=1, description=labels[k] if k < len(labels) else "")

        return run(done)


def _layout(lay: Layout | None) -> tuple[str, str]:
    if lay is None:
        return "none fits", "-"
    return lay.strategy.describe(), f"{lay.estimate.mfu:.1%}"


VERDICT_CELL = {True: "PP needed", False: "PP not needed", None: "nothing fits"}


def _table(points: list[Point], title: str, first: str) -> Group:
    """One row per point, narrow enough for 80 columns; the dominant exposed cost goes in the lines below."""
    cols: dict[str, list[str]] = {first: [], "best layout": [], "MFU": [], "best without PP": [], "MFU ": [], "verdict": []}
    for p in points:
        verdict = VERDICT_CELL[p.verdict.needs_pp] + (f" ({p.verdict.gain:+.1%})" if p.verdict.gain is not None else "")
        first_cell = p.label if p.value is None else f"{p.value:g}"
        for k, cell in zip(cols, (first_cell, *_layout(p.best), *_layout(p.best_without_pp), verdict)):
            cols[k].append(cell)
    return plain_table(title, cols, (first, "best layout", "best without PP", "verdict"), f"{glossary.COMPARE} {glossary.LAYOUT}")


def _point_line(p: Point) -> str:
    dom = p.dominant.describe() if p.dominant else "none exposed"
    return f"[b]{p.label}[/b]: {p.verdict.reason}; dominant exposed cost without PP: {dom}"


def _narrowed_lines(out: Output, points: list[Point]) -> None:
    """How narrowed searches were done, once per distinct way (clusters of one device count share it)."""
    notes: dict[str, list[str]] = {}
    for p in points:
        if "narrowed" in p.result.extra:
            notes.setdefault(narrowed_note(p.result.extra["narrowed"]), []).append(p.label)
    for note, labels in notes.items():
        out.print(f"[b]{', '.join(labels)}[/b]: {note}" if len(points) > 1 else note)


def _header(out: Output, inputs: PlanInputs, where: str) -> None:
    m = inputs.model
    out.print(
        f"[b]{m.name}[/b] on [b]{inputs.devices}[/b] devices of {where}, seq {m.seq_len}, global batch {inputs.global_batch} "
        f"sequences = {inputs.global_batch * m.seq_len / 1e6:.1f}M tokens; a point's verdict is 'PP not needed' when its best "
        f"layout without PP is within {inputs.threshold:.0%} of its best"
    )


def _common(inputs: PlanInputs) -> dict[str, object]:
    return {"model": inputs.model.name, "devices": inputs.devices, "global_batch": inputs.global_batch, "threshold": inputs.threshold}


def compare(
    model: str = typer.Option("deepseek-v3", "--model", "-m", help="Model preset or path to a config.json."),
    devices: int = typer.Option(2048, "--devices", "-n", help="Number of accelerators (at most 1,048,576)."),
    clusters: str = typer.Option(DEFAULT_CLUSTERS, "--clusters", "-c", help="Cluster presets or cluster files, comma-separated."),
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
    jobs: int = typer.Option(1, "--jobs", "-j", help="Plan this many points at once in worker processes."),
    png: Path | None = typer.Option(None, "--png", help="Also draw the grouped bar chart to this PNG file."),
    exhaustive: bool = EXHAUSTIVE,
    json_out: bool = JSON_OUT,
) -> None:
    out = Output(json_mode=json_out)
    names = [c.strip() for c in clusters.split(",") if c.strip()]
    # the clusters share one command's bound on candidates
    per_search = None if exhaustive else SEARCH_ROWS // max(1, len(names))
    inputs = _inputs(model, devices, seq_len, global_batch, global_batch_tokens, precision, threshold, headroom, overlap_tp, overlap_ep, per_search,
                     attention, eager)
    _check_jobs(jobs)
    if len(set(names)) != len(names):
        raise BandwiseError(f"--clusters {clusters!r}: a cluster repeats; give each once")
    if not names:
        raise BandwiseError("--clusters is empty; give cluster presets separated by commas, e.g. h100,gb200-nvl72")
    cl = [get_cluster(n) for n in names]
    for c in cl:  # refuse before the progress bar starts drawing
        c.check_devices(inputs.devices)
    points = _run_with_bar(out, [c.name for c in cl], f"{inputs.model.name} on {len(cl)} clusters",
                           lambda done: compare_clusters(inputs, cl, jobs=jobs, on_point=done))
    if png is not None:
        from bandwise.report.plots import compare_chart

        compare_chart(points, inputs, str(png))
    validation = {c.name: band_dict(c.device.name, inputs.model.is_moe, inputs.devices) for c in cl}
    if json_out:
        out.emit_json({**_common(inputs), "clusters": points, "validation": validation, **({"png": str(png)} if png else {})})
        return
    _header(out, inputs, ", ".join(names))
    table = _table(points, "Best layout with and without pipeline parallelism", "cluster")
    out.print(table, min_width=min_width(table))
    for p in points:
        out.print(_point_line(p))
    for name, v in validation.items():
        out.print(f"{name}: tokens/s and MFU {v['line']}")
    _narrowed_lines(out, points)
    if png is not None:
        out.print(f"chart written to {png}")


def sweep(
    vary: str = typer.Option(..., "--vary", help="scale-up-size=8,16,36,72,144 or scale-out-bandwidth=25,50,100,200,400 (GB/s per device)."),
    model: str = typer.Option("deepseek-v3", "--model", "-m", help="Model preset or path to a config.json."),
    devices: int = typer.Option(2048, "--devices", "-n", help="Number of accelerators (at most 1,048,576)."),
    base_cluster: str = typer.Option("h100", "--base-cluster", "-c", help="Cluster preset or file whose level is varied."),
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
    png: Path | None = typer.Option(None, "--png", help="Also draw MFU against the varied quantity, and the exposed communication by dim, to this PNG file."),
    exhaustive: bool = EXHAUSTIVE,
    json_out: bool = JSON_OUT,
) -> None:
    out = Output(json_mode=json_out)
    spec = parse_vary(vary)
    base = get_cluster(base_cluster)
    # the shared enumeration holds its candidates in memory and each value searches them again: half the bound
    inputs = _inputs(model, devices, seq_len, global_batch, global_batch_tokens, precision, threshold, headroom, overlap_tp, overlap_ep,
                     None if exhaustive else SEARCH_ROWS // 2, attention, eager)
    labels = [vary_cluster(base, spec.kind, v).name for v in spec.values]
    base.check_devices(inputs.devices)
    points = _run_with_bar(out, labels, f"{len(labels)} points", lambda done: sweep_points(inputs, base, spec, on_point=done).points)
    result = SweepResult(base=base, vary=spec, points=points)
    if png is not None:
        from bandwise.report.plots import sweep_chart

        sweep_chart(result, inputs, str(png))
    if json_out:
        out.emit_json({**_common(inputs), **result.to_dict(), **({"png": str(png)} if png else {})})
        return
    _header(out, inputs, f"{base.name}, {spec.kind} varied")
    table = _table(result.points, VARY_KINDS[spec.kind].capitalize(), spec.kind)
    out.print(table, min_width=min_width(table))
    for p in sorted(result.points, key=lambda p: p.value):
        out.print(f"[b]{p.value:g}[/b]: dominant exposed cost without PP: {p.dominant.describe() if p.dominant else 'none exposed'}")
    out.print(_crossover_line(result))
    _narrowed_lines(out, result.points[:1])
    if png is not None:
        out.print(f"chart written to {png}")


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
    words = f"\n\n[b]Words[/b]: {glossary.COMPARE}\n\n{glossary.LAYOUT}"
    app.command("compare", help=COMPARE_HELP + words)(compare)
    app.command("sweep", help=SWEEP_HELP + words)(sweep)
