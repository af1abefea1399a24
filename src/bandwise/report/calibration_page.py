"""A calibration as a page (`calibrate --html`): each factor against the preset figure it scales.

Rows: the factor, the figure of the cluster or engine it scales, that figure as the preset gives it and as
calibrated, the factor's residual, what the evidence could not tell it apart from, and what it was fitted
from. The chart draws each factor on a log axis around 1 (the preset). Figures carry their path in the
calibration's `--json` document (`report.html.value`).
"""

from __future__ import annotations

import math
from typing import Any

from bandwise.report.html import esc, page, pyplot, svg, value


def _chart(doc: dict[str, Any]) -> str:
    plt = pyplot()
    names = list(doc["factors"])
    vals = [doc["factors"][n]["value"] for n in names]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(names) + 1.2), dpi=100)
    ax.barh(range(len(names)), [math.log2(v) for v in vals], color=["#4c78a8" if v >= 1 else "#e45756" for v in vals])
    ax.axvline(0, color="black", lw=1)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    lim = max(1.0, max(abs(math.log2(v)) for v in vals) * 1.15)
    ticks = [t for t in range(-int(lim) - 1, int(lim) + 2)]
    ax.set_xlim(-lim, lim)
    ax.set_xticks(ticks, [f"{2.0 ** t:g}x" for t in ticks])
    ax.set_xlabel("measured / modelled speed (log scale; 1x = the preset)")
    fig.tight_layout()
    return svg(fig)


def calibration_page(doc: dict[str, Any], presets: dict[str, tuple[str, float, float]], command: str = "") -> str:
    """`doc`: `Calibration.to_dict()`; `presets`: `cost.calibrated.preset_figures`."""
    head = (f"<h1>Calibration of {esc(doc['device'])}{' under ' + esc(doc['engine']) if doc.get('engine') else ''}</h1>"
            f'<p class="note">{esc(doc.get("evidence", ""))}</p>' + (f"<p><code>{esc(command)}</code></p>" if command else ""))
    rows = []
    for name, f in doc["factors"].items():
        what, preset, now = presets.get(name, ("", float("nan"), float("nan")))
        resid = f.get("residual")
        factor = value(f"factors.{name}.value", f["value"], format(f["value"], ".3f"))
        shown_resid = "-" if resid is None else value(f"factors.{name}.residual", resid, format(resid, ".1%"))
        apart = ", ".join(f.get("confounded_with", [])) or "-"
        cells = [esc(name), esc(what), esc(format(preset, ".4g")), esc(format(now, ".4g")), factor, shown_resid, esc(apart), esc(f.get("fitted_from", ""))]
        numeric = (False, False, True, True, True, True, False, False)
        rows.append("<tr>" + "".join(f'<td class="n">{c}</td>' if n else f"<td>{c}</td>" for c, n in zip(cells, numeric)) + "</tr>")
    table = ("<table><tr><th>factor</th><th>scales</th><th>preset</th><th>calibrated</th><th>factor</th><th>residual</th>"
             "<th>not told apart from</th><th>fitted from</th></tr>" + "".join(rows) + "</table>")
    levels = (f"<p>Levels measured: {esc(', '.join(doc.get('levels_measured', [])) or 'none')}; from the datasheet: "
              f"{esc(', '.join(doc.get('levels_datasheet', [])) or 'none')}.</p>")
    return page(f"bandwise calibration: {doc['device']}", head + "<h2>Factors against their presets</h2>" + _chart(doc) + table + levels)
