"""Every rank of a job side by side, and the rank that holds the others back.

A synchronous data-parallel (or pipelined, or tensor-parallel) step runs at the pace of its
slowest rank: the others reach their collective early and wait inside it, so a straggler shows
twice, as more compute on its own rank and as more exposed communication on every other rank.
The per-rank measures are those of `trace.analyze_trace` over each rank's ProfilerStep windows
(medians per step); the temporal breakdown follows Holistic Trace Analysis's definitions
(compute, non-overlapped communication, memcpy/memset, idle; HTA's `get_temporal_breakdown`).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from bandwise.doctor.rules import Finding, _band, amdahl

STRAGGLER_SHARE = 0.05
"""A rank whose extra compute per step is at least this share of the step is named: below it,
per-step noise (kernel-time jitter of a few percent between identical GPUs) would name one."""
STRAGGLER_MIN_MS = 1.0
LIVE_MIN_MS = 5.0
"""Live, a rank's DataLoader wait is timed on the host around `next()`; on a loaded machine that
timing jitters by a few ms between identical ranks, so less than this is not named."""


@dataclass(kw_only=True, slots=True)
class RankRow:
    name: str
    rank: int | None
    """From the trace's distributedInfo, else from the file name (rank-3, rank_3, rank3), else None."""
    steps: int
    step_ms: float
    busy_ms: float
    """Compute + memcpy per step (median), the rank's own work."""
    exposed_comm_ms: float
    """Communication not hidden behind compute, per step (median): on a healthy rank, its share of
    the collectives; beside a straggler, also its wait for it."""
    idle_ms: float
    breakdown: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_of(name: str, signals: dict[str, Any]) -> int | None:
    r = signals.get("rank")
    if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
        return r
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None


def rank_rows(analyses: list[dict[str, Any]], names: list[str]) -> list[RankRow]:
    """One row per rank with GPU steps, ordered by rank (then name)."""
    rows = []
    for a, name in zip(analyses, names):
        per_step = [r for r in a.get("per_step", []) if "gpu_busy_share" in r]
        if not per_step or a["signals"].get("steps", 0) < 1:
            continue

        def med(f) -> float:  # noqa: ANN001
            return statistics.median(f(r) for r in per_step) / 1e3

        rows.append(RankRow(
            name=name, rank=rank_of(name, a["signals"]), steps=len(per_step),
            step_ms=med(lambda r: r["step_us"]),
            busy_ms=med(lambda r: (r["compute"] + r["memcpy"]) * r["step_us"]),
            exposed_comm_ms=med(lambda r: r["comm"] * r["step_us"]),
            idle_ms=med(lambda r: (r["idle"] + r["data_wait"]) * r["step_us"]),
            breakdown=a["breakdown"],
        ))
    return sorted(rows, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.name))


def straggler(rows: list[RankRow]) -> Finding | None:
    """The rank with the most work per step, when it exceeds the others' median by at least
    STRAGGLER_SHARE of the step and the others wait in their collectives for about that long."""
    if len(rows) < 2:
        return None
    slow = max(rows, key=lambda r: r.busy_ms)
    others = [r for r in rows if r is not slow]
    gap = slow.busy_ms - statistics.median(r.busy_ms for r in others)
    step = statistics.median(r.step_ms for r in rows)
    if step <= 0 or gap < STRAGGLER_MIN_MS:
        return None
    share = gap / step
    waiting = statistics.median(r.exposed_comm_ms for r in others) - slow.exposed_comm_ms
    if share < STRAGGLER_SHARE or waiting < 0.5 * gap:
        return None
    who = f"rank {slow.rank}" if slow.rank is not None else slow.name
    return Finding(
        id="straggler",
        severity=_band(share) or "warning",
        title=f"straggler: {who} works {gap:.1f} ms more per step than the median rank, and the others wait for it "
              f"({share:.0%} of the step)",
        evidence={"rank": who, "extra_ms_per_step": gap, "step_ms": step, "share": share,
                  "others_wait_ms": waiting, "ranks": len(rows)},
        fix=f"find what makes {who} slower: its GPU's clocks and temperature (nvidia-smi -q -d CLOCK,PERFORMANCE,TEMPERATURE: "
            "a throttled or power-capped GPU), more work on its shard (longer sequences, an unbalanced pipeline stage: "
            "`bandwise plan` balances stages), or its host (data loading, CPU contention); swap its node out to confirm",
        expected_speedup=amdahl(share),
    )


@dataclass(kw_only=True, slots=True)
class LiveRow:
    """One rank of `doctor run` under torchrun: medians per step of its own monitor."""

    rank: int
    steps: int
    step_ms: float
    data_wait_ms: float
    optimizer_ms: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def live_rows(data: dict[int, dict[str, Any]]) -> list[LiveRow]:
    rows = []
    for rank, d in sorted(data.items()):
        m = d["summary"]["medians"]
        if not d["summary"]["steps"] or m.get("step_s") is None:
            continue
        rows.append(LiveRow(rank=rank, steps=d["summary"]["steps"], step_ms=1e3 * (m["step_s"] + (m.get("data_wait_s") or 0.0)),
                            data_wait_ms=1e3 * (m.get("data_wait_s") or 0.0),
                            optimizer_ms=None if m.get("optimizer_s") is None else 1e3 * m["optimizer_s"]))
    return rows


def input_straggler(rows: list[LiveRow]) -> tuple[LiveRow, Finding] | None:
    """The rank whose input holds the others, and the finding that names it. Live, a rank's own
    slowness shows where the monitor sees it without the collectives: its wait for its own
    DataLoader. A rank that waits on its input at least STRAGGLER_SHARE of the step longer than
    the median rank holds every rank's step: they all wait for it in the gradient sync."""
    if len(rows) < 2:
        return None
    slow = max(rows, key=lambda r: r.data_wait_ms)
    gap = slow.data_wait_ms - statistics.median(r.data_wait_ms for r in rows if r is not slow)
    step = statistics.median(r.step_ms for r in rows)
    if step <= 0 or gap < LIVE_MIN_MS or gap / step < STRAGGLER_SHARE:
        return None
    share = gap / step
    return slow, Finding(
        id="straggler",
        severity=_band(share) or "warning",
        title=f"straggler: rank {slow.rank} waits {gap:.1f} ms more per step on its input than the median rank, and every rank "
              f"waits for it ({share:.0%} of the step)",
        evidence={"rank": f"rank {slow.rank}", "extra_ms_per_step": gap, "step_ms": step, "share": share, "ranks": len(rows)},
        fix=f"give rank {slow.rank}'s DataLoader what the others have: more workers (num_workers), pinned memory and prefetch, "
            "its shard on local storage, no other load on its host's CPUs; `bandwise doctor tune-loader` measures the settings",
        expected_speedup=amdahl(share),
    )
