"""The shipped published runs as the tests read them, loaded once per process (`load_runs` caches
the parse).

A module rather than conftest fixtures: test modules use the runs at import, in parameter lists."""

from __future__ import annotations

import copy

from bandwise.plan.runs import load_runs

RUNS, SOURCES = load_runs()
BY_ID = {r["id"]: r for r in RUNS}
IN_SAMPLE = [r for r in RUNS if r.get("first_sight") is None]
"""The runs the model was adjusted on: those in the data before first sights were recorded."""
FIRST_SIGHT = [r for r in RUNS if r.get("first_sight") is not None]
"""The runs added with a first-sight prediction (`plan.first_sight`)."""


def shipped_run(run_id: str) -> dict:
    """A copy of one shipped run, free to change."""
    return copy.deepcopy(BY_ID[run_id])
