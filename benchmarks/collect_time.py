"""How long `pytest --co` of the whole suite takes, here and at an earlier commit, in the same run.

    python3 benchmarks/collect_time.py [BEFORE_COMMIT] [--runs 3]

The earlier commit is written out with `git archive` to a temporary folder; each tree collects with its
own `src` first on PYTHONPATH, in the environment this is started in (PYTHONDONTWRITEBYTECODE as set).
One unmeasured run of each tree first (the first run of a tree that keeps bytecode compiles it), then
`--runs` runs of each, interleaved, so that a shared machine's load falls on both alike. Reports wall
seconds and CPU seconds (user + system of the pytest process, from getrusage), each run and the median,
and the ratio before / after. CPU time is the figure to compare on a loaded machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collect(tree: Path) -> tuple[float, float, str]:
    """(wall s, CPU s, pytest's last line) of one `python3 -m pytest --co -q` in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"], cwd=tree, env=env,
                         capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if run.returncode != 0:
        raise SystemExit(f"pytest --co failed in {tree}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    return wall, cpu, run.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", nargs="?", default="5a9dcb1")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bandwise-collect-") as tmp:
        old = Path(tmp) / "before"
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], capture_output=True, check=True).stdout
        archive_path = Path(tmp) / "before.tar"
        archive_path.write_bytes(archive)
        with tarfile.open(archive_path) as tar:
            tar.extractall(old, filter="data")
        trees = {f"before ({args.before})": old, "after (this tree)": ROOT}
        for tree in trees.values():
            collect(tree)  # unmeasured
        seen: dict[str, list[tuple[float, float]]] = {k: [] for k in trees}
        for i in range(args.runs):
            for name, tree in trees.items():
                wall, cpu, line = collect(tree)
                seen[name].append((wall, cpu))
                print(f"run {i + 1} {name:24s} wall {wall:6.2f} s  cpu {cpu:6.2f} s  ({line})")
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in seen.items()}
    for k, (w, c) in med.items():
        print(f"median {k:24s} wall {w:6.2f} s  cpu {c:6.2f} s")
    (bw, bc), (aw, ac) = med.values()
    print(f"before / after: wall {bw / aw:.2f}x, cpu {bc / ac:.2f}x; "
          f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
