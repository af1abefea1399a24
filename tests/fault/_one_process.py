"""One-process training in this process (CPU, fp32, `debug-moe`), for the checkpoint tests that
damage or forge a checkpoint and resume from it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import torch

from bandwise.runtime.data import DataConfig
from bandwise.runtime.train import TrainConfig, train
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy

STEPS = 4
EVERY = 2
LAYOUT = Strategy(micro_batch=1, global_batch=4)


def run(ckpt: Path, log: Path, *, resume: bool) -> None:
    """Train to STEPS. One intra-op thread: with two, this model's fp32 CPU losses differ in their
    last bits between two identical runs, and a bit-for-bit comparison would test that instead."""
    cfg = TrainConfig(
        seq_len=64, steps=STEPS, lr=3e-3, warmup=1, dtype="fp32", eval_batches=1, progress=False, compare=False,
        data=DataConfig(num_workers=0), checkpoint_dir=str(ckpt), checkpoint_every=EVERY, resume=resume, log=str(log),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(get_model("debug-moe"), LAYOUT, cfg)
    finally:
        torch.set_num_threads(threads)


def logged(log: Path) -> tuple[dict[int, float], float | None]:
    losses, val = {}, None
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec:
            losses[rec["step"]] = rec["loss"]
        elif "val_loss" in rec:
            val = rec["val_loss"]
    return losses, val


def files(path: Path) -> dict[str, bytes]:
    """Every file under `path`, by relative name."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def resign(step_dir: Path) -> None:
    """Rewrite `manifest.json` to match the files as they are now, as someone able to write the
    checkpoint folder could: the manifest then vouches for forged files."""
    entries = {}
    for p in sorted(step_dir.iterdir()):
        if p.is_file() and p.name != "manifest.json":
            entries[p.name] = {"bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
    manifest = json.loads((step_dir / "manifest.json").read_text())
    manifest["files"] = entries
    (step_dir / "manifest.json").write_text(json.dumps(manifest))
