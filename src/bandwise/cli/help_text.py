"""Command help as prose that the terminal wraps, not as the source file's line breaks.

typer's rich help keeps every newline after a command's first paragraph (typer.rich_utils,
`_get_help_text`: in "rich" markup mode the remaining lines are printed as written), so a help text
wrapped at 120 columns in the source breaks mid-sentence on an 80-column terminal. `reflow` joins the
lines of each paragraph before typer sees them; a line that starts with whitespace (an example
command), a list marker or an option (`--vary ...`) keeps its own line.
"""

from __future__ import annotations

import inspect
import re

import typer

_OWN_LINE = re.compile(r"(\s|[-*•] |--|\d+[.)] )")
"""A line that starts like this is not a continuation of the one before it."""


def reflow(text: str | None) -> str | None:
    """`text` with each paragraph's wrapped lines joined by spaces; blank lines and lines that start a
    list item, an option or an indented example are kept."""
    if not text:
        return text
    out: list[str] = []
    for line in inspect.cleandoc(text).splitlines():
        if out and out[-1].strip() and line.strip() and not _OWN_LINE.match(line) and not out[-1].startswith((" ", "\t")):
            out[-1] = f"{out[-1].rstrip()} {line.strip()}"
        else:
            out.append(line.rstrip())
    return "\n".join(out)


def reflow_commands(app: typer.Typer) -> None:
    """Reflow the help of every command registered on `app` and on its command groups."""
    for info in app.registered_commands:
        info.help = reflow(info.help or (info.callback.__doc__ if info.callback else None))
    for group in app.registered_groups:
        if group.typer_instance is not None:
            reflow_commands(group.typer_instance)
