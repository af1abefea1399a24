"""Forged pickles in a checkpoint never run. Each payload would create a marker directory when
unpickled; every test first shows that plain unpickling does create it (so the payload is live),
then that resuming refuses the forged checkpoint in one line, falls back to the one before, ends
with the same losses, and the marker does not exist. The forger may also rewrite manifest.json
to vouch for the forged files: then the checksums pass and the unpickler alone must refuse."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import pytest
import torch

import _one_process as one
from bandwise.runtime import checkpoint as ckpt

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


class Payload:
    """Unpickled, calls os.mkdir(marker)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _u(s: str) -> bytes:
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b  # SHORT_BINUNICODE


def dotted_payload(marker: Path) -> bytes:
    """Protocol 4: module `torch.distributed.checkpoint.filesystem`, name `os.mkdir`, called with
    (marker,). pickle resolves a dotted name as an attribute path, so a check on the module name
    alone lets os.mkdir through DCP's own module."""
    return b"\x80\x04" + _u("torch.distributed.checkpoint.filesystem") + _u("os.mkdir") + b"\x93" + _u(str(marker)) + b"\x85R."


def legacy_torch_payload(marker: Path, size: int) -> bytes:
    """torch.save's pre-zip format holding a Payload, zero-padded to `size` bytes (unpickling stops
    before the padding)."""
    buf = io.BytesIO()
    torch.save(Payload(marker), buf, _use_new_zipfile_serialization=False)
    data = buf.getvalue()
    assert len(data) <= size
    return data + b"\0" * (size - len(data))


def _live(payload: bytes, marker: Path, load) -> None:
    """The payload runs when loaded without restrictions."""
    load(payload)
    assert marker.is_dir()
    marker.rmdir()


def _resume(base, tmp_path: Path, capsys) -> tuple[str, Path]:
    """Resume from the (forged) copy; returns the one refusal line."""
    capsys.readouterr()
    one.run(tmp_path / "ckpt", tmp_path / "resumed.jsonl", resume=True)
    refusals = [line for line in capsys.readouterr().err.splitlines() if "refused" in line]
    assert len(refusals) == 1, refusals
    losses, val = one.logged(tmp_path / "resumed.jsonl")
    assert losses == {s: base.losses[s] for s in (3, 4)} and val == base.val  # from step-2, exact
    return refusals[0], tmp_path / "ckpt"


def test_restricted_unpickler_refuses_code(tmp_path):
    marker = tmp_path / "ran"
    plain = pickle.dumps(Payload(marker))
    dotted = dotted_payload(marker)
    not_data = b"\x80\x04" + _u("torch.distributed.checkpoint.filesystem") + _u("FileSystemWriter") + b"\x93" + _u(str(marker)) + b"\x85R."
    for payload in (plain, dotted):
        _live(payload, marker, pickle.loads)
    for payload, names in ((plain, "posix.mkdir"), (dotted, "torch.distributed.checkpoint.filesystem.os.mkdir"),
                           (not_data, "torch.distributed.checkpoint.filesystem.FileSystemWriter")):
        with pytest.raises(pickle.UnpicklingError, match=f"refers to {names}, which is not allowed"):
            ckpt._RestrictedUnpickler(io.BytesIO(payload)).load()
    # the rank-local metadata name DCP falls back to goes through the same unpickler
    (tmp_path / "__0.metadata").write_bytes(plain)
    with pytest.raises(pickle.UnpicklingError, match="posix.mkdir"):
        ckpt._SafeReader(tmp_path).read_metadata(rank=0)
    assert not marker.exists()


@pytest.mark.parametrize("resigned", [False, True], ids=["manifest-stale", "manifest-rewritten"])
@pytest.mark.parametrize("kind", ["plain", "dotted"])
def test_forged_metadata_is_found(base, tmp_path, kind, resigned):
    marker = tmp_path / "ran"
    payload = pickle.dumps(Payload(marker)) if kind == "plain" else dotted_payload(marker)
    _live(payload, marker, pickle.loads)
    step = one.copy(base.ckpt, tmp_path / "ckpt") / "step-4"
    (step / ".metadata").write_bytes(payload)
    if resigned:
        one.resign(step)
    found = ckpt.problems(step)
    name = "posix.mkdir" if kind == "plain" else "torch.distributed.checkpoint.filesystem.os.mkdir"
    refusal = f".metadata does not load as DCP metadata: refers to {name}, which is not allowed"
    if resigned:
        assert found == [refusal]  # the checksums pass: the unpickler alone refuses
    else:
        assert found[0].startswith(".metadata is ") and "(shorter than written)" in found[0] and refusal in found
    assert not marker.exists()


def test_forged_metadata_is_refused_on_resume(base, tmp_path, capsys):
    marker = tmp_path / "ran"
    payload = dotted_payload(marker)
    step = one.copy(base.ckpt, tmp_path / "ckpt") / "step-4"
    (step / ".metadata").write_bytes(payload)
    one.resign(step)
    line, root = _resume(base, tmp_path, capsys)
    assert line == (f"bandwise: warning: checkpoint {step} refused: .metadata does not load as DCP metadata: refers to "
                    "torch.distributed.checkpoint.filesystem.os.mkdir, which is not allowed; moved to step-4.refused, nothing deleted")
    assert (root / "step-4.refused" / ".metadata").read_bytes() == payload
    assert not marker.exists()


def test_forged_optimizer_value_is_refused(base, tmp_path, capsys):
    """A non-tensor value in a .distcp file (the optimizer's learning rate) is read with
    torch.load(weights_only=True); DCP's own planner would read it with weights_only=False."""
    marker = tmp_path / "ran"
    step = one.copy(base.ckpt, tmp_path / "ckpt") / "step-4"
    metadata = ckpt._unpickle_metadata((step / ".metadata").read_bytes())
    index, where = next((i, s) for i, s in metadata.storage_data.items() if i.fqn.startswith("optim.param_groups.") and i.fqn.endswith(".lr"))
    payload = legacy_torch_payload(marker, where.length)
    _live(payload, marker, lambda b: torch.load(io.BytesIO(b), weights_only=False))
    data = bytearray((step / where.relative_path).read_bytes())
    data[where.offset : where.offset + where.length] = payload
    (step / where.relative_path).write_bytes(bytes(data))
    one.resign(step)
    line, _ = _resume(base, tmp_path, capsys)
    assert f"refused: loading failed (rank 0: {index.fqn} holds more than plain data (Trying to load unsupported GLOBAL posix.mkdir" in line
    assert not marker.exists()


def test_pickles_outside_the_manifest_are_never_read(base, tmp_path):
    marker = tmp_path / "ran"
    payload = pickle.dumps(Payload(marker))
    root = one.copy(base.ckpt, tmp_path / "ckpt")
    (root / "step-4" / "__0.metadata").write_bytes(payload)  # DCP's rank-local metadata name
    buf = io.BytesIO()
    torch.save(Payload(marker), buf)
    (root / "step-4" / "extra.pt").write_bytes(buf.getvalue())
    assert ckpt.problems(root / "step-4") == ["__0.metadata is not in the manifest", "extra.pt is not in the manifest"]
    (root / ".tmp-step-6").mkdir()  # an unfinished save is never a checkpoint
    (root / ".tmp-step-6" / ".metadata").write_bytes(payload)
    assert [p.name for _, p in ckpt.checkpoint_dirs(root)] == ["step-2", "step-4"]
    assert not marker.exists()


def test_resume_reads_tensors_and_values_with_weights_only(base, tmp_path, monkeypatch):
    calls = []
    real = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    one.copy(base.ckpt, tmp_path / "ckpt")
    one.run(tmp_path / "ckpt", tmp_path / "resumed.jsonl", resume=True)
    assert len(calls) > 100 and set(calls) == {True}  # every tensor and every optimizer value
