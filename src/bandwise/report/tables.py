"""Rich renderings of plans and estimates: the top-layouts table, the verdict, the breakdown."""

from __future__ import annotations

from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from bandwise.cost.step import BREAKDOWN_TERMS, MEMORY_TERMS, Estimate
from bandwise.plan.search import Layout

BAR_COLOURS = {"compute": "green", "recompute": "yellow", "contention": "bright_green", "bubble": "magenta", "optimizer": "cyan"}


def layouts_table(layouts: list[Layout], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("#", "layout", "ZeRO", "mb", "schedule", "recompute", "mem GiB", "step s", "tok/s/dev", "MFU", "exposed comm"):
        table.add_column(col, justify="left" if col in ("layout", "schedule", "recompute") else "right")
    for i, lay in enumerate(layouts, 1):
        s, e = lay.strategy, lay.estimate
        sched = "-" if s.pp == 1 else s.schedule + (f" v{s.virtual_stages}" if s.virtual_stages > 1 else "")
        table.add_row(
            str(i),
            _degrees(s),
            str(s.zero),
            str(s.micro_batch),
            sched,
            s.recompute,
            f"{e.memory_gib_per_device:.1f}",
            f"{e.step_time_s:.2f}",
            f"{e.tokens_per_s_per_device:,.0f}",
            f"{e.mfu:.1%}",
            f"{e.exposed_comm_s / e.step_time_s:.1%}",
        )
    return table


def _degrees(s) -> str:  # noqa: ANN001
    names = {"dp_replicate": "rep", "dp_shard": "fsdp", "tp": "tp", "cp": "cp", "pp": "pp", "ep": "ep"}
    parts = [f"{short}{getattr(s, k)}" for k, short in names.items() if getattr(s, k) > 1]
    return " ".join(parts) or "1 device"


def breakdown(est: Estimate, title: str) -> Panel:
    """Step time as a bar of its terms, then memory per device by part."""
    width = 60
    step = est.step_time_s
    bar = Text()
    legend = Table.grid(padding=(0, 2))
    legend.add_column()
    legend.add_column(justify="right")
    legend.add_column(justify="right")
    for term in BREAKDOWN_TERMS:
        t = est.breakdown.get(term, 0.0)
        if t <= 0:
            continue
        colour = BAR_COLOURS.get(term, "red")
        bar.append("█" * max(1, round(width * t / step)), style=colour)
        label = term if term in BAR_COLOURS else f"{term} (exposed comm)"
        legend.add_row(Text(label, style=colour), f"{t * 1e3:,.1f} ms", f"{t / step:.1%}")
    mem = Table.grid(padding=(0, 2))
    mem.add_column()
    mem.add_column(justify="right")
    for term in MEMORY_TERMS:
        mem.add_row(term.replace("_", " + "), f"{est.memory_gib.get(term, 0.0):.1f} GiB")
    mem.add_row("total", f"{est.memory_gib_per_device:.1f} GiB" + ("" if est.fits else "  (does not fit)"))
    grid = Table.grid(padding=(0, 4))
    grid.add_row(Text(f"step {step:.3f} s · {est.microbatches} micro-batches · MFU {est.mfu:.1%} · HFU {est.hfu:.1%}"), "")
    grid.add_row(bar, "")
    grid.add_row(legend, mem)
    return Panel(grid, title=title, title_align="left")
