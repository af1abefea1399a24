"""bandwise: plan, run and debug large-model training.

`import bandwise` gives the Python API (`bandwise.api`): plan, estimate, compare, sweep, validate,
load_model, load_cluster, diagnose and calibrate, each returning a typed result whose `to_dict()` is the
matching command's `--json`. The names load on first use, so that importing one part of the
package (the trainer, the doctor's hooks in a training script) does not load the planner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "BandwiseError",
    "CompareResult",
    "DoctorResult",
    "EstimateResult",
    "NothingFits",
    "PlanResult",
    "SweepOutcome",
    "ValidateResult",
    "__version__",
    "calibrate",
    "compare",
    "diagnose",
    "estimate",
    "load_cluster",
    "load_model",
    "plan",
    "sweep",
    "validate",
]

if TYPE_CHECKING:
    from bandwise.api import (
        BandwiseError,
        CompareResult,
        DoctorResult,
        EstimateResult,
        NothingFits,
        PlanResult,
        SweepOutcome,
        ValidateResult,
        calibrate,
        compare,
        diagnose,
        estimate,
        load_cluster,
        load_model,
        plan,
        sweep,
        validate,
    )


def __getattr__(name: str) -> Any:
    """PEP 562: the API's names, imported when first read. `plan` is also the planner's package,
    which Python binds here once any of its modules loads: the package is callable
    (`bandwise/plan/__init__.py`), so `bandwise.plan(...)` is the API's either way."""
    if name == "plan":
        import bandwise.plan

        return bandwise.plan
    if name in __all__:
        from bandwise import api

        return getattr(api, name)
    raise AttributeError(f"module 'bandwise' has no attribute {name!r}")
