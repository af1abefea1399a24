"""Checkpoint/resume is exact: a run SIGKILLed between checkpoints and resumed logs the same
losses, bit for bit, as a run that was never interrupted (CPU, fp32, 2 ranks, FSDP + EP, MoE
with aux-free biases, DataLoader workers). A half-written checkpoint left by the crash is
ignored, and checkpoint metadata is never unpickled beyond DCP's own classes."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from _train_harness import spawn

pytestmark = pytest.mark.dist

LAYOUT = {"dp_shard": 2, "ep": 2, "micro_batch": 1, "global_batch": 4}


def _losses(log: Path) -> dict[int, float]:
    """Last logged training loss per step (a resumed run appends to the same file)."""
    out = {}
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec:
            out[rec["step"]] = rec["loss"]
    return out


def test_sigkill_then_resume_is_bit_identical(tmp_path):
    common = dict(layout=LAYOUT, steps=6, every=2)
    ckpt_b, log_b, log_a = tmp_path / "ckpt_b", tmp_path / "b.jsonl", tmp_path / "a.jsonl"
    with pytest.raises(mp.ProcessExitedException):
        spawn("train_checkpointed", 2, tmp_path / "b1", ckpt_dir=str(ckpt_b), log=str(log_b), resume=False, kill_at=5, **common)
    assert sorted(_losses(log_b)) == [1, 2, 3, 4, 5]  # killed after step 5, last checkpoint at 4
    assert sorted(p.name for p in ckpt_b.iterdir()) == ["step-2", "step-4"]
    (ckpt_b / ".tmp-step-6").mkdir()  # what a crash during a save would leave behind
    (ckpt_b / ".tmp-step-6" / ".metadata").write_bytes(b"garbage")

    resume = dict(ckpt_dir=str(ckpt_b), log=str(log_b), resume=True, **common)
    straight = dict(ckpt_dir=str(tmp_path / "ckpt_a"), log=str(log_a), resume=False, **common)
    spawn("in_turn", 2, tmp_path / "b2", runs=[("train_checkpointed", resume), ("train_checkpointed", straight)])
    uninterrupted = _losses(log_a)
    assert sorted(uninterrupted) == [1, 2, 3, 4, 5, 6]
    assert _losses(log_b) == uninterrupted  # exact float equality, every step


def test_checkpoint_metadata_is_not_unpickled_freely(tmp_path):
    from bandwise.runtime.checkpoint import _SafeReader

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo unsafe",))

    (tmp_path / ".metadata").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(pickle.UnpicklingError, match="system"):
        _SafeReader(tmp_path).read_metadata()


def test_resume_into_another_layout_is_refused(tmp_path):
    from bandwise.errors import BandwiseError
    from bandwise.runtime.checkpoint import check_layout
    from bandwise.specs.strategy import Strategy

    saved = Strategy(dp_shard=2, ep=2)
    (tmp_path / "trainer.json").write_text(json.dumps({"step": 4, "strategy": saved.to_dict()}))
    check_layout(tmp_path, saved)  # same layout: fine
    with pytest.raises(BandwiseError, match=r"written with dp_shard=2, tp=1, ep=2 \(now dp_shard=1, tp=2, ep=1\)"):
        check_layout(tmp_path, Strategy(tp=2))


@pytest.mark.parametrize("layout", [
    {"dp_shard": 2, "micro_batch": 1, "global_batch": 4},  # one tied matrix in one FSDP unit
    {"pp": 2, "micro_batch": 1, "global_batch": 4, "schedule": "1F1B"},  # its two pipeline copies
], ids=["fsdp", "pp"])
def test_a_tied_model_resumes_exactly(tmp_path, layout):
    """A tied model (`runtime/parallel/tied.py`) killed after step 3 and resumed from its step-2
    checkpoint trains steps 3 and 4 as a run that never stopped: the shared matrix, or each
    pipeline copy, and its optimizer state come back whole."""
    tied = dict(layout=layout, steps=4, every=2, model="debug", model_fields={"tied_embeddings": True})
    ckpt_b, log_b, log_a = tmp_path / "ckpt_b", tmp_path / "b.jsonl", tmp_path / "a.jsonl"
    with pytest.raises(mp.ProcessExitedException):
        spawn("train_checkpointed", 2, tmp_path / "b1", ckpt_dir=str(ckpt_b), log=str(log_b), resume=False, kill_at=3, **tied)
    resumed = dict(ckpt_dir=str(ckpt_b), log=str(log_b), resume=True, **tied)
    straight = dict(ckpt_dir=str(tmp_path / "ckpt_a"), log=str(log_a), resume=False, **tied)
    spawn("in_turn", 2, tmp_path / "b2", runs=[("train_checkpointed", resumed), ("train_checkpointed", straight)])
    uninterrupted = _losses(log_a)
    assert sorted(uninterrupted) == [1, 2, 3, 4]
    assert _losses(log_b) == uninterrupted  # exact float equality, every step
