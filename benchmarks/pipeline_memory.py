"""Predicted vs measured peak activation memory per rank, all seven torch schedules; planner speed.

Runs the tiny model of tests/dist/_pipeline_worker.py through torch.distributed.pipelining on
CPU/gloo at world sizes 2 and 4 with 8 micro-batches, and prints per rank the peak bytes saved
for backward (saved_tensors_hooks, de-duplicated by storage, parameters excluded) next to the
simulator's prediction. Then times `schedule_factors` on a planner-sized batch.

    python benchmarks/pipeline_memory.py
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "dist"))
import _pipeline_worker as worker  # noqa: E402

from bandwise.cost import pipeline  # noqa: E402
from bandwise.specs.strategy import SCHEDULES  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(world: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as out:
        port = _port()
        procs = [subprocess.Popen([sys.executable, worker.__file__, str(r), str(world), str(port), out]) for r in range(world)]
        if any(p.wait() for p in procs):
            raise SystemExit(f"a rank failed at world size {world}")
        return [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(world)]


def main() -> None:
    per = worker.stage_bytes_per_microbatch()
    kept = worker.LAYERS / (worker.LAYERS + 1)
    print(f"tiny model: {worker.LAYERS} x (Linear {worker.WIDTH}, tanh) per stage, {worker.ROWS} rows per micro-batch, "
          f"{per / 1024:.0f} KiB saved per micro-batch and stage, {worker.MICROBATCHES} micro-batches")
    print("| world | schedule | rank | predicted KiB | measured KiB | error |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for world in (2, 4):
        ranks = measure(world)
        for name in worker.SCHEDULE_NAMES:
            v = 1 if name in ("GPipe", "1F1B") else 2
            spec = pipeline.PipelineSpec(schedule=name, stages=world, microbatches=worker.MICROBATCHES, virtual=v, kept_for_w=kept)
            predicted = pipeline.simulate(spec, activation_bytes=per).peak_bytes
            for r in range(world):
                measured = ranks[r][name]["peak_bytes"]
                err = (measured - predicted[r]) / predicted[r]
                worst = max(worst, abs(err))
                print(f"| {world} | {name} | {r} | {predicted[r] / 1024:.0f} | {measured / 1024:.0f} | {err:+.1%} |")
    print(f"worst per-rank error: {worst:.1%}")

    rng = np.random.default_rng(0)
    n = 1_000_000
    sched = rng.integers(0, len(SCHEDULES), n)
    p = rng.choice([2, 4, 8, 16], n)
    v = np.where(np.isin(sched, [0, 1]), 1, 2)
    m = p * rng.choice([2, 4, 8, 16, 32, 64], n)
    pipeline._factors.cache_clear()
    pipeline.pipeline_summary.cache_clear()
    pipeline._summary_at.cache_clear()
    t0 = time.perf_counter()
    pipeline.schedule_factors(sched, p, m, v)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(5):
        t0 = time.perf_counter()
        pipeline.schedule_factors(sched, p, m, v)
        warm.append(time.perf_counter() - t0)
    distinct = len(np.unique(np.stack([sched, p, m, v], axis=1), axis=0))
    print(f"schedule_factors on {n:,} candidates ({distinct} distinct combinations, m up to {m.max()}): "
          f"first call {cold:.2f} s (simulations), cached median {np.median(warm):.2f} s")


if __name__ == "__main__":
    main()
