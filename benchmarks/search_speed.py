"""How fast the planner searches: candidates per second, cold (first search in the process, pipeline
schedules simulated) and warm (simulations cached), for DeepSeek-V3 on 2048 H800s.

    python benchmarks/search_speed.py [--repeats 5]

Prints the median of the warm runs; the acceptance bar is >= 1,000,000 candidates/s and < 2 s
for the whole exhaustive search.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from bandwise.plan.search import search
from bandwise.specs.registry import get_cluster, get_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="deepseek-v3")
    ap.add_argument("--cluster", default="h800")
    ap.add_argument("--devices", type=int, default=2048)
    ap.add_argument("--global-batch", type=int, default=15360)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    model = get_model(args.model).with_seq_len(args.seq_len)
    cluster = get_cluster(args.cluster)

    t0 = time.perf_counter()
    cold = search(model, cluster, args.devices, args.global_batch)
    cold_s = time.perf_counter() - t0
    warm = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        r = search(model, cluster, args.devices, args.global_batch)
        warm.append(time.perf_counter() - t0)
    med = statistics.median(warm)
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"{args.model} on {args.devices} x {args.cluster}: {cold.searched:,} valid candidates, {cold.fitting:,} fit")
    print(f"cold search: {cold_s:.2f} s = {cold.searched / cold_s / 1e6:.2f} M candidates/s")
    print(f"warm search: median {med:.2f} s of {args.repeats} = {r.searched / med / 1e6:.2f} M candidates/s")


if __name__ == "__main__":
    main()
