"""Fixtures the unit tests share."""

from __future__ import annotations

import subprocess

import pytest

from bandwise.cli.main import main


@pytest.fixture
def cli(capsys):
    """The real entry point, in-process: `cli(*args)` returns a CompletedProcess (exit code,
    stdout, stderr) and consumes what the command printed."""

    def run(*args: str) -> subprocess.CompletedProcess:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return run
