"""Parsing speed and peak memory of `doctor trace` on the ResNet-50 traces and a synthesised 1 GB trace.

    python benchmarks/trace_memory.py [--gb 1.0] [--keep PATH]

The synthetic trace repeats a ResNet-like step (ProfilerStep, DataLoader span, CPU operators,
cudaLaunchKernel runtime events, kernels on a stream, memcpy) until it reaches `--gb` GB of
JSON. Each parse runs in a fresh child process so its peak RSS (VmHWM) is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRACES = Path(__file__).parents[1] / "tests" / "data" / "traces" / "resnet50-dataloader"

CHILD = """
import json, sys, time
from bandwise.doctor.trace import analyze_trace
from bandwise.doctor.rules import diagnose
from bandwise.doctor.signals import signals_from_trace
t0 = time.perf_counter()
a = analyze_trace(sys.argv[1])
d = diagnose(signals_from_trace(a["signals"]), a["breakdown"])
elapsed = time.perf_counter() - t0
rss = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) * 1024
print(json.dumps({"seconds": elapsed, "peak_rss": rss, "events": a["events"], "steps": a["steps"], "findings": [f.id for f in d.findings]}))
"""


def synthesise(path: Path, target_bytes: int, rank: int | None = None, world_size: int | None = None) -> int:
    """Write a chrome trace of about `target_bytes`; returns the number of events. With `rank`, the
    head carries `distributedInfo` as torch.profiler writes it under torchrun."""
    n_events, step, t = 0, 0, 1_700_000_000_000_000
    dist = "" if rank is None else f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world_size}}},\n'
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Synthetic GPU", "totalGlobalMem": 85899345920, "computeMajor": 9, "computeMinor": 0}],\n' + dist + '"traceEvents": [\n')
        first = True
        while f.tell() < target_bytes:
            evs = [
                {"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": t, "dur": 100_000},
                {"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "pid": 1, "tid": 1, "ts": t + 10, "dur": 20_000},
            ]
            for k in range(400):
                ts = t + 20_100 + k * 200
                evs.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": ts, "dur": 30, "args": {"External id": k, "Input Dims": [[64], [64, 512], [512, 64]], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]}})
                evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 5, "dur": 8, "args": {"correlation": k, "external id": k}})
                evs.append({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "pid": 0, "tid": 7, "ts": ts + 20, "dur": 150, "args": {"stream": 7, "correlation": k, "external id": k, "grid": [132, 1, 1], "block": [384, 1, 1]}})
            evs.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": t + 20_050, "dur": 40, "args": {"bytes": 1 << 22}})
            for e in evs:
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
            n_events += len(evs)
            step += 1
            t += 100_000
        f.write("\n]}\n")
    return n_events


def measure(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gb", type=float, default=1.0)
    p.add_argument("--keep", type=Path, default=None, help="write the synthetic trace here and keep it")
    args = p.parse_args(argv)
    print("| trace | size | events | parse + diagnose (s) | peak RSS (MB) | findings |")
    print("|---|---|---|---|---|---|")
    for path in sorted(TRACES.glob("*.json.gz")):
        r = measure(path)
        print(f"| {path.name} | {path.stat().st_size / 1e6:.1f} MB gz | {r['events']} | {r['seconds']:.2f} | {r['peak_rss'] / 2**20:.0f} | {', '.join(r['findings'])} |")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "synthetic.pt.trace.json"
        t0 = time.perf_counter()
        n = synthesise(path, int(args.gb * 1e9))
        made = time.perf_counter() - t0
        r = measure(path)
        size = path.stat().st_size
        print(f"| synthetic ({made:.0f} s to write) | {size / 1e9:.2f} GB | {n} | {r['seconds']:.1f} ({size / 1e6 / r['seconds']:.0f} MB/s) | {r['peak_rss'] / 2**20:.0f} | {', '.join(r['findings'])} |")
        if args.keep is None:
            os.unlink(path)
    return 0 if r["peak_rss"] < 500 * 2**20 else 1


if __name__ == "__main__":
    sys.exit(main())
