"""The multi-process harness reruns a job once when a rank aborts (SIGABRT), and only once."""

from __future__ import annotations

import pytest
import torch.multiprocessing as mp
from _train_harness import spawn

pytestmark = pytest.mark.dist


def test_a_job_whose_rank_aborts_once_is_run_again(tmp_path):
    marker = tmp_path / "aborts"
    results = spawn("abort_once", 2, tmp_path / "out", marker=str(marker), times=1)
    assert [r["rank"] for r in results] == [0, 1] and marker.read_text() == "1"


def test_a_second_abort_fails(tmp_path):
    marker = tmp_path / "aborts"
    with pytest.raises(mp.ProcessExitedException):
        spawn("abort_once", 2, tmp_path / "out", marker=str(marker), times=2)
    assert marker.read_text() == "2"
