"""The fuzz suite's report (its example counts are in `fuzzing.py`).

BANDWISE_FUZZ_REPORT=PATH writes, at the end, per input class: examples, exit codes seen,
tracebacks, warnings, the slowest example, the largest child peak RSS and a digest of the
inputs drawn, as JSON. Under the `ci` hypothesis profile (tests/conftest.py) the digests are the
same on every run: that is how two CI runs are shown to have drawn the same examples.
"""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path

from hypothesis import settings

from cli_contract import TALLY
from fuzzing import ENV_EXAMPLES

def pytest_terminal_summary(terminalreporter) -> None:
    if not TALLY:
        return
    terminalreporter.section("fuzz tally")
    terminalreporter.write_line(f"hypothesis profile: {settings.get_current_profile_name()}")
    for kind, t in sorted(TALLY.items()):
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(t.exit_codes.items(), key=lambda kv: str(kv[0])))
        child = f", child peak {t.peak_rss_mb:.0f} MB" if t.peak_rss_mb else ""
        caught = f", warnings {dict(t.warnings)}" if t.warnings else ""
        terminalreporter.write_line(f"{kind}: {t.examples} examples (digest {t.digest[:12]}), exits {{{codes}}}, tracebacks {t.tracebacks}, "
                                    f"slowest {t.slowest_s:.2f} s{child}{caught}")
    terminalreporter.write_line(f"total: {sum(t.examples for t in TALLY.values())} examples; this process's peak RSS {_own_peak_mb():.0f} MB")


def pytest_sessionfinish(session) -> None:
    path = os.environ.get("BANDWISE_FUZZ_REPORT")
    if not path or not TALLY:
        return
    report = {
        "examples_setting": ENV_EXAMPLES or "default",
        "hypothesis_profile": settings.get_current_profile_name(),
        "total_examples": sum(t.examples for t in TALLY.values()),
        "tracebacks": sum(t.tracebacks for t in TALLY.values()),
        "pytest_process_peak_rss_mb": round(_own_peak_mb(), 1),
        "classes": {k: t.to_dict() for k, t in sorted(TALLY.items())},
    }
    Path(path).write_text(json.dumps(report, indent=2) + "\n")


def _own_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
