"""Checkpoints with torch.distributed.checkpoint (DCP): sharded, written by every rank at once.

A checkpoint `step-N/` holds the model, optimizer (flattened per parameter name, so pipeline
stages and model parts merge into one key space), router biases (model buffers), every rank's
RNG states, and `trainer.json` (step, data position, LR-scheduler state). It is written to a
hidden temporary directory first and renamed once every rank has finished (`os.replace` of a
directory is atomic on POSIX), so a crash mid-save never replaces the last good checkpoint.

Loading never unpickles arbitrary objects: tensor data is read by DCP with `weights_only=True`,
and DCP's metadata file, which is a pickle, is read through `_SafeReader`, whose unpickler only
resolves DCP's own metadata classes and a few plain containers.

Expert weights differ per expert-parallel rank under the same parameter name, so their keys carry
the EP rank (`...experts.w1@ep1`); DCP would otherwise treat them as replicas of one tensor.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from bandwise.errors import BandwiseError

_OPTS = StateDictOptions(flatten_optimizer_state_dict=True)
_SAFE_MODULE_PREFIXES = ("torch.distributed.checkpoint.",)
_SAFE_GLOBALS = {
    ("collections", "OrderedDict"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # maps a layout's name to torch.strided etc.
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "slice"),
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.startswith(_SAFE_MODULE_PREFIXES) or (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"checkpoint metadata refers to {module}.{name}, which is not allowed")


class _SafeReader(dcp.FileSystemReader):
    """DCP's file reader with the metadata pickle read by a restricted unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = ".metadata" if rank is None else f"__{rank}.metadata"
        with open(Path(self.path) / name, "rb") as f:
            metadata = _RestrictedUnpickler(io.BytesIO(f.read())).load()
        if not isinstance(metadata, Metadata):
            raise BandwiseError(f"{self.path}: checkpoint metadata is not DCP metadata")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _tag(sd: dict[str, Any], ep_rank: int | None) -> dict[str, Any]:
    if ep_rank is None:
        return sd
    return {(f"{k}@ep{ep_rank}" if ".experts.w" in k else k): v for k, v in sd.items()}


def _untag(sd: dict[str, Any]) -> dict[str, Any]:
    return {k.split("@ep")[0]: v for k, v in sd.items()}


def _state(parts: list[nn.Module], optimizers: list[torch.optim.Optimizer], ep_rank: int | None) -> dict[str, Any]:
    model: dict[str, Any] = {}
    optim: dict[str, Any] = {}
    for part, opt in zip(parts, optimizers):
        model.update(_tag(get_model_state_dict(part, options=_OPTS), ep_rank))
        optim.update(_tag(get_optimizer_state_dict(part, opt, options=_OPTS), ep_rank))
    rng = {f"rank{_rank()}.cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng[f"rank{_rank()}.cuda"] = torch.cuda.get_rng_state()
    return {"model": model, "optim": optim, "rng": rng}


def checkpoint_dirs(root: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under `root`, oldest first (temporary directories are ignored)."""
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith("step-") and (p / "trainer.json").is_file():
            try:
                found.append((int(p.name[5:]), p))
            except ValueError:
                continue
    return sorted(found)


def save(root: Path, step: int, parts: list[nn.Module], optimizers: list[torch.optim.Optimizer], trainer: dict[str, Any], *, ep_rank: int | None = None, keep: int = 2) -> Path:
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}"
    if _rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    if dist.is_initialized():
        dist.barrier()
    dcp.save(_state(parts, optimizers, ep_rank), storage_writer=dcp.FileSystemWriter(tmp))
    if _rank() == 0:
        (tmp / "trainer.json").write_text(json.dumps(trainer))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for _, old in checkpoint_dirs(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    if dist.is_initialized():
        dist.barrier()
    return final


def load(path: Path, parts: list[nn.Module], optimizers: list[torch.optim.Optimizer], *, ep_rank: int | None = None) -> dict[str, Any]:
    """Restore in place; returns the trainer state saved with it."""
    trainer = json.loads((path / "trainer.json").read_text())
    state = _state(parts, optimizers, ep_rank)
    dcp.load(state, storage_reader=_SafeReader(path))
    for part, opt in zip(parts, optimizers):
        names = set(get_model_state_dict(part, options=_OPTS))
        model_sd = {k: v for k, v in _untag(state["model"]).items() if k in names}
        set_model_state_dict(part, model_sd, options=_OPTS)
        osd_names = set(get_optimizer_state_dict(part, opt, options=_OPTS))
        optim_sd = {k: v for k, v in _untag(state["optim"]).items() if k in osd_names}
        set_optimizer_state_dict(part, opt, optim_sd, options=_OPTS)
    torch.set_rng_state(state["rng"][f"rank{_rank()}.cpu"])
    if f"rank{_rank()}.cuda" in state["rng"]:
        torch.cuda.set_rng_state(state["rng"][f"rank{_rank()}.cuda"])
    return trainer


LAYOUT_FIELDS = ("dp_replicate", "dp_shard", "tp", "pp", "ep", "virtual_stages", "schedule")


def check_layout(path: Path, strategy: Any) -> None:
    """Resume only into the layout that wrote the checkpoint: the per-rank keys (expert-parallel
    tags, pipeline stages, RNG states) are tied to it. Raises one line naming both layouts."""
    saved = json.loads((path / "trainer.json").read_text()).get("strategy") or {}
    now = strategy.to_dict()
    diff = [f"{k}={saved.get(k)!r}" for k in LAYOUT_FIELDS if k in saved and saved[k] != now[k]]
    if diff:
        raise BandwiseError(
            f"{path} was written with {', '.join(diff)} (now {', '.join(f'{k}={now[k]!r}' for k in LAYOUT_FIELDS if saved.get(k, now[k]) != now[k])}); "
            "resume with the same layout, or start a new --checkpoint-dir"
        )


def latest(root: Path) -> Path | None:
    found = checkpoint_dirs(root)
    return found[-1][1] if found else None
