"""SIGKILL a 2-rank training run at seeded random points, during training steps and during
checkpoint saves (inside DCP's write, between the write and the rename, while the oldest
checkpoint is removed), then resume it: the resumed run must start from the newest checkpoint
that was complete when the run died, and log the same losses, bit for bit, as a run that was
never interrupted (`_faults.py` says how points are named and fired).

By default the first 3 points of the seeded draw run (a kill while DCP writes a checkpoint, one in
training, one between a save's write and its rename); BANDWISE_FAULT_POINTS=20 runs 20 points, and
benchmarks/fault_matrix.py runs the same matrix and prints its tally.
"""

from __future__ import annotations

import os

import pytest

import _faults as F

pytestmark = pytest.mark.dist

POINTS = int(os.environ.get("BANDWISE_FAULT_POINTS", "3"))
SEED = int(os.environ.get("BANDWISE_FAULT_SEED", "0"))


def test_the_draw_covers_saves_and_steps(uninterrupted):
    timelines, losses = uninterrupted.timelines, uninterrupted.losses
    assert sorted(losses) == list(range(1, F.STEPS + 1))
    # every rank wrote its own shard of every checkpoint, and rank 0 renamed each one
    for n in range(F.EVERY, F.STEPS + 1, F.EVERY):
        for rank, labels in enumerate(timelines):
            assert f"open .tmp-step-{n}/__{rank}_0.distcp" in labels
        assert f"rename .tmp-step-{n} -> step-{n}" in timelines[0]
    points = F.choose_points(timelines, POINTS, SEED)
    assert len(set(points)) == len(points) == POINTS
    kinds = {F.stratum(p.label) for p in points}
    assert {"write", "training", "commit"} <= kinds


@pytest.mark.parametrize("i", range(POINTS))
def test_kill_then_resume_is_bit_identical(uninterrupted, tmp_path, i):
    point = F.choose_points(uninterrupted.timelines, POINTS, SEED)[i]
    outcome = F.try_point(tmp_path, point, uninterrupted)
    assert outcome.identical, f"{point}: {outcome.detail}"
    assert outcome.resumed_from == outcome.expected_from
