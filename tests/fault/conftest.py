"""Fixtures of the fault tests: one uninterrupted one-process run and one on 2 ranks (which also
records each rank's events for the SIGKILL matrix); a test copies their checkpoints before
damaging or forging them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import _faults
import _one_process as one


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """One intra-op thread in this process for these tests: the models are tiny, a second thread
    on a busy 2-core machine only waits, and runs compared bit for bit need the same count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@dataclass(frozen=True)
class Base:
    ckpt: Path
    """step-2 and step-4, as the run left them (copy before changing anything)."""
    losses: dict[int, float]
    val: float | None


@pytest.fixture(scope="session")
def base(tmp_path_factory) -> Base:
    tmp = tmp_path_factory.mktemp("base")
    one.run(tmp / "ckpt", tmp / "m.jsonl", resume=False)
    losses, val = one.logged(tmp / "m.jsonl")
    assert sorted(losses) == list(range(1, one.STEPS + 1))
    assert sorted(p.name for p in (tmp / "ckpt").iterdir()) == ["step-2", "step-4"]
    return Base(tmp / "ckpt", losses, val)


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory) -> _faults.Reference:
    return _faults.reference(tmp_path_factory.mktemp("reference"))
