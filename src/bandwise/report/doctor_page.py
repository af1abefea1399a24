"""The doctor's report as a page (`doctor trace --html`, `doctor run --html`).

Every figure in words comes from the command's `--json` document (`doc`) and carries its path
(`report.html.value`); the charts draw the same figures, and the step timeline draws each trace's
per-step rows, which the document keeps only as medians. Sections, each where its data exist:

- the step-time breakdown (one bucket per instant, `doctor.trace`), and each step of each trace;
- device time by kernel class (`signals.kernel_ms`, as HTA's kernel breakdown sums it);
- findings, sorted by expected gain, with their evidence and fixes;
- a job's ranks (`signals.per_rank`): step, busy, exposed communication and idle per rank, and
  each rank's exposed time per kind of collective (HTA's temporal breakdown, per collective);
- with `--strategy`: the measured step against the plan's, term by term (`doctor.against_plan`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bandwise.report.html import esc, page, pyplot, svg, value

BUCKET_COLOURS = {"compute": "#4c78a8", "comm": "#f58518", "memcpy": "#72b7b2", "data_wait": "#e45756", "preprocess": "#eeca3b",
                  "optimizer": "#54a24b", "idle": "#bab0ac"}
BUCKET_WORDS = {"compute": "compute", "comm": "exposed communication", "memcpy": "memcpy/memset", "data_wait": "DataLoader wait",
                "preprocess": "host preprocessing", "optimizer": "optimizer", "idle": "idle"}
CLASS_COLOURS = {"gemm_bf16_fp16_fp8": "#1f5f99", "gemm_tf32": "#4c78a8", "gemm_fp32": "#9ecae9", "gemm_dtype_unknown": "#6b8fb8",
                 "attention_fused": "#8172B3", "softmax": "#b39ddb", "embedding": "#937860", "optimizer_multi_tensor": "#54a24b",
                 "elementwise_reduction": "#eeca3b", "all_gather": "#f58518", "reduce_scatter": "#ffbf79", "all_reduce": "#e45756",
                 "all_to_all": "#c44e52", "send_recv": "#b279a2", "other_collective": "#ff9da6", "memcpy_h2d": "#72b7b2",
                 "memcpy_other": "#a5d6d1", "memset": "#d0d0d0"}
RANK_COLUMNS = (("steps", "steps", "{:,}"), ("step_ms", "step", "{:,.2f}"), ("busy_ms", "busy", "{:,.2f}"),
                ("exposed_comm_ms", "exposed comm", "{:,.2f}"), ("idle_ms", "idle", "{:,.2f}"))


def _num(path: str, v: Any, fmt: str = "{:.4g}") -> str:
    return value(path, v, fmt.format(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else value(path, v, str(v))


def _pct(path: str, v: float) -> str:
    return value(path, v, f"{v:.2%}")


def _rank_name(row: dict[str, Any]) -> str:
    return f"rank {row['rank']}" if row.get("rank") is not None else row["name"]


def _fig(w: float, h: float) -> tuple[Any, Any]:
    return pyplot().subplots(figsize=(w, h))


def _legend(ax: Any) -> None:
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _stacked(ax: Any, names: list[str], parts: dict[str, list[float]], colours: dict[str, str], words: dict[str, str] | None = None,
             unit: str = "ms per step") -> None:
    """One horizontal bar per name, stacked by part."""
    left = np.zeros(len(names))
    for key, vals in parts.items():
        v = np.asarray(vals, dtype=float)
        if v.any():
            ax.barh(names, v, left=left, color=colours.get(key, "#999999"), label=(words or {}).get(key, key.replace("_", " ")))
            left += v
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="x", alpha=0.25)
    _legend(ax)


def breakdown_section(doc: dict[str, Any]) -> str:
    b = doc["breakdown"]
    if not b:
        return ""
    fig, ax = _fig(10, 1.3)
    _stacked(ax, ["step"], {k: [v * 100] for k, v in b.items()}, BUCKET_COLOURS, BUCKET_WORDS, unit="% of the step")
    ax.set_xlim(0, 100)
    items = "".join(f'<li><span style="color:{BUCKET_COLOURS.get(k, "#999")}">&#9632;</span> {esc(BUCKET_WORDS.get(k, k))}: '
                    f'{_pct(f"breakdown.{k}", v)}</li>' for k, v in sorted(b.items(), key=lambda kv: -kv[1]))
    several = "signals" in doc and "ranks" in doc["signals"]
    note = ("the mean of the ranks' medians, normalised" if several else "the median step") + (
        "; each instant counted once: compute kernels, then communication not under compute, then memcpy/memset, then "
        "DataLoader wait, then idle (torch_tb_profiler's priority order, communication split out as HTA does)")
    return (f"<h2>Step-time breakdown</h2><figure>{svg(fig)}<figcaption class=\"note\">{esc(note)}</figcaption></figure>"
            f"<ul>{items}</ul>")


def timeline_section(analyses: dict[str, dict[str, Any]] | None, straggler: str | None) -> str:
    """Each step of each trace: stacked by bucket for one trace, one line per rank for several."""
    rows = {name: [r for r in a.get("per_step", []) if r.get("step_us")] for name, a in (analyses or {}).items()}
    rows = {n: r for n, r in rows.items() if r}
    if not rows:
        return ""
    if len(rows) == 1:
        (name, steps), = rows.items()
        keys = [k for k in BUCKET_COLOURS if any(k in r for r in steps)]
        fig, ax = _fig(10, 0.32 * len(steps) + 1.3)
        _stacked(ax, [f"step {i + 1}" for i in range(len(steps))], {k: [r.get(k, 0.0) * r["step_us"] / 1e3 for r in steps] for k in keys},
                 BUCKET_COLOURS, BUCKET_WORDS, unit="ms")
        ax.set_title(f"{name}: each ProfilerStep window", fontsize=9)
    else:
        # the ranks of a synchronous job share each step's length: what differs is each one's own work
        fig, ax = _fig(10, 4.2)
        for name, steps in rows.items():
            slow = straggler is not None and name == straggler
            ax.plot(range(1, len(steps) + 1), [(r.get("compute", 0.0) + r.get("memcpy", 0.0)) * r["step_us"] / 1e3 for r in steps],
                    marker="o", markersize=3, linewidth=2.2 if slow else 0.9, color="#C44E52" if slow else "#4c78a8",
                    alpha=1.0 if slow else 0.5, label=f"{name} (the straggler)" if slow else None)
            ax.plot(range(1, len(steps) + 1), [r["step_us"] / 1e3 for r in steps], linestyle=":", linewidth=0.8, color="#555555")
        ax.set_xlabel("step")
        ax.set_ylabel("ms")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.25)
        ax.set_title(f"{len(rows)} traces: each step's busy time (compute + memcpy), one line per trace; dotted: the step", fontsize=9)
        if straggler in rows:
            ax.legend(fontsize=7, loc="lower right")
    return ("<h2>Step timeline</h2><figure>" + svg(fig) + "<figcaption class=\"note\">Each ProfilerStep window the trace "
            "recorded, as the doctor cut it; the medians of these are the figures above.</figcaption></figure>")


def kernel_section(doc: dict[str, Any]) -> str:
    """Device time per step by kernel class, one bar per trace."""
    sig = doc.get("signals") or {}
    ranks = sig.get("ranks")
    order = {r["name"]: _rank_name(r) for r in sig.get("per_rank") or []}  # by rank, where the ranks are known
    names = [n for n in order if n in (ranks or {})] + sorted(set(ranks or {}) - set(order))
    per = ({order.get(n, n): (f"signals.ranks.{n}.kernel_ms", ranks[n].get("kernel_ms")) for n in names} if ranks is not None
           else {"this trace": ("signals.kernel_ms", sig.get("kernel_ms"))})
    per = {n: pk for n, pk in per.items() if pk[1]}
    if not per:
        return ""
    classes = [c for c in CLASS_COLOURS if any(c in k for _, k in per.values())]
    classes += sorted({c for _, k in per.values() for c in k} - set(classes))
    fig, ax = _fig(10, 0.32 * len(per) + 1.4)
    _stacked(ax, list(per), {c: [k.get(c, 0.0) for _, k in per.values()] for c in classes}, CLASS_COLOURS)
    head = "".join(f"<th>{esc(c.replace('_', ' '))}</th>" for c in classes)
    body = "".join(f"<tr><td>{esc(n)}</td>" + "".join(f'<td class="n">{_num(f"{p}.{c}", k[c], "{:,.3f}")}</td>' if c in k else "<td></td>"
                                                     for c in classes) + "</tr>" for n, (p, k) in per.items())
    return ("<h2>Kernel classes</h2><figure>" + svg(fig) + "<figcaption class=\"note\">Device time per step by what each kernel is "
            "(read from its name; a matmul whose name has no dtype takes its launching operator's), summed as HTA's kernel breakdown "
            "sums it: concurrent streams overlap, so the classes can add up to more than the step.</figcaption></figure>"
            f"<table><tr><th>trace</th>{head}</tr>{body}</table><p class=\"note\">ms per step</p>")


def findings_section(doc: dict[str, Any]) -> str:
    if not doc["findings"]:
        verdict = "healthy: no bottleneck above its threshold" if doc.get("healthy") else "no finding"
        return f"<h2>Findings</h2><p>{esc(verdict)}</p>"
    rows = []
    for i, f in enumerate(doc["findings"]):
        p = f"findings.{i}"
        ev = "<br>".join(f"{esc(k)} = " + (esc(", ".join(map(str, v))) if isinstance(v, list) else _num(f"{p}.evidence.{k}", v))
                         for k, v in f["evidence"].items() if v is not None)
        gain = f"{_num(f'{p}.expected_speedup', f['expected_speedup'], '{:.3f}')}x" if f.get("expected_speedup") else "n/a"
        note = f'<br><span class="note">{esc(f["note"])}</span>' if f.get("note") else ""
        rows.append(f"<tr><td><b>{esc(f['id'])}</b><br>{esc(f['title'])}</td><td>{esc(f['severity'])}</td><td>{ev}</td>"
                    f'<td class="n">{gain}</td><td><code>{esc(f["fix"])}</code>{note}</td></tr>')
    return ("<h2>Findings, by expected gain</h2><table><tr><th>finding</th><th>severity</th><th>evidence</th><th>expected step gain</th>"
            f"<th>fix</th></tr>{''.join(rows)}</table>")


def ranks_section(doc: dict[str, Any], straggler: str | None) -> str:
    """A job's ranks: the per-rank table and chart, and each rank's exposed time per collective."""
    sig = doc.get("signals") or {}
    per_rank = sig.get("per_rank") or []
    if len(per_rank) < 2:
        return ""
    names = [_rank_name(r) for r in per_rank]
    fig, ax = _fig(10, 0.28 * len(per_rank) + 1.4)
    _stacked(ax, names, {"busy": [r["busy_ms"] for r in per_rank], "comm": [r["exposed_comm_ms"] for r in per_rank],
                         "idle": [r["idle_ms"] for r in per_rank]},
             {"busy": BUCKET_COLOURS["compute"], "comm": BUCKET_COLOURS["comm"], "idle": BUCKET_COLOURS["idle"]},
             {"busy": "busy (compute + memcpy)", "comm": "exposed communication", "idle": "idle"})
    if straggler is not None:
        for label in ax.get_yticklabels():
            if label.get_text() == straggler:
                label.set_color("#C44E52")
                label.set_fontweight("bold")
    head = "".join(f"<th>{esc(w)}</th>" for _, w, _ in RANK_COLUMNS)
    body = "".join(f"<tr><td>{esc(n)}</td>" + "".join(f'<td class="n">{_num(f"signals.per_rank.{i}.{k}", r[k], fmt)}</td>'
                                                     for k, _, fmt in RANK_COLUMNS) + f"<td>{esc(r['name'])}</td></tr>"
                   for i, (n, r) in enumerate(zip(names, per_rank)))
    out = ("<h2>Ranks</h2><figure>" + svg(fig) + "<figcaption class=\"note\">Median per step of each rank. Busy: compute + memcpy, the "
           "rank's own work; exposed communication: collectives not hidden behind compute, which beside a straggler is mostly the wait "
           "for it (HTA's temporal breakdown).</figcaption></figure>"
           f"<table><tr><th>rank</th>{head}<th>trace</th></tr>{body}</table><p class=\"note\">ms per step (median)</p>")
    ranks = sig.get("ranks") or {}
    comm = {n: (row["name"], ranks.get(row["name"], {}).get("comm_exposed_ms") or {}) for n, row in zip(names, per_rank)}
    kinds = [k for k in CLASS_COLOURS if any(k in c for _, c in comm.values())]
    if kinds:
        fig, ax = _fig(10, 0.28 * len(comm) + 1.4)
        _stacked(ax, list(comm), {k: [c.get(k, 0.0) for _, c in comm.values()] for k in kinds}, CLASS_COLOURS)
        head = "".join(f"<th>{esc(k.replace('_', '-'))}</th>" for k in kinds)
        body = "".join(f"<tr><td>{esc(n)}</td>" + "".join(f'<td class="n">{_num(f"signals.ranks.{t}.comm_exposed_ms.{k}", c[k], "{:,.3f}")}</td>'
                                                         if k in c else "<td></td>" for k in kinds) + "</tr>" for n, (t, c) in comm.items())
        out += ("<h3>Exposed time per collective</h3><figure>" + svg(fig) + "<figcaption class=\"note\">Each kind of collective's time not "
                "under a compute kernel, median per step, read from the NCCL/RCCL kernel names.</figcaption></figure>"
                f"<table><tr><th>rank</th>{head}</tr>{body}</table><p class=\"note\">ms per step (median)</p>")
    return out


def plan_section(doc: dict[str, Any]) -> str:
    """The measured step against the plan for its layout, term by term."""
    ap = (doc.get("signals") or {}).get("against_plan")
    if not ap:
        return ""
    terms = ap["terms"]
    fig, ax = _fig(10, 0.55 * len(terms) + 1.3)
    y = np.arange(len(terms))
    ax.barh(y - 0.2, [t["measured_ms"] for t in terms], 0.4, color="#4c78a8", label="measured")
    ax.barh(y + 0.2, [t["predicted_ms"] for t in terms], 0.4, color="#bab0ac", label="predicted by the plan")
    ax.set_yticks(y, [("off: " if t["off"] else "") + t["name"] for t in terms])
    for label, t in zip(ax.get_yticklabels(), terms):
        if t["off"]:
            label.set_color("#C44E52")
    ax.invert_yaxis()
    ax.set_xlabel("ms per step")
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="x", alpha=0.25)
    _legend(ax)
    rows = "".join(f"<tr><td>{esc(t['name'])}</td><td class=\"n\">{_num(f'signals.against_plan.terms.{i}.measured_ms', t['measured_ms'], '{:,.2f}')}</td>"
                   f"<td class=\"n\">{_num(f'signals.against_plan.terms.{i}.predicted_ms', t['predicted_ms'], '{:,.2f}')}</td>"
                   f"<td>{'<b>off</b>: ' + esc(t['why']) if t['off'] else ''}</td></tr>" for i, t in enumerate(terms))
    traced = _num("signals.against_plan.ranks_traced", ap["ranks_traced"], "{}")
    world = _num("signals.against_plan.world_size", ap["world_size"], "{}")
    return (f"<h2>Against the plan</h2><p>{esc(ap['strategy'])}, {esc(ap['model'])} on {world} x {esc(ap['cluster'])}; "
            f"{traced} rank(s) traced. Measured: the median over ranks of each rank's median step.</p>"
            f"<figure>{svg(fig)}</figure><table><tr><th>term</th><th>measured, ms</th><th>predicted, ms</th><th></th></tr>{rows}</table>"
            "<p class=\"note\">A term is off when measured and predicted differ by more than 20% of the larger and by more than 2% "
            "of the step.</p>")


def live_ranks_section(doc: dict[str, Any]) -> str:
    """`doctor run` under torchrun: each rank's own monitor, median per step."""
    rows = (doc.get("signals") or {}).get("per_rank_live") or []
    if not rows:
        return ""
    cols = (("steps", "{:,}"), ("step_ms", "{:,.2f}"), ("data_wait_ms", "{:,.2f}"), ("optimizer_ms", "{:,.2f}"))
    body = "".join(f"<tr><td>rank {r['rank']}</td>" + "".join(f'<td class="n">{_num(f"signals.per_rank_live.{i}.{k}", r[k], fmt)}</td>'
                                                             if r.get(k) is not None else "<td></td>" for k, fmt in cols) + "</tr>"
                   for i, r in enumerate(rows))
    return ("<h2>Ranks</h2><table><tr><th>rank</th><th>steps</th><th>step, ms</th><th>DataLoader wait, ms</th><th>optimizer, ms</th></tr>"
            f"{body}</table>")


def _straggler(doc: dict[str, Any]) -> str | None:
    f = next((f for f in doc["findings"] if f["id"] == "straggler"), None)
    return None if f is None else str(f["evidence"].get("rank"))


def doctor_page(doc: dict[str, Any], title: str, command: str, analyses: dict[str, dict[str, Any]] | None = None) -> str:
    """The whole page. `doc` is the command's `--json` document; `analyses` each trace's own
    analysis (`DoctorResult.analyses`), for the step timeline."""
    sig = doc.get("signals") or {}
    steps = doc["steps"]
    verdict = ("healthy: no bottleneck above its threshold" if doc.get("healthy") else f"{len(doc['findings'])} finding(s)"
               if doc.get("verdict") else "no verdict: too few steps measured")
    facts = [f"{value('steps', steps, f'{steps:,}')} steps measured"]
    if sig.get("step_ms"):
        facts.append(f"median step {_num('signals.step_ms', sig['step_ms'], '{:,.2f}')} ms")
    if sig.get("device_name"):
        facts.append(esc(sig["device_name"]))
    if doc.get("traces") and len(doc["traces"]) > 1:
        facts.append(f"{len(doc['traces'])} traces")
    for key, label, fmt in (("samples_per_s", "samples/s", "{:,.1f}"), ("tokens_per_s", "tokens/s", "{:,.1f}")):
        if sig.get(key):
            facts.append(f"{_num(f'signals.{key}', sig[key], fmt)} {label}")
    if sig.get("mfu") is not None:
        facts.append(f"MFU {_pct('signals.mfu', sig['mfu'])}")
    cls = "pp-no" if doc.get("healthy") else "pp-yes" if doc["findings"] else ""
    straggler = _straggler(doc)
    # the step timeline names traces by file; the straggler finding names a rank
    by_rank = {_rank_name(r): r["name"] for r in sig.get("per_rank") or []}
    parts = [f"<h1>{esc(title)}</h1>", f'<p class="note">{" &middot; ".join(facts)}</p>',
             f'<div class="verdict {cls}"><b>{esc(verdict)}.</b> '
             + (esc(doc["findings"][0]["title"]) if doc["findings"] else "") + "</div>",
             breakdown_section(doc), timeline_section(analyses, by_rank.get(straggler, straggler)), kernel_section(doc),
             findings_section(doc), ranks_section(doc, straggler), live_ranks_section(doc), plan_section(doc)]
    if doc.get("missing"):
        parts.append(f"<h2>Not measured</h2><p class=\"note\">No verdict on these: {esc(', '.join(doc['missing']))}</p>")
    if doc.get("traces"):
        parts.append("<h2>Traces</h2><ul>" + "".join(f"<li><code>{esc(t)}</code></li>" for t in doc["traces"]) + "</ul>")
    parts.append(f"<h2>Made by</h2><pre>{esc(command)}</pre>")
    return page(title, "\n".join(p for p in parts if p))
