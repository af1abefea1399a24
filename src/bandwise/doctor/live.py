"""The straggler check while a torchrun job runs.

Each rank's monitor rewrites its running summary to `rank-N.live.json` (`_bootstrap._live_writer`);
`watch` reads them every POLL_S while the launcher runs and names a rank the first time the input
straggler rule (`ranks.input_straggler`, the rule the end-of-run report uses) finds it, with the
step and the time it was found, so a long job's user hears of it while it still runs, and says so
again when the rule stops naming it (the rank caught up, or another now holds the others). A live
line is what the rule said at that moment; the report at the end, over all steps, is the verdict.
Each node's `doctor run` sees its own ranks (their files are local), so the rule runs per node.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bandwise.doctor.ranks import input_straggler, live_rows
from bandwise.doctor.rules import MIN_STEPS

POLL_S = 0.5
LIVE_MIN_STEPS = 10
"""Steps every rank must have measured before a live verdict: a median over the end-of-run
minimum (3) is one slow batch away from naming a balanced rank."""
CONFIRM = 2
"""Consecutive polls that must name the same rank before it is said."""
LIVE_FILE = re.compile(r"rank-(\d+)\.live\.json$")


def read_live(folder: Path) -> dict[int, dict[str, Any]]:
    """Each rank's latest running summary; a file being replaced or unreadable is skipped this round."""
    data = {}
    for f in folder.iterdir():
        m = LIVE_FILE.match(f.name)
        if m is None:
            continue
        try:
            data[int(m.group(1))] = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
    return data


def check(data: dict[int, dict[str, Any]]) -> tuple[int, int, str] | None:
    """(rank, its steps so far, the finding's title) when the rule names a straggler now: only once
    every rank on this node (torchrun's LOCAL_WORLD_SIZE, which each rank writes) has reported, so
    the first two ranks to report are not compared as if they were the job."""
    rows = live_rows(data)
    expected = max((int(d.get("local_world_size") or 0) for d in data.values()), default=0)
    if len(rows) < max(2, expected) or min(r.steps for r in rows) < max(MIN_STEPS, LIVE_MIN_STEPS):
        return None
    found = input_straggler(rows)
    if found is None:
        return None
    slow, finding = found
    return slow.rank, slow.steps, finding.title


class Verdicts:
    """What the live lines have said so far: a rank is named once CONFIRM polls in a row name it, and
    cleared once CONFIRM polls in a row do not; a cleared rank can be named again."""

    def __init__(self) -> None:
        self.notes: list[dict[str, Any]] = []
        self.named: dict[int, int] = {}  # a named rank -> the polls in a row that have not named it
        self.streak: tuple[int | None, int] = (None, 0)  # the rank the last polls named, and how many in a row

    def update(self, found: tuple[int, int, str] | None, elapsed: float, steps_now: int = 0) -> list[str]:
        """The lines this poll adds, given what `check` found now."""
        lines = []
        rank_now = None if found is None else found[0]
        self.streak = (rank_now, self.streak[1] + 1 if rank_now == self.streak[0] else 1)
        for rank in list(self.named):
            self.named[rank] = 0 if rank == rank_now else self.named[rank] + 1
            if self.named[rank] >= CONFIRM:
                del self.named[rank]
                title = f"rank {rank} no longer holds the others back"
                self.notes.append({"event": "cleared", "rank": rank, "step": steps_now, "elapsed_s": round(elapsed, 2), "title": title})
                lines.append(f"bandwise doctor: live, {elapsed:.1f} s in, at step {steps_now}: {title}")
        if found is not None and found[0] not in self.named and self.streak[1] >= CONFIRM:
            rank, steps, title = found
            self.named[rank] = 0
            self.notes.append({"event": "named", "rank": rank, "step": steps, "elapsed_s": round(elapsed, 2), "title": title})
            lines.append(f"bandwise doctor: live, {elapsed:.1f} s in, rank {rank} at step {steps}: {title}")
        return lines


def watch(proc: subprocess.Popen, folder: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Poll the ranks' live files until `proc` exits: `say` each line `Verdicts` adds; its notes."""
    t0 = time.monotonic()
    verdicts = Verdicts()
    while True:
        try:
            proc.wait(timeout=POLL_S)
            return verdicts.notes
        except subprocess.TimeoutExpired:
            pass
        data = read_live(folder)
        steps_now = min((int(d.get("steps") or 0) for d in data.values()), default=0)
        for line in verdicts.update(check(data), time.monotonic() - t0, steps_now):
            say(line)
