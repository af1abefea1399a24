"""Command help reads as prose the terminal wraps: a paragraph wrapped in the source is not broken
mid-sentence on screen (`cli.help_text`)."""

from __future__ import annotations

import pytest

from bandwise.cli.help_text import reflow
from bandwise.cli.main import app, main


def test_reflow_joins_a_paragraph_and_keeps_what_stands_alone():
    text = """First line
    goes on here.

    Second paragraph, wrapped
    in the source.

      torchrun --nproc-per-node 2 -m bandwise train
    --vary scale-up-size=8,16 sets
    the domain.
    - a list item
    - another
    """
    assert reflow(text).splitlines() == [
        "First line goes on here.", "", "Second paragraph, wrapped in the source.", "",
        "  torchrun --nproc-per-node 2 -m bandwise train", "--vary scale-up-size=8,16 sets the domain.", "- a list item", "- another",
    ]
    assert reflow(None) is None and reflow("") == ""


def _commands() -> list[list[str]]:
    out = [[c.name] for c in app.registered_commands]
    out += [[g.name, c.name] for g in app.registered_groups for c in g.typer_instance.registered_commands]
    return out


@pytest.mark.parametrize("argv", _commands(), ids=" ".join)
def test_every_paragraph_of_a_help_is_one_line_on_a_wide_terminal(argv, capsys, monkeypatch):
    """At 4,000 columns nothing needs wrapping, so every line break on screen is one the help text forces:
    each prose paragraph is then a single line (an indented example or an option item stands alone)."""
    monkeypatch.setenv("COLUMNS", "4000")
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    out = capsys.readouterr().out
    usage = out.split("╭")[0]  # the text above the option panels
    lines = [line.strip() for line in usage.splitlines()]
    for before, line in zip(lines, lines[1:]):
        if before and line and not before.startswith("Usage:"):
            assert line.startswith(("-", "•", "torchrun", "bandwise", "python")), f"{' '.join(argv)}: a paragraph broken before {line[:40]!r}"
