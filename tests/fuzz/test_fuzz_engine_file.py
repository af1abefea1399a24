"""Damaged engine files through `bandwise estimate --engine FILE`: wrong shapes, types and values in
the behaviours, layouts and versions a user writes; every one a result or one line, never a traceback."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cli_contract import run_cli
from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from mutations import damaged, mutated

from bandwise.cost.profiles import PRICED
from bandwise.specs.registry import engine_presets

SEEDS = {name: engine.to_dict() for name, engine in engine_presets().items()}
READ_PATHS = (
    ("title",), ("exports",), ("behaviours",), ("layouts",), ("versions",), ("layouts", "schedules"), ("layouts", "zero_stages"),
    ("layouts", "source"), ("versions", "2021"), ("versions", "2021", "behaviours"),
    *(("behaviours", f) for f in sorted(PRICED)), *(("behaviours", f, "value") for f in sorted(PRICED)),
    *(("behaviours", f, k) for f in ("attention", "flash_attention", "selective_modules") for k in ("source", "devices")),
)
"""Where `engine_from_dict` and `params_for` look."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("engine")
    yield path
    shutil.rmtree(path)


def command(path: Path) -> list[str]:
    return ["estimate", "--model", "debug", "--dp-shard", "2", "--tp", "2", "--cluster", "h100", "--engine", str(path), "--json"]


def test_every_preset_as_a_file_prices_a_layout(folder):
    for name, doc in SEEDS.items():
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        result = run_cli("engine-yaml", command(path), name)
        assert result.code == 0, (name, result.stderr)


@fuzz_settings(default=60)
@given(data=st.data())
def test_damaged_engine_file(folder, data):
    name = data.draw(st.sampled_from(sorted(SEEDS)))
    doc, edits = data.draw(mutated(SEEDS[name], READ_PATHS))
    raw, cut = data.draw(damaged(yaml.safe_dump(doc, sort_keys=False).encode()))
    path = folder / "engine.yaml"
    path.write_bytes(raw)
    run_cli("engine-yaml", command(path), f"{name}: {edits} {cut}")
