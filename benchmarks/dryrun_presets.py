"""Dry run of one real-size layout per preset: every role measured on this CPU, beside the planner.

    python benchmarks/dryrun_presets.py [--only llama3-70b,deepseek-v3] [--json out.json]

Each row is `bandwise train --dry-run` for the layout below at its true world size and the
model's full depth (unless a depth is given, in which case the full-depth figure is extrapolated
as the command prints). The figures are in benchmarks/RESULTS.md, "Dry run of every preset".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from bandwise.cli.dry_run import summary
from bandwise.runtime.dryrun import dry_run
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy

GIB = 2**30

# (preset, layout, layers or None for the full depth, sequence length or None for the preset's)
LAYOUTS: list[tuple[str, Strategy, int | None, int | None]] = [
    ("llama3-8b", Strategy(dp_shard=64, micro_batch=1, global_batch=64), None, None),
    ("llama3-70b", Strategy(dp_shard=16, tp=8, pp=4, micro_batch=1, global_batch=64), None, None),
    ("llama3-405b", Strategy(dp_shard=16, tp=8, pp=16, micro_batch=1, global_batch=256), None, None),
    ("mixtral-8x7b", Strategy(dp_shard=64, ep=8, micro_batch=1, global_batch=64), None, 4096),
    ("qwen3-235b-a22b", Strategy(dp_shard=64, pp=4, ep=16, micro_batch=1, global_batch=256), None, None),
    ("deepseek-v3", Strategy(dp_shard=128, pp=16, ep=64, micro_batch=1, global_batch=2048), None, None),
    ("kimi-k2", Strategy(dp_shard=128, pp=16, ep=64, micro_batch=1, global_batch=2048), None, None),
    ("gpt3-175b", Strategy(dp_shard=16, tp=8, pp=8, micro_batch=1, global_batch=128), None, None),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated presets")
    ap.add_argument("--json", default="", help="write every summary here")
    ap.add_argument("--cluster", default="h100")
    args = ap.parse_args(argv)
    only = {m for m in args.only.split(",") if m}
    rows = []
    for name, s, layers, seq in LAYOUTS:
        if only and name not in only:
            continue
        spec = get_model(name).with_seq_len(seq or get_model(name).seq_len)
        t0 = time.perf_counter()
        run = dry_run(spec, s, layers=layers)
        wall = time.perf_counter() - t0
        ran = spec if layers is None else dataclasses.replace(spec, layers=layers, dense_layers=min(spec.dense_layers, layers))
        out = summary(ran, spec, s, run, args.cluster)
        out["wall_s"] = wall
        rows.append(out)
        worst = max(out["roles"], key=lambda r: r["bytes"]["total"])
        print(
            f"{name:16s} {s.world_size:>5,} seq {spec.seq_len:>6,} {s.describe():28s} roles {len(out['roles'])}  "
            + "  ".join(f"{r['role']}: {r['bytes']['total'] / GIB:6.2f}" for r in out["roles"])
            + f"  | states {max(r['bytes']['params'] + r['bytes']['grads + optimizer'] for r in out['roles']) / GIB:6.2f}"
            f" vs {(out['planner']['params'] + out['planner']['grads + optimizer']) / GIB:6.2f}"
            f"  | peak {worst['bytes']['total'] / GIB:6.2f} vs planner {out['planner']['total'] / GIB:6.2f} GiB"
            f" ({100 * out['difference']['total']:+.1f}%)  {wall:5.0f} s",
            flush=True,
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
