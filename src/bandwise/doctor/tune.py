"""Fixes that are measured, not guessed: DataLoader settings and the largest micro-batch that fits.

`tune_loader` times the user's own dataset through DataLoaders over a grid of `num_workers`,
`pin_memory`, `prefetch_factor` and `persistent_workers` (autotuning workers has been asked for
since pytorch#23048). Each setting reads two short epochs, so worker start-up, which
`persistent_workers` saves from the second epoch on, is counted.

`find_max_batch` tries a step at growing micro-batches on the device, recovering from OOM,
then bisects; the accumulation that keeps the global batch follows.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from bandwise.errors import BandwiseError


@dataclass(kw_only=True, slots=True, frozen=True)
class LoaderSetting:
    num_workers: int
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"num_workers": self.num_workers, "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            kw["prefetch_factor"] = self.prefetch_factor or 2
            kw["persistent_workers"] = self.persistent_workers
        return kw

    def describe(self) -> str:
        return "DataLoader(" + ", ".join(f"{k}={v}" for k, v in self.kwargs().items()) + ")"


def default_grid(cuda: bool | None = None, cpus: int | None = None) -> list[LoaderSetting]:
    cuda = torch.cuda.is_available() if cuda is None else cuda
    cpus = cpus or os.cpu_count() or 2
    workers = sorted({0, 2, 4, min(8, max(4, 2 * cpus))})
    grid = [LoaderSetting(num_workers=0, pin_memory=p) for p in ((False, True) if cuda else (False,))]
    for w, p, pf, pw in itertools.product([w for w in workers if w > 0], (False, True) if cuda else (False,), (2, 4), (False, True)):
        grid.append(LoaderSetting(num_workers=w, pin_memory=p, prefetch_factor=pf, persistent_workers=pw))
    return grid


def tune_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    grid: list[LoaderSetting] | None = None,
    batches: int = 20,
    collate_fn: Callable[..., Any] | None = None,
    progress: Callable[[LoaderSetting], None] | None = None,
) -> list[dict[str, Any]]:
    """Samples/s of each setting over two epochs of `batches // 2` batches after the first batch; best first."""
    if batch_size < 1 or batches < 4:
        raise BandwiseError(f"tune-loader: batch_size={batch_size} and batches={batches} must be >= 1 and >= 4")
    per_epoch = max(1, batches // 2)
    n = min(len(dataset), per_epoch * batch_size)  # type: ignore[arg-type]
    if n < batch_size:
        raise BandwiseError(f"tune-loader: the dataset has {len(dataset)} samples, fewer than batch_size={batch_size}")  # type: ignore[arg-type]
    subset = torch.utils.data.Subset(dataset, range(n))
    results = []
    for s in grid or default_grid():
        if progress:
            progress(s)
        loader = DataLoader(subset, batch_size=batch_size, shuffle=False, drop_last=True, collate_fn=collate_fn, **s.kwargs())
        # The first batch waits for the workers to start (a one-off per run with persistent
        # workers); the rate is taken after it, so the second epoch's restart still counts.
        samples, first_s = 0, None
        t0 = time.perf_counter()
        for _ in range(2):
            for batch in loader:
                if first_s is None:
                    first_s = time.perf_counter() - t0
                    t_rate = time.perf_counter()
                    continue
                samples += _count(batch)
        elapsed = time.perf_counter() - t_rate
        del loader  # shut persistent workers down before the next setting starts its own
        results.append({"setting": s.kwargs(), "describe": s.describe(), "samples_per_s": samples / elapsed, "startup_s": first_s, "seconds": elapsed})
    results.sort(key=lambda r: -r["samples_per_s"])
    return results


def _count(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, (list, tuple)) and batch:
        return _count(batch[0])
    if isinstance(batch, dict) and batch:
        return _count(next(iter(batch.values())))
    return 1


def load_object(spec: str) -> Any:
    """'path/to/file.py:name' or 'package.module:name' -> the object (called if it is a factory)."""
    if ":" not in spec:
        raise BandwiseError(f"--dataset {spec!r}: use FILE.py:NAME or MODULE:NAME naming a Dataset or a function returning one")
    where, name = spec.rsplit(":", 1)
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise BandwiseError(f"--dataset {spec!r}: file {where} not found")
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        assert mod_spec is not None and mod_spec.loader is not None
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[path.stem] = module  # worker processes unpickle the dataset's class by module name
        sys.path.insert(0, str(path.parent.resolve()))
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    if not hasattr(module, name):
        raise BandwiseError(f"--dataset {spec!r}: {where} has no attribute {name!r}")
    obj = getattr(module, name)
    if not isinstance(obj, Dataset) and callable(obj):
        obj = obj()
    if not hasattr(obj, "__getitem__") or not hasattr(obj, "__len__"):
        raise BandwiseError(f"--dataset {spec!r}: {name} is a {type(obj).__name__}, not a map-style Dataset with __getitem__ and __len__")
    return obj


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def find_max_batch(step: Callable[[int], Any], *, start: int = 1, limit: int = 1 << 16, device: str | torch.device | None = None) -> int:
    """Largest micro-batch b in [start, limit] for which `step(b)` (a forward+backward) runs without OOM.

    Doubles until the first OOM, then bisects between the last success and the failure; after
    each OOM the caching allocator's blocks are released so the next try starts clean.
    """
    if start < 1 or limit < start:
        raise BandwiseError(f"find_max_batch: start={start}, limit={limit} must satisfy 1 <= start <= limit")
    cuda = device is not None and torch.device(device).type == "cuda"

    def fits(b: int) -> bool:
        try:
            step(b)
            return True
        except Exception as exc:  # only OOM means "too big"; anything else is the user's bug
            if not _is_oom(exc):
                raise
            return False
        finally:
            if cuda:
                torch.cuda.empty_cache()

    if not fits(start):
        raise BandwiseError(f"find_max_batch: even micro-batch {start} runs out of memory; use activation checkpointing or a smaller model per device")
    good, bad = start, None
    while bad is None and good < limit:
        trial = min(limit, good * 2)
        if fits(trial):
            good = trial
        else:
            bad = trial
    if bad is None:
        return good
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good


def accumulation_for(global_batch: int, micro_batch: int, data_parallel: int = 1) -> tuple[int, int]:
    """(micro-batch, accumulation steps) that keep `global_batch` = micro * accumulation * dp exactly,
    using the largest micro-batch <= `micro_batch` that divides the per-replica batch."""
    if global_batch % data_parallel:
        raise BandwiseError(f"global batch {global_batch} is not divisible by data-parallel degree {data_parallel}")
    per_replica = global_batch // data_parallel
    mb = min(micro_batch, per_replica)
    while per_replica % mb:
        mb -= 1
    return mb, per_replica // mb


def expected_workers_gain(results: list[dict[str, Any]]) -> float:
    """Best samples/s over the single-process (num_workers=0) baseline."""
    base = [r["samples_per_s"] for r in results if r["setting"]["num_workers"] == 0]
    return results[0]["samples_per_s"] / max(base) if base else math.nan
