"""The planner's memory model against the dry run's measurement, layout by layout.

    python benchmarks/memory_dryrun.py [--limit N] [--json out.json]

Each layout runs `runtime.dryrun.dry_run` (torch's memory tracker over two real training steps on
fake tensors and the fake process group, at the layout's true world size and the model's real
width) and sets the largest role's peak beside `cost.step.estimate` for the same model, depth,
layout and sequence length, without the planner's fixed CUDA reserve (no tensor tracker sees
it). Depth is cut to a few layers per pipeline stage so the whole table runs in minutes on two
cores; the planner is evaluated at the same depth, so the comparison is like for like.

Goals (issue 16): every layout within 10%, median within 5%, model states equal. The table and
its reading are in benchmarks/RESULTS.md, "Dry run against the memory model".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time

from bandwise.cli.dry_run import planner_memory
from bandwise.runtime.dryrun import dry_run
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy

GIB = 2**30
S = Strategy

# (preset, layers built, sequence length, layout). Sequence lengths are cut for the widest models
# only to keep a role under ~20 s; each row says what it ran.
LAYOUTS: list[tuple[str, int, int, Strategy]] = [
    # FSDP / HSDP, recomputation, micro-batch size
    ("llama3-8b", 2, 8192, S(dp_shard=8, micro_batch=1, global_batch=8)),
    ("llama3-8b", 2, 8192, S(dp_shard=8, micro_batch=2, global_batch=16)),
    ("llama3-8b", 2, 8192, S(dp_shard=8, micro_batch=1, global_batch=8, recompute="selective")),
    ("llama3-8b", 2, 8192, S(dp_shard=8, micro_batch=1, global_batch=8, recompute="full")),
    ("llama3-8b", 2, 8192, S(dp_replicate=4, dp_shard=16, micro_batch=1, global_batch=64)),
    ("llama3-8b", 2, 8192, S(dp_shard=64, micro_batch=1, global_batch=128)),
    ("llama3-8b", 4, 8192, S(dp_shard=8, micro_batch=1, global_batch=32)),
    ("llama3-8b", 2, 4096, S(dp_shard=8, micro_batch=2, global_batch=16, recompute="full")),
    # TP with sequence parallelism
    ("llama3-8b", 2, 8192, S(dp_shard=8, tp=2, micro_batch=1, global_batch=8)),
    ("llama3-8b", 2, 8192, S(dp_shard=8, tp=8, micro_batch=1, global_batch=8)),
    ("llama3-8b", 2, 8192, S(dp_shard=8, tp=4, micro_batch=2, global_batch=16, recompute="selective")),
    ("llama3-70b", 2, 8192, S(dp_shard=16, tp=8, micro_batch=1, global_batch=16)),
    ("llama3-70b", 2, 8192, S(dp_shard=16, tp=8, micro_batch=1, global_batch=16, recompute="full")),
    ("llama3-70b", 2, 8192, S(dp_replicate=2, dp_shard=8, tp=8, micro_batch=1, global_batch=16, recompute="selective")),
    # PP: every schedule family
    ("llama3-8b", 4, 8192, S(dp_shard=4, pp=2, schedule="GPipe", micro_batch=1, global_batch=16)),
    ("llama3-8b", 4, 8192, S(dp_shard=4, pp=2, schedule="1F1B", micro_batch=1, global_batch=16)),
    ("llama3-8b", 8, 8192, S(dp_shard=4, pp=4, schedule="1F1B", micro_batch=1, global_batch=32)),
    ("llama3-8b", 8, 8192, S(dp_shard=4, pp=2, schedule="Interleaved1F1B", virtual_stages=2, micro_batch=1, global_batch=16)),
    ("llama3-8b", 8, 8192, S(dp_shard=4, pp=2, schedule="LoopedBFS", virtual_stages=2, micro_batch=1, global_batch=16)),
    ("llama3-8b", 8, 8192, S(dp_shard=4, pp=2, schedule="InterleavedZeroBubble", virtual_stages=2, micro_batch=1, global_batch=16)),
    ("llama3-8b", 8, 8192, S(dp_shard=4, pp=2, schedule="ZBVZeroBubble", virtual_stages=2, micro_batch=1, global_batch=16)),
    ("llama3-8b", 8, 8192, S(dp_shard=4, pp=2, schedule="DualPipeV", virtual_stages=2, micro_batch=1, global_batch=16)),
    ("llama3-8b", 4, 8192, S(dp_shard=4, pp=2, schedule="1F1B", micro_batch=1, global_batch=16, recompute="full")),
    ("llama3-70b", 8, 8192, S(dp_shard=8, tp=8, pp=4, schedule="1F1B", micro_batch=1, global_batch=32)),
    ("llama3-70b", 8, 8192, S(dp_shard=8, tp=8, pp=4, schedule="1F1B", micro_batch=1, global_batch=32, recompute="selective")),
    ("llama3-70b", 8, 8192, S(dp_shard=8, tp=8, pp=2, schedule="Interleaved1F1B", virtual_stages=2, micro_batch=1, global_batch=16, recompute="full")),
    ("gpt3-175b", 8, 2048, S(dp_shard=8, tp=8, pp=4, schedule="1F1B", micro_batch=1, global_batch=32)),
    ("gpt3-175b", 8, 2048, S(dp_shard=8, tp=8, pp=4, schedule="1F1B", micro_batch=2, global_batch=64, recompute="selective")),
    ("llama3-405b", 4, 8192, S(dp_shard=8, tp=8, pp=2, schedule="1F1B", micro_batch=1, global_batch=16, recompute="full")),
    # EP (MoE)
    ("mixtral-8x7b", 2, 4096, S(dp_shard=8, ep=8, micro_batch=1, global_batch=8)),
    ("mixtral-8x7b", 2, 4096, S(dp_shard=16, ep=8, micro_batch=2, global_batch=32)),
    ("mixtral-8x7b", 2, 4096, S(dp_shard=8, ep=8, micro_batch=1, global_batch=8, recompute="full")),
    ("mixtral-8x7b", 4, 4096, S(dp_shard=8, ep=4, pp=2, schedule="1F1B", micro_batch=1, global_batch=32)),
    ("qwen3-235b-a22b", 2, 4096, S(dp_shard=64, ep=16, micro_batch=1, global_batch=64)),
    ("qwen3-235b-a22b", 2, 4096, S(dp_shard=64, ep=64, micro_batch=1, global_batch=64, recompute="selective")),
    ("qwen3-235b-a22b", 4, 4096, S(dp_shard=32, ep=32, pp=2, schedule="1F1B", micro_batch=1, global_batch=64)),
    ("deepseek-v3", 4, 4096, S(dp_shard=64, ep=64, micro_batch=1, global_batch=64)),
    ("deepseek-v3", 4, 4096, S(dp_shard=64, ep=64, micro_batch=1, global_batch=64, recompute="full")),
    ("deepseek-v3", 8, 4096, S(dp_shard=64, ep=64, pp=4, schedule="1F1B", micro_batch=1, global_batch=256)),
    ("deepseek-v3", 8, 4096, S(dp_shard=64, ep=64, pp=2, schedule="DualPipeV", virtual_stages=2, micro_batch=1, global_batch=256)),
    ("kimi-k2", 4, 4096, S(dp_shard=64, ep=64, micro_batch=1, global_batch=64)),
    ("kimi-k2", 4, 4096, S(dp_shard=128, ep=64, micro_batch=2, global_batch=256, recompute="selective")),
]


def run_one(name: str, layers: int, seq: int, s: Strategy, cluster: str) -> dict:
    full = get_model(name).with_seq_len(seq)
    spec = dataclasses.replace(full, layers=layers, dense_layers=min(full.dense_layers, layers))
    t0 = time.perf_counter()
    run = dry_run(full, s, seq_len=seq, layers=layers)
    planner = planner_memory(spec, s, cluster)
    worst = max(run.roles, key=lambda r: r.peak_bytes)
    states = lambda r: r.states["params"] + r.states["grads"] + r.states["optimizer"]  # noqa: E731
    return {
        "model": name, "layers": layers, "seq_len": seq, "layout": s.describe(), "world_size": s.world_size,
        "micro_batch": s.micro_batch, "recompute": s.recompute, "schedule": s.schedule if s.pp > 1 else "",
        "measured_peak": worst.peak_bytes, "role": worst.role,
        "measured_states": max(states(r) for r in run.roles),
        "measured_by_category": worst.by_category,
        "planner": planner, "error": (worst.peak_bytes - planner["total"]) / planner["total"],
        "states_error": (max(states(r) for r in run.roles) - planner["params"] - planner["grads + optimizer"]) / (planner["params"] + planner["grads + optimizer"]),
        "seconds": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0, help="run only the first N layouts")
    ap.add_argument("--json", default="")
    ap.add_argument("--cluster", default="h100")
    args = ap.parse_args(argv)
    rows = []
    todo = LAYOUTS[: args.limit] if args.limit else LAYOUTS
    print(f"{'model':16s} {'L':>2s} {'seq':>5s} {'layout':40s} {'world':>5s} {'mb':>2s} {'recompute':9s} {'measured':>8s} {'planner':>8s} {'error':>7s} {'states':>7s}  role", flush=True)
    for name, layers, seq, s in todo:
        try:
            r = run_one(name, layers, seq, s, args.cluster)
        except Exception as exc:  # noqa: BLE001 - a layout that cannot run is a row too
            print(f"{name:16s} {layers:2d} {seq:5d} {s.describe():40s} FAILED: {str(exc).splitlines()[0][:120]}", flush=True)
            rows.append({"model": name, "layout": s.describe(), "failed": str(exc)[:2000]})
            continue
        rows.append(r)
        print(f"{name:16s} {layers:2d} {seq:5d} {r['layout']:40s} {r['world_size']:5d} {s.micro_batch:2d} {s.recompute:9s} "
              f"{r['measured_peak'] / GIB:8.2f} {r['planner']['total'] / GIB:8.2f} {100 * r['error']:+6.1f}% {100 * r['states_error']:+6.2f}%  {r['role']} ({r['seconds']:.0f} s)", flush=True)
    ok = [r for r in rows if "error" in r]
    if ok:
        errs = sorted(abs(r["error"]) for r in ok)
        print(f"\n{len(ok)} layouts ran ({len(rows) - len(ok)} failed): median |error| {100 * statistics.median(errs):.1f}%, "
              f"within 10%: {sum(e <= 0.10 for e in errs)}, worst {100 * errs[-1]:.1f}%; "
              f"model states: median |error| {100 * statistics.median(abs(r['states_error']) for r in ok):.2f}%")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
