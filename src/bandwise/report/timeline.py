"""Pipeline timelines: a compact per-rank text strip for the terminal and a matplotlib Gantt chart."""

from __future__ import annotations

import math

from bandwise.cost.pipeline import Timeline
from bandwise.errors import INSTALL, BandwiseError
from bandwise.files import save_figure

MANY_BARS = 300
"""Bars past which a Gantt chart draws its bars as an image, without labels."""
COLORS = {"F": "#4C72B0", "B": "#C44E52", "I": "#DD8452", "W": "#55A868"}


def text_rows(t: Timeline, width: int = 120) -> list[str]:
    """One line per rank: the action kind in each time cell (lower case F/B/I/W, '.' idle).

    A cell is `scale` time units with scale chosen so the makespan fits in `width` characters;
    a cell shows the action covering its midpoint.
    """
    scale = max(t.makespan / width, min(_durations(t)) or 1.0) if t.makespan > 0 else 1.0
    cells = max(1, math.ceil(t.makespan / scale - 1e-9))
    rows = []
    for r, seq in enumerate(t.actions):
        line = ["."] * cells
        for a, t0, t1 in zip(seq, t.start[r], t.end[r]):
            for c in range(int(t0 / scale), min(cells, math.ceil(t1 / scale - 1e-9))):
                if t0 <= (c + 0.5) * scale < t1:
                    line[c] = a.kind
        rows.append(f"rank {r:>2} |{''.join(line)}|")
    return rows


def _durations(t: Timeline) -> list[float]:
    return [e - s for r in range(len(t.actions)) for s, e in zip(t.start[r], t.end[r]) if e > s]


def gantt(t: Timeline, path: str) -> None:
    """Draw one row per rank, F/B/I/W coloured, each bar labelled with its micro-batch."""
    fig = gantt_figure(t)
    try:
        save_figure(fig, path, what="the Gantt chart", dpi=120)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def gantt_figure(t: Timeline, max_width: float | None = None):
    """The Gantt chart as a figure, at most `max_width` inches wide."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise BandwiseError(f"--png needs matplotlib ({exc}); from the bandwise checkout run: {INSTALL['plot']}") from exc
    s = t.spec
    p = len(t.actions)
    width = max(8.0, t.makespan * 0.22)
    fig, ax = plt.subplots(figsize=(min(width, max_width or width), 0.6 * p + 1.4))
    # past a few hundred bars, an SVG of one path and one label per bar weighs megabytes: the bars are
    # drawn as one embedded image then, without micro-batch labels (too small to read anyway)
    many = sum(len(seq) for seq in t.actions) > MANY_BARS
    for r, seq in enumerate(t.actions):
        for a, t0, t1 in zip(seq, t.start[r], t.end[r]):
            # the second leg of a V or a later loop is drawn lighter, so stages can be told apart
            local = t.stage_of_rank[r].index(a.stage) if t.stage_of_rank else 0
            ax.barh(r, t1 - t0, left=t0, height=0.8, color=COLORS[a.kind], alpha=1.0 if local == 0 else 0.6, edgecolor="black", linewidth=0.4,
                    rasterized=many)
            if not many:
                ax.text((t0 + t1) / 2, r, str(a.mb), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(p), [f"rank {r}" for r in range(p)])
    ax.invert_yaxis()
    ax.set_xlabel("time (units of one stage's forward)" if s.f == 1 else "time")
    title = f"{s.schedule}: p={s.stages}, m={s.microbatches}" + (f", v={s.virtual}" if s.virtual > 1 else "")
    ax.set_title(f"{title}  (bubble {t.bubble_fraction:.1%}, makespan {t.makespan:g})")
    ax.legend(
        handles=[Patch(color=COLORS[k], label=label) for k, label in (("F", "forward"), ("B", "backward"), ("I", "backward (input)"), ("W", "backward (weights)"))],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
    )
    fig.tight_layout()
    return fig
