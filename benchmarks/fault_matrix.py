"""The SIGKILL matrix of tests/fault/test_sigkill_matrix.py, with its tally.

A 2-rank training run (gloo, CPU, fp32, FSDP + EP on debug-moe, 6 steps, a checkpoint every 2)
is killed at each of N seeded random points, 6 in 10 inside a checkpoint save (while DCP writes
the files, between the write and the rename, while the oldest checkpoint is removed), then resumed
with --resume semantics.
A point counts as bit-identical when the resumed run started right after the newest checkpoint
complete at the kill, and every loss it logged and its validation loss equal the uninterrupted
run's exactly (`tests/fault/_faults.py` names the points and how each is fired).

    python benchmarks/fault_matrix.py [--points 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fault"))
import _faults as F  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bandwise-faults-") as tmp:
        ref = F.reference(Path(tmp) / "reference")
        points = F.choose_points(ref.timelines, args.points, args.seed)
        outcomes = []
        for i, point in enumerate(points):
            t = time.perf_counter()
            o = F.try_point(Path(tmp) / f"point{i}", point, ref)
            outcomes.append(o)
            print(f"{i + 1:>2}. rank {point.rank} at {point.label!r} [{F.stratum(point.label)}]: resumed after step-{o.resumed_from} "
                  f"(newest complete: step-{o.expected_from}), {o.detail} ({time.perf_counter() - t:.1f} s)", flush=True)
    seconds = time.perf_counter() - t0
    ok = sum(o.identical for o in outcomes)
    saves = sum(p.during_save for p in points)
    mid = sum(F.is_mid_save(p.label) for p in points)
    print(f"{len(points)} points (seed {args.seed}): {saves} during a checkpoint save ({mid} before its rename), "
          f"{len(points) - saves} during training")
    print(f"{ok}/{len(points)} bit-identical; {seconds:.0f} s in all")
    sys.exit(0 if ok == len(points) else 1)


if __name__ == "__main__":
    main()
