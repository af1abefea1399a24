"""The README documents every command and the exit codes of the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from bandwise.cli.main import app

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def _commands() -> list[str]:
    names = [c.name for c in app.registered_commands]
    names += [g.name for g in app.registered_groups]
    return sorted(n for n in names if n)


@pytest.mark.parametrize("name", _commands())
def test_every_command_is_in_the_readme(name):
    assert f"bandwise {name}" in README


def test_the_readme_states_the_exit_codes_the_plan_uses():
    for code, words in (("2", "bad input"), ("3", "nothing fits")):
        assert f"{code}: {words}" in README
