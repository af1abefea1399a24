"""A whole run in words and tables: days, device-hours, money, energy and what goodput costs."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Group

from bandwise.cost.run import RunCost
from bandwise.report.html import esc, value
from bandwise.report.tables import plain_table, short_count
from bandwise.specs.operations import SOURCES

RUN_WORDS = (
    "days: wall-clock time, steps x step time / ETTR; device-h: days x 24 x devices; cost: device-hours x price; "
    "MWh: facility energy, (device + host + network watts) x devices x PUE x time; ETTR: effective training time ratio "
    "after failures, checkpoints and restarts (Daly's interval); * on the time/cost frontier (no other row is both faster and cheaper); "
    "per day saved: the extra cost over the row above for each day it saves."
)


def hours(n: float) -> str:
    """Device-hours at a glance: 30.8M, 412k, 96."""
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else f"{n:.0f}"


def money(x: float | None) -> str:
    if x is None:
        return "-"
    return f"${x / 1e6:.2f}M" if x >= 1e6 else f"${x / 1e3:.1f}k" if x >= 1e3 else f"${x:.2f}"


def energy(kwh: float | None) -> str:
    return "-" if kwh is None else f"{kwh / 1e3:,.0f}" if kwh >= 1e4 else f"{kwh / 1e3:.2f}"


def _duration(s: float) -> str:
    return "never" if math.isinf(s) else f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.1f} s"


def run_lines(run: RunCost) -> list[str]:
    """What `plan`, `estimate` and the pages print under a layout priced for a whole run."""
    g = run.goodput
    cost = f", {money(run.cost)} at ${run.price_per_device_hour:g}/device-hour" if run.cost is not None else " (no price: --price or the cluster file's price_per_device_hour)"
    lines = [
        f"[b]run[/b]: {short_count(run.tokens, tokens=True)} tokens in {run.steps:,} steps of {run.step_time_s:.2f} s: "
        f"[b]{run.days:.1f} days[/b], {hours(run.device_hours)} device-hours{cost}",
        f"goodput: ETTR {g.ettr:.1%}; an interruption every {_duration(g.mttf_s)} ({run.interruptions:,.0f} expected), "
        f"a checkpoint of {g.checkpoint_bytes / 1e12:.2f} TB stalls {_duration(g.checkpoint_s)} every {_duration(g.interval_s)} (Daly), "
        f"restart {_duration(g.restart_s)}; without them {run.train_s / 86400:.1f} days",
    ]
    if run.energy_kwh is None:
        lines.append(f"energy: not priced: {run.power_source}")
    else:
        carbon = f", {run.carbon_t:,.0f} t CO2e" if run.carbon_t is not None else ""
        lines.append(f"energy: {run.energy_kwh / 1e3:,.1f} MWh at the facility ({run.device_power_w:.0f} W per device from {run.power_source}, "
                     f"{run.facility_power_w / 1e6:.2f} MW in all with host, network and PUE){carbon}")
    return lines


def sources_line() -> str:
    """Where the goodput and energy defaults come from, for a page or `--help`."""
    return "; ".join(f"{k}: {SOURCES[k]}" for k in ("failure_rate_per_device_hour", "checkpoint_write_bytes_per_s", "restart_s",
                                                     "host_power_w_per_device", "pue"))


def runs_table(rows: list[tuple[str, RunCost | None]], on_frontier: set[str], first: str, marginal: bool = False) -> Group:
    """One row per point: time, device-hours, cost, energy, ETTR; ranked columns by time and by cost.
    `marginal` (rows in growing order, a sweep of device counts): what each day saved over the row
    above costs, which says where adding devices stops paying."""
    priced = [(k, r) for k, r in rows if r is not None]
    by_time = {k: i + 1 for i, (k, _) in enumerate(sorted(priced, key=lambda kr: kr[1].wall_s))}
    key = (lambda r: r.cost) if priced and all(r.cost is not None for _, r in priced) else (lambda r: r.device_hours)
    by_cost = {k: i + 1 for i, (k, _) in enumerate(sorted(priced, key=lambda kr: key(kr[1])))}
    cols: dict[str, list[str]] = {first: [], "days": [], "device-h": [], "cost": [], "MWh": [], "ETTR": [], "time #": [], "cost #": []}
    if marginal:
        cols["per day saved"] = []
    prev: RunCost | None = None
    for label, r in rows:
        mark = "*" if label in on_frontier else ""
        cells = ([f"{label}{mark}", "-", "-", "-", "-", "-", "-", "-"] if r is None else
                 [f"{label}{mark}", f"{r.days:.1f}", hours(r.device_hours), money(r.cost), energy(r.energy_kwh), f"{r.goodput.ettr:.1%}",
                  str(by_time[label]), str(by_cost[label])])
        if marginal:
            saved = None if r is None or prev is None else prev.days - r.days
            extra = key(r) - key(prev) if saved else None
            cells.append("-" if not saved or saved <= 0 else money(extra / saved) if r.cost is not None else f"{hours(extra / saved)} device-h")
            prev = r if r is not None else prev
        for k, c in zip(cols, cells):
            cols[k].append(c)
    return plain_table("The whole run: time, cost and energy of each point's best layout", cols, (first,), RUN_WORDS)


def _cell(path: str, v: Any, spec: str, unit: str = "") -> str:
    return "<td class=\"n\">-</td>" if v is None else f"<td class=\"n\">{unit}{value(path, v, format(v, spec))}</td>"


def _fig(path: str, v: Any, spec: str) -> str:
    """A figure of the document, shown as format(v, spec) (the pages' tests read it back)."""
    return "-" if v is None else value(path, v, format(v, spec))


def run_html(run: dict[str, Any], path: str = "run") -> str:
    """The plan page's section for a whole run: a `RunCost.to_dict()` at `path` of the --json document."""
    g = run["goodput"]
    cost = (f", ${_fig(path + '.cost', run['cost'], ',.0f')} at ${run['price_per_device_hour']:g} per device-hour"
            if run["cost"] is not None else "")
    used = ("no energy: " + esc(run["power_source"]) if run["energy_kwh"] is None else
            f"{_fig(path + '.energy_kwh', run['energy_kwh'], ',.0f')} kWh at the facility")
    failures = ("no interruptions" if g["mttf_s"] is None else
                f"an interruption every {_fig(path + '.goodput.mttf_s', g['mttf_s'], ',.0f')} s, a checkpoint every "
                f"{_fig(path + '.goodput.interval_s', g['interval_s'], ',.0f')} s (Daly)")
    return (f"<h2>The whole run</h2><p>{_fig(path + '.tokens', run['tokens'], ',.0f')} tokens in {_fig(path + '.steps', run['steps'], ',')} "
            f"steps: <b>{_fig(path + '.days', run['days'], '.1f')} days</b>, {_fig(path + '.device_hours', run['device_hours'], ',.0f')} "
            f"device-hours{cost}; {used}. Goodput: ETTR {_fig(path + '.goodput.ettr', g['ettr'], '.1%')}, {failures}.</p>"
            f"<p class=\"note\">{esc(sources_line())}</p>")


def runs_html(doc: dict[str, Any]) -> str:
    """The compare and sweep pages' table of each point's whole run (`runs` and `frontier` of the --json document)."""
    runs, on = doc.get("runs"), set(doc.get("frontier") or ())
    if not runs:
        return ""
    rows = []
    for label, r in runs.items():
        at = f"runs.{label}"
        mark = " *" if label in on else ""
        if r is None:
            rows.append(f"<tr><td>{esc(label)}</td><td colspan=\"5\">nothing fits</td></tr>")
            continue
        rows.append(f"<tr><td><b>{esc(label)}</b>{mark}</td>{_cell(at + '.days', r['days'], '.1f')}"
                    f"{_cell(at + '.device_hours', r['device_hours'], ',.0f')}{_cell(at + '.cost', r['cost'], ',.0f', '$')}"
                    f"{_cell(at + '.energy_kwh', r['energy_kwh'], ',.0f')}{_cell(at + '.goodput.ettr', r['goodput']['ettr'], '.1%')}</tr>")
    head = "<tr><th>point</th><th>days</th><th>device-hours</th><th>cost</th><th>kWh</th><th>ETTR</th></tr>"
    return (f"<h2>The whole run: time, cost and energy</h2><table>{head}{''.join(rows)}</table>"
            f"<p class=\"note\">{esc(RUN_WORDS)} On this page energy is in kWh.</p>")
