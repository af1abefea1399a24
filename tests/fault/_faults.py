"""Kill a training run at a chosen point, resume it, and compare it with a run never interrupted.

Training runs on 2 gloo ranks forked from this process (CPU, fp32, FSDP + EP on `debug-moe`),
saving a checkpoint every `EVERY` steps. A point is one event in one rank's own sequence,
recorded once in an uninterrupted run:

  fwd S.M                a forward pass begins (micro-batch M of step S; after the last step,
                         the validation passes continue the count);
  step S                 step S is done (its checkpoint saved, its metrics line written);
  <op> <path>            a file operation under the checkpoint directory, seen by a Python audit
                         hook before it happens: `open` for writing, `mkdir`, `rename` (also
                         os.replace), `remove`, `rmtree`; the path is relative to that directory.

A label seen again in the same run gets ` #2`, ` #3`, ... At its point the rank SIGKILLs every
rank of the run, itself last: the whole job dies at once, mid-write where a peer was writing.
No production code knows about any of this.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.modules.module import register_module_forward_pre_hook

# Imported here, before any rank is forked: each forked rank then starts with them loaded.
from bandwise.runtime.data import DataConfig
from bandwise.runtime.model import Transformer
from bandwise.runtime.train import TrainConfig, train
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy

WORLD = 2
STEPS = 6
EVERY = 2
LAYOUT = {"dp_shard": 2, "ep": 2, "micro_batch": 1, "global_batch": 4}
TRAIN = dict(seq_len=64, steps=STEPS, lr=3e-3, warmup=1, dtype="fp32", eval_batches=1, progress=False, compare=False)
AUDITED = {"open": "open", "os.mkdir": "mkdir", "os.rename": "rename", "os.remove": "remove", "shutil.rmtree": "rmtree"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Events:
    """This rank's event labels, in order; fires the kill at `kill`."""

    def __init__(self, root: Path, kill: str | None, pid_dir: Path) -> None:
        self.root = os.path.abspath(root)
        self.kill = kill
        self.pid_dir = pid_dir
        self.seen: dict[str, int] = {}
        self.labels: list[str] = []
        self.step = 1
        self.micro = 0

    def __call__(self, label: str) -> None:
        if ".probe-" in label:  # the trainer's check that the directory takes files: a random name
            return
        n = self.seen[label] = self.seen.get(label, 0) + 1
        label = label if n == 1 else f"{label} #{n}"
        self.labels.append(label)
        if label == self.kill:
            self.kill_all()

    def kill_all(self) -> None:
        me = os.getpid()
        pids = [int(p.read_text()) for p in self.pid_dir.glob("*.pid")]
        for pid in pids:
            if pid != me:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        os.kill(me, signal.SIGKILL)

    def rel(self, path: Any) -> str | None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, (str, os.PathLike)):
            return None
        full = os.path.abspath(os.fspath(path))
        if not full.startswith(self.root + os.sep):
            return None
        return full[len(self.root) + 1 :]

    def audit(self, event: str, args: tuple) -> None:
        op = AUDITED.get(event)
        if op is None:
            return
        if op == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & WRITE_FLAGS)
            if not writing:
                return
            rel = self.rel(path)
            if rel is not None:
                self(f"open {rel}")
        elif op == "rename":
            src, dst = self.rel(args[0]), self.rel(args[1])
            if src is not None:
                self(f"rename {src} -> {dst}")
        else:
            rel = self.rel(args[0])
            if rel is not None:
                self(f"{op} {rel}")

    def forward(self, module: torch.nn.Module, args: Any) -> None:
        if isinstance(module, Transformer):
            self(f"fwd {self.step}.{self.micro}")
            self.micro += 1

    def on_step(self, rec: dict[str, Any]) -> None:
        self(f"step {rec['step']}")
        self.step, self.micro = rec["step"] + 1, 0


def _worker(rank: int, world: int, port: int, args: dict[str, Any], out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    pid_dir = Path(out_dir, "pids")
    pid_dir.mkdir(exist_ok=True)
    Path(pid_dir, f"rank{rank}.pid").write_text(str(os.getpid()))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = _train(rank, pid_dir=pid_dir, **args)
    except Exception:
        result = {"error": traceback.format_exc()}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _train(rank: int, *, pid_dir: Path, ckpt_dir: str, log: str, resume: bool, kill: tuple[int, str] | None) -> dict[str, Any]:
    events = Events(Path(ckpt_dir), kill[1] if kill and kill[0] == rank else None, pid_dir)
    Path(ckpt_dir).mkdir(parents=True, exist_ok=True)
    sys.addaudithook(events.audit)  # this forked rank only; it dies or exits after the run
    register_module_forward_pre_hook(events.forward)
    cfg = TrainConfig(**TRAIN, data=DataConfig(num_workers=0), checkpoint_dir=ckpt_dir, checkpoint_every=EVERY, resume=resume, log=log)
    train(get_model("debug-moe"), Strategy.from_dict(LAYOUT), cfg, on_step=events.on_step)
    return {"labels": events.labels}


def run(tmp: Path, *, ckpt_dir: Path, log: Path, resume: bool, kill: tuple[int, str] | None = None) -> list[dict[str, Any]] | None:
    """One run on WORLD ranks; each rank's result, or None when the run was killed."""
    tmp.mkdir(parents=True, exist_ok=True)
    args = dict(ckpt_dir=str(ckpt_dir), log=str(log), resume=resume, kill=kill)
    try:
        mp.start_processes(_worker, args=(WORLD, free_port(), args, str(tmp)), nprocs=WORLD, join=True, start_method="fork")
    except mp.ProcessExitedException:
        return None
    results = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(WORLD)]
    for r in results:
        if "error" in r:
            raise AssertionError(r["error"])
    return results


def logged(log: Path) -> tuple[dict[int, float], float | None]:
    """(loss per step, validation loss) from a metrics file; a step logged twice keeps the last."""
    losses, val = {}, None
    if log.exists():
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if "loss" in rec:
                losses[rec["step"]] = rec["loss"]
            if "val_loss" in rec and "loss" not in rec:
                val = rec["val_loss"]
    return losses, val


# ---- the matrix ---------------------------------------------------------------------------
def is_save(label: str) -> bool:
    return not label.startswith(("fwd ", "step "))


def is_mid_save(label: str) -> bool:
    """Before the save's rename: the checkpoint being written is not complete."""
    return is_save(label) and ".tmp-step-" in label.split(" -> ")[0]


def complete_at(timelines: list[list[str]], rank: int, label: str) -> list[int]:
    """Checkpoints complete when `rank` reaches `label` in the uninterrupted order. Rank 0 renames
    step-N after every rank has written and hashed its files, and no rank leaves a save before the
    rename is done: on rank 0 a checkpoint is complete once its rename happened (the audit hook
    fires before it), on another rank once its `step N` event is reached."""
    before = timelines[rank][: timelines[rank].index(label) + (rank != 0)]
    done = []
    for n in range(EVERY, STEPS + 1, EVERY):
        marker = f"rename .tmp-step-{n} -> step-{n}" if rank == 0 else f"step {n}"
        if marker in before:
            done.append(n)
    return done


def _validation(label: str) -> bool:
    """A forward pass of the validation after the last step, but its first."""
    return label.startswith(f"fwd {STEPS + 1}.") and label != f"fwd {STEPS + 1}.0"


def stratum(label: str) -> str:
    """Where in the run a label falls:
    write         DCP writing the checkpoint's files (a rank's shard, the metadata);
    commit        after DCP, before the rename: trainer.json, manifest.json, the rename itself;
    begin         clearing and making the save's temporary directory;
    after-rename  removing the oldest checkpoint once the new one is in place;
    training      forward passes and step ends (and the first validation pass)."""
    if not is_save(label):
        return "training"
    if not is_mid_save(label):
        return "after-rename"
    path = label.split(" ", 1)[1].split(" -> ")[0]
    if "/" not in path:
        return "commit" if label.startswith("rename ") else "begin"
    return "commit" if path.endswith(("/trainer.json", "/manifest.json")) else "write"


PATTERN = ("write", "training", "commit", "training", "write", "begin", "training", "after-rename", "training", "write")
"""The stratum of the i-th point (repeated): 6 in 10 fall inside a save, 5 of them before its
rename; the first 3 points are a kill during DCP's write, one in training, one between the write
and the rename."""


@dataclass(frozen=True)
class Point:
    rank: int
    label: str

    @property
    def during_save(self) -> bool:
        return is_save(self.label)


def choose_points(timelines: list[list[str]], n: int, seed: int) -> list[Point]:
    """`n` distinct points drawn with `seed`, the i-th from stratum PATTERN[i % 10] (another
    stratum when that one is used up); the draw depends only on the labels, not on timing."""
    rng = random.Random(seed)
    pools: dict[str, list[tuple[int, str]]] = {}
    for r, labels in enumerate(timelines):
        for label in labels:
            if not _validation(label):
                pools.setdefault(stratum(label), []).append((r, label))
    for pool in pools.values():
        pool.sort()
        rng.shuffle(pool)
    out = []
    for i in range(n):
        order = [PATTERN[i % len(PATTERN)], *PATTERN]
        pool = next((pools[s] for s in order if pools.get(s)), None)
        if pool is None:
            break
        out.append(Point(*pool.pop()))
    return out


@dataclass
class Outcome:
    point: Point
    resumed_from: int
    expected_from: int
    identical: bool
    detail: str


@dataclass
class Reference:
    timelines: list[list[str]]
    """Each rank's labels, in order."""
    losses: dict[int, float]
    val: float | None
    ckpt: Path
    """The checkpoints it left (step-4 and step-6); copy before changing anything."""


def reference(tmp: Path) -> Reference:
    results = run(tmp / "ref-run", ckpt_dir=tmp / "ref-ckpt", log=tmp / "ref.jsonl", resume=False)
    assert results is not None
    losses, val = logged(tmp / "ref.jsonl")
    return Reference([r["labels"] for r in results], losses, val, tmp / "ref-ckpt")


def try_point(tmp: Path, point: Point, ref: Reference) -> Outcome:
    """Kill at `point`, resume, and compare with the uninterrupted run."""
    timelines, ref_losses, ref_val = ref.timelines, ref.losses, ref.val
    ckpt, log_a, log_b = tmp / "ckpt", tmp / "killed.jsonl", tmp / "resumed.jsonl"
    killed = run(tmp / "a", ckpt_dir=ckpt, log=log_a, resume=False, kill=(point.rank, point.label))
    if killed is not None:
        return Outcome(point, -1, -1, False, "the run was not killed: the point was never reached")
    expected = max(complete_at(timelines, point.rank, point.label), default=0)
    on_disk = sorted(int(p.name[5:]) for p in ckpt.iterdir() if p.name.startswith("step-") and p.name[5:].isdigit())
    if max(on_disk, default=0) != expected:
        return Outcome(point, -1, expected, False, f"after the kill the newest step-N on disk is {on_disk}, expected step-{expected}")
    run(tmp / "b", ckpt_dir=ckpt, log=log_b, resume=True)
    losses_a, _ = logged(log_a)
    losses_b, val_b = logged(log_b)
    resumed_from = min(losses_b, default=STEPS + 1) - 1
    problems = []
    if sorted(losses_b) != list(range(expected + 1, STEPS + 1)):
        problems.append(f"the resumed run logged steps {sorted(losses_b)}, expected {expected + 1}..{STEPS}")
    for source, losses in (("killed", losses_a), ("resumed", losses_b)):
        for step, loss in losses.items():
            if loss != ref_losses.get(step):
                problems.append(f"{source} run step {step}: loss {loss!r} != {ref_losses.get(step)!r}")
    if val_b != ref_val:
        problems.append(f"validation loss {val_b!r} != {ref_val!r}")
    return Outcome(point, resumed_from if losses_b else expected, expected, not problems, "; ".join(problems) or "bit-identical")
