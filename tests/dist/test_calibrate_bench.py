"""`calibrate --bench` on a gloo job of 4 CPU ranks seen as two levels of two (a "socket" and a "net"):
one level's all-gather is slowed to a planted share of its datasheet bandwidth, the bench must find that level with that factor,
and the plan made with the calibration must move its traffic off that level."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bandwise import api

pytestmark = pytest.mark.dist

PLANTED = 0.03
"""The net level's all-gather planted at this share of its datasheet bandwidth (its modelled time / 0.03):
gloo between processes of one machine reaches about 0.3 of the cluster file's figure on both levels."""

CLUSTER = """
name: cpu-two-level
description: a CPU job as two levels of two ranks (tests/dist/test_calibrate_bench.py)
device: {name: cpu, peak_flops_per_s: {bf16: 1.0e+11}, hbm_bytes: 1.7e+10, hbm_bandwidth_bytes_per_s: 2.0e+10}
levels:
- {name: socket, size: 2, bandwidth_bytes_per_s: 2.0e+9, latency_s: 2.0e-5}
- {name: net, size: 0, bandwidth_bytes_per_s: 2.0e+9, latency_s: 2.0e-5}
"""

SCRIPT = """
import sys, time
import numpy as np
import torch.distributed as dist
from bandwise.doctor import bench
from bandwise.specs.registry import get_cluster

cluster, planted, out = get_cluster(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo")
real = bench._ops
net = next(lg for lg in bench.level_groups(cluster, 4) if lg.level == "net")

def slowed_net(device):
    ops = real(device)
    gather = ops["all_gather"]

    def make(x, d, g):
        op = gather(x, d, g)
        if len({r // 2 for r in dist.get_process_group_ranks(g)}) == 1:  # a group of the socket level: as it is
            return op
        # the net's all-gather takes what a link at `planted` of the datasheet bandwidth would
        target = float(bench._model_seconds(cluster.placed(4), net, "all_gather", np.array([float(x.numel())]))[0]) / planted

        def run():
            t0 = time.perf_counter()
            op()
            time.sleep(max(0.0, target - (time.perf_counter() - t0)))
        return run
    ops["all_gather"] = make
    return ops

kw = dict(sizes=(1 << 22, 1 << 24), collectives=("all_gather",), reps=3, iters=2)
for name, ops in (("clean", real), ("planted", slowed_net)):
    bench.OPS = ops
    timings, refused = bench.run_bench(cluster, **kw)
    if dist.get_rank() == 0:
        fits = bench.fit_bench(cluster, 4, timings)
        open(f"{out}/{name}.yaml", "w").write(bench.calibration_from_bench(cluster, 4, fits, refused).to_yaml())
dist.barrier()
dist.destroy_process_group()
"""


def test_the_bench_finds_the_slowed_level_and_the_plan_moves_off_it(tmp_path: Path) -> None:
    cluster = tmp_path / "cpu.yaml"
    cluster.write_text(CLUSTER)
    script = tmp_path / "bench.py"
    script.write_text(SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", str(script), str(cluster), str(PLANTED), str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    clean, planted = (yaml.safe_load((tmp_path / f"{n}.yaml").read_text())["factors"] for n in ("clean", "planted"))
    found = {lv: (clean[f"bandwidth.{lv}"]["value"], planted[f"bandwidth.{lv}"]["value"]) for lv in ("socket", "net")}
    assert found["net"][1] == pytest.approx(PLANTED, rel=0.2), found
    # the level found is the net: the socket's factor, and the net's without the fault, are gloo's own,
    # 4-10 times the planted one on the shared 2-core machine (how many times moves with its load; the
    # planted figure does not, being a wait to a set time); twice is the margin kept against a busier one
    assert min(found["socket"][1], found["net"][0]) > 2 * PLANTED, found
    # the plan: debug-moe on the four ranks, one sequence per rank. With the clean calibration the
    # gradient all-reduce over the net is hidden behind the backward and plain data parallelism wins; ten
    # times slower than that, the net costs more than a pipeline's sends of one micro-batch's activations, and the
    # plan puts the pipeline across it (PP is the outermost dimension, the net the outermost level)
    kw = dict(global_batch=4, engine="bandwise")
    before = api.plan("debug-moe", str(cluster), 4, calibration=tmp_path / "clean.yaml", **kw)
    after = api.plan("debug-moe", str(cluster), 4, calibration=tmp_path / "planted.yaml", **kw)
    assert before.best.strategy.pp == 1 and after.best.strategy.pp == 2, (before.best.strategy.describe(), after.best.strategy.describe())
    # each is the better of the two under its own calibration: the choice follows the measured net
    cross = api.estimate("debug-moe", str(cluster), strategy=before.best.strategy, engine="bandwise", calibration=tmp_path / "planted.yaml")
    assert cross.layout.estimate.tokens_per_s_per_device < after.best.estimate.tokens_per_s_per_device
