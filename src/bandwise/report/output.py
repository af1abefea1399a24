"""One output sink: human (rich), JSON, or quiet — decided once per command."""

from __future__ import annotations

import json
import math
import os
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


def plain(obj: Any) -> Any:
    """`obj` as the plain JSON values `--json` prints: what the Python API's `to_dict()` returns."""
    return _jsonable(obj)


def make_console() -> Console:
    """The terminal's width, or COLUMNS when set; 160 when piped to a file (rich would say 80)."""
    console = Console(highlight=False)
    return console if console.is_terminal or os.environ.get("COLUMNS", "").isdigit() else Console(highlight=False, width=160)


@dataclass(slots=True)
class Output:
    """Where a command writes. `json_mode` prints one JSON document and nothing else."""

    json_mode: bool = False
    quiet: bool = False
    console: Console = field(default_factory=lambda: make_console())

    def print(self, *renderables: Any, min_width: int = 0) -> None:
        """`min_width`: render at least this wide (the terminal wraps the lines) rather than cut a number."""
        if self.json_mode or self.quiet:
            return
        width = self.console.width
        if min_width > width:
            self.console.width = min_width
        self.console.print(*renderables)
        self.console.width = width

    def emit_json(self, obj: Any) -> None:
        json.dump(_jsonable(obj), sys.stdout, indent=2)
        sys.stdout.write("\n")
