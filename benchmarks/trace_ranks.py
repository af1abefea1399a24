"""Reading a job's rank traces one process per core: `doctor trace DIR -j K` for K = 1 and the cores.

    python benchmarks/trace_ranks.py [--ranks 4] [--mb 150]

Writes `--ranks` synthetic rank traces of about `--mb` MB of JSON each (the ResNet-like step of
benchmarks/trace_memory.py, named rank-N), then times `bandwise doctor trace DIR --json -j K`
in a fresh process for each K, three runs each (median), and reports MB of JSON per second and
the largest peak RSS of any process of the run (ru_maxrss of the reaped descendants).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from trace_memory import synthesise  # noqa: E402


def write_ranks(folder: Path, ranks: int, mb: float) -> int:
    total = 0
    for r in range(ranks):
        path = folder / f"rank-{r}.pt.trace.json"
        synthesise(path, int(mb * 1e6))
        doc_head = path.read_text()[:200]
        assert doc_head.startswith('{"schemaVersion": 1')
        total += path.stat().st_size
    return total


def run(folder: Path, jobs: int) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bandwise", "doctor", "trace", str(folder), "--json", "-j", str(jobs)],
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in (0,):
        sys.exit(proc.stderr.strip().splitlines()[-1])
    json.loads(proc.stdout)
    peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return elapsed, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--mb", type=float, default=150.0)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        size = write_ranks(folder, args.ranks, args.mb)
        print(f"{args.ranks} rank traces, {size / 1e6:,.0f} MB of JSON in all; {cores} cores\n")
        print("| -j | seconds (median of 3) | MB/s | MB/s per process | largest peak RSS (MB) |")
        print("|---:|---:|---:|---:|---:|")
        base = None
        for jobs in sorted({1, min(cores, args.ranks)}):
            times = []
            peak = 0.0
            for _ in range(3):
                t, p = run(folder, jobs)
                times.append(t)
                peak = max(peak, p)
            t = statistics.median(times)
            base = base or t
            print(f"| {jobs} | {t:.1f} ({base / t:.2f}x) | {size / 1e6 / t:.0f} | {size / 1e6 / t / jobs:.0f} | {peak:.0f} |")


if __name__ == "__main__":
    main()
