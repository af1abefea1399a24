"""Reading a job's rank traces one process per core: `doctor trace DIR -j K`, and HTA on the same files.

    python benchmarks/trace_ranks.py [--ranks 4] [--mb 100] [--hta-python PY]

Writes `--ranks` synthetic rank traces of about `--mb` MB of JSON each (the ResNet-like step of
benchmarks/trace_memory.py, named rank-N, `distributedInfo` in the head as torch.profiler writes
it under torchrun), then times `bandwise doctor trace DIR --json -j K` in a fresh process for
each K (1 and the cores), three runs each (median). MB/s is JSON read per wall second, the
interpreter's start included; per core divides by K. Memory is sampled every 20 ms over the
whole process tree (VmRSS of the command and its workers, summed): the largest sum is the job's
peak, beside the largest single process (VmHWM). With `--hta-python`, HTA's
`TraceAnalysis(trace_dir).get_temporal_breakdown()` runs once on the same directory, measured
the same way (HTA is not a dependency of bandwise: give the interpreter of an environment with
holistictraceanalysis installed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from trace_memory import synthesise  # noqa: E402

HTA = """
import logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
df = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
print(len(df), "ranks")
"""


def write_ranks(folder: Path, ranks: int, mb: float) -> int:
    total = 0
    for r in range(ranks):
        path = folder / f"rank-{r}.pt.trace.json"
        synthesise(path, int(mb * 1e6), rank=r, world_size=ranks)
        total += path.stat().st_size
    return total


def _status(pid: int, key: str) -> int:
    """A /proc/PID/status field in bytes (0 once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))
    except (OSError, StopIteration):
        return 0


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc/PID/task/*/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def measured(cmd: list[str]) -> tuple[float, float, float, str]:
    """(seconds, peak of the tree's summed RSS, largest single-process peak RSS, stdout) of `cmd`."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        sys.exit(f"{cmd[0]}: cannot run it ({exc.strerror}); give the path of a python interpreter")
    peak_sum, peak_one, done = 0, 0, threading.Event()

    def sample() -> None:
        nonlocal peak_sum, peak_one
        while not done.is_set():
            pids = _tree(proc.pid)
            peak_sum = max(peak_sum, sum(_status(p, "VmRSS") for p in pids))
            peak_one = max([peak_one] + [_status(p, "VmHWM") for p in pids])
            time.sleep(0.02)

    t0 = time.perf_counter()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    elapsed = time.perf_counter() - t0
    done.set()
    sampler.join()
    if proc.returncode:
        sys.exit(f"{cmd[0]} failed: {(err or out).strip().splitlines()[-1:]}")
    return elapsed, peak_sum / 2**20, peak_one / 2**20, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--hta-python", help="python of an environment with holistictraceanalysis, to run HTA on the same directory")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        size = write_ranks(folder, args.ranks, args.mb)
        print(f"{args.ranks} rank traces, {size / 1e6:,.0f} MB of JSON in all; {cores} cores\n")
        print("| reader | seconds (median of 3) | MB/s | MB/s per core | peak RSS, all processes (MB) | largest process (MB) |")
        print("|---|---:|---:|---:|---:|---:|")
        base = None
        for jobs in sorted({1, min(cores, args.ranks)}):
            runs = [measured([sys.executable, "-m", "bandwise", "doctor", "trace", str(folder), "--json", "-j", str(jobs)]) for _ in range(3)]
            for r in runs:
                json.loads(r[3])
            t = statistics.median(r[0] for r in runs)
            base = base or t
            print(f"| bandwise -j {jobs} | {t:.1f} ({base / t:.2f}x) | {size / 1e6 / t:.0f} | {size / 1e6 / t / jobs:.0f} | {max(r[1] for r in runs):.0f} | {max(r[2] for r in runs):.0f} |")
        if args.hta_python:
            t, peak_sum, peak_one, out = measured([args.hta_python, "-c", HTA, str(folder)])
            print(f"| HTA ({out.strip()}) | {t:.1f} | {size / 1e6 / t:.0f} | - | {peak_sum:.0f} | {peak_one:.0f} |")


if __name__ == "__main__":
    main()
