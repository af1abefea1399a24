"""Checkpoints with torch.distributed.checkpoint (DCP): sharded, written by every rank at once.

A checkpoint `step-N/` holds the model, optimizer (flattened per parameter name, so pipeline
stages and model parts merge into one key space), router biases (model buffers), every rank's
RNG states, `trainer.json` (step, data position, LR-scheduler state), and `manifest.json`: the
size and SHA-256 of every other file in it. It is written to a hidden temporary directory first
and renamed once every rank has finished and the manifest is written (`os.replace` of a
directory is atomic on POSIX), so a crash mid-save never replaces the last good checkpoint and a
`step-N/` was always complete when it appeared. Each rank hashes its share of the files, at save
and at resume.

Resuming checks the newest checkpoint against its manifest before reading anything in it: a file
missing, truncated, grown or changed, a file the manifest does not list, or metadata that does
not unpickle refuses it in one line. A refused checkpoint is moved aside (`step-N.refused`;
nothing is deleted) and the one before it is tried. A run without --resume refuses a directory
that already holds checkpoints, so it never replaces them; `save` never replaces an existing
`step-N/`, and old checkpoints past `keep` are renamed to a hidden name before they are removed,
so a crash during that removal leaves no half-deleted `step-N/`.

Loading never unpickles arbitrary objects: DCP's metadata file, which is a pickle, is read
through `_RestrictedUnpickler`, which resolves only DCP's own data classes and a few plain
types; tensor data and the optimizer's plain values (learning rate, betas) are read with
torch.load(weights_only=True) (`_SafeLoadPlanner`).

Expert weights differ per expert-parallel rank under the same parameter name, so their keys carry
the EP rank (`...experts.w1@ep1`); DCP would otherwise treat them as replicas of one tensor.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import io
import json
import os
import pickle
import shutil
import tempfile
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import (
    CheckpointException,
    DefaultLoadPlanner,
    DefaultSavePlanner,
)
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from bandwise.errors import BandwiseError
from bandwise.files import output_error

TRAINER = "trainer.json"
MANIFEST = "manifest.json"
METADATA = ".metadata"

_OPTS = StateDictOptions(flatten_optimizer_state_dict=True)
_DCP_PREFIX = "torch.distributed.checkpoint."
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
    """Resolves DCP's data classes (dataclasses and enums defined in torch.distributed.checkpoint),
    torch dtypes and the plain types above; nothing else, and no dotted name (pickle protocol 4
    resolves `module` + `a.b` as an attribute path, which would reach the modules DCP imports)."""

    def find_class(self, module: str, name: str) -> Any:
        if "." not in name:
            if (module, name) in _SAFE_GLOBALS:
                return super().find_class(module, name)
            if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
                return getattr(torch, name)
            if module.startswith(_DCP_PREFIX):
                obj = super().find_class(module, name)
                if isinstance(obj, type) and obj.__module__.startswith(_DCP_PREFIX) and (dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum)):
                    return obj
        raise pickle.UnpicklingError(f"refers to {module}.{name}, which is not allowed")


def _unpickle_metadata(data: bytes) -> Metadata:
    metadata = _RestrictedUnpickler(io.BytesIO(data)).load()
    if not isinstance(metadata, Metadata):
        raise pickle.UnpicklingError(f"holds a {type(metadata).__name__}, not DCP metadata")
    return metadata


class _SafeReader(dcp.FileSystemReader):
    """DCP's file reader with the metadata pickle read by a restricted unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = METADATA if rank is None else f"__{rank}{METADATA}"
        with open(Path(self.path) / name, "rb") as f:
            data = f.read()
        try:
            metadata = _unpickle_metadata(data)
        except pickle.UnpicklingError as exc:
            raise pickle.UnpicklingError(f"{Path(self.path) / name}: {exc}") from None
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class _SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner on a flat state dict, reading non-tensor values (the optimizer's
    learning rate, betas, ...) with torch.load(weights_only=True) instead of a full unpickle."""

    def __init__(self) -> None:
        super().__init__(flatten_state_dict=False, flatten_sharded_tensors=False)

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            self.state_dict[fqn] = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as exc:
            raise BandwiseError(f"{fqn} holds more than plain data ({_weights_only_detail(str(exc))})") from None


def _weights_only_detail(text: str) -> str:
    """The line of torch.load's weights-only refusal that says what was refused."""
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    if len(paragraphs) > 1 and paragraphs[0].startswith("Weights only load failed"):
        return paragraphs[1].splitlines()[0]
    return paragraphs[0].splitlines()[0] if paragraphs else "refused by torch.load(weights_only=True)"


# ---- collectives (plain calls without a process group) ------------------------------------
def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _gather(obj: Any) -> list[Any]:
    """`obj` from every rank, in rank order, on every rank."""
    if not dist.is_initialized():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


@contextmanager
def _one_process_quiet():
    """DCP warns on every save and load without a process group that it assumes one process;
    that is what one process means, so the warning is dropped there."""
    with warnings.catch_warnings():
        if not dist.is_initialized():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


def _on_rank0(fn: Callable[[], Any]) -> Any:
    """Run `fn` on rank 0; every rank returns its result or raises its error, so no rank waits
    for a peer that failed."""
    box: list[Any] = [None, None]
    if _rank() == 0:
        try:
            box = [fn(), None]
        except BandwiseError as exc:
            box = [None, ("user", str(exc))]
        except Exception as exc:  # still raised on every rank, as an internal error
            box = [None, ("internal", f"{type(exc).__name__}: {exc}")]
    if dist.is_initialized():
        dist.broadcast_object_list(box, src=0)
    result, error = box
    if error is not None:
        raise BandwiseError(error[1]) if error[0] == "user" else RuntimeError(error[1])
    return result


# ---- state ----------------------------------------------------------------------------------
def _tag(sd: dict[str, Any], ep_rank: int | None) -> dict[str, Any]:
    if ep_rank is None:
        return sd
    return {(f"{k}@ep{ep_rank}" if ".experts.w" in k else k): v for k, v in sd.items()}


def _untag(sd: dict[str, Any]) -> dict[str, Any]:
    return {k.split("@ep")[0]: v for k, v in sd.items()}


def _state(parts: list[nn.Module], optimizers: list[torch.optim.Optimizer], ep_rank: int | None) -> dict[str, Any]:
    """One flat dict: `model.<name>`, `optim.<name>` and `rng.rank<r>.<device>` keys."""
    state: dict[str, Any] = {}
    for part, opt in zip(parts, optimizers):
        state.update({f"model.{k}": v for k, v in _tag(get_model_state_dict(part, options=_OPTS), ep_rank).items()})
        state.update({f"optim.{k}": v for k, v in _tag(get_optimizer_state_dict(part, opt, options=_OPTS), ep_rank).items()})
    state[f"rng.rank{_rank()}.cpu"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state[f"rng.rank{_rank()}.cuda"] = torch.cuda.get_rng_state()
    return state


def _group(state: dict[str, Any], group: str) -> dict[str, Any]:
    prefix = f"{group}."
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def checkpoint_dirs(root: Path) -> list[tuple[int, Path]]:
    """The `step-N` directories under `root`, oldest first (temporary, refused and
    half-removed ones have other names and are left out)."""
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        if p.name.startswith("step-") and p.name[5:].isdigit() and p.is_dir():
            found.append((int(p.name[5:]), p))
    return sorted(found)


def prepare_root(root: Path, *, refuse_existing: bool) -> None:
    """Before training starts: make `root` (with its parents) and check that it takes files. A run
    that saves without --resume (`refuse_existing`) refuses a directory already holding checkpoints."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise output_error("checkpoints to", root, exc) from exc
    if refuse_existing:
        existing = checkpoint_dirs(root)
        if existing:
            names = ", ".join(p.name for _, p in existing)
            raise BandwiseError(
                f"--checkpoint-dir {root} already holds {names}; add --resume to continue from the newest, "
                "or choose an empty directory (a new run does not replace earlier checkpoints)"
            )


# ---- save ---------------------------------------------------------------------------------
def _digest(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()
    return {"bytes": path.stat().st_size, "sha256": sha}


def _write_json(path: Path, obj: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError behind a DCP failure (DCP wraps each rank's exception), if there is one."""
    if isinstance(exc, OSError):
        return exc
    for failure in (getattr(exc, "failures", None) or {}).values():
        inner = failure[0] if isinstance(failure, tuple) else failure
        if isinstance(inner, OSError):
            return inner
    return None


def _remove_old(root: Path, old: Path) -> None:
    hidden = root / f".old-{old.name}"
    try:
        shutil.rmtree(hidden, ignore_errors=True)
        os.replace(old, hidden)
    except OSError:
        return
    shutil.rmtree(hidden, ignore_errors=True)


def save(root: Path, step: int, parts: list[nn.Module], optimizers: list[torch.optim.Optimizer], trainer: dict[str, Any], *, ep_rank: int | None = None, keep: int = 2) -> Path:
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}"
    kept = f"earlier checkpoints in {root} are kept"

    def begin() -> None:
        if final.exists():
            raise BandwiseError(f"{final} exists already: another run may be writing to {root}; give each run its own --checkpoint-dir")
        try:
            shutil.rmtree(tmp, ignore_errors=True)  # left by a crash during an earlier save
            tmp.mkdir(parents=True)
        except OSError as exc:
            raise output_error("the checkpoint", final, exc, note=kept) from exc

    _on_rank0(begin)
    try:
        with _one_process_quiet():
            dcp.save(_state(parts, optimizers, ep_rank), storage_writer=dcp.FileSystemWriter(tmp), planner=DefaultSavePlanner(flatten_state_dict=False))
    except (Exception, CheckpointException) as exc:  # CheckpointException is a BaseException
        if _rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        os_exc = _os_error(exc)
        if os_exc is None:
            raise RuntimeError(f"saving {final} failed ({_failure(exc)})") from exc
        raise output_error("the checkpoint", final, os_exc, note=kept) from None
    # dcp.save returns on every rank after the metadata is written: all files are in place.
    names = sorted(p.name for p in tmp.iterdir() if p.is_file() and p.name not in (TRAINER, MANIFEST))
    try:
        mine: Any = {n: _digest(tmp / n) for n in names[_rank()::_world()]}
    except OSError as exc:
        mine = f"{exc.strerror}: {exc.filename}"
    shares = _gather(mine)

    def finish() -> None:
        errors = [s for s in shares if isinstance(s, str)]
        try:
            if errors:
                raise OSError(f"hashing the checkpoint's files failed ({errors[0]})")
            files = {k: v for s in shares for k, v in s.items()}
            _write_json(tmp / TRAINER, trainer)
            files[TRAINER] = _digest(tmp / TRAINER)
            _write_json(tmp / MANIFEST, {"format": 1, "step": step, "files": files})
            _fsync_dir(tmp)
            os.replace(tmp, final)
            _fsync_dir(root)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise output_error("the checkpoint", final, exc, note=kept) from exc
        for _, old in checkpoint_dirs(root)[:-keep]:
            _remove_old(root, old)
        for left in root.glob(".old-step-*"):  # a crash during an earlier removal left it
            shutil.rmtree(left, ignore_errors=True)

    _on_rank0(finish)
    return final


# ---- check and load -------------------------------------------------------------------------
def _read_manifest(path: Path) -> dict[str, dict[str, Any]]:
    f = path / MANIFEST
    if not f.is_file():
        raise BandwiseError(f"{MANIFEST} is missing (not finished by this version of bandwise, or damaged)")
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BandwiseError(f"{MANIFEST} does not read as JSON ({exc})") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise BandwiseError(f"{MANIFEST} has no 'files' table")
    for name, entry in files.items():
        if name in ("", ".", "..", MANIFEST) or os.sep in name or (os.altsep and os.altsep in name):
            raise BandwiseError(f"{MANIFEST} lists {name!r}, which is not a file of this checkpoint")
        if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int) and isinstance(entry.get("sha256"), str)):
            raise BandwiseError(f"{MANIFEST} entry for {name} has no byte count and SHA-256")
    for required in (METADATA, TRAINER):
        if required not in files:
            raise BandwiseError(f"{MANIFEST} does not list {required}")
    return files


def _check_file(path: Path, name: str, entry: dict[str, Any]) -> list[str]:
    p = path / name
    if not p.is_file():
        return [f"{name} is missing"]
    try:
        size = p.stat().st_size
        if size != entry["bytes"]:
            return [f"{name} is {size:,} bytes, the manifest says {entry['bytes']:,} ({'shorter' if size < entry['bytes'] else 'longer'} than written)"]
        if _digest(p)["sha256"] != entry["sha256"]:
            return [f"{name} has changed since it was written (its SHA-256 differs from the manifest's)"]
    except OSError as exc:
        return [f"{name} cannot be read ({exc.strerror})"]
    return []


def _check_contents(path: Path, listed: set[str]) -> list[str]:
    try:
        return _contents_problems(path, listed)
    except OSError as exc:
        return [f"{exc.filename or path} cannot be read ({exc.strerror})"]


def _contents_problems(path: Path, listed: set[str]) -> list[str]:
    found = [f"{p.name} is not in the manifest" for p in sorted(path.iterdir()) if p.name not in listed and p.name != MANIFEST]
    meta = path / METADATA
    if meta.is_file():
        try:
            _unpickle_metadata(meta.read_bytes())
        except Exception as exc:  # any damage: a restricted unpickle of stray bytes can fail many ways
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            found.append(f"{METADATA} does not load as DCP metadata: {detail}")
    trainer = path / TRAINER
    if trainer.is_file():
        try:
            state = json.loads(trainer.read_text(encoding="utf-8"))
            int(state["step"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            found.append(f"{TRAINER} does not hold a step")
    return found


def problems(path: Path) -> list[str]:
    """What is wrong with checkpoint `path` (empty: nothing found). Call on every rank: each
    hashes its share of the files, and every rank gets the whole list."""
    rank, world = _rank(), _world()
    found: list[str] = []
    try:
        files = _read_manifest(path)
    except BandwiseError as exc:  # the same on every rank
        found.append(str(exc))
        files = {}
    names = sorted(files)
    for name in names[rank::world]:
        found += _check_file(path, name, files[name])
    if rank == 0 and files:
        found += _check_contents(path, set(names))
    return [p for share in _gather(found) for p in share]


def load(path: Path, parts: list[nn.Module], optimizers: list[torch.optim.Optimizer], *, ep_rank: int | None = None) -> dict[str, Any]:
    """Restore in place; returns the trainer state saved with it."""
    trainer = json.loads((path / TRAINER).read_text(encoding="utf-8"))
    state = _state(parts, optimizers, ep_rank)
    with _one_process_quiet():
        dcp.load(state, storage_reader=_SafeReader(path), planner=_SafeLoadPlanner())
    model, optim = _untag(_group(state, "model")), _untag(_group(state, "optim"))
    for part, opt in zip(parts, optimizers):
        names = set(get_model_state_dict(part, options=_OPTS))
        set_model_state_dict(part, {k: v for k, v in model.items() if k in names}, options=_OPTS)
        osd_names = set(get_optimizer_state_dict(part, opt, options=_OPTS))
        set_optimizer_state_dict(part, opt, {k: v for k, v in optim.items() if k in osd_names}, options=_OPTS)
    rng = _group(state, "rng")
    torch.set_rng_state(rng[f"rank{_rank()}.cpu"])
    if f"rank{_rank()}.cuda" in rng:
        torch.cuda.set_rng_state(rng[f"rank{_rank()}.cuda"])
    return trainer


def _failure(exc: BaseException) -> str:
    """One line for a failed DCP call, which wraps each rank's exception in a CheckpointException."""
    inner, where = exc, ""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        rank, failure = min(failures.items())
        inner = failure[0] if isinstance(failure, tuple) else failure
        where = f"rank {rank}: "
    text = str(inner)
    detail = _weights_only_detail(text) if "Weights only load failed" in text else (text.strip().splitlines() or [""])[0]
    kind = "" if isinstance(inner, BandwiseError) else f"{type(inner).__name__}: "
    return f"{where}{kind}{detail}"


def _set_aside(path: Path) -> Path:
    for i in range(1, 1000):
        target = path.with_name(f"{path.name}.refused" + ("" if i == 1 else f"-{i}"))
        if not target.exists():
            try:
                path.rename(target)
            except OSError as exc:
                raise output_error("checkpoints to", path.parent, exc) from exc
            return target
    raise BandwiseError(f"{path.parent} holds too many refused copies of {path.name}; move them away")


def resume(root: Path, parts: list[nn.Module], optimizers: list[torch.optim.Optimizer], *, ep_rank: int | None, strategy: Any, warn: Callable[[str], None]) -> tuple[Path, dict[str, Any]] | None:
    """Load the newest checkpoint under `root` that passes its checks; returns it and its trainer
    state, or None when `root` holds none. Each refused one is reported through `warn` (one line)
    and moved aside; raises if every checkpoint is refused. Call on every rank."""
    found = checkpoint_dirs(root)
    if not found:
        return None
    refused = []
    for _, path in reversed(found):
        bad = problems(path)
        if not bad:
            check_layout(path, strategy)  # a different layout is the user's choice, not damage: raise
            try:
                trainer, local = load(path, parts, optimizers, ep_rank=ep_rank), None
            except (Exception, CheckpointException) as exc:  # CheckpointException is a BaseException
                trainer, local = None, f"loading failed ({_failure(exc)})"
            bad = [r for r in _gather(local) if r]
            if not bad:
                return path, trainer
        aside = _on_rank0(lambda: _set_aside(path))
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        warn(f"checkpoint {path} refused: {bad[0]}{more}; moved to {aside.name}, nothing deleted")
        refused.append(path.name)
    raise BandwiseError(
        f"--resume: none of the checkpoints under {root} passed its checks ({', '.join(refused)}; each refusal is printed "
        "above and the checkpoints are kept as step-N.refused); start again without --resume, or use another --checkpoint-dir"
    )


LAYOUT_FIELDS = ("dp_replicate", "dp_shard", "tp", "pp", "ep", "virtual_stages", "schedule")


def check_layout(path: Path, strategy: Any) -> None:
    """Resume only into the layout that wrote the checkpoint: the per-rank keys (expert-parallel
    tags, pipeline stages, RNG states) are tied to it. Raises one line naming both layouts."""
    saved = json.loads((path / TRAINER).read_text()).get("strategy") or {}
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
