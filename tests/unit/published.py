"""The shipped published runs as the tests read them, loaded once per process (`load_runs` caches
the parse) and only when a test first reads them: `published.RUNS`, `.SOURCES`, `.BY_ID`,
`.IN_SAMPLE` (the runs the model was adjusted on: those in the data before first sights were
recorded) and `.FIRST_SIGHT` (the runs added with a first-sight prediction, `plan.first_sight`).

No test module reads them at import, so collecting the suite parses nothing (the parse cost 0.4 s
CPU of every `pytest --co`): test modules `import published` and name `published.RUNS` inside tests."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from bandwise.plan.runs import load_runs


@cache
def _loaded() -> dict[str, Any]:
    runs, sources = load_runs()
    return {"RUNS": runs, "SOURCES": sources, "BY_ID": {r["id"]: r for r in runs},
            "IN_SAMPLE": [r for r in runs if r.get("first_sight") is None],
            "FIRST_SIGHT": [r for r in runs if r.get("first_sight") is not None]}


def __getattr__(name: str) -> Any:
    """The module's data names, loaded on first use (PEP 562)."""
    if name in ("RUNS", "SOURCES", "BY_ID", "IN_SAMPLE", "FIRST_SIGHT"):
        return _loaded()[name]
    raise AttributeError(f"module 'published' has no attribute {name!r}")


def shipped_run(run_id: str) -> dict:
    """A copy of one shipped run, free to change."""
    return copy.deepcopy(_loaded()["BY_ID"][run_id])
