"""Published per-device memory in the validation data, and `bandwise validate --memory`."""

from __future__ import annotations

import json

import pytest

from bandwise.cost.memory import GIB
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.plan.runs import published_memory
from bandwise.plan.validate import comparable_memory_gib, run_all
from entry import exit_code
import published
from published import shipped_run



def test_published_memory_is_read_with_what_it_measures():
    titan = published_memory(shipped_run("torchtitan_h100_t1_fsdp"))
    assert titan.gib == 82.4 and titan.basis == "reserved_peak"  # TorchTitan logs max_reserved_gib
    fig = published_memory(shipped_run("korthikanti2022_175B"))
    assert fig.gib == pytest.approx(45.56 + 12.35) and fig.basis == "states_and_activations"
    assert published_memory(shipped_run("korthikanti2022_530B_dp8_2240gpu")) is None  # not in Figure 1
    assert sum(published_memory(r) is not None for r in published.IN_SAMPLE) == 4 + 12
    assert sum(published_memory(r) is not None for r in published.RUNS) > 4 + 12  # sources added since publish theirs too


def test_reserved_peak_leaves_out_what_lies_outside_the_allocator():
    res = run_all([shipped_run("torchtitan_h100_t1_fsdp")], sources=published.SOURCES)[0]
    est = res.estimate
    assert res.memory_predicted_gib == pytest.approx(est.memory_gib_per_device - DEFAULT_PARAMS.reserved_bytes / GIB)
    assert res.memory_error == pytest.approx(res.memory_predicted_gib / 82.4 - 1)
    with pytest.raises(ValueError, match="basis"):
        comparable_memory_gib(est, "nvidia-smi", DEFAULT_PARAMS)


def test_korthikanti_figure_1_totals_within_ten_percent_through_validate():
    results = run_all(published.RUNS, source="korthikanti2022", sources=published.SOURCES)
    with_memory = [r for r in results if r.memory_published_gib is not None]
    assert len(with_memory) == 4
    for r in with_memory:
        assert abs(r.memory_error) <= 0.10, (r.id, r.memory_error)


def test_cli_memory_table_and_json(capsys):
    assert exit_code(["validate", "--source", "korthikanti2022", "--memory"]) == 0
    out = capsys.readouterr().out
    assert "Memory per device" in out and "states_and_activations" in out
    assert exit_code(["validate", "--source", "korthikanti2022", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    run = next(r for r in doc["runs"] if r["id"] == "korthikanti2022_1T")
    assert run["memory_published_gib"] == pytest.approx(26.56 + 32.96)
    assert run["memory_error"] == pytest.approx(run["memory_predicted_gib"] / run["memory_published_gib"] - 1)
