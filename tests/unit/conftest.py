"""Fixtures the unit tests share."""

from __future__ import annotations

import subprocess

import pytest

from entry import in_process


@pytest.fixture
def cli(capsys):
    """The real entry point, in-process: `cli(*args)` returns a CompletedProcess (exit code,
    stdout, stderr) and consumes what the command printed."""

    def run(*args: str) -> subprocess.CompletedProcess:
        return in_process(capsys, *args)

    return run
