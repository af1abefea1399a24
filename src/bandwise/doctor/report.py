"""Render a `Diagnosis`: rich terminal report and JSON document (the page: `report/doctor_page.py`)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from bandwise.doctor.rules import MIN_STEPS, Diagnosis, Finding
from bandwise.errors import BandwiseError
from bandwise.report.output import Output

_RICH = {"compute": "blue", "comm": "dark_orange", "memcpy": "cyan", "h2d": "cyan", "data_wait": "red", "preprocess": "yellow", "optimizer": "green", "idle": "grey50"}


def merge(diagnoses: list[Diagnosis], names: list[str]) -> Diagnosis:
    """One diagnosis over several ranks: mean breakdown, each finding from the rank where it gains most."""
    if len(diagnoses) == 1:
        return diagnoses[0]
    devices = {n: d.signals.get("device") for d, n in zip(diagnoses, names)}
    if len(set(devices.values())) > 1:
        cpu = [n for n, dev in devices.items() if dev == "cpu"]
        raise BandwiseError(f"traces mix device and CPU-only ranks ({', '.join(cpu[:3])}{' ...' if len(cpu) > 3 else ''} have no device activity); "
                            "their breakdowns measure different things: pass them to separate `doctor trace` runs")
    # Ranks with too few steps for a verdict add no findings; the step count shown is that of
    # the ranks that were judged, and the others are named in `missing`.
    judged = [d for d in diagnoses if d.verdict]
    unjudged = [f"steps ({n}: have {d.steps}, need >= {MIN_STEPS} for a verdict)" for d, n in zip(diagnoses, names) if not d.verdict]
    keys = sorted({k for d in diagnoses for k in d.breakdown})
    mean = {k: sum(d.breakdown.get(k, 0.0) for d in diagnoses) / len(diagnoses) for k in keys}
    total = sum(mean.values()) or 1.0
    best: dict[str, tuple[Finding, list[str]]] = {}
    for d, name in zip(diagnoses, names):
        for f in d.findings:
            prev = best.get(f.id)
            ranks = (prev[1] if prev else []) + [name]
            if prev is None or (f.expected_speedup or 1.0) > (prev[0].expected_speedup or 1.0):
                best[f.id] = (f, ranks)
            else:
                best[f.id] = (prev[0], ranks)
    findings = []
    for f, ranks in best.values():
        f.evidence = {**f.evidence, "ranks": ranks}
        findings.append(f)
    findings.sort(key=lambda f: -(f.expected_speedup or 1.0))
    return Diagnosis(
        steps=min(d.steps for d in (judged or diagnoses)),
        breakdown={k: v / total for k, v in mean.items()},
        findings=findings,
        missing=sorted({m for d in diagnoses for m in d.missing if not m.startswith("steps")} | set(unjudged)),
        signals={"ranks": {n: d.signals for d, n in zip(diagnoses, names)}},
    )


def to_json(d: Diagnosis, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**d.to_dict(), **(extra or {})}


def print_report(out: Output, d: Diagnosis, title: str) -> None:
    out.print(Text(title, style="bold"))
    rates = [f"{d.steps} steps measured"]
    for key, label in (("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s")):
        if d.signals.get(key):
            rates.append(f"{d.signals[key]:,.1f} {label}")
    if d.signals.get("mfu") is not None:
        rates.append(f"MFU {d.signals['mfu']:.2%}")
    out.print(Text(" · ".join(rates), style="dim"))
    out.print(breakdown_bar(d.breakdown))
    legend = Text()
    for k, v in sorted(d.breakdown.items(), key=lambda kv: -kv[1]):
        legend.append("■ ", style=_RICH.get(k, "white"))
        legend.append(f"{k} {v:.1%}   ")
    out.print(legend)
    if d.healthy:
        out.print(Text("healthy: no bottleneck above its threshold", style="bold green"))
    elif not d.verdict:
        out.print(Text(f"no verdict: {d.steps} step(s) measured, {MIN_STEPS} needed", style="bold yellow"))
    per_rank = d.signals.get("per_rank") or []
    if len(per_rank) > 1:
        table = Table(title="Per rank (median per step, ms)")
        for col in ("rank", "steps", "step", "busy", "exposed comm", "idle", "trace"):
            table.add_column(col, justify="left" if col == "trace" else "right")
        for r in per_rank:
            table.add_row("-" if r["rank"] is None else str(r["rank"]), str(r["steps"]), f"{r['step_ms']:.1f}", f"{r['busy_ms']:.1f}",
                          f"{r['exposed_comm_ms']:.1f}", f"{r['idle_ms']:.1f}", r["name"])
        out.print(table)
        out.print(Text("busy: compute + memcpy · exposed comm: communication not hidden behind compute (HTA's temporal breakdown)", style="dim"))
    plan = d.signals.get("against_plan")
    if plan:
        table = Table(title=f"Against the plan: {plan['strategy']}, {plan['model']} on {plan['world_size']} x {plan['cluster']} "
                            f"({plan['ranks_traced']} rank(s) traced), ms per step")
        for col in ("term", "measured", "predicted", ""):
            table.add_column(col, justify="left" if col in ("term", "") else "right")
        for t in plan["terms"]:
            table.add_row(t["name"], f"{t['measured_ms']:,.1f}", f"{t['predicted_ms']:,.1f}", Text("off" if t["off"] else "", style="bold red"))
        out.print(table)
        for t in plan["terms"]:
            if t["off"]:
                out.print(Text(f"{t['name']}: {t['measured_ms']:,.1f} ms measured against {t['predicted_ms']:,.1f} ms predicted: {t['why']}", style="red"))
    if d.signals.get("step_source") == "gpu_user_annotation":
        out.print(Text("steps taken from the GPU-side ProfilerStep annotations: the trace has no CPU-side ones", style="dim"))
    if d.findings:
        table = Table(title="Findings, by expected gain", show_lines=True)
        for col in ("finding", "severity", "evidence", "expected"):
            table.add_column(col)
        for f in d.findings:
            ev = ", ".join(f"{k}={_fmt(v)}" for k, v in f.evidence.items() if v is not None)
            sev = Text(f.severity, style="bold red" if f.severity == "critical" else "yellow")
            table.add_row(f"{f.id}\n{f.title}", sev, ev, f"{f.expected_speedup:.2f}x" if f.expected_speedup else "n/a")
        out.print(table)
        out.print(Text("Fixes", style="bold"))
        for i, f in enumerate(d.findings, 1):
            out.print(Text(f"{i}. [{f.id}] {f.fix}" + (f"  ({f.note})" if f.note else "")))
    if d.missing:
        out.print(Text("not measured (no verdict on these): " + ", ".join(d.missing), style="dim"))


def breakdown_bar(breakdown: dict[str, float], width: int = 60) -> Text:
    bar = Text()
    used = 0
    items = [(k, v) for k, v in breakdown.items() if v > 0]
    for i, (k, v) in enumerate(items):
        n = width - used if i == len(items) - 1 else round(v * width)
        bar.append("█" * max(0, n), style=_RICH.get(k, "white"))
        used += max(0, n)
    return bar


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)
