"""A measured run read from a job's own log: bandwise train's metrics JSONL, TorchTitan's and Megatron-LM's lines."""

from __future__ import annotations

import json

import pytest

from bandwise.errors import BandwiseError
from bandwise.plan.calibrate import calibrate_log, predict_calibrated
from bandwise.plan.run_logs import WARMUP, logged_case, read_log
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

S = Strategy(dp_shard=8, micro_batch=1, global_batch=8)
MODEL = get_model("llama3-8b")


def test_bandwise_metrics_jsonl(tmp_path):
    path = tmp_path / "metrics.jsonl"
    values = [100.0, 900.0, 1000.0, 1010.0, 990.0]  # the first WARMUP are the warm-up
    path.write_text("".join(json.dumps({"step": i, "tokens_per_s_per_device": v}) + "\n" for i, v in enumerate(values)) + '{"step": 5, "val_loss": 1}\n')
    run = read_log(path, S, MODEL, 8)
    assert run.tokens_per_s_per_device == 1000.0 and run.measurements == len(values) - WARMUP


def test_torchtitan_tps(tmp_path):
    path = tmp_path / "titan.log"
    lines = [f"[rank0]: step: {i}  loss: 9.1  memory: 40.12GiB(42.23%)  tps: {v:,}  tflops: 300  mfu: 30%" for i, v in enumerate([500, 5000, 6100, 6300, 6200], 1)]
    path.write_text("\n".join(lines) + "\n")
    assert read_log(path, S, MODEL, 8).tokens_per_s_per_device == 6200


def test_megatron_iteration_time(tmp_path):
    path = tmp_path / "megatron.log"
    lines = [f" [2026-12-01 10:00:0{i}] iteration {i:>8}/     100 | consumed samples: {8 * i} | elapsed time per iteration (ms): {ms} | "
             f"learning rate: 1.0E-04 | global batch size: 8 | lm loss: 9.0 |" for i, ms in enumerate([9000.0, 2100.0, 2000.0, 2000.0, 2200.0], 1)]
    path.write_text("\n".join(lines) + "\n")
    # tokens per step over the median iteration time, per device: 8 sequences x 8192 tokens / 2.0 s / 8 GPUs
    assert read_log(path, S, MODEL, 8).tokens_per_s_per_device == pytest.approx(8 * 8192 / 2.0 / 8)


def test_a_log_without_throughput_is_one_line(tmp_path):
    path = tmp_path / "x.log"
    path.write_text("hello\n{not json\n")
    with pytest.raises(BandwiseError, match="no throughput found") as err:
        read_log(path, S, MODEL, 8)
    assert "\n" not in str(err.value)


def test_one_logged_run_calibrates_to_itself(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"tokens_per_s_per_device": 5000.0}) + "\n" for _ in range(4)))
    cal = calibrate_log(path, S, MODEL, get_cluster("h100"), "torchtitan")
    case, _ = logged_case(path, S, MODEL, get_cluster("h100"), "torchtitan")
    assert predict_calibrated(case, cal).predicted == pytest.approx(5000.0, rel=1e-3)
    assert cal.engine == "torchtitan" and cal.levels_datasheet == ("infiniband",)
