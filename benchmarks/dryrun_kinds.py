"""The dry run against the planner's memory model for models with layer kinds, at full size.

    PYTHONPATH=src python benchmarks/dryrun_kinds.py [--json out.json]

Each row builds the whole model (every layer, its real width and sequence length) in the trainer on
fake tensors at the layout's true world size (`runtime.dryrun.dry_run`, as `bandwise train
--dry-run` does) and sets the peak beside `cli.dry_run.planner_memory` for the same layout, as
benchmarks/memory_dryrun.py does for single-kind models. Rows: a Mamba-2 hybrid (Nemotron-H 8B:
24 Mamba-2, 4 attention, 24 MLP-only layers), a model windowed on every layer (Mistral-7B-v0.1,
window 4096, at 8k and 32k tokens) and one windowed on half its layers (Gemma 2 9B, 21 of 42).
Goal (issue 37, point 4): within 10%. Recorded in benchmarks/RESULTS.md, "Layer kinds in the
trainer (issue 37, point 4)".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bandwise.cli.dry_run import planner_memory
from bandwise.runtime.dryrun import dry_run
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy

GIB = 2**30
HF = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf"
FSDP64 = Strategy(dp_shard=64, micro_batch=1, global_batch=64)

ROWS: list[tuple[str, int, Strategy]] = [
    ("nemotron-h-8b", 8192, FSDP64),
    (str(HF / "Mistral-7B-v0.1" / "config.json"), 8192, FSDP64),
    (str(HF / "Mistral-7B-v0.1" / "config.json"), 32768, FSDP64),
    (str(HF / "gemma-2-9b" / "config.json"), 8192, FSDP64),
]


def run_one(model: str, seq: int, s: Strategy, cluster: str) -> dict:
    spec = get_model(model).with_seq_len(seq)
    t0 = time.perf_counter()
    run = dry_run(spec, s, seq_len=seq)
    planner = planner_memory(spec, s, cluster)
    role = max(run.roles, key=lambda r: r.peak_bytes)
    return {"model": spec.name, "seq_len": seq, "layout": s.describe(), "world_size": s.world_size,
            "windowed_layers": spec.windowed_layers, "mamba_layers": spec.mamba_layers, "layers": spec.layers,
            "measured": role.peak_bytes, "planner": planner["total"], "error": role.peak_bytes / planner["total"] - 1,
            "measured_activations": role.by_category["activations"], "planner_activations": planner["activations"],
            "measured_params": role.param_count, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="")
    ap.add_argument("--cluster", default="h100")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'model':18s} {'seq':>6s} {'layout':8s} {'kinds':24s} {'measured':>9s} {'planner':>9s} {'error':>7s} {'act. meas.':>10s} {'act. plan':>10s}", flush=True)
    for model, seq, s in ROWS:
        r = run_one(model, seq, s, args.cluster)
        rows.append(r)
        kinds = f"{r['mamba_layers']} Mamba-2, " if r["mamba_layers"] else ""
        kinds += f"{r['windowed_layers']}/{r['layers']} windowed"
        print(f"{r['model']:18s} {seq:6d} {r['layout']:8s} {kinds:24s} {r['measured'] / GIB:9.2f} {r['planner'] / GIB:9.2f} "
              f"{100 * r['error']:+6.1f}% {r['measured_activations'] / GIB:10.2f} {r['planner_activations'] / GIB:10.2f}  ({r['seconds']:.0f} s)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
