"""The planner's speed, paired against another checkout: whole processes, alternating, on one machine.

    git worktree add /tmp/b3 b3bb08d
    python benchmarks/planner_speed.py --before /tmp/b3/src --runs 5

Each round runs the same command once with the other checkout's `src` and once with this one's,
as fresh `python -m bandwise` processes, and reads wall time, and user and system time and peak RSS from the
child's own rusage (`os.wait4`). The medians and their ratio are printed; the two sides share the
machine's load, so the ratio holds where the absolute seconds do not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMANDS = {
    "plan DeepSeek-V3 x 2048 H800": ["plan", "--model", "deepseek-v3", "--cluster", "h800", "--devices", "2048", "--seq-len", "4096",
                                     "--global-batch", "15360", "--json"],
    "compare (default)": ["compare", "--json"],
}


def run(src: Path, argv: list[str]) -> tuple[float, float, float, float]:
    """(wall s, user s, system s, peak RSS MB) of one fresh process, from its own rusage (os.wait4)."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bandwise", *argv], env={**os.environ, "PYTHONPATH": str(src)}, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode} with {src}")
    return wall, usage.ru_utime, usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="the other checkout's src folder")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    sides = {"before": args.before.resolve(), "after": (HERE.parent / "src").resolve()}
    for name, argv in COMMANDS.items():
        got: dict[str, list[tuple[float, float, float, float]]] = {side: [] for side in sides}
        for _ in range(args.runs):
            for side, src in sides.items():
                got[side].append(run(src, argv))
        med = {side: [statistics.median(x[i] for x in rows) for i in range(3)] for side, rows in got.items()}
        rss = {side: max(x[3] for x in rows) for side, rows in got.items()}
        print(f"{name}: median of {args.runs}, wall / user / sys s, peak RSS MB")
        for side in sides:
            w, u, s = med[side]
            print(f"  {side:6s} {w:5.2f} / {u:5.2f} / {s:4.2f}   {rss[side]:6.0f}")
        print(f"  after / before: {med['after'][0] / med['before'][0]:.2f}x wall")


if __name__ == "__main__":
    main()
