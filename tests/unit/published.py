"""The shipped published runs as the tests read them, loaded once per process (`load_runs` caches
the parse), and the exit code of an in-process command for tests that read its output themselves.

A module rather than conftest fixtures: test modules use the runs at import, in parameter lists."""

from __future__ import annotations

import copy

from bandwise.cli.main import main
from bandwise.plan.runs import load_runs

RUNS, SOURCES = load_runs()
BY_ID = {r["id"]: r for r in RUNS}


def shipped_run(run_id: str) -> dict:
    """A copy of one shipped run, free to change."""
    return copy.deepcopy(BY_ID[run_id])


def exit_code(args: list[str]) -> int:
    """Run the real entry point in-process; its output stays in capsys for the test to read."""
    try:
        main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
