"""A planted fault found from a training job's own trace: issue 49's planted-fault check, the trace half.

Run under torchrun, gloo on 4 CPU ranks seen as two levels of two (a "socket" and a "net"):

    PYTHONPATH=src torchrun --nproc-per-node 4 benchmarks/planted_trace_cpu.py --out /tmp/planted

1. measures the link over the job (`runtime.compare.runtime_cluster`) and writes it as two levels of two ranks,
   OUT/cpu-two-level.yaml, with `debug` widened (`WIDE`) as OUT/debug-wide.yaml;
2. trains that model as HSDP (FSDP over the two ranks of a socket, replicated across the net) under
   `train --profile` in bf16, twice: as it is, and with the socket's collectives slowed to a planted share of
   its bandwidth (each all-gather and reduce-scatter FSDP issues inside a socket lasts what `cost.comm` gives
   for its bytes on a link at that share: the link is slow, whatever the collective); then times the
   collectives as `calibrate --bench` does, under the same fault, into OUT/bench.yaml;
3. fits a calibration from each run's traces (`api.calibrating.calibrate`, what `bandwise calibrate
   OUT/<run>/trace --strategy ... --model OUT/debug-wide.yaml --cluster OUT/cpu-two-level.yaml --engine bandwise`
   does), writes OUT/<run>.yaml and OUT/planted.json, and prints each level's factor.

The socket's factor from the planted run should be the planted share; the net's, measured from the
replicas' all-reduce, gloo's own, as in the clean run. A run takes 75-105 s of the 2-core container, so it is a
benchmark, not a test (figures: benchmarks/RESULTS.md, "A planted fault found from the job's own trace").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from dataclasses import replace

import numpy as np
import torch
import torch.distributed as dist
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bandwise.api.calibrating import calibrate  # noqa: E402
from bandwise.cost import comm  # noqa: E402
from bandwise.cost.calibrated import calibrated_cluster  # noqa: E402
from bandwise.doctor import bench  # noqa: E402
from bandwise.doctor.bench import level_groups  # noqa: E402
from bandwise.runtime.compare import attention_efficiency, runtime_cluster  # noqa: E402
from bandwise.runtime.data import DataConfig  # noqa: E402
from bandwise.runtime.metrics import measure_matmul_flops  # noqa: E402
from bandwise.runtime.train import TrainConfig, train  # noqa: E402
from bandwise.specs.calibration import BANDWIDTH, Calibration, Factor, load_calibration  # noqa: E402
from bandwise.specs.hardware import Cluster, cluster_to_file_dict  # noqa: E402
from bandwise.specs.registry import get_model  # noqa: E402
from bandwise.specs.strategy import Strategy  # noqa: E402

WIDE = dict(name="debug-wide", hidden=512, ffn=1408, layers=2, heads=8, kv_heads=4)
"""`debug` made wider and shallower: a layer's FSDP all-gather carries 12 MB (fp32), so its time is mostly
bytes rather than gloo's per-message latency, and the bandwidth a fault slows shows in it."""
STRATEGY = Strategy(dp_replicate=2, dp_shard=2, global_batch=8, micro_batch=2, overlap_fsdp=False, overlap_dp=False)
"""FSDP's groups are the consecutive pairs (0, 1) and (2, 3), one socket each (`specs.strategy.DIMS`, innermost first, puts dp_shard
inside dp_replicate); the replicas' all-reduce crosses the net. Nothing overlaps on gloo (see
benchmarks/trace_transfer_cpu.py), so the plan is priced without overlap."""
SLOWED = (("all_gather_single", "all_gather"), ("all_gather_into_tensor", "all_gather"),
          ("reduce_scatter_single", "reduce_scatter"), ("reduce_scatter_tensor", "reduce_scatter"))
"""The c10d entry points FSDP2 issues its collectives through (`DefaultAllGather`/`DefaultReduceScatter` in
torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: `all_gather_single` and `reduce_scatter_single`
in torch 2.13, `all_gather_into_tensor` and `reduce_scatter_tensor` before), and the cost model's collective for each."""


def two_levels(clus: Cluster) -> Cluster:
    """The measured one-level cluster (`runtime.compare.runtime_cluster`) as two levels of two ranks, each with
    the link measured over the job: the datasheet the fault is planted against and the fit reads."""
    lv = clus.levels[0]
    return replace(clus, name="cpu-two-level", levels=(replace(lv, name="socket", size=2), replace(lv, name="net", size=0)))


def plant(cluster: Cluster, world: int, level: str, share: float) -> dict:
    """Slow every FSDP collective whose group lies inside one group of `level` to what the cost model gives
    for it on a link at `share` of the level's bandwidth (latency as it is); returns the originals, to put back."""
    placed = calibrated_cluster(cluster.placed(world), Calibration(device=cluster.device.name, factors=(Factor(name=BANDWIDTH + level, value=share),)))
    lg = next(g for g in level_groups(cluster, world) if g.level == level)
    inside = [set(g) for g in lg.groups]
    real = {}
    for name, kind in SLOWED:
        if not hasattr(dist, name):
            continue
        real[name] = fn = getattr(dist, name)

        def slowed(*args, _fn=fn, _kind=kind, **kwargs):
            t0 = time.perf_counter()
            work = _fn(*args, **kwargs)
            group = kwargs.get("group", args[2] if len(args) > 2 else None)
            ranks = set(dist.get_process_group_ranks(group)) if group is not None else set(range(world))
            if not any(ranks <= g for g in inside):
                return work
            if work is not None:
                work.wait()
            tensors = [t for t in (*args[:2], *kwargs.values()) if hasattr(t, "numel")]
            nbytes = float(max(t.numel() * t.element_size() for t in tensors))  # the full buffer: gathered, or to scatter
            model = float(getattr(comm, f"{_kind}_time")(placed, np.array([nbytes]), np.asarray(lg.stride), np.asarray(lg.size))[0])
            time.sleep(max(0.0, model - (time.perf_counter() - t0)))
            return work
        setattr(dist, name, slowed)
    return real


def _config(steps: int, profile: str) -> TrainConfig:
    return TrainConfig(steps=steps, warmup=2, dtype="bf16", progress=False, compare=False, check_memory=False, profile=profile, profile_steps=3,
                       data=DataConfig(num_workers=0, persistent_workers=False))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--planted", type=float, default=0.02, help="the socket's bandwidth share in the planted run")
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = replace(get_model("debug"), **WIDE)
    model_file = args.out / "debug-wide.yaml"
    device, dtype = torch.device("cpu"), torch.bfloat16  # the job's compute dtype (`_config`)
    peak = measure_matmul_flops(device, dtype, n=1024)
    cluster = two_levels(runtime_cluster(device, world, peak, dtype=dtype, attention=attention_efficiency(spec, STRATEGY.micro_batch, device, dtype, peak)))
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        model_file.write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
        (args.out / "cpu-two-level.yaml").write_text(yaml.safe_dump(cluster_to_file_dict(cluster), sort_keys=False))
    dist.barrier()
    for run, share in (("clean", None), ("planted", args.planted)):
        real = plant(cluster, world, "socket", share) if share else {}
        try:
            train(spec, STRATEGY, _config(args.steps, profile=str(args.out / run / "trace")))
            dist.barrier()
            if share:  # `calibrate --bench` under the same fault
                timings, refused = bench.run_bench(cluster, sizes=(1 << 22, 1 << 24), collectives=("all_gather",), reps=3, iters=2)
                if rank == 0:
                    fits = bench.fit_bench(cluster, world, timings)
                    (args.out / "bench.yaml").write_text(bench.calibration_from_bench(cluster, world, fits, refused).to_yaml())
        finally:
            for name, fn in real.items():
                setattr(dist, name, fn)
        dist.barrier()
    if rank == 0:
        found = {}
        for run in ("clean", "planted"):
            cal = calibrate(sorted((args.out / run / "trace").glob("rank*.json")), strategy=STRATEGY, model=str(model_file), cluster=cluster,
                            engine="bandwise").calibration
            (args.out / f"{run}.yaml").write_text(cal.to_yaml())
            found[run] = {f.name: f.value for f in cal.factors}
            print(f"{run}: {cal.evidence}")
            for f in cal.factors:
                print(f"  {f.name:24s} {f.value:8.4f}  {f.fitted_from}")
        found["bench"] = {f.name: f.value for f in load_calibration(args.out / "bench.yaml").factors}
        print("bench (planted): " + ", ".join(f"{k} {v:.4f}" for k, v in found["bench"].items()))
        (args.out / "planted.json").write_text(json.dumps({"planted": args.planted, "strategy": STRATEGY.describe(), "factors": found}, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
