"""The cluster a job measures over itself (`runtime.compare.runtime_cluster`) is one cluster: every rank
prices with the same figures, whatever its own timings read (a rank that reaches a timed collective first
waits in it for the others)."""

from __future__ import annotations

import pytest
from _train_harness import spawn

pytestmark = pytest.mark.dist


def test_every_rank_gets_the_average_of_the_ranks_figures(tmp_path):
    world = 2
    results = spawn("runtime_cluster_of", world, tmp_path)
    first = results[0]
    for r in results[1:]:
        assert r == pytest.approx(first, rel=1e-12)
    # rank r passed peak (r + 1) GFLOP/s and attention 0.1 (r + 1): each gets the ranks' mean
    assert first["peak"] == pytest.approx(1e9 * (1 + 2) / 2)
    assert first["attention"] == pytest.approx(0.1 * (1 + 2) / 2)
    assert first["bandwidth"] > 0 and first["latency"] > 0 and first["hbm"] > 0
