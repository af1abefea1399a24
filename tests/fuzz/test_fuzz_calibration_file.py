"""Damaged calibration files through `bandwise estimate --calibration FILE`: wrong shapes, types and values
in the factors a user (or a damaged disk) writes; every one a result or one line, never a traceback."""

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

SEED = {
    "format": 1, "name": "seed", "device": "h100-sxm", "engine": None, "evidence": "a planted seed",
    "factors": {"gemm": {"value": 0.9, "fitted_from": "seed", "residual": 0.01, "confounded_with": ["attention"]},
                "attention": 0.8, "bandwidth.nvlink": {"value": 0.7, "preset": 0.8}},
    "levels_measured": ["nvlink"], "levels_datasheet": ["infiniband"],
}
READ_PATHS = (
    ("format",), ("device",), ("engine",), ("evidence",), ("factors",), ("levels_measured",), ("levels_datasheet",),
    ("factors", "gemm"), ("factors", "gemm", "value"), ("factors", "gemm", "residual"), ("factors", "gemm", "confounded_with"),
    ("factors", "attention"), ("factors", "bandwidth.nvlink", "value"), ("factors", "bandwidth.nvlink", "preset"),
)
"""Where `calibration_from_dict` and `cost.calibrated` look."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("calibration")
    yield path
    shutil.rmtree(path)


def command(path: Path) -> list[str]:
    return ["estimate", "--model", "debug", "--dp-shard", "2", "--tp", "2", "--cluster", "h100", "--calibration", str(path), "--json"]


def test_the_seed_prices_a_layout(folder):
    path = folder / "seed.yaml"
    path.write_text(yaml.safe_dump(SEED, sort_keys=False))
    result = run_cli("calibration-yaml", command(path), "seed")
    assert result.code == 0, result.stderr


@fuzz_settings(default=40)
@given(data=st.data())
def test_damaged_calibration_file(folder, data):
    doc, edits = data.draw(mutated(SEED, READ_PATHS))
    raw, cut = data.draw(damaged(yaml.safe_dump(doc, sort_keys=False).encode()))
    path = folder / "calibration.yaml"
    path.write_bytes(raw)
    run_cli("calibration-yaml", command(path), f"{edits} {cut}")
