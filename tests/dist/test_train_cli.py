"""`bandwise train` through its real entry points: plan → train under torchrun, the loss falling
on 1 and 2 processes, and one-line refusals of bad strategies and data paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _train_harness import free_port

from bandwise.cli.main import main

pytestmark = pytest.mark.dist

SMALL = ["--seq-len", "64", "--num-workers", "0", "--lr", "3e-3", "--warmup", "2", "-q"]


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


def _losses(path) -> list[float]:
    return [json.loads(line)["loss"] for line in open(path) if '"loss"' in line]


def test_one_process_loss_falls_on_default_corpus(tmp_path, capsys):
    log = tmp_path / "m.jsonl"
    code, out, err = _cli(capsys, "train", "--model", "debug-moe", "--steps", "12", "--global-batch", "8", "--micro-batch", "4", "--metrics", str(log), *SMALL, "--json")
    assert code == 0, err
    losses = _losses(log)
    assert len(losses) == 12
    # A uniform guess over 256 bytes costs ln 256 = 5.55 nats; the model must beat it clearly.
    assert losses[0] == pytest.approx(5.55, abs=0.1)
    assert max(losses[-3:]) < losses[0] - 1.0
    summary = json.loads(out)
    assert summary["steps"] == 12 and summary["val_loss"] < losses[0]
    assert summary["experts"].startswith("experts: torch._grouped_mm")  # fp32 on CPU: the grouped kernel, named
    rec = json.loads(log.read_text().splitlines()[-2])
    assert {"loss", "tokens_per_s", "mfu", "data_wait_share", "grad_norm", "maxvio", "peak_mem_bytes"} <= set(rec)
    assert rec["maxvio"][0] is None and all(v >= 0 for v in rec["maxvio"][1:])  # layer 0 is dense
    # the planner's comparison says what the MFU is measured against (issue 17, item 7)
    p = summary["planner"]
    assert p["peak_flops"] > 0 and 0 < p["attention_efficiency"] <= 1


def test_summary_names_the_per_device_rate_and_the_peak(capsys):
    from bandwise.cli.train import _table
    from rich.console import Console

    summary = {"model": "debug", "layout": "1 device", "strategy": {}, "steps": 3, "first_loss": 5.5, "last_loss": 4.0,
               "val_loss": 4.1, "median_step_s": 0.03, "median_tokens_per_s_per_device": 8000.0, "median_mfu": 0.3,
               "median_data_wait_share": 0.05, "experts": "experts: per-expert loop (why; what it costs)",
               "planner": {"peak_flops": 1.9e11, "device": "cpu (measured)", "dtype": "float32", "predicted_step_s": 0.03,
                           "ratio": 1.0, "predicted_mfu": 0.3}}
    console = Console(width=100, record=True)
    console.print(_table(summary))
    text = console.export_text()
    assert "tokens/s per device" in text and "0.19 TFLOP/s" in text
    assert "per-expert loop" in text and "why" not in text  # the kernel, its reasons left to the header
    assert "float32 matmul timed on this cpu" in " ".join(text.split())


def test_plan_json_to_torchrun_two_processes(tmp_path, capsys):
    """The planner's JSON drives a 2-process job; its loss falls as on one process."""
    # priced as bandwise's own trainer runs it, the plan lists only layouts the trainer can run
    code, out, err = _cli(capsys, "plan", "-m", "debug-moe", "-c", "h100", "-n", "2", "--seq-len", "64", "--global-batch", "8",
                          "--engine", "bandwise", "--json")
    assert code == 0, err
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    best = json.loads(out)["best"]["strategy"]
    log = tmp_path / "m.jsonl"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
        "-m", "bandwise", "train", "--model", "debug-moe", "--strategy", str(plan), "--steps", "8", "--metrics", str(log), *SMALL, "--json",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert summary["strategy"] == best  # the plan's layout ran unchanged
    losses = _losses(log)
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.5
    assert summary["planner"]["predicted_step_s"] > 0 and summary["planner"]["measured_step_s"] > 0


def test_strategy_file_forms(tmp_path):
    from bandwise.cli.train import load_strategy

    layout = lambda **kw: {"strategy": {"dp_shard": 2, **kw}, "estimate": {"step_time_s": 1.0}}  # noqa: E731
    plan = {"searched": 3, "fitting": 2, "seconds": 0.1, "best": layout(), "best_without_pp": layout(), "verdict": {}, "top": [layout(), layout(tp=2)]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "est.json").write_text(json.dumps(layout(pp=2)))
    assert load_strategy(str(tmp_path / "plan.json"), None).dp_shard == 2
    # rows count from 1, as `plan` prints them and `plan --emit --pick N` reads them
    assert load_strategy(str(tmp_path / "plan.json"), 1).tp == 1 and load_strategy(str(tmp_path / "plan.json"), 2).tp == 2
    assert load_strategy(str(tmp_path / "est.json"), None).pp == 2
    for pick in (0, 3):
        with pytest.raises(ValueError, match=rf"--pick {pick}: .* 2 layouts .*use 1 to 2"):
            load_strategy(str(tmp_path / "plan.json"), pick)


@pytest.mark.parametrize(
    ("args", "env_world", "needle"),
    [
        (["--model", "debug", "--tp", "3"], "1", "not the 1 devices"),  # world size mismatch, names the fix
        (["--model", "debug", "--dp-shard", "2", "--ep", "2"], "2", "no experts (use ep=1)"),  # model cannot be split so
        (["--model", "debug", "--tp", "2", "--seq-len", "63"], "2", "seq_len=63"),
        (["--model", "debug", "--data", "/nonexistent/tokens.bin"], "1", "'/nonexistent/tokens.bin' does not exist"),
        (["--model", "debug-moe", "--expert-kernel", "cutlass"], "1", "expert_kernel='cutlass' is unknown; use one of: auto, grouped_mm, loop"),
        (["--model", "debug-moe", "--dtype", "fp64", "--expert-kernel", "grouped_mm"], "1", "not float64; use --expert-kernel loop or auto"),
    ],
)
def test_bad_input_is_one_line(capsys, monkeypatch, args, env_world, needle):
    monkeypatch.setenv("WORLD_SIZE", env_world)  # what torchrun would set; refusal comes before any process group
    code, out, err = _cli(capsys, "train", *args, "--steps", "1", "-q")
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("bandwise: error: ")  # a user error: no --debug hint


def test_valid_strategy_the_trainer_cannot_run(tmp_path, capsys, monkeypatch):
    """Context parallelism is valid for the planner but not executed: refused up front, with the fix."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    (tmp_path / "est.json").write_text(json.dumps({"strategy": {"cp": 2}, "estimate": {}}))
    code, _, err = _cli(capsys, "train", "--model", "debug", "--strategy", str(tmp_path / "est.json"), "--steps", "1", "-q")
    assert code == 2 and "cp=2: the trainer does not run context parallelism" in err


def test_bad_token_file(tmp_path, capsys):
    bad = tmp_path / "odd.bin"
    bad.write_bytes(b"\x00\x01\x02")  # 3 bytes: not whole uint16 tokens
    code, _, err = _cli(capsys, "train", "--model", "debug", "--data", str(bad), "--steps", "1", "-q")
    assert code == 2 and "not a whole number of uint16 tokens" in err


def test_non_finite_loss_stops_naming_the_step_or_is_skipped(tmp_path, capsys):
    blowup = ["--model", "debug", "--steps", "3", "--lr", "1e30", "--warmup", "0", "--global-batch", "2", "--micro-batch", "2", "--seq-len", "32", "--num-workers", "0", "-q"]
    code, _, err = _cli(capsys, "train", *blowup)
    assert code == 2 and "step 2: loss=" in err and "not finite" in err  # step 1's update made the weights overflow
    log = tmp_path / "m.jsonl"
    code, _, err = _cli(capsys, "train", *blowup, "--on-nonfinite", "skip", "--metrics", str(log))
    assert code == 0, err
    recs = [json.loads(line) for line in log.read_text().splitlines() if '"loss"' in line]
    assert [r["skipped"] for r in recs] == [False, True, True]
