"""Published whole runs: the data's stages add up to the published token counts, and a prediction's
figures are the sums and ratios of its stages' runs."""

from __future__ import annotations

import json
import math

import pytest

from bandwise.api.whole_runs import whole_runs
from bandwise.errors import BandwiseError
from bandwise.plan.whole_runs import load_whole_runs
from entry import in_process


def _runs():
    return {r.id: r for r in load_whole_runs()[0]}


def test_at_least_eight_runs_each_with_a_published_figure_and_a_cited_source():
    runs, sources = load_whole_runs()
    assert len(runs) >= 8
    for r in runs:
        assert r.published.device_hours > 0 and r.sources and all(s in sources for s in r.sources)
        assert r.stages and all((s.tokens is None) != (s.steps is None) for s in r.stages)


@pytest.mark.parametrize(("run", "tokens"), [
    ("llama3.1-405b", 15.6e12 + 40e6),  # Llama 3 Sec. 3.1: 15.6T, with the last 40M annealed (Sec. 3.4.3)
    ("bloom-176b", 366e9),  # BigScience 2022, arXiv 2211.05100
    ("llama-65b", 1.4e12), ("llama2-70b", 2e12),
])
def test_stage_tokens_add_up_to_the_published_totals(run, tokens):
    assert sum(s.tokens for s in _runs()[run].stages) == pytest.approx(tokens, rel=1e-3)


def test_deepseek_v3_pre_training_is_14_8t_tokens_and_its_extensions_1000_steps_each():
    stages = _runs()["deepseek-v3"].stages
    assert sum(s.tokens for s in stages if s.tokens) == pytest.approx(14.8e12)
    assert [s.steps for s in stages if s.steps] == [1000, 1000]


def test_a_prediction_is_the_sum_of_its_stages():
    (pred,) = whole_runs("llama-65b")
    (stage,) = pred.stages
    run = stage.run
    assert pred.device_hours == pytest.approx(run.wall_s * 2048 / 3600)
    assert pred.gap == pytest.approx(run.device_hours / 1022362 - 1)
    assert pred.ettr == pytest.approx(run.train_s / run.wall_s)
    # at the published ~380 tokens/s/GPU (LLaMA Sec. 2.4), with the same goodput
    assert pred.at_published_rate == pytest.approx(1.4e12 / 380 / 3600 / run.goodput.ettr)


def test_unknown_run_ids_are_one_line_errors():
    with pytest.raises(BandwiseError, match="no such whole run"):
        whole_runs("llama-9000b")


def test_whole_runs_command_prints_json_with_its_sources(capsys):
    result = in_process(capsys, "whole-runs", "--only", "llama-7b", "--json")
    assert result.returncode == 0
    doc = json.loads(result.stdout)
    (row,) = doc["runs"]
    assert row["id"] == "llama-7b" and row["published"]["device_hours"] == 82432
    assert row["predicted"]["device_hours"] > 0 and "llama1_paper" in doc["sources"]


def test_a_run_file_of_ones_own_is_priced_stage_by_stage(capsys, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("runs:\n  - id: mine\n    model: llama3-8b\n    cluster: h100\n    devices: 16\n    stages:\n"
                    "      - {name: main, tokens: 10B, seq_len: 8192, global_batch_tokens: 1048576}\n"
                    "      - {name: long, steps: 10, seq_len: 32768, global_batch_tokens: 1048576}\n")
    (pred,) = whole_runs(path=path)
    main, long = pred.stages
    assert main.run.steps == math.ceil(10e9 / 2**20) and long.run.tokens == 10 * 2**20
    assert pred.device_hours == pytest.approx(main.run.device_hours + long.run.device_hours) and pred.gap is None
    path.write_text("runs:\n  - {id: x, model: llama3-8b}\n")
    bad = in_process(capsys, "whole-runs", "--file", str(path))
    assert bad.returncode == 2 and "missing field(s) cluster, devices, stages" in bad.stderr


@pytest.mark.parametrize(("stage", "words"), [
    ("strategy: 5", "must map Strategy fields"), ("strategy: {zz: 1}", "must map Strategy fields"),
    ("strategy: {dp_shard: 16, micro_batch: x}", "micro_batch='x'"), ("published_tokens_per_s_per_device: -1", "above zero"),
    ("seq_len: 0", "positive whole number"),
])
def test_bad_run_files_are_one_line(capsys, tmp_path, stage, words):
    path = tmp_path / "run.yaml"
    path.write_text("runs:\n  - id: mine\n    model: llama3-8b\n    cluster: h100\n    devices: 16\n    stages:\n"
                    f"      - {{name: main, tokens: 1B, seq_len: 8192, global_batch: 16, {stage}}}\n".replace("seq_len: 8192, global_batch: 16, seq_len: 0", "seq_len: 0, global_batch: 16"))
    bad = in_process(capsys, "whole-runs", "--file", str(path))
    assert bad.returncode == 2 and words in bad.stderr and "Traceback" not in bad.stderr
