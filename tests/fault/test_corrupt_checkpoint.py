"""A damaged newest checkpoint (a file truncated, grown, one byte flipped, its metadata or manifest
deleted, its step changed) is refused on resume in one line that names it and what is wrong; the
run resumes from the checkpoint before it and ends with the same losses, bit for bit, as the run
that was never interrupted. Nothing is deleted or overwritten: the refused checkpoint is kept
aside as it was, the one before it is untouched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import _faults
import _one_process as one
from bandwise.cli.main import main
from bandwise.errors import BandwiseError
from bandwise.runtime import checkpoint as ckpt

CLI = ["train", "--model", "debug-moe", "--global-batch", "4", "--micro-batch", "1", "--seq-len", "64", "--steps", str(one.STEPS),
       "--warmup", "1", "--dtype", "fp32", "--num-workers", "0", "--checkpoint-every", str(one.EVERY), "-q"]


def _truncate(p: Path, size: int) -> None:
    with open(p, "r+b") as f:
        f.truncate(size)


def _flip(p: Path, at: float) -> None:
    data = bytearray(p.read_bytes())
    i = int(len(data) * at)
    data[i] ^= 0xFF
    p.write_bytes(bytes(data))


def truncated_data(step: Path) -> None:
    _truncate(step / "__0_0.distcp", (step / "__0_0.distcp").stat().st_size // 2)


def grown_data(step: Path) -> None:
    with open(step / "__0_0.distcp", "ab") as f:
        f.write(b"\0" * 16)


def flipped_tensor_byte(step: Path) -> None:
    _flip(step / "__0_0.distcp", 0.75)  # inside the tensors: loaded as-is, it would train on silently


def metadata_deleted(step: Path) -> None:
    (step / ".metadata").unlink()


def metadata_truncated(step: Path) -> None:
    _truncate(step / ".metadata", 100)


def manifest_deleted(step: Path) -> None:
    (step / "manifest.json").unlink()


def step_changed(step: Path) -> None:
    p = step / "trainer.json"
    text = p.read_text()
    assert '"step": 4' in text
    p.write_text(text.replace('"step": 4', '"step": 3'))  # same size: only the checksum tells


CASES = [
    (truncated_data, "__0_0.distcp is {half:,} bytes, the manifest says {size:,} (shorter than written)"),
    (flipped_tensor_byte, "__0_0.distcp has changed since it was written"),
    (metadata_deleted, ".metadata is missing"),
]
"""Each resumed in full: refused, the previous checkpoint used, the same losses to the end."""

CHECKED = [
    (grown_data, "__0_0.distcp is {grown:,} bytes, the manifest says {size:,} (longer than written)"),
    (metadata_truncated, ".metadata is 100 bytes"),
    (manifest_deleted, "manifest.json is missing"),
    (step_changed, "trainer.json has changed since it was written"),
]
"""Each checked by the same verification, without training (`problems`, which resume calls first)."""


def _expected(base, says: str) -> str:
    size = (base.ckpt / "step-4" / "__0_0.distcp").stat().st_size  # as written, measured here
    return says.format(size=size, half=size // 2, grown=size + 16)


@pytest.mark.parametrize(("damage", "says"), CASES, ids=[c[0].__name__ for c in CASES])
def test_damaged_newest_checkpoint_is_refused_and_the_previous_used(base, tmp_path, capsys, damage, says):
    root = one.copy(base.ckpt, tmp_path / "ckpt")
    damage(root / "step-4")
    damaged, previous = one.files(root / "step-4"), one.files(root / "step-2")
    capsys.readouterr()
    one.run(root, tmp_path / "resumed.jsonl", resume=True)
    refusals = [line for line in capsys.readouterr().err.splitlines() if "refused" in line]
    assert len(refusals) == 1, refusals
    assert refusals[0].startswith(f"bandwise: warning: checkpoint {root / 'step-4'} refused: {_expected(base, says)}")
    assert refusals[0].endswith("; moved to step-4.refused, nothing deleted")
    losses, val = one.logged(tmp_path / "resumed.jsonl")
    assert sorted(losses) == [3, 4]  # from step-2
    assert losses == {s: base.losses[s] for s in (3, 4)} and val == base.val  # exact floats
    assert one.files(root / "step-4.refused") == damaged  # kept aside as it was
    assert one.files(root / "step-2") == previous
    assert ckpt.problems(root / "step-4") == []  # the step-4 written again is whole


@pytest.mark.parametrize(("damage", "says"), CHECKED, ids=[c[0].__name__ for c in CHECKED])
def test_damage_is_found(base, tmp_path, damage, says):
    root = one.copy(base.ckpt, tmp_path / "ckpt")
    assert ckpt.problems(root / "step-4") == []
    damage(root / "step-4")
    found = ckpt.problems(root / "step-4")
    assert found and found[0].startswith(_expected(base, says))


@pytest.mark.dist
def test_two_ranks_refuse_together(uninterrupted, tmp_path, capfd):
    """On 2 ranks each hashes half the files: rank 1 checks __0_0.distcp, rank 0 prints the refusal,
    and both move on to the checkpoint before."""
    root = one.copy(uninterrupted.ckpt, tmp_path / "ckpt")
    assert sorted(p.name for p in root.iterdir()) == ["step-4", "step-6"]
    flipped_tensor_byte(root / "step-6")
    capfd.readouterr()
    _faults.run(tmp_path / "run", ckpt_dir=root, log=tmp_path / "resumed.jsonl", resume=True)
    refusals = [line for line in capfd.readouterr().err.splitlines() if "refused" in line]
    assert refusals == [f"bandwise: warning: checkpoint {root / 'step-6'} refused: __0_0.distcp has changed since it was written "
                        "(its SHA-256 differs from the manifest's); moved to step-6.refused, nothing deleted"]
    losses, val = _faults.logged(tmp_path / "resumed.jsonl")
    assert losses == {s: uninterrupted.losses[s] for s in (5, 6)} and val == uninterrupted.val


def test_every_checkpoint_damaged_is_one_error(base, tmp_path, capsys):
    root = one.copy(base.ckpt, tmp_path / "ckpt")
    truncated_data(root / "step-4")
    metadata_deleted(root / "step-2")
    before = one.files(root)
    with pytest.raises(SystemExit) as exc:
        main([*CLI, "--checkpoint-dir", str(root), "--resume"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2
    assert [line.split(" refused:")[0] for line in lines[:2]] == [
        f"bandwise: warning: checkpoint {root / 'step-4'}", f"bandwise: warning: checkpoint {root / 'step-2'}"]
    assert len(lines) == 3 and lines[2].startswith(f"bandwise: error: --resume: none of the checkpoints under {root} passed")
    after = one.files(root)
    assert sorted(after) == sorted(k.replace("step-4/", "step-4.refused/").replace("step-2/", "step-2.refused/") for k in before)
    assert list(after.values()) == [before[k.replace(".refused", "")] for k in after]


def test_a_new_run_does_not_replace_existing_checkpoints(base, tmp_path, capsys):
    root = one.copy(base.ckpt, tmp_path / "ckpt")
    before = one.files(root)
    with pytest.raises(SystemExit) as exc:
        main([*CLI, "--checkpoint-dir", str(root)])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.strip() == (f"bandwise: error: --checkpoint-dir {root} already holds step-2, step-4; add --resume to continue "
                           "from the newest, or choose an empty directory (a new run does not replace earlier checkpoints)")
    assert one.files(root) == before


def test_save_never_replaces_an_existing_step(tmp_path):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    (tmp_path / "step-4").mkdir()
    (tmp_path / "step-4" / "keep.txt").write_text("earlier")
    with pytest.raises(BandwiseError, match=r"step-4 exists already: another run may be writing"):
        ckpt.save(tmp_path, 4, [model], [opt], {"step": 4})
    assert sorted(os.listdir(tmp_path)) == ["step-4"] and (tmp_path / "step-4" / "keep.txt").read_text() == "earlier"
