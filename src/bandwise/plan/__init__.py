"""The planner: search, verdict, validation, sweeps.

`bandwise.plan(...)` is the Python API's plan function (`bandwise.api.planning.plan`), and
`bandwise.plan` is also this package: once any `bandwise.plan.*` module is imported, Python binds the
package to that name. So the package is callable, and calling it is calling the API.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from bandwise.api.planning import plan

        return plan(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
