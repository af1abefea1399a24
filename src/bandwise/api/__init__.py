"""bandwise from Python: the commands as functions that return typed results.

    >>> import bandwise
    >>> result = bandwise.plan(model="llama3-8b", cluster="h100", devices=8)
    >>> result.needs_pp
    False

`plan`, `estimate`, `compare` and `sweep` take `tokens="15T"` (or `steps`) and `price="$2.10/h"` to price
the whole run (`result.run`, or `result.runs` per point); `sweep_devices` and `whole_runs` compare runs.

Each result's `to_dict()` is the document the matching command prints with `--json`; bad input
raises the `BandwiseError` whose message the command prints as its one line. The CLI is a layer
over these functions.
"""

from __future__ import annotations

from bandwise.api.devices_sweep import sweep_devices
from bandwise.api.calibrating import calibrate
from bandwise.api.doctoring import diagnose
from bandwise.api.planning import (
    compare,
    estimate,
    load_cluster,
    load_model,
    plan,
    sweep,
    validate,
)
from bandwise.api.results import (
    CompareResult,
    DoctorResult,
    EstimateResult,
    PlanResult,
    SweepOutcome,
    ValidateResult,
)
from bandwise.api.whole_runs import whole_runs
from bandwise.errors import BandwiseError, NothingFits

__all__ = [
    "BandwiseError",
    "CompareResult",
    "DoctorResult",
    "EstimateResult",
    "NothingFits",
    "PlanResult",
    "SweepOutcome",
    "ValidateResult",
    "calibrate",
    "compare",
    "diagnose",
    "estimate",
    "load_cluster",
    "load_model",
    "plan",
    "sweep",
    "sweep_devices",
    "validate",
    "whole_runs",
]
