"""How a gloo collective's time grows with its group: per call, over groups of 2 and of 4 in one job of 4 ranks.

Run under torchrun, gloo on 4 CPU ranks:

    PYTHONPATH=src torchrun --nproc-per-node 4 benchmarks/gloo_latency_cpu.py --out /tmp/gloo_latency.json

Each collective the trainer runs on gloo, timed on its own (a barrier before each call, the median of
`--reps` calls), the group sizes interleaved so the load of the shared machine falls on both alike:
- `all_reduce` of one float (the gradient norm's, `runtime.metrics.grad_norm_and_clip`): gloo's ring
  all-reduce (gloo/allreduce.cc) passes its one non-empty segment around the ring twice, reduce-scatter then
  all-gather, 2 (g - 1) messages one after the other;
- `all_gather_into_tensor` of one float a rank: gloo's ring all-gather (gloo/allgather.cc), g - 1 rounds;
- `reduce_scatter_tensor` of one float a rank: torch runs it as a gloo all-reduce of the whole input
  (`ProcessGroupGloo::reduce_scatter_tensor_coalesced`, torch/csrc/distributed/c10d/ProcessGroupGloo.cpp),
  2 (g - 1) messages.
A per-message latency alone gives a group of 2 a third of the all-reduce time of a group of 4, and a third
of its all-gather time too; a fixed cost per call (the work handed to ProcessGroupGloo's worker thread and
back, `ProcessGroupGloo::enqueue`) gives both sizes the same. The least-squares fit of
T = call + messages x message over the six medians says how much of each there is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

MESSAGES = {"all_reduce": lambda g: 2 * (g - 1), "all_gather": lambda g: g - 1, "reduce_scatter": lambda g: 2 * (g - 1)}
"""Messages on a collective's critical path over g ranks, for a payload of one element a rank (see above)."""


def _call(op: str, group, g: int) -> None:
    if op == "all_reduce":
        dist.all_reduce(torch.ones(1), group=group)
    elif op == "all_gather":
        dist.all_gather_into_tensor(torch.empty(g), torch.ones(1), group=group)
    else:
        dist.reduce_scatter_tensor(torch.empty(1), torch.ones(g), group=group)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    pair = pairs[rank // 2]
    groups = {2: pair, world: dist.group.WORLD}
    times: dict[tuple[str, int], list[float]] = {(op, g): [] for op in MESSAGES for g in groups}
    for op in MESSAGES:  # warm the connections
        for g, grp in groups.items():
            _call(op, grp, g)
    for _ in range(args.reps):
        for op in MESSAGES:
            for g, grp in groups.items():
                dist.barrier()
                t0 = time.perf_counter()
                _call(op, grp, g)
                times[(op, g)].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    gathered = [None] * world
    dist.all_gather_object(gathered, med)
    if rank == 0:
        keys = sorted(med)
        over_ranks = {k: statistics.median(m[k] for m in gathered) for k in keys}
        a = np.array([[1.0, MESSAGES[op](g)] for op, g in keys])
        y = np.array([over_ranks[k] for k in keys])
        (call, message), *_ = np.linalg.lstsq(a, y, rcond=None)
        rows = [{"op": op, "group": g, "messages": MESSAGES[op](g), "median_s": over_ranks[(op, g)],
                 "fit_s": call + message * MESSAGES[op](g)} for op, g in keys]
        out = {"reps": args.reps, "world": world, "fit": {"call_s": call, "message_s": message}, "rows": rows,
               "torch": torch.__version__}
        args.out.write_text(json.dumps(out, indent=1))
        print(f"fit: {call * 1e3:.3f} ms a call + {message * 1e3:.3f} ms a message")
        for r in rows:
            print(f"{r['op']:15s} g={r['group']} messages {r['messages']}: {r['median_s'] * 1e3:7.3f} ms (fit {r['fit_s'] * 1e3:7.3f})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
