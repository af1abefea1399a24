"""One command module per command group (issue 35): each `bandwise.cli` module that registers
commands registers its own group and no other, and every command it registers is defined in it.

What a module registers is read by running its `register` on an empty app, not by searching text."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import typer

import bandwise.cli
from bandwise.cli.main import app

OWN_COMMANDS = {
    "plan": {"plan"},
    "estimate": {"estimate"},
    "catalog": {"models", "clusters", "engines"},
    "schedule": {"schedule"},
    "validate": {"validate"},
    "calibrate": {"calibrate"},
    "train": {"train"},
    "compare": {"compare"},
    "sweep": {"sweep"},
    "doctor": {"doctor"},
    "experiment": {"experiment"},
    "whole_runs": {"whole-runs"},
}
"""The command group each module owns: a top-level command, or a group of subcommands."""


def _cli_modules() -> dict[str, ModuleType]:
    return {m.name: importlib.import_module(f"bandwise.cli.{m.name}") for m in pkgutil.iter_modules(bandwise.cli.__path__)}


def _names(probe: typer.Typer) -> set[str]:
    names = {c.name or c.callback.__name__.replace("_", "-") for c in probe.registered_commands}
    return names | {g.name or g.typer_instance.info.name for g in probe.registered_groups}


def _callbacks(probe: typer.Typer) -> list:
    """Every command's function, subcommands of groups included."""
    found = [c.callback for c in probe.registered_commands]
    for g in probe.registered_groups:
        found += _callbacks(g.typer_instance)
    return found


def _registered(module: ModuleType) -> typer.Typer:
    probe = typer.Typer()
    module.register(probe)
    return probe


def test_each_cli_module_registers_its_own_command_group_only():
    registered = {name: _names(_registered(module)) for name, module in _cli_modules().items() if hasattr(module, "register")}
    assert registered == OWN_COMMANDS


def test_each_command_is_defined_in_the_module_that_registers_it():
    strays = [
        f"bandwise.cli.{name} registers {fn.__name__} from {fn.__module__}"
        for name, module in _cli_modules().items() if hasattr(module, "register")
        for fn in _callbacks(_registered(module)) if fn.__module__ != module.__name__
    ]
    assert not strays


def test_the_root_command_registers_each_module_once():
    assert sorted(_names(app)) == sorted(n for names in OWN_COMMANDS.values() for n in names)
    assert len(app.registered_commands) + len(app.registered_groups) == sum(len(names) for names in OWN_COMMANDS.values())
