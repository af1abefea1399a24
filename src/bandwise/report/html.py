"""Self-contained HTML pages: one file, no network, no script, readable printed.

Charts are matplotlib figures inlined as SVG. matplotlib is already the project's chart library
(`report/plots.py`, `report/timeline.py`); its SVG needs no script to draw, so a page opens offline
and prints as it shows. A JavaScript chart library (Plotly, Bokeh, Vega) would have to be inlined
to open offline: Plotly's bundle alone is about 3.5 MB, past the 1 MB a plan page may weigh. Hover
text is SVG's own `<title>` element, which browsers show as a tooltip.

Every figure a page prints from a `--json` document carries that document's value and path
(`data-json="top.0.estimate.mfu" data-value="0.5290..."`), so a test can check the page against
the document number by number.
"""

from __future__ import annotations

import html
import io
import re
from typing import Any

from bandwise.errors import INSTALL, BandwiseError

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;color:#222}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4}
.verdict{padding:.6em 1em;border-left:6px solid #888;background:#fafafa}.pp-yes{border-color:#c44e52}.pp-no{border-color:#2e7d32}
.note{color:#555;font-size:.88em}code,pre{background:#f4f4f4;padding:2px 4px;white-space:pre-wrap}
svg{max-width:100%;height:auto}
@media print{body{max-width:none;margin:0}h2{break-after:avoid}figure,svg,table{break-inside:avoid}}
"""


def esc(text: Any) -> str:
    return html.escape(str(text))


def value(path: str, v: Any, shown: str) -> str:
    """A figure from the --json document: its text as shown, its path and exact value as attributes."""
    return f'<span data-json="{esc(path)}" data-value="{esc(repr(v))}">{esc(shown)}</span>'


def page(title: str, body: str) -> str:
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head>\n'
            f"<body>\n{body}\n</body></html>\n")


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend; its text kept as SVG text and its ids stable."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise BandwiseError(f"--html and --png need matplotlib ({exc}); from the bandwise checkout run: {INSTALL['plot']}") from exc
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as <text>: smaller, searchable, selectable
    matplotlib.rcParams["svg.hashsalt"] = "bandwise"  # the same ids on every run
    return plt


def svg(fig: Any, titles: dict[str, list[str]] | None = None) -> str:
    """The figure as an inline <svg> element, its figure closed. `titles[gid]`: hover text for each
    point of the artist whose gid is `gid`, in the order of its points."""
    plt = pyplot()
    buf = io.StringIO()
    try:
        fig.savefig(buf, format="svg", bbox_inches="tight")
    finally:
        plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)  # its date would make every page differ
    for gid, lines in (titles or {}).items():
        text = _titled(text, gid, lines)
    return text


def _titled(text: str, gid: str, lines: list[str]) -> str:
    """Give the k-th mark inside `<g id="gid">` the k-th hover text."""
    start = text.find(f'<g id="{gid}">')
    if start < 0:
        return text
    end = text.index("</g>", start)
    group = text[start:end]
    it = iter(lines)

    def add(m: re.Match[str]) -> str:
        line = next(it, None)
        return m.group(0) if line is None else f"{m.group(1)}><title>{esc(line)}</title></{m.group(2)}>"

    group = re.sub(r"(<(use|path)\b[^>]*?)\s*/>", add, group)
    return text[:start] + group + text[end:]
