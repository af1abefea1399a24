"""An error's fix is computed, and following it works: the advice is run and must succeed."""

from __future__ import annotations

import json
import re

import pytest

from bandwise.cli.main import main


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def _numbers(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def _valid_plan(argv: list[str], capsys) -> None:
    """The plan finds valid layouts (whether they fit in memory is another question: exit 0 or 3)."""
    code, out, err = run([*argv, "--json"], capsys)
    assert code in (0, 3), err
    assert json.loads(out)["searched"] > 0


def test_a_fixed_degree_that_rules_out_every_layout_names_the_values_that_work(capsys):
    base = ["plan", "--model", "llama3-70b", "--cluster", "h100", "--devices", "64", "--global-batch", "512"]
    code, _, err = run([*base, "--fix", "tp=3"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "tp=3" in err
    values = _numbers(err.split("valid tp values here:")[1])
    assert values and 3 not in values
    for tp in values[:4] + values[-1:]:
        _valid_plan([*base, "--fix", f"tp={tp}"], capsys)


def test_a_device_count_with_no_valid_split_names_batches_and_counts_that_work(capsys):
    base = ["plan", "--model", "llama3-8b", "--cluster", "h100"]
    code, _, err = run([*base, "--devices", "37", "--global-batch", "512"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    batches = _numbers(re.search(r"use a global batch of ([\d or]+)", err).group(1))
    counts = _numbers(re.search(r"or ([\d or]+) devices", err).group(1))
    assert batches and counts
    for gb in batches:
        _valid_plan([*base, "--devices", "37", "--global-batch", str(gb)], capsys)
    for n in counts:
        _valid_plan([*base, "--devices", str(n), "--global-batch", "512"], capsys)


@pytest.mark.parametrize("micro_batch, global_batch", [(1, 511), (4, 520)])
def test_a_batch_that_does_not_divide_is_answered_with_batches_that_do(micro_batch, global_batch, capsys):
    base = ["estimate", "--model", "llama3-70b", "--cluster", "h100", "--dp-shard", "8", "--tp", "8"]
    code, _, err = run([*base, "--micro-batch", str(micro_batch), "--global-batch", str(global_batch)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    batches = _numbers(re.search(r"use a global batch of ([\d or]+)", err).group(1))
    assert batches and global_batch not in batches
    for gb in batches:
        assert run([*base, "--micro-batch", str(micro_batch), "--global-batch", str(gb), "--json"], capsys)[0] == 0
    suggested = re.search(r"micro_batch=(\d+)", err)
    assert (suggested is not None) == (global_batch % 8 == 0)  # a micro-batch helps only if the 8 ranks split the batch
    if suggested:
        assert run([*base, "--micro-batch", suggested.group(1), "--global-batch", str(global_batch), "--json"], capsys)[0] == 0
