"""Settings every test shares: the hypothesis profiles, a cache of its own, a bytecode cache, and the slow stage.

Hypothesis profiles (BANDWISE_HYPOTHESIS_PROFILE, default `ci`):
- `ci`: derandomized, so every run of the suite draws the same examples and a red run is a
  change, not a draw; no deadline (the machines are shared) and no example database.
- `explore`: random draws, for `scripts/fuzz`, which also raises the example counts. A failure
  it finds is added to its test as an `@example` before it is fixed, so `ci` keeps it.

The schedule cache (`cost.pipeline`) and the data cache (`runtime.data`) go to a folder of the
test run's own: a test never depends on, nor writes into, the user's `~/.cache/bandwise`.

Tests under tests/dist, tests/fault and tests/interop, and those marked `slow`, form the second
stage of `scripts/test` (`-m slow`); the first stage (`-m "not slow"`) is what a developer runs
while working.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

if sys.dont_write_bytecode:
    # Compiled test modules (asserts rewritten) and bandwise modules kept in git-ignored __pycache__ folders even
    # where the environment asks for none (PYTHONDONTWRITEBYTECODE, as this project's containers set it): without
    # them every run rewrote every test module's asserts and compiled every bandwise module afresh, 3.8 s of the
    # 10.5 s CPU of `pytest --co` (benchmarks/RESULTS.md). Installed packages keep the bytecode they were installed with.
    sys.dont_write_bytecode = False

PROFILE_ENV = "BANDWISE_HYPOTHESIS_PROFILE"
settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", derandomize=False, deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get(PROFILE_ENV, "ci"))

_CACHE = tempfile.mkdtemp(prefix="bandwise-test-cache-")
os.environ["BANDWISE_CACHE_DIR"] = _CACHE  # the pipeline schedule cache
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a Hub id is read from a cache a test fills, never from the network
os.environ.setdefault("BANDWISE_CACHE", str(Path(_CACHE) / "data"))  # the tokenized corpus; a run may share one

SLOW_FOLDERS = ("dist", "fault", "interop")
"""Whole folders of the second stage: multi-process runs, kill-and-resume, engine installs."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        path = Path(str(item.path))
        if path.is_relative_to(here) and path.relative_to(here).parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The modules, items and parameters collection made live as long as the session: moved out of the
    garbage collector's view (gc.freeze), so that its full passes walk only what the tests make. pytest
    ends every session with five of them (unraisableexception.py, gc_collect_harder), which took 1.3 s
    CPU of a 5 s `pytest --co` over torch's and the items' objects (benchmarks/RESULTS.md). They are given
    back at exit (atexit runs before the interpreter's last collection), where extension modules such as
    triton's count what is left alive."""
    gc.freeze()
    atexit.register(gc.unfreeze)


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    shutil.rmtree(_CACHE, ignore_errors=True)
