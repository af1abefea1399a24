"""`bandwise train --dry-run`: one rank of each role measured, set beside the planner's memory model.

The measurement is `runtime.dryrun` (torch's memory trackers over real training steps on fake
tensors and the fake process group); the prediction is `cost.step.estimate` for the same model,
layout and sequence length. Both count what the caching allocator hands out: the planner's
fixed reserve for the CUDA context, cuBLAS workspaces and NCCL buffers (`CostParams.reserved_bytes`)
is left out of the comparison because no tensor tracker can see it.

Beside the memory, the planner's step time for the layout on the cluster as the trainer runs it
(`--engine bandwise`), under `--calibration` where one is given: a calibration scales speeds, not
bytes, so it moves that time and no memory figure.

`runtime.dryrun` imports torch, so `run` imports it only when a dry run is asked for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.table import Table

from bandwise.cost.calibrated import calibrated, calibration_line
from bandwise.cost.memory import GIB
from bandwise.cost.profiles import trainer_params
from bandwise.cost.step import estimate
from bandwise.report.output import Output
from bandwise.runtime.preflight import TRAINER_ENGINE
from bandwise.specs.calibration import Calibration
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import engine_for, get_cluster
from bandwise.specs.strategy import Strategy

ROWS = (
    ("params", ("params",), "weights this rank holds (fp32 shards; bf16 copies where kept)"),
    ("grads + optimizer", ("grads", "optimizer"), "gradients and AdamW moments, just after the step"),
    ("grads not yet made", ("grads",), "gradients at the peak less those just after the step"),
    ("activations", ("activations",), "saved for backward and temporaries, at the peak"),
    ("buffers", ("buffers",), "FSDP's gathered weights and reduce buffers, module buffers, at the peak"),
)
PLANNER_TERMS = {"params": ("params",), "grads + optimizer": ("grads_optimizer",), "grads not yet made": ("grads_not_at_peak",), "activations": ("activations",), "buffers": ("buffers",)}


def planner_memory(spec: ModelSpec, s: Strategy, cluster_name: str) -> dict[str, float]:
    """The planner's per-rank bytes per row of the table (and 'total') for `s`, without the fixed reserve."""
    # the dry run measures torch's allocations, which hold no CUDA context
    est = estimate(spec, get_cluster(cluster_name), s, trainer_params(accelerator=False))
    out = {label: sum(est.memory_gib[t] for t in terms) * GIB for label, terms in PLANNER_TERMS.items()}
    out["total"] = est.memory_gib_per_device * GIB
    return out


def planner_time(spec: ModelSpec, s: Strategy, cluster_name: str, cal: Calibration | None) -> dict[str, Any]:
    """The planner's step of `s` on the cluster as this trainer runs it there, calibrated by `cal` if given."""
    clus, params = calibrated(get_cluster(cluster_name), trainer_params(), cal, TRAINER_ENGINE)
    est = estimate(spec, clus, s, params)
    out: dict[str, Any] = {"step_s": est.step_time_s, "tokens_per_s_per_device": est.tokens_per_s_per_device, "mfu": est.mfu}
    if cal is not None:
        out["calibration"] = calibration_line(cal, clus)
    return out


def measured_rows(role: Any) -> dict[str, float]:
    """One role's figures per row: model states after the step, activations and buffers at the peak."""
    rows: dict[str, float] = {}
    for label, cats, _ in ROWS:
        src = role.states if label in ("params", "grads + optimizer") else role.by_category
        rows[label] = sum(src[c] for c in cats)
        if label == "grads not yet made":
            rows[label] -= role.states["grads"]
    rows["total"] = role.peak_bytes
    return rows


def summary(spec: ModelSpec, full: ModelSpec, s: Strategy, run: Any, cluster: str, cal: Calibration | None = None) -> dict[str, Any]:
    """The dry run, the planner at the depth that ran, (with --layers) the full-depth figure, and the
    planner's step time of the whole model."""
    planner = planner_memory(spec, s, cluster)
    roles = [{"role": r.role, "rank": r.rank, "pp_rank": r.pp_rank, "stages": r.stage_ids, "seconds": round(r.seconds, 1),
              "params": r.param_count, "bytes": measured_rows(r), "torch": r.raw} for r in run.roles]
    worst = max(roles, key=lambda r: r["bytes"]["total"])
    out: dict[str, Any] = {
        "model": spec.name, "layout": s.describe(), "strategy": s.to_dict(), "world_size": s.world_size,
        "seq_len": spec.seq_len, "layers": spec.layers, "model_layers": full.layers, "cluster": cluster,
        "roles": roles, "planner": planner,
        "difference": {k: (worst["bytes"][k] - planner[k]) / planner[k] if planner[k] else None for k in (*PLANNER_TERMS, "total")},
        "planner_time": planner_time(full, s, cluster, cal),
    }
    if spec.layers != full.layers:
        # the layers left out add what the planner says they add: measured(L) + planner(N) - planner(L)
        planner_full = planner_memory(full, s, cluster)
        out["full_depth"] = {
            "method": f"measured at {spec.layers} of {full.layers} layers, plus the planner's difference between {full.layers} and {spec.layers} layers",
            "measured_bytes": worst["bytes"]["total"] + planner_full["total"] - planner["total"],
            "planner_bytes": planner_full["total"],
        }
    return out


def render(out: Output, s: dict[str, Any]) -> None:
    largest = max(r["bytes"]["total"] for r in s["roles"])
    unit, scale = ("GiB", GIB) if largest >= GIB else ("MiB", 2**20)
    gib = lambda b: f"{b / scale:,.2f}"  # noqa: E731
    title = f"bandwise train --dry-run: {s['model']}, {s['layout']}, {s['world_size']:,} ranks, seq {s['seq_len']:,}"
    t = Table(title=title)
    t.add_column(f"{unit} per rank")
    for r in s["roles"]:
        t.add_column(f"{r['role']}\n(rank {r['rank']:,})", justify="right")
    t.add_column(f"planner\n({s['cluster']})", justify="right")
    t.add_column("measured\n- planner", justify="right")
    for label in (*PLANNER_TERMS, "total"):
        row = [label] + [gib(r["bytes"][label]) for r in s["roles"]]
        d = s["difference"][label]
        row += [gib(s["planner"][label]), "-" if d is None else f"{100 * d:+.1f}%"]
        t.add_row(*row, style="bold" if label == "total" else None)
    out.print(t)
    out.print(
        "measured: torch's memory tracker over two training steps on fake tensors (model states just after the "
        "optimizer step, the rest at the peak); the difference is the largest role's. Neither side counts the "
        "CUDA context and NCCL/cuBLAS workspaces the planner reserves on top."
    )
    if "full_depth" in s:
        f = s["full_depth"]
        out.print(f"full depth ({s['model_layers']} layers): ≈ {gib(f['measured_bytes'])} {unit} measured ({f['method']}); planner {gib(f['planner_bytes'])} {unit}")
    t = s["planner_time"]
    out.print(f"planner on {s['cluster']} ({s['model_layers']} layers, as bandwise's trainer runs it): step {t['step_s']:,.3g} s, "
              f"{t['tokens_per_s_per_device']:,.0f} tokens/s per device, MFU {t['mfu']:.1%}"
              + (f"; {t['calibration']}" if "calibration" in t else ""))
    secs = sum(r["seconds"] for r in s["roles"])
    out.print(f"{len(s['roles'])} role(s) in {secs:.0f} s")


def run(spec: ModelSpec, s: Strategy, *, layers: int | None, pp_ranks: list[int] | None, seq_len: int | None, cluster: str, out: Output,
        calibration: Calibration | None = None) -> dict[str, Any]:
    from bandwise.runtime.dryrun import dry_run

    # a cluster the trainer does not run on, or a file that does not apply to it, is refused before the minutes of the run
    clus = get_cluster(cluster)
    engine_for(clus.device, TRAINER_ENGINE)
    calibrated(clus, trainer_params(), calibration, TRAINER_ENGINE)
    result = dry_run(spec, s, seq_len=seq_len, layers=layers, pp_ranks=pp_ranks)
    full = spec.with_seq_len(result.seq_len)
    ran = full if layers is None else dataclasses.replace(full, layers=layers, dense_layers=min(full.dense_layers, layers))
    s_out = summary(ran, full, s, result, cluster, calibration)
    if out.json_mode:
        out.emit_json(s_out)
    else:
        render(out, s_out)
    return s_out
