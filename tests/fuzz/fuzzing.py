"""How many examples each fuzz test draws.

BANDWISE_FUZZ_EXAMPLES=N runs each hypothesis test for N examples times its weight (the
default is a small count per test, so the folder runs in well under a minute on two cores);
`scripts/fuzz` sets it. Whether the draws are random or the same on every run is the hypothesis
profile's (tests/conftest.py). No example database is kept (nothing is written into the checkout)
and there is no deadline: the check is on each command's result and its work, not its speed.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

ENV_EXAMPLES = os.environ.get("BANDWISE_FUZZ_EXAMPLES", "")
SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture]


def fuzz_settings(default: int, weight: float = 1.0) -> settings:
    """`default` examples, or BANDWISE_FUZZ_EXAMPLES x `weight` when that is set."""
    n = max(1, round(int(ENV_EXAMPLES) * weight)) if ENV_EXAMPLES else default
    return settings(max_examples=n, deadline=None, database=None, suppress_health_check=SUPPRESSED, print_blob=True)
