"""The layout space of a plan: every candidate's tokens/s per device against its memory per device.

`plan` keeps only its best layouts; a picture of the trade-off needs all of them. `layout_space`
walks the same candidates the search walked (the same enumeration, validity rules, overlap switches
and cost model, `plan.search`), keeping two float32 numbers and a flag per layout (9 bytes: 21 MB
for 2.3 M layouts) and, per side (with and without PP), its frontier: the fitting layouts that no
other layout of that side beats in tokens/s at less or equal memory, as named `Layout`s. A search
that narrowed (past `SEARCH_ROWS` candidates) is drawn from its first, coarse pass: a grid over
every parallel degree, which is what the search itself saw of the whole space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bandwise.cost.memory import GIB
from bandwise.cost.step import ROWS_AT_ONCE, capacity_bytes, evaluate
from bandwise.plan.search import (
    DEGREE_COLUMNS,
    Layout,
    SearchResult,
    _degree_tuples,  # the search's own enumeration, so that the picture shows exactly its candidates
    _with_overlap,
    candidate_chunks,
    runnable_mask,
)
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import DIMS, SCHEDULES, Layouts


@dataclass(frozen=True, slots=True)
class LayoutSpace:
    """Every searched candidate's figures; index i is one layout."""

    memory_gib: np.ndarray
    """Peak memory per device, GiB (float32)."""
    tokens_per_s: np.ndarray
    """Tokens/s per device (float32)."""
    with_pp: np.ndarray
    """The layout pipelines (pp > 1)."""
    fitting: np.ndarray
    """The layout fits: its charged bytes (`PeakMemory.charged`) within the capacity."""
    capacity_gib: float
    """Memory a layout may use: the device's, less the headroom; above it a layout does not fit."""
    frontier: dict[bool, list[Layout]]
    """Per side (True: with PP), the fitting layouts that nothing of that side beats at less memory, by memory."""
    coarse: bool = False
    """Drawn from a narrowed search's coarse pass."""

    @property
    def fits(self) -> np.ndarray:
        return self.fitting


def pareto(memory: np.ndarray, tps: np.ndarray) -> np.ndarray:
    """Indices of the points that no other point beats in tps at less or equal memory, by memory."""
    order = np.lexsort((-tps, memory))  # by memory, then the faster first
    best = np.maximum.accumulate(tps[order])
    rising = np.concatenate(([True], best[1:] > best[:-1]))
    return order[rising]


def layout_space(model: ModelSpec, cluster: Cluster, devices: int, global_batch: int, result: SearchResult,
                 options: dict[str, Any]) -> LayoutSpace:
    """Walk the candidates `search(model, cluster, devices, global_batch, **options)` walked."""
    cluster = cluster.placed(devices)
    params, overlap = options["params"], options.get("overlap") or {}
    fixed, allow_pp = options.get("fixed") or {}, options.get("allow_pp", True)
    zero_stages = options.get("zero_stages", (0, 1, 2))
    cap = capacity_bytes(cluster, params)
    degrees = _degree_tuples(model, devices, fixed, allow_pp)
    degrees = degrees[np.isin(degrees[:, DEGREE_COLUMNS.index("zero_stage")], zero_stages)]
    level = (result.extra.get("narrowed") or {}).get("level", 0)
    space = {"fixed": fixed, "allow_pp": allow_pp, "precisions": options.get("precisions", ("bf16",)), "schedules": options.get("schedules", SCHEDULES)}
    mem, tps, pp, fit = [], [], [], []
    edge: dict[bool, list[tuple[Layouts, np.ndarray, np.ndarray]]] = {False: [], True: []}
    for chunk in candidate_chunks(model, devices, global_batch, degrees=degrees, coarse=level, **space):
        ok = runnable_mask(chunk, devices, model, options.get("rules"))
        if not ok.any():
            continue
        c = _with_overlap(chunk.take(np.flatnonzero(ok)), overlap, options.get("rules"))
        for start in range(0, len(c), ROWS_AT_ONCE):
            block = c.take(slice(start, start + ROWS_AT_ONCE))
            r = evaluate(model, cluster, block, DIMS, params, capacity=cap)
            m, t, p = r.memory_bytes / GIB, r.tokens_per_s_per_device, block.pp > 1
            mem.append(m.astype(np.float32))
            tps.append(t.astype(np.float32))
            pp.append(p)
            fit.append(r.fit_bytes <= cap)
            for side in (False, True):
                idx = np.flatnonzero((p == side) & fit[-1])
                if len(idx):
                    keep = idx[pareto(m[idx], t[idx])]
                    edge[side].append((block.take(keep), m[keep], t[keep]))
    frontier = {side: _named(model, cluster, edge[side], params, cap) for side in (False, True)}
    join = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dtype=dt)
    return LayoutSpace(memory_gib=join(mem, np.float32), tokens_per_s=join(tps, np.float32), with_pp=join(pp, bool),
                       fitting=join(fit, bool), capacity_gib=cap / GIB, frontier=frontier, coarse=bool(level))


def _named(model: ModelSpec, cluster: Cluster, parts: list[tuple[Layouts, np.ndarray, np.ndarray]], params: Any, cap: float) -> list[Layout]:
    """The frontier over every chunk's frontier, priced again as `Layout`s (a handful of rows)."""
    if not parts:
        return []
    rows = Layouts.concat([p[0] for p in parts])
    keep = pareto(np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]))
    rows = rows.take(keep)
    r = evaluate(model, cluster, rows, DIMS, params)
    return [Layout(strategy=rows.row(i, DIMS), estimate=r.estimate(i, cap, cluster.device.hbm_bytes)) for i in range(len(rows.tp))]
