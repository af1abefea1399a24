"""One output sink: human (rich), JSON, or quiet — decided once per command."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console


def _jsonable(obj: Any) -> Any:
    """numpy scalars/arrays, dataclasses and non-finite floats -> plain JSON values."""
    if hasattr(obj, "to_dict"):
        return _jsonable(obj.to_dict())
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy scalar or array
        return _jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def make_console() -> Console:
    """Wide enough for the planner's tables when piped to a file (rich defaults to 80 columns)."""
    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=160)


@dataclass(slots=True)
class Output:
    """Where a command writes. `json_mode` prints one JSON document and nothing else."""

    json_mode: bool = False
    quiet: bool = False
    console: Console = field(default_factory=lambda: make_console())

    def print(self, *renderables: Any) -> None:
        if not (self.json_mode or self.quiet):
            self.console.print(*renderables)

    def emit_json(self, obj: Any) -> None:
        json.dump(_jsonable(obj), sys.stdout, indent=2)
        sys.stdout.write("\n")
