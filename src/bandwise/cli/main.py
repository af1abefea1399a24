"""The `bandwise` root command: registers the command modules and maps user errors to one line.

Exit codes: 0 done; 1 internal error (a bug: one line, then the hint to run again with --debug);
2 a user error (`BandwiseError`, `ValueError`, a missing file, bad YAML or JSON: one line naming
the value and the fix); 3 the plan found no layout that fits in memory (`NothingFits`, which says
what would fit); 130 interrupted. `--debug` (or BANDWISE_DEBUG=1) re-raises with the traceback.
"""

from __future__ import annotations

import json
import os
import sys

import typer
import yaml

from bandwise import __version__
from bandwise.cli import calibrate as calibrate_commands
from bandwise.cli import catalog as catalog_commands
from bandwise.cli import compare as compare_commands
from bandwise.cli import doctor as doctor_commands
from bandwise.cli import estimate as estimate_commands
from bandwise.cli import experiment as experiment_commands
from bandwise.cli import plan as plan_commands
from bandwise.cli import schedule as schedule_commands
from bandwise.cli import sweep as sweep_commands
from bandwise.cli import train as train_commands
from bandwise.cli import validate as validate_commands
from bandwise.cli import whole_runs as whole_runs_commands
from bandwise.cli.help_text import reflow_commands
from bandwise.cli.options import bare_emit
from bandwise.errors import INSTALL, NothingFits
from bandwise.heap import keep_freed_memory

app = typer.Typer(
    name="bandwise",
    help=(
        "Plan, run and debug large-model training: which parallel layout reaches the highest "
        "MFU on this cluster, does it fit, is pipeline parallelism worth it, and why is the "
        "accelerator idle. Add --debug to any command for full tracebacks."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)



def _version(value: bool) -> None:
    if value:
        print(f"bandwise {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", callback=_version, is_eager=True),
) -> None:
    """Root options; each command is registered below."""


# Each command module exposes `register(app)`; the order here is the order in --help.
for _module in (plan_commands, estimate_commands, catalog_commands, schedule_commands, validate_commands, calibrate_commands, train_commands, compare_commands, sweep_commands, doctor_commands, experiment_commands, whole_runs_commands):
    _module.register(app)
reflow_commands(app)


def _click_class(name: str) -> type[BaseException]:
    """typer may vendor click; find its exception classes through a public typer class."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


ClickException = _click_class("ClickException")
OPTIONAL_EXTRAS = {"torch": "train", "matplotlib": "plot"}
"""Packages only some commands need, and the extra that installs each (`errors.INSTALL`)."""
REQUIRED = {"msgspec": "msgspec", "numpy": "numpy", "yaml": "pyyaml", "typer": "typer", "rich": "rich"}
"""The import names of pyproject.toml's `dependencies`, and the distribution each comes in: one missing
is an incomplete install, not a bug (a command imports msgspec or numpy only when it runs)."""
USER_ERRORS = (ValueError, OSError, yaml.YAMLError, json.JSONDecodeError, KeyError)


def _fail(message: str, code: int, *, internal: bool = False) -> None:
    """One line on stderr; only a bug (internal) asks for the traceback, a user error names its fix."""
    first_line = message.strip().splitlines()[0] if message.strip() else "unknown error"
    print(f"bandwise: error: {first_line}", file=sys.stderr)
    if internal:
        print("  (run again with --debug for the traceback)", file=sys.stderr)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    keep_freed_memory()  # the planner's temporaries reuse pages instead of faulting them in again (bandwise/heap.py)
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("BANDWISE_DEBUG", "") not in ("", "0")
    args = bare_emit([a for a in args if a != "--debug"])
    try:
        rv = app(args=args, prog_name="bandwise", standalone_mode=False)
    except typer.Abort:
        print("bandwise: aborted", file=sys.stderr)
        sys.exit(130)
    except ClickException as exc:  # usage errors: click words them well; keep them to one line
        if debug:
            raise
        ctx = getattr(exc, "ctx", None)
        hint = f"see '{ctx.command_path} --help'" if ctx is not None else "see 'bandwise --help'"
        print(f"bandwise: error: {exc.format_message()} ({hint})", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except ModuleNotFoundError as exc:
        if debug:
            raise
        package = (exc.name or "").split(".")[0]
        if package in OPTIONAL_EXTRAS:
            _fail(f"this command needs {package}, which is not installed; from the bandwise checkout run: {INSTALL[OPTIONAL_EXTRAS[package]]}", 2)
        if package in REQUIRED:
            _fail(f"bandwise needs {REQUIRED[package]}, which is not installed in this Python ({sys.executable}): the install is "
                  f"incomplete; from the bandwise checkout run: pip install -e .", 2)
        _fail(f"internal error (ModuleNotFoundError: {exc}); please report it", 1, internal=True)
    except NothingFits as exc:
        if debug:
            raise
        _fail(str(exc), NothingFits.exit_code)
    except USER_ERRORS as exc:
        if debug:
            raise
        text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        if isinstance(exc, OSError) and exc.filename and exc.strerror:
            text = f"{exc.strerror}: {exc.filename}"
        _fail(text, 2)
    except Exception as exc:  # a bug, not the user's fault: still one line, code 1
        if debug:
            raise
        _fail(f"internal error ({type(exc).__name__}: {exc}); please report it", 1, internal=True)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
