"""The one line a prediction script prints for a set of errors: count, median and p90 of |error|, signed median;
and `restated`, the runs priced before and after a copy of them states what a source says of its jobs.

Imported by the `predict_*.py` scripts, which run from this folder (`python3 benchmarks/predict_....py`)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np

import bandwise.specs.registry as registry
from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs


def fig(errs: list[float]) -> str:
    """'  n  median m%  p90 q%  signed s%' of predicted / measured - 1 errors."""
    a = np.abs(errs)
    return f"{len(a):4d}  median {np.median(a):6.1%}  p90 {np.percentile(a, 90):6.1%}  signed {np.median(errs):+6.1%}"


def compare(before: dict, after: dict, groups: dict[str, list[str]]) -> list[str]:
    """Print each run whose error moved (before -> after, `RunResult`s by id), then `fig` before and after over
    each named group of run ids and over every priced run; return the ids that moved."""
    moved = [k for k in before if before[k].error != after[k].error]
    for k in moved:
        print(f"{k:60s} {before[k].error:+7.1%} -> {after[k].error:+7.1%}")
    every = [k for k in before if before[k].error is not None]
    for name, ids in {**groups, "all priced runs": every}.items():
        ids = [k for k in ids if before[k].error is not None]
        print(f"{name}: {fig([before[k].error for k in ids])}  ->  {fig([after[k].error for k in ids])}")
    return moved


def restated(state: Callable[[dict], bool], group: str) -> tuple[dict, dict, list[str]]:
    """Price the shipped runs, then a copy in which `state(run)` writes what the source says of a run (True where it
    wrote something); print the moved runs and the figures (`compare`), and each stated run whose recomputation,
    memory or fit changed. Returns the results before and after by id, and the stated ids."""
    runs, sources = load_runs()
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    copied = copy.deepcopy(runs)
    ids = [run["id"] for run in copied if state(run)]
    after = {r.id: r for r in V.run_all(copied, sources=sources)}
    compare(before, after, {group: ids})
    for rid in ids:
        b, a = before[rid], after[rid]
        if b.strategy is None or a.strategy is None:
            continue
        b_mem, a_mem = b.estimate.memory_gib_per_device, a.estimate.memory_gib_per_device
        if (b.strategy.recompute, round(b_mem, 1), b.estimate.fits) != (a.strategy.recompute, round(a_mem, 1), a.estimate.fits):
            flag = "" if a.estimate.fits else ", nothing fits"
            print(f"  {rid}: {b.strategy.recompute} {b_mem:.1f} GiB -> {a.strategy.recompute} {a_mem:.1f} GiB{flag}")
    print(f"{len(ids)} runs stated")
    return before, after, ids


def with_cluster_presets(edit: Callable[[dict], None]) -> None:
    """From here on the presets load as `edit` leaves clusters.yaml's parsed text (a device figure changed before
    the presets file is): the registry's loader is wrapped and its caches cleared."""
    load = registry._load_yaml

    def patched(name: str):
        data = load(name)
        if name == "clusters.yaml":
            edit(data)
        return data

    registry._load_yaml = patched
    for f in (registry.device_presets, registry.cluster_presets):
        f.cache_clear()
