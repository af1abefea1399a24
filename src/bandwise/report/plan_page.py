"""The plan as a page (`plan --html`) and a picture (`plan --png`).

Every figure in words comes from the `plan --json` document (`doc`), as it prints; the charts draw
the same layouts, and the layout space (`plan.space`) that the document does not hold. The scatter
bins the space: each side (with and without PP) on a 64 x 40 grid over memory and tokens/s, one
mark per occupied cell at the mean of its layouts, its shade the count (log scale); the frontiers
are drawn exactly, one mark per layout. So a search of millions of layouts is a few thousand marks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bandwise.cost.pipeline import Timeline
from bandwise.cost.results import BREAKDOWN_LABELS, BREAKDOWN_TERMS, MEMORY_TERMS
from bandwise.plan.search import Layout
from bandwise.plan.space import LayoutSpace
from bandwise.report.html import esc, page, pyplot, svg, value
from bandwise.report.run import run_html
from bandwise.report.timeline import gantt_figure

GRID = (64, 40)
"""Cells of the scatter's grid: memory x tokens/s."""
SIDES = {True: ("with PP", "#4C72B0", "Blues"), False: ("without PP", "#DD8452", "Oranges")}
TERM_COLOURS = {"compute": "#4C72B0", "recompute": "#8da0cb", "contention": "#b3b3b3", "bubble": "#937860", "tp": "#64B5CD",
                "cp": "#8172B3", "ep": "#C44E52", "fsdp": "#DD8452", "dp": "#55A868", "pp": "#CCB974", "optimizer": "#2E7D32"}
BARS = 8
"""Layouts whose step and memory are drawn side by side."""


def _name(lay: Layout) -> str:
    return lay.strategy.describe()


def _hover(lay: Layout) -> str:
    e = lay.estimate
    return f"{_name(lay)}: {e.tokens_per_s_per_device:,.1f} tokens/s per device, MFU {e.mfu:.1%}, {e.memory_gib_per_device:.1f} GiB"


def _bins(space: LayoutSpace, side: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(x, y, count, hover) of the occupied cells of one side."""
    sel = (space.with_pp == side) & np.isfinite(space.tokens_per_s) & np.isfinite(space.memory_gib)
    m, t = space.memory_gib[sel].astype(np.float64), space.tokens_per_s[sel].astype(np.float64)
    if not len(m):
        return np.zeros(0), np.zeros(0), np.zeros(0), []
    mx, tx = _extent(space)
    ix = np.minimum((m / mx * GRID[0]).astype(np.int64), GRID[0] - 1)
    iy = np.minimum((t / tx * GRID[1]).astype(np.int64), GRID[1] - 1)
    cell = ix * GRID[1] + iy
    occupied, inv, count = np.unique(cell, return_inverse=True, return_counts=True)
    x = np.bincount(inv, weights=m) / count
    y = np.bincount(inv, weights=t) / count
    label = SIDES[side][0]
    hover = [f"{int(c):,} layouts {label}: {a * mx / GRID[0]:.0f}-{(a + 1) * mx / GRID[0]:.0f} GiB, "
             f"{b * tx / GRID[1]:,.0f}-{(b + 1) * tx / GRID[1]:,.0f} tokens/s per device"
             for c, a, b in zip(count, occupied // GRID[1], occupied % GRID[1])]
    return x, y, count, hover


def _extent(space: LayoutSpace) -> tuple[float, float]:
    """The axes' reach: the fitting layouts and twice the memory limit, whichever is less, so that
    layouts far past the limit do not squeeze the ones that fit."""
    ok = np.isfinite(space.tokens_per_s) & np.isfinite(space.memory_gib)
    mx = float(min(space.memory_gib[ok].max(initial=1.0), 2 * space.capacity_gib)) * 1.02
    tx = float(space.tokens_per_s[ok].max(initial=1.0)) * 1.05
    return mx, tx


def scatter(ax: Any, space: LayoutSpace, best: Layout | None, nopp: Layout | None) -> dict[str, list[str]]:
    """The layout space on `ax`; returns the hover text of each artist by gid."""
    titles: dict[str, list[str]] = {}
    mx, tx = _extent(space)
    for side in (False, True):
        x, y, count, hover = _bins(space, side)
        keep = x <= mx
        if not keep.any():
            continue
        label, colour, cmap = SIDES[side]
        art = ax.scatter(x[keep], y[keep], s=9, c=np.log10(count[keep]) + 1, cmap=cmap, vmin=0, vmax=np.log10(count.max()) + 1.5,
                         marker="s" if side else "o", linewidths=0, label=f"layouts {label} (shade: count)")
        art.set_gid(f"cells-{'pp' if side else 'nopp'}")
        titles[art.get_gid()] = [h for h, k in zip(hover, keep) if k]
        edge = space.frontier[side]
        if edge:
            fx = [lay.estimate.memory_gib_per_device for lay in edge]
            fy = [lay.estimate.tokens_per_s_per_device for lay in edge]
            ax.step(fx, fy, where="post", color=colour, linewidth=1.6, label=f"frontier {label}")
            art = ax.scatter(fx, fy, s=16, color=colour, edgecolors="black", linewidths=0.4, zorder=3)
            art.set_gid(f"frontier-{'pp' if side else 'nopp'}")
            titles[art.get_gid()] = [_hover(lay) for lay in edge]
    ax.axvline(space.capacity_gib, color="#C44E52", linestyle="--", linewidth=1.2, label=f"memory limit {space.capacity_gib:.1f} GiB")
    for lay, marker, text, gid in ((best, "*", "recommended", "recommended"), (nopp, "D", "best without PP", "best-nopp")):
        if lay is not None:
            art = ax.scatter([lay.estimate.memory_gib_per_device], [lay.estimate.tokens_per_s_per_device], s=170 if marker == "*" else 70,
                             marker=marker, color="#FFD700" if marker == "*" else "white", edgecolors="black", linewidths=1.0, zorder=5,
                             label=f"{text}: {_name(lay)}")
            art.set_gid(gid)
            titles[gid] = [f"{text}: {_hover(lay)}"]
    ax.set_xlim(0, mx)
    ax.set_ylim(0, tx)
    ax.set_xlabel("memory per device, GiB (peak rank)")
    ax.set_ylabel("tokens/s per device")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.25)
    return titles


def _bar_layouts(doc: dict[str, Any], best: Layout | None, nopp: Layout | None, top: list[Layout]) -> list[tuple[str, Layout]]:
    rows = [(f"top[{i}]", lay) for i, lay in enumerate(top[:BARS])]
    if nopp is not None and not any(lay.strategy == nopp.strategy for _, lay in rows):
        rows.append(("best_without_pp", nopp))
    return rows


def step_bars(ax: Any, rows: list[tuple[str, Layout]]) -> None:
    """Seconds per step by term, stacked, one bar per layout."""
    names = [f"{i + 1}. {_name(lay)}" if key.startswith("top") else f"no PP: {_name(lay)}" for i, (key, lay) in enumerate(rows)]
    left = np.zeros(len(rows))
    for term in BREAKDOWN_TERMS:
        ms = np.array([lay.estimate.breakdown[term] * 1e3 for _, lay in rows])
        if ms.any():
            ax.barh(names, ms, left=left, color=TERM_COLOURS[term], label=BREAKDOWN_LABELS[term])
            left += ms
    ax.invert_yaxis()
    ax.set_xlabel("ms per step")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def memory_bars(ax: Any, rows: list[tuple[str, Layout]], capacity_gib: float, device_gib: float) -> None:
    """GiB per device by category (the rank with the peak), one bar per layout, against capacity."""
    names = [f"{i + 1}. {_name(lay)}" if key.startswith("top") else f"no PP: {_name(lay)}" for i, (key, lay) in enumerate(rows)]
    left = np.zeros(len(rows))
    colours = pyplot().get_cmap("tab10")
    for k, term in enumerate(MEMORY_TERMS):
        gib = np.array([lay.estimate.memory_gib.get(term, 0.0) for _, lay in rows])
        if (gib > 0).any():
            ax.barh(names, np.maximum(gib, 0), left=left, color=colours(k % 10), label=term.replace("_", " "))
            left += np.maximum(gib, 0)
    ax.axvline(capacity_gib, color="#C44E52", linestyle="--", linewidth=1.2, label=f"limit {capacity_gib:.1f} GiB")
    ax.axvline(device_gib, color="black", linewidth=1.0, label=f"device {device_gib:.1f} GiB")
    ax.invert_yaxis()
    ax.set_xlabel("GiB per device (the rank with the peak)")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _fig(plt: Any, w: float, h: float) -> tuple[Any, Any]:
    fig, ax = plt.subplots(figsize=(w, h))
    return fig, ax


def _layout_row(path: str, lay: dict[str, Any], n: str, name: str) -> str:
    e = lay["estimate"]
    cells = [
        ("tokens_per_s_per_device", f"{e['tokens_per_s_per_device']:,.1f}"), ("mfu", f"{e['mfu']:.2%}"),
        ("memory_gib_per_device", f"{e['memory_gib_per_device']:.2f}"), ("step_time_s", f"{e['step_time_s']:.3f}"),
    ]
    tds = "".join(f'<td class="n">{value(f"{path}.estimate.{k}", e[k], shown)}</td>' for k, shown in cells)
    return f"<tr><td>{esc(n)}</td><td>{esc(name)}</td>{tds}</tr>"


def plan_page(doc: dict[str, Any], space: LayoutSpace, heading: str, command: str, device_gib: float,
              best: Layout | None, nopp: Layout | None, top: list[Layout], timeline: Timeline | None, timeline_note: str) -> str:
    """The whole page. `doc` is `plan --json`; the Layouts are the same ones, for the charts."""
    plt = pyplot()
    needs = doc["verdict"]["needs_pp"]
    head = {True: "PP needed", False: "PP not needed", None: "no verdict on PP"}[needs]
    cls = {True: "pp-yes", False: "pp-no", None: ""}[needs]
    searched, fitting = doc["searched"], doc["fitting"]
    reason = doc["verdict"]["reason"]
    narrowed = " (the search narrowed past its bound: the scatter shows its coarse pass)" if space.coarse else ""
    parts = [f"<h1>{esc(heading)}</h1>",
             (f'<p class="note">priced as {value("engine", doc["engine"], doc["engine"])}; searched {value("searched", searched, f"{searched:,}")} '
              f'valid layouts, {value("fitting", fitting, f"{fitting:,}")} fit in {space.capacity_gib:.1f} GiB per device{narrowed}</p>'),
             f'<div class="verdict {cls}"><b>{esc(head)}.</b> {value("verdict.reason", reason, reason)}</div>']
    figures = []
    for key, label, obj in (("best", "recommended", best), ("best_without_pp", "best without PP", nopp)):
        lay = doc.get(key)
        if lay and obj is not None:
            e = lay["estimate"]
            tps, mfu, gib = e["tokens_per_s_per_device"], e["mfu"], e["memory_gib_per_device"]
            figures.append(f"<li>{esc(label)}: <b>{esc(_name(obj))}</b>, "
                           f"{value(key + '.estimate.tokens_per_s_per_device', tps, f'{tps:,.1f}')} tokens/s per device, "
                           f"MFU {value(key + '.estimate.mfu', mfu, f'{mfu:.2%}')}, "
                           f"{value(key + '.estimate.memory_gib_per_device', gib, f'{gib:.2f}')} GiB per device</li>")
    parts.append(f"<ul>{''.join(figures)}</ul>")
    line = doc["validation"]["line"]
    parts.append(f'<p>Validated error: tokens/s and MFU {value("validation.line", line, line)}</p>')
    if doc.get("run"):
        parts.append(run_html(doc["run"]))

    fig, ax = _fig(plt, 10, 6)
    titles = scatter(ax, space, best, nopp)
    ax.set_title(f"{len(space.memory_gib):,} layouts: tokens/s per device against memory per device", fontsize=10)
    parts.append("<h2>Layout space</h2><figure>" + svg(fig, titles) + "<figcaption class=\"note\">Hover a mark for its layouts. "
                 f"Each side is binned on a {GRID[0]} x {GRID[1]} grid (one mark per occupied cell, at its layouts' mean; "
                 "darker: more layouts); the frontiers are exact: each mark one layout that nothing of its side beats at less memory."
                 "</figcaption></figure>")
    rows = _bar_layouts(doc, best, nopp, top)
    if rows:
        fig, ax = _fig(plt, 10, 0.45 * len(rows) + 1.2)
        step_bars(ax, rows)
        parts.append("<h2>Step time by term</h2><figure>" + svg(fig) + "</figure>")
        fig, ax = _fig(plt, 10, 0.45 * len(rows) + 1.2)
        memory_bars(ax, rows, space.capacity_gib, device_gib)
        parts.append("<h2>Memory per device by category</h2><figure>" + svg(fig) + "</figure>")
    if timeline is not None:
        parts.append("<h2>Pipeline timeline of the recommended layout</h2><figure>" + svg(gantt_figure(timeline, max_width=11.0))
                     + f'<figcaption class="note">{esc(timeline_note)}</figcaption></figure>')
    elif timeline_note:
        parts.append(f'<h2>Pipeline timeline</h2><p class="note">{esc(timeline_note)}</p>')
    table = "".join(_layout_row(f"top.{i}", lay, str(i + 1), _name(obj)) for i, (lay, obj) in enumerate(zip(doc["top"], top)))
    parts.append("<h2>Top layouts</h2><table><tr><th>#</th><th>layout</th><th>tokens/s per device</th><th>MFU</th><th>GiB per device</th>"
                 f"<th>step, s</th></tr>{table}</table>")
    parts.append(f"<h2>Made by</h2><pre>{esc(command)}</pre>")
    return page(heading, "\n".join(parts))


def plan_picture(path: str, space: LayoutSpace, heading: str, device_gib: float, best: Layout | None, nopp: Layout | None,
                 top: list[Layout]) -> None:
    """The scatter and the step and memory bars in one PNG."""
    from bandwise.files import save_figure

    plt = pyplot()
    rows = _bar_layouts({}, best, nopp, top)
    fig = plt.figure(figsize=(13, 10))
    grid = fig.add_gridspec(2, 2, height_ratios=[3, 2])
    ax = fig.add_subplot(grid[0, :])
    scatter(ax, space, best, nopp)
    ax.set_title(heading, fontsize=10)
    if rows:
        step_bars(fig.add_subplot(grid[1, 0]), rows)
        memory_bars(fig.add_subplot(grid[1, 1]), rows, space.capacity_gib, device_gib)
    fig.tight_layout()
    try:
        save_figure(fig, path, what="the plan picture", dpi=110)
    finally:
        plt.close(fig)
