"""Settings of the fuzz suite and its report.

BANDWISE_FUZZ_EXAMPLES=N runs each hypothesis test for N examples times its weight (the
default is a small count per test, so the folder runs in well under a minute on two cores).
BANDWISE_FUZZ_REPORT=PATH writes, at the end, per input class: examples, exit codes seen,
tracebacks, warnings, the slowest example and the largest child peak RSS, as JSON.
Hypothesis keeps no example database (nothing is written into the checkout) and has no
deadline: the check is on each command's result, not its speed.
"""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path

from hypothesis import HealthCheck, settings

from cli_contract import TALLY

ENV_EXAMPLES = os.environ.get("BANDWISE_FUZZ_EXAMPLES", "")
SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture]


def fuzz_settings(default: int, weight: float = 1.0) -> settings:
    """`default` examples, or BANDWISE_FUZZ_EXAMPLES x `weight` when that is set."""
    n = max(1, round(int(ENV_EXAMPLES) * weight)) if ENV_EXAMPLES else default
    return settings(max_examples=n, deadline=None, database=None, suppress_health_check=SUPPRESSED, print_blob=True)


def pytest_terminal_summary(terminalreporter) -> None:
    if not TALLY:
        return
    terminalreporter.section("fuzz tally")
    for kind, t in sorted(TALLY.items()):
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(t.exit_codes.items(), key=lambda kv: str(kv[0])))
        child = f", child peak {t.peak_rss_mb:.0f} MB" if t.peak_rss_mb else ""
        caught = f", warnings {dict(t.warnings)}" if t.warnings else ""
        terminalreporter.write_line(f"{kind}: {t.examples} examples, exits {{{codes}}}, tracebacks {t.tracebacks}, slowest {t.slowest_s:.2f} s{child}{caught}")
    terminalreporter.write_line(f"total: {sum(t.examples for t in TALLY.values())} examples; this process's peak RSS {_own_peak_mb():.0f} MB")


def pytest_sessionfinish(session) -> None:
    path = os.environ.get("BANDWISE_FUZZ_REPORT")
    if not path or not TALLY:
        return
    report = {
        "examples_setting": ENV_EXAMPLES or "default",
        "total_examples": sum(t.examples for t in TALLY.values()),
        "tracebacks": sum(t.tracebacks for t in TALLY.values()),
        "pytest_process_peak_rss_mb": round(_own_peak_mb(), 1),
        "classes": {k: t.to_dict() for k, t in sorted(TALLY.items())},
    }
    Path(path).write_text(json.dumps(report, indent=2) + "\n")


def _own_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
