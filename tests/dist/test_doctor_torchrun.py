"""`bandwise doctor run -- torchrun ...`: every rank under the monitor, the report over all of them,
and the rank whose input pipeline holds the others back, on a real two-process DDP job (gloo, CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.dist

SCRIPT = """
import os, time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

dist.init_process_group("gloo")
rank = dist.get_rank()
SLOW = float(os.environ.get("SLOW_S", "0")) if rank == int(os.environ.get("SLOW_RANK", "-1")) else 0.0

class Data(Dataset):
    def __len__(self):
        return int(os.environ.get("SAMPLES", "64"))
    def __getitem__(self, i):
        time.sleep(SLOW)  # this rank's input pipeline is slower
        return torch.randn(32), torch.randn(1)

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(Data(), batch_size=8):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
# Without it about one run in seven aborts at exit on torch 2.13 + gloo ("terminate called without an
# active exception": a gloo worker thread still holds the last gradient all-reduce; cf. pytorch #179291).
dist.barrier()
dist.destroy_process_group()
"""


def doctor(tmp_path: Path, env: dict[str, str]) -> dict:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    cmd = [sys.executable, "-m", "bandwise", "doctor", "run", "--json", "--", sys.executable, "-m", "torch.distributed.run",
           "--standalone", "--nproc-per-node", "2", str(script)]
    import os

    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, **env, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:  # the lines that say why a rank died, not only torchrun's summary at the end
        why = [line for line in proc.stderr.splitlines() if any(w in line for w in ("Error", "error", "terminate", "what()", "Fatal", "Abort"))]
        raise AssertionError("\n".join(why[:30]) + "\n...\n" + proc.stderr[-1500:])
    return json.loads(proc.stdout)


def test_every_rank_is_monitored_and_the_slow_input_is_named(tmp_path: Path) -> None:
    # 80 ms more input per 8-sample batch on rank 1, for 60 steps (about 5 s)
    doc = doctor(tmp_path, {"SLOW_RANK": "1", "SLOW_S": "0.01", "SAMPLES": "480"})
    assert doc["ranks"] == 2
    # named while the job ran, before its last step
    final_steps = {r["rank"]: r["steps"] for r in doc["signals"]["per_rank_live"]}
    assert len(doc["live"]) == 1, (doc["live"], final_steps)
    note = doc["live"][0]
    assert note["event"] == "named" and note["rank"] == 1 and 10 <= note["step"] < final_steps[1], (note, final_steps)
    rows = doc["signals"]["per_rank_live"]
    assert [r["rank"] for r in rows] == [0, 1] and all(r["steps"] >= 3 for r in rows)
    assert rows[1]["data_wait_ms"] - rows[0]["data_wait_ms"] > 60
    f = next(f for f in doc["findings"] if f["id"] == "straggler")
    assert f["evidence"]["rank"] == "rank 1" and "DataLoader" in f["fix"]


def test_balanced_ranks_name_no_straggler(tmp_path: Path) -> None:
    doc = doctor(tmp_path, {"SAMPLES": "240"})
    assert doc["ranks"] == 2 and all(f["id"] != "straggler" for f in doc["findings"])
    assert doc["live"] == [], doc["live"]


def test_the_launcher_and_the_script_are_told_apart() -> None:
    from bandwise.cli.doctor import torchrun_split

    assert torchrun_split(["torchrun", "--nproc-per-node", "8", "train.py", "--lr", "1"]) == (["torchrun", "--nproc-per-node", "8"], ["train.py", "--lr", "1"])
    assert torchrun_split(["python", "-m", "torch.distributed.run", "--standalone", "-m", "pkg.train", "x"]) == (
        ["python", "-m", "torch.distributed.run", "--standalone"], ["-m", "pkg.train", "x"])
    assert torchrun_split(["python", "train.py"]) is None
