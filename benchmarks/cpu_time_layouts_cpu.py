"""CPU time against wall time of the CPU/gloo transfer check's layouts: do the ranks share the cores' work alike?

Run under torchrun, gloo on 4 CPU ranks:

    PYTHONPATH=src torchrun --nproc-per-node 4 benchmarks/cpu_time_layouts_cpu.py [--rounds 3] [--steps 10]

Each round trains FSDP4, FSDP2·PP2 and HSDP 2x2 once (`trace_transfer_cpu`'s layouts and batch), in an order
that rotates from round to round, and reads each rank's process CPU time (`time.process_time`, every thread of
the process: the step's own and gloo's) and the wall time around the run. Rank 0 prints the four ranks' CPU
seconds, the wall seconds, their ratio (the cores the job kept busy on average) and the run's median step.
With 4 ranks on 2 cores, a rank waiting for its peers can give its core to another, so two layouts with the same
CPU work may take the same time even where the cost model gives one of them less latency (benchmarks/RESULTS.md,
"Calibrate (fourth pass)").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trace_transfer_cpu import CALIBRATE_ON, MODEL, PREDICT, _config  # noqa: E402

from bandwise.runtime.train import train  # noqa: E402
from bandwise.specs.registry import get_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = get_model(MODEL)
    layouts = [CALIBRATE_ON, *PREDICT]
    seen: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in layouts}
    for r in range(args.rounds):
        for label, s in layouts[r % len(layouts):] + layouts[:r % len(layouts)]:
            dist.barrier()
            c0, w0 = time.process_time(), time.perf_counter()
            step = train(spec, s, _config(args.steps)).median_step_s
            mine = torch.tensor([time.process_time() - c0, time.perf_counter() - w0, step])
            every = [torch.zeros(3) for _ in range(world)]
            dist.all_gather(every, mine)
            cpu, wall = sum(float(x[0]) for x in every), max(float(x[1]) for x in every)
            seen[label].append((cpu, wall, float(every[0][2])))
            if rank == 0:
                print(f"{label:10s} round {r + 1}: CPU of the {world} ranks {cpu:.2f} s over {wall:.2f} s wall "
                      f"({cpu / wall:.2f} cores), median step {float(every[0][2]):.3f} s", flush=True)
    if rank == 0:
        for label, v in seen.items():
            print(f"{label:10s} median: CPU {statistics.median(x[0] for x in v):.2f} s, wall {statistics.median(x[1] for x in v):.2f} s, "
                  f"{statistics.median(x[0] / x[1] for x in v):.2f} cores, step {statistics.median(x[2] for x in v):.3f} s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
