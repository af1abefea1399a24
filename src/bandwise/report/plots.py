"""Charts for `bandwise compare` and `bandwise sweep` (matplotlib, imported only when a PNG or a page is asked for).

Both charts have two panels: MFU of the best layout with and without pipeline parallelism, and
below it the exposed communication per step split by parallel dim, so a reader sees which
collective the pipeline is there to hide.
"""

from __future__ import annotations

from typing import Any

from bandwise.errors import INSTALL, BandwiseError
from bandwise.files import save_figure
from bandwise.plan.sweep import COMM_DIMS, PlanInputs, Point, SweepResult

DIM_COLOURS = {"tp": "#4C72B0", "cp": "#8172B3", "ep": "#C44E52", "fsdp": "#DD8452", "dp": "#55A868", "pp": "#937860"}
WITH_PP, WITHOUT_PP = "#4C72B0", "#DD8452"


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise BandwiseError(f"--png needs matplotlib ({exc}); from the bandwise checkout run: {INSTALL['plot']}") from exc
    return plt


def _mfu(p: Point, which: str) -> float:
    lay = p.best if which == "best" else p.best_without_pp
    return lay.estimate.mfu * 100 if lay else 0.0


def _exposed_bars(ax: Any, xs: list[float], points: list[Point], width: float) -> None:
    """Stacked exposed-comm bars per dim: the best layout left of x, the best without PP right of it."""
    labelled: set[str] = set()
    for shift, which, hatch in ((-width / 2, "best", ""), (width / 2, "best_without_pp", "//")):
        bottom = [0.0] * len(points)
        for dim in COMM_DIMS:
            ms = [p.exposed_ms(which).get(dim, 0.0) for p in points]
            if not any(ms):
                continue
            label = None if dim in labelled else dim
            labelled.add(dim)
            ax.bar([x + shift for x in xs], ms, width, bottom=bottom, color=DIM_COLOURS[dim], hatch=hatch, edgecolor="white", linewidth=0.5, label=label)
            bottom = [b + m for b, m in zip(bottom, ms)]
    ax.set_ylabel("exposed comm, ms/step")
    ax.legend(title="dim (plain: best; hatched: without PP)", fontsize=7, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _title(inputs: PlanInputs) -> str:
    m = inputs.model
    return f"{m.name}, {inputs.devices} devices, {inputs.global_batch} x {m.seq_len} tokens per step"


def compare_chart(points: list[Point], inputs: PlanInputs, path: str) -> None:
    """`compare_figure` to a PNG file."""
    _save(compare_figure(points, inputs), path)


def sweep_chart(result: SweepResult, inputs: PlanInputs, path: str) -> None:
    """`sweep_figure` to a PNG file."""
    _save(sweep_figure(result, inputs), path)


def _save(fig: Any, path: str) -> None:
    try:
        save_figure(fig, path, what="the chart", dpi=120)
    finally:
        _pyplot().close(fig)


def compare_figure(points: list[Point], inputs: PlanInputs) -> Any:
    """Grouped MFU bars (with / without PP) per cluster, verdict above; exposed comm by dim below."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(7.0, 1.9 * len(points) + 3), 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    xs = list(range(len(points)))
    w = 0.38
    top.bar([x - w / 2 for x in xs], [_mfu(p, "best") for p in points], w, color=WITH_PP, label="best layout")
    top.bar([x + w / 2 for x in xs], [_mfu(p, "best_without_pp") for p in points], w, color=WITHOUT_PP, label="best without PP")
    for x, p in zip(xs, points):
        word, colour = {True: ("PP needed", "#C44E52"), False: ("PP not needed", "#2E7D32"), None: ("nothing fits", "#8C6D1F")}[p.verdict.needs_pp]
        top.text(x, max(_mfu(p, "best"), _mfu(p, "best_without_pp")) + 1, word, ha="center", fontsize=8, color=colour)
        for shift, which in ((-w / 2, "best"), (w / 2, "best_without_pp")):
            v = _mfu(p, which)
            top.text(x + shift, v / 2, f"{v:.1f}", ha="center", va="center", fontsize=7, color="white")
    top.set_ylabel("MFU, %")
    top.set_ylim(0, max([_mfu(p, "best") for p in points] + [1.0]) * 1.18)
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    top.set_title(_title(inputs), fontsize=10)
    _exposed_bars(bottom, xs, points, w)
    bottom.set_xticks(xs, [p.label for p in points])
    fig.tight_layout()
    return fig


def sweep_figure(result: SweepResult, inputs: PlanInputs) -> Any:
    """MFU against the varied quantity (two lines, crossover marked); exposed comm by dim below."""
    plt = _pyplot()
    pts = sorted(result.points, key=lambda p: p.value)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8.5, 7.5), gridspec_kw={"height_ratios": [3, 2]})
    # evenly spaced positions labelled with the values: domain sizes and bandwidths span decades
    xs = list(range(len(pts)))
    top.plot(xs, [_mfu(p, "best") for p in pts], "o-", color=WITH_PP, label="best layout (PP allowed)")
    top.plot(xs, [_mfu(p, "best_without_pp") for p in pts], "s--", color=WITHOUT_PP, label="best without PP")
    for x, p in zip(xs, pts):
        if p.verdict.needs_pp:
            top.annotate(f"PP{p.best.strategy.pp}", (x, _mfu(p, "best")), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    x_cross = result.crossover
    if x_cross is not None:
        i = [p.value for p in pts].index(x_cross)
        top.axvline(i, color="#2E7D32", linestyle=":", linewidth=1.5)
        top.text(i, top.get_ylim()[0], f" PP not needed from {x_cross:g}", color="#2E7D32", fontsize=8, va="bottom")
    else:
        top.text(0.99, 0.02, "PP still pays off at the largest value", transform=top.transAxes, ha="right", fontsize=8, color="#C44E52")
    top.set_ylabel("MFU, %")
    top.set_xticks(xs, [f"{p.value:g}" for p in pts])
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    top.set_title(f"{_title(inputs)}\nbase {result.base.name}, {result.vary.kind} varied", fontsize=10)
    _exposed_bars(bottom, xs, pts, 0.38)
    bottom.set_xticks(xs, [f"{p.value:g}" for p in pts])
    bottom.set_xlabel(result.vary.kind.replace("-", " ") + (" (devices)" if result.vary.kind == "scale-up-size" else " (GB/s per device)"))
    fig.tight_layout()
    return fig


def run_frontier_chart(labels: list[str], runs: list[Any], on_frontier: set[str], title: str, path: str) -> None:
    """`run_frontier_figure`, written to `path`."""
    _save(run_frontier_figure(labels, runs, on_frontier, title), path)


def run_frontier_figure(labels: list[str], runs: list[Any], on_frontier: set[str], title: str) -> Any:
    """Days against cost (device-hours where a run has no price), one mark per point, the frontier joined."""
    plt = _pyplot()
    priced = [(k, r) for k, r in zip(labels, runs) if r is not None]
    money = bool(priced) and all(r.cost is not None for _, r in priced)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    amounts = [r.cost if money else r.device_hours for _, r in priced]
    scale, word = (1e6, "millions") if max(amounts, default=0.0) >= 1e6 else (1e3, "thousands")
    xs = [a / scale for a in amounts]
    ys = [r.days for _, r in priced]
    ax.scatter(xs, ys, color=WITH_PP)
    for (k, _), x, y in zip(priced, xs, ys):
        ax.annotate(k, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    front = sorted((x, y) for (k, _), x, y in zip(priced, xs, ys) if k in on_frontier)
    if len(front) > 1:
        ax.plot(*zip(*front), color=WITHOUT_PP, linewidth=1, label="time/cost frontier")
        ax.legend(fontsize=8)
    ax.set_xlabel(f"cost, {word}" if money else f"device-hours, {word}")
    ax.set_ylabel("days, wall-clock")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
