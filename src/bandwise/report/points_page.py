"""`compare --html` and `sweep --html`: one model planned at several points, as a page.

The page is the plan page's pieces (`report.html`): the chart the command's `--png` draws, inlined
as SVG; per point the verdict, the best layout with and without PP and the dominant exposed cost
of the best layout without PP; the validated error; the command. Every figure in words is the
`--json` document's (`points` is that document's list: `clusters` for compare, `points` for sweep).
"""

from __future__ import annotations

from typing import Any

from bandwise.report.html import esc, page, pyplot, svg, value
from bandwise.report.run import runs_html

VERDICTS = {True: "PP needed", False: "PP not needed", None: "nothing fits"}


def _v(path: str, v: Any, spec: str) -> str:
    """`value` with the text shown as format(v, spec)."""
    return value(path, v, format(v, spec))


def _layout_cells(path: str, lay: dict[str, Any] | None, name: str) -> str:
    if not lay:
        return "<td>none fits</td><td></td><td></td><td></td>"
    e, at = lay["estimate"], f"{path}.estimate"
    return (f"<td>{esc(name)}</td><td class=\"n\">{_v(at + '.tokens_per_s_per_device', e['tokens_per_s_per_device'], ',.1f')}</td>"
            f"<td class=\"n\">{_v(at + '.mfu', e['mfu'], '.2%')}</td>"
            f"<td class=\"n\">{_v(at + '.memory_gib_per_device', e['memory_gib_per_device'], '.2f')}</td>")


def _engines(points: list[dict[str, Any]], key: str, engine: str | None) -> str:
    """What the points are priced as: one engine, or, where no engine was named and the clusters' platforms differ,
    each cluster's own (`registry.engine_for`)."""
    named = [(i, p) for i, p in enumerate(points) if p.get("engine")]
    if len({p["engine"] for _, p in named}) <= 1:
        return esc(engine or (named[0][1]["engine"] if named else "the default engine"))
    return "each cluster's platform's engine: " + ", ".join(
        f"{esc(p['cluster'])} as {value(f'{key}.{i}.engine', p['engine'], p['engine'])}" for i, p in named)


def points_page(doc: dict[str, Any], key: str, names: list[tuple[str, str]], heading: str, fig: Any, command: str,
                closing: str = "") -> str:
    """The page. `key`: 'clusters' (compare) or 'points' (sweep); `names[i]`: the point's best layout
    and best layout without PP in words; `fig`: the command's chart; `closing`: a line after the table."""
    pyplot()  # the page's SVG settings, before the figure is written
    rows = []
    for i, (p, (best, nopp)) in enumerate(zip(doc[key], names)):
        path = f"{key}.{i}"
        needs = p["verdict"]["needs_pp"]
        dom = p.get("dominant_exposed")
        dom_text = (f"{esc(dom['collective'])} over {esc(dom['link'])}: "
                    f"{_v(path + '.dominant_exposed.ms_per_step', dom['ms_per_step'], ',.1f')} ms per step "
                    f"({_v(path + '.dominant_exposed.share_of_step', dom['share_of_step'], '.2%')} of it)" if dom else "none exposed")
        label = value(f"{path}.cluster", p["cluster"], p["cluster"])
        rows.append(f"<tr><td><b>{label}</b></td><td>{esc(VERDICTS[needs])}</td>{_layout_cells(f'{path}.best', p['best'], best)}"
                    f"{_layout_cells(f'{path}.best_without_pp', p['best_without_pp'], nopp)}<td>{dom_text}</td></tr>")
    reasons = "".join(f"<li><b>{esc(p['cluster'])}</b>: {value(f'{key}.{i}.verdict.reason', p['verdict']['reason'], p['verdict']['reason'])}</li>"
                      for i, p in enumerate(doc[key]))
    head = ("<tr><th rowspan=\"2\">point</th><th rowspan=\"2\">verdict</th><th colspan=\"4\">best layout</th>"
            "<th colspan=\"4\">best layout without PP</th><th rowspan=\"2\">dominant exposed cost without PP</th></tr><tr>"
            + "<th>layout</th><th>tokens/s per device</th><th>MFU</th><th>GiB per device</th>" * 2 + "</tr>")
    threshold = doc["threshold"]
    parts = [f"<h1>{esc(heading)}</h1>",
             (f"<p class=\"note\">{value('model', doc['model'], doc['model'])} on {_v('devices', doc['devices'], ',')} devices, "
              f"global batch {_v('global_batch', doc['global_batch'], ',')} sequences; priced as {_engines(doc[key], key, doc.get('engine'))}. "
              "PP is not needed where the best layout without it is within "
              f"{_v('threshold', threshold, '.1%')} of the best, in tokens/s per device.</p>"),
             "<h2>MFU with and without pipeline parallelism, and what is exposed</h2><figure>" + svg(fig) + "</figure>",
             f"<h2>Each point</h2><table>{head}{''.join(rows)}</table>"]
    if closing:
        parts.append(f"<p>{closing}</p>")
    parts.append(runs_html(doc))
    parts.append(f"<h2>Verdicts</h2><ul>{reasons}</ul>")
    lines = doc.get("validation") or {}
    if lines:
        parts.append("<h2>Validated error</h2><ul>" + "".join(
            f"<li>{esc(n)}: tokens/s and MFU {value(f'validation.{n}.line', v['line'], v['line'])}</li>" for n, v in lines.items()) + "</ul>")
    parts.append(f"<h2>Made by</h2><pre>{esc(command)}</pre>")
    return page(heading, "\n".join(parts))


def devices_page(doc: dict[str, Any], names: list[str], fig: Any, command: str) -> str:
    """The page of `sweep --vary devices=... --html`: the run's days against its cost at each device count
    (the chart of `--png`), each count's best layout and what the whole run takes, the command. Every figure in
    words is the `--json` document's; `names[i]`: the count's best layout in words."""
    pyplot()
    heading = f"{doc['model']} on {doc['cluster']} at {len(doc['points'])} device counts"
    rows = []
    for i, (p, name) in enumerate(zip(doc["points"], names)):
        path, lay = f"points.{i}", p["best"]
        rows.append(f"<tr><td><b>{_v(path + '.devices', p['devices'], ',')}</b></td><td>{esc(VERDICTS[p['verdict']['needs_pp']])}</td>"
                    f"{_layout_cells(path + '.best', lay, name)}</tr>")
    head = "<tr><th>devices</th><th>verdict</th><th>best layout</th><th>tokens/s per device</th><th>MFU</th><th>GiB per device</th></tr>"
    parts = [f"<h1>{esc(heading)}</h1>",
             (f"<p class=\"note\">{value('model', doc['model'], doc['model'])} on {value('cluster', doc['cluster'], doc['cluster'])}, "
              f"priced as {esc(doc.get('engine') or 'the default engine')}; each count is planned as <code>bandwise plan --devices N</code> plans it, "
              "and its best layout priced as the whole run. A count on the frontier (*) is not beaten on both time and cost by another.</p>"),
             "<h2>Days against cost</h2><figure>" + svg(fig) + "</figure>",
             f"<h2>Each device count</h2><table>{head}{''.join(rows)}</table>",
             runs_html(doc),
             f"<h2>Made by</h2><pre>{esc(command)}</pre>"]
    return page(heading, "\n".join(parts))
