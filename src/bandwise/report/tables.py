"""Rich renderings of plans and estimates: the top-layouts table, the verdict, the breakdown."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from bandwise.cost.results import (
    BREAKDOWN_LABELS,
    BREAKDOWN_TERMS,
    MEMORY_TERMS,
    Estimate,
)
from bandwise.plan.search import Layout
from bandwise.report import glossary

BAR_COLOURS = {"compute": "green", "recompute": "yellow", "contention": "bright_green", "bubble": "magenta", "optimizer": "cyan"}


def _column(table: Table, header: str, cells: list[str], *, text: bool = False) -> None:
    """A number column is never narrower than its widest cell, so rich can wrap text but never cut a number."""
    if text:  # break only between words: as wide as the longest word
        width = max([len(w) for c in cells for w in c.split()] + [len(w) for w in header.split()] + [1])
        table.add_column(header, justify="left", min_width=width, overflow="fold")
    else:  # the header may wrap between words
        table.add_column(header, justify="right", min_width=max([len(c) for c in cells] + [len(w) for w in header.split()] + [1]))


def plain_table(title: str, columns: dict[str, list[str]], text: tuple[str, ...], words: str = "") -> Group:
    """A table of cells by column, the text columns wrapped between words, with its glossary under it."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for header, cells in columns.items():
        _column(table, header, cells, text=header in text)
    for i in range(len(next(iter(columns.values()), []))):
        table.add_row(*(cells[i] for cells in columns.values()))
    return Group(table, Text(words, style="dim")) if words else Group(table)


def min_width(group: Group) -> int:
    """Columns a `plain_table` needs with its text columns at their narrowest: print at least this wide."""
    table = group.renderables[0]
    return sum(c.min_width or 0 for c in table.columns) + 2 * (len(table.columns) - 1)


def short_count(n: float, tokens: bool = False) -> str:
    """A parameter or token count at a glance: 70.6B, 1.05T; token counts below a million in full."""
    if tokens and n < 1e6:
        return f"{n:,.0f}"
    return f"{n / 1e12:.2f}T" if n >= 1e12 else f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.2f}M" if tokens else f"{n / 1e6:.1f}M"


RECOMPUTE_SHORT = {"none": "none", "selective": "sel.", "full": "full"}


def layouts_table(layouts: list[Layout], title: str, *, wide: bool = False, hidden: int = 0) -> Group:
    """The ranked layouts and the words under them: a short column set that fits 80 columns; `wide` adds the rest."""
    rows: dict[str, list[str]] = {"#": [], "layout": [], "mb": [], "recomp": [], "GiB": [], "tok/s": [], "MFU": [], "comm": []}
    if wide:
        rows.update({"step s": [], "mbs": [], "HFU": [], "bubble": [], "precision": []})
    for i, lay in enumerate(layouts, 1):
        s, e = lay.strategy, lay.estimate
        cells = {
            "#": str(i), "layout": s.describe(), "mb": str(s.micro_batch), "recomp": RECOMPUTE_SHORT[s.recompute],
            "GiB": f"{e.memory_gib_per_device:.1f}", "tok/s": f"{e.tokens_per_s_per_device:,.0f}", "MFU": f"{e.mfu:.1%}",
            "comm": f"{e.exposed_comm_s / e.step_time_s:.1%}", "step s": f"{e.step_time_s:.2f}", "mbs": str(e.microbatches),
            "HFU": f"{e.hfu:.1%}", "bubble": f"{e.breakdown.get('bubble', 0.0) / e.step_time_s:.1%}", "precision": s.precision,
        }
        for k in rows:
            rows[k].append(cells[k])
    words = glossary.LAYOUT + " " + glossary.PLAN_COLUMNS + (" " + glossary.PLAN_WIDE_COLUMNS if wide else "")
    if hidden:
        words += f" {hidden} near-duplicate(s) hidden: same degrees as the layout above them, within 1% of its tok/s (--all lists them)."
    return plain_table(title, rows, ("layout",), words)


def breakdown(est: Estimate, title: str) -> Panel:
    """Step time as a bar of its terms, then memory per device by part."""
    width = 40  # with the legend and memory beside it, the panel fits 80 columns
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
        legend.add_row(Text(BREAKDOWN_LABELS[term], style=colour), f"{t * 1e3:,.1f} ms", f"{t / step:.1%}")
    mem = Table.grid(padding=(0, 2))
    mem.add_column()
    mem.add_column(justify="right")
    for term in MEMORY_TERMS:
        if term == "grads_not_at_peak" and not est.memory_gib.get(term):
            continue
        mem.add_row(glossary.MEMORY_LABELS.get(term, term), f"{est.memory_gib.get(term, 0.0):.1f} GiB")
    mem.add_row("total", f"{est.memory_gib_per_device:.1f} GiB" + ("" if est.fits else f"  ({est.fit_words()})"))
    grid = Table.grid(padding=(0, 3))
    grid.add_row(legend, mem)
    head = Text(f"step {step:.3f} s · {est.microbatches} micro-batches · MFU {est.mfu:.1%} · HFU {est.hfu:.1%}")
    return Panel(Group(head, bar, grid, Text(glossary.BREAKDOWN, style="dim")), title=title, title_align="left")
