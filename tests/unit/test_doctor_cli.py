"""`bandwise doctor run` on an unmodified script, `doctor tune-loader`, the batch-size finder."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
import textwrap

import pytest
import torch

from bandwise.doctor.tune import LoaderSetting, accumulation_for, find_max_batch, tune_loader
from bandwise.errors import BandwiseError
from entry import in_process

TRAIN = textwrap.dedent(
    """
    import sys, time, torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 96
        def __getitem__(self, i):
            time.sleep(0.002)  # storage latency
            g = torch.Generator().manual_seed(i)
            return torch.randn(16, generator=g), torch.randn(1, generator=g)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Slow(), batch_size=8):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    print(f"final loss {loss.item():.8f}")
    sys.exit(int(sys.argv[1]))
    """
)


def _bandwise(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bandwise", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # runs a training script under the doctor in a child process
def test_doctor_run_unmodified_script(tmp_path, capfd, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    monkeypatch.setattr(sys, "argv", [str(script), "0"])
    with pytest.raises(SystemExit):
        runpy.run_path(str(script), run_name="__main__")
    reference = capfd.readouterr().out.strip()
    assert reference.startswith("final loss")
    r = in_process(capfd, "doctor", "run", "--json", "--", "python", str(script), "3")
    # the script's exit code and its output are its own; its stdout moves to stderr under --json
    assert r.returncode == 3, r.stderr
    assert reference in r.stderr  # same final loss to 8 digits: results unchanged
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 3 and doc["steps"] >= 3
    assert sum(doc["breakdown"].values()) == pytest.approx(1.0)
    f = next(f for f in doc["findings"] if f["id"] == "input_bound")
    assert f["evidence"]["dataloader_share"] >= 0.2
    assert doc["medians"]["optimizer_s"] is not None and doc["medians"]["samples"] == 8

    r = in_process(capfd, "doctor", "run", "--", sys.executable, str(script), "0")
    assert r.returncode == 0, r.stderr
    assert reference in r.stdout and "input_bound" in r.stdout and "Fixes" in r.stdout


def test_doctor_run_rejects_non_python(capfd):
    bad = in_process(capfd, "doctor", "run", "--", "make", "train")
    assert bad.returncode == 2 and bad.stderr.startswith("bandwise: error: doctor run: 'make' is not a python or torchrun command")


def test_doctor_run_without_torchrun_on_the_path_is_one_line(tmp_path, capfd, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # no torchrun here
    bad = in_process(capfd, "doctor", "run", "--", "torchrun", "--nproc-per-node", "2", str(script))
    assert bad.returncode == 2 and "'torchrun' not found" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


DATASET = textwrap.dedent(
    """
    import time, torch
    from torch.utils.data import Dataset

    class Waiting(Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            time.sleep(0.004)
            return torch.full((8,), float(i))

    def make():
        return Waiting()
    """
)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_tune_loader_cli_finds_workers(tmp_path):
    (tmp_path / "data_mod.py").write_text(DATASET)
    r = _bandwise("doctor", "tune-loader", "--dataset", f"{tmp_path / 'data_mod.py'}:make", "--batch-size", "8", "--batches", "8", "--workers", "0,4", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["best"]["setting"]["num_workers"] == 4
    # 4 workers waiting in parallel: well above the serial rate, which sleep bounds at 250 samples/s
    assert doc["baseline_samples_per_s"] < 250
    assert doc["best"]["samples_per_s"] > 1.5 * doc["baseline_samples_per_s"]
    assert len(doc["results"]) == 5  # 0 workers, and 4 workers x prefetch {2, 4} x persistent {no, yes}


def test_tune_loader_user_errors(capfd):
    r = in_process(capfd, "doctor", "tune-loader", "--dataset", "nocolon", "--batch-size", "8")
    assert r.returncode == 2 and "FILE.py:NAME" in r.stderr.splitlines()[0]
    with pytest.raises(BandwiseError, match="fewer than batch_size"):
        tune_loader(list(range(3)), batch_size=8, grid=[LoaderSetting(num_workers=0)])


def test_find_max_batch_with_oom_recovery():
    """A step that 'runs out of memory' above 37 samples, the way the CUDA allocator raises."""
    tried = []

    def step(b: int) -> None:
        tried.append(b)
        if b > 37:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        torch.zeros(b, 4).sum()

    assert find_max_batch(step) == 37
    assert tried[:7] == [1, 2, 4, 8, 16, 32, 64]  # doubling, then bisection
    with pytest.raises(ValueError, match="shape"):  # a real bug is not mistaken for OOM
        find_max_batch(lambda b: (_ for _ in ()).throw(ValueError("bad shape")))
    with pytest.raises(BandwiseError, match="even micro-batch 1"):
        find_max_batch(lambda b: (_ for _ in ()).throw(torch.OutOfMemoryError("out of memory")))


@pytest.mark.parametrize("glob,micro,dp,expect", [(512, 37, 1, (32, 16)), (1024, 64, 8, (64, 2)), (96, 200, 1, (96, 1)), (60, 7, 2, (6, 5))])
def test_accumulation_keeps_global_batch(glob, micro, dp, expect):
    mb, acc = accumulation_for(glob, micro, dp)
    assert (mb, acc) == expect and mb * acc * dp == glob and mb <= micro
