"""Device idle after each host sync in a torch.profiler trace (`CostParams.host_sync_s`): the first gap, and
every gap until a kernel is found already queued (launched before the previous kernel ended: the host is
ahead again). A sync counts where the host waited for the device: the call took over 15 us and the device
was busy until it returned.

    python benchmarks/host_sync_gap.py tests/data/traces/h200_moe1b/trace_moe-1b.json.gz
"""

from __future__ import annotations

import bisect
import gzip
import json
import statistics
import sys

SYNCS = ("cudaStreamSynchronize", "cudaMemcpyAsync")
WAITED_US = 15.0


def main(path: str) -> None:
    events = json.load(gzip.open(path))["traceEvents"]
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    kernels = sorted((e["ts"], e["ts"] + e.get("dur", 0), launch.get(e["args"].get("correlation")))
                     for e in events if e.get("cat") == "kernel")
    starts = [k[0] for k in kernels]
    first, chain, counted = [], [], []
    for s in events:
        if s.get("cat") != "cuda_runtime" or s["name"] not in SYNCS or s["dur"] <= WAITED_US:
            continue
        end = s["ts"] + s["dur"]
        i = bisect.bisect_left(starts, end)
        if i == 0 or i >= len(kernels) or max(k[1] for k in kernels[max(0, i - 50):i]) < end - WAITED_US:
            continue  # the host did not wait for the device
        idle, busy_until, j = kernels[i][0] - end, kernels[i][1], i + 1
        while j < len(kernels) and kernels[j][2] is not None and kernels[j][2] > busy_until:  # launched after the device went idle
            idle += max(0.0, kernels[j][0] - busy_until)
            busy_until = max(busy_until, kernels[j][1])
            j += 1
        first.append(kernels[i][0] - end)
        chain.append(idle)
        counted.append(j - i)
    print(f"syncs the host waited at: {len(first)}; first gap median {statistics.median(first):.1f} us; "
          f"idle until the host is ahead again median {statistics.median(chain):.1f} us (mean {statistics.mean(chain):.1f}) "
          f"over a median {statistics.median(counted)} kernels")


if __name__ == "__main__":
    main(sys.argv[1])
