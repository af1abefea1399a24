"""The real entry point, run in this process, as the CLI tests call it."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from bandwise.cli.main import main


def exit_code(args: list[str]) -> int:
    """Run `bandwise args`; its output stays captured for the test to read."""
    try:
        main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def in_process(capture, *args: str) -> subprocess.CompletedProcess:
    """Run `bandwise args` and read what it printed from `capture` (pytest's capsys, or capfd to
    also catch the output of processes it starts)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capture.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def json_of(capture, *args: str) -> Any:
    """Run `bandwise args` (a `--json` command) in this process; it must exit 0, and its output is parsed."""
    done = in_process(capture, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)
