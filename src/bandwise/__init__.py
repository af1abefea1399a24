"""bandwise: plan, run and debug large-model training.

`import bandwise` gives the Python API (`bandwise.api`): plan, estimate, compare, sweep, validate,
load_model, load_cluster, diagnose and calibrate, each returning a typed result whose `to_dict()` is the
matching command's `--json`. The names load on first use, so that importing one part of the
package (the trainer, the doctor's hooks in a training script) does not load the planner.
"""

from __future__ import annotations

import sys
import types
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
    "sweep_devices",
    "validate",
    "whole_runs",
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
        sweep_devices,
        validate,
        whole_runs,
    )


class _Planner(types.ModuleType):
    """The planner package (`bandwise.plan`), callable as the API's plan function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from bandwise.api.planning import plan

        return plan(*args, **kwargs)


class _Package(types.ModuleType):
    """`bandwise` itself. Python binds a subpackage to its parent's attribute once it loads, so the
    planner package and the API's `plan` would share the name `plan`: this property holds the
    package and returns it callable (`_Planner`), however and whenever it was imported."""

    @property
    def plan(self) -> Any:
        import importlib

        planner = importlib.import_module("bandwise.plan")  # not `import bandwise.plan`: that reads this property
        if not isinstance(planner, _Planner):
            planner.__class__ = _Planner
        return planner

    @plan.setter
    def plan(self, module: types.ModuleType) -> None:  # the import system binding the subpackage
        if not isinstance(module, _Planner):
            module.__class__ = _Planner


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    """PEP 562: the API's names, imported when first read (`plan`: `_Package.plan`)."""
    if name in __all__:
        from bandwise import api

        return getattr(api, name)
    raise AttributeError(f"module 'bandwise' has no attribute {name!r}")
