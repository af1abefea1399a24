"""Calibrate from a trace of one layout, predict two others: issue 49's transfer check on what CI has.

Run under torchrun, gloo on 4 CPU ranks:

    PYTHONPATH=src torchrun --nproc-per-node 4 benchmarks/trace_transfer_cpu.py --out /tmp/transfer

1. measures the device as `bandwise train` does at its end (`runtime.compare.runtime_cluster`: matmul
   peak, copy bandwidth, attention at the model's shape, a timed all-reduce over the 4 ranks) and
   writes it as a cluster file, OUT/cpu-cluster.yaml;
2. runs `--runs` rounds. Each round trains the calibration layout (FSDP over 4) once under `train --profile`
   (a torch.profiler CPU trace of 3 steps per rank, `runtime.train._profiler`, into OUT/trace/round<N>; in the
   first `--traces` rounds), then the traced layout, each of the two others and TP once each, unprofiled, in an
   order that rotates from round to round. The machine is shared and its load drifts over minutes (load average
   0.5 -> 35 within one run of this script): run in blocks, one layout's runs all met one load and the next
   layout's another, and the calibrating trace, taken first, a third. Interleaved, every layout and the traces
   see the same spread of load;
3. fits the calibration from all the traces (`api.calibrating.calibrate`, the median rank of 4 x `--traces`
   rank traces; what `bandwise calibrate OUT/trace/round* --strategy OUT/fsdp4.json --model debug --cluster
   OUT/cpu-cluster.yaml --engine bandwise` does), written to OUT/calibration.yaml;
4. compares the median of each layout's runs (each run's median step) with the plan's step for that layout,
   with and without the calibration, and gives the runs' spread.

Rank 0 prints one table and writes OUT/transfer.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bandwise.api.calibrating import calibrate  # noqa: E402
from bandwise.api.doctoring import priced  # noqa: E402
from bandwise.runtime.compare import attention_efficiency, runtime_cluster  # noqa: E402
from bandwise.runtime.data import DataConfig  # noqa: E402
from bandwise.runtime.metrics import measure_matmul_flops  # noqa: E402
from bandwise.runtime.train import TrainConfig, train  # noqa: E402
from bandwise.specs.hardware import cluster_to_file_dict  # noqa: E402
from bandwise.specs.registry import get_cluster, get_model  # noqa: E402
from bandwise.specs.strategy import Strategy  # noqa: E402

MODEL = "debug"
BATCH = dict(global_batch=8, micro_batch=2, overlap_fsdp=False, overlap_dp=False)
"""Nothing overlaps here: the trace shows FSDP2's all-gathers and reduce-scatters on the step's own thread
(its `FSDP::all_gather` ranges hold the wait; gloo runs them on the CPU the ranks share), so the plans are
priced without the overlap a GPU job has (`Strategy.overlap_fsdp`, `overlap_dp`)."""
CALIBRATE_ON = ("fsdp4", Strategy(dp_shard=4, **BATCH))
PREDICT = (("fsdp2-pp2", Strategy(dp_shard=2, pp=2, **BATCH)), ("hsdp2x2", Strategy(dp_replicate=2, dp_shard=2, **BATCH)))
"""The two layouts predicted, chosen before their errors were seen (the pipeline kept from the first pass): each
runs only the kinds of work the traced layout shows (FSDP's gathers and reduce-scatters, the gradient norm's
all-reduces, the same layers' compute), in other groups, counts and shares, plus the pipeline's bubble and sends."""
ALSO = (("fsdp2-tp2", Strategy(dp_shard=2, tp=2, **BATCH)),)
"""Reported beside, not a target: tensor parallelism runs per-layer activation collectives and DTensor's
dispatch on the host, neither of which the FSDP4 trace shows, so nothing measured there calibrates them."""


def _config(steps: int, profile: str = "") -> TrainConfig:
    return TrainConfig(steps=steps, warmup=2, progress=False, compare=False, check_memory=False, profile=profile, profile_steps=3,
                       data=DataConfig(num_workers=0, persistent_workers=False))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8, help="steps of each timed run (the first is left out of its median)")
    ap.add_argument("--traces", type=int, default=3, help="rounds that trace the calibration layout first (at most --runs)")
    ap.add_argument("--reprice", action="store_true", help="no training: fit and price again from OUT's traces, cluster file and "
                    "measured runs (an earlier run's), so two versions of the model are set against the same measurements")
    args = ap.parse_args()
    if args.reprice:
        earlier = json.loads((args.out / "transfer.json").read_text())
        clus = get_cluster(str(args.out / "cpu-cluster.yaml"))
        report(args.out, clus, {r["layout"]: r["runs_s"] for r in earlier["rows"]}, name="transfer-repriced.json")
        return
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = get_model(MODEL)
    name, s0 = CALIBRATE_ON

    device, dtype = torch.device("cpu"), torch.float32
    peak = measure_matmul_flops(device, dtype, n=1024)
    attn = attention_efficiency(spec, s0.micro_batch, device, dtype, peak)
    clus = runtime_cluster(device, world, peak, dtype=dtype, attention=attn)

    layouts = (CALIBRATE_ON, *PREDICT, *ALSO)
    measured: dict[str, list[float]] = {label: [] for label, _ in layouts}
    for r in range(args.runs):
        if r < args.traces:
            train(spec, s0, _config(6, profile=str(args.out / "trace" / f"round{r + 1}")))
            dist.barrier()
        for label, s in layouts[r % len(layouts):] + layouts[:r % len(layouts)]:  # the traced layout too, unprofiled
            measured[label].append(train(spec, s, _config(args.steps)).median_step_s)
    dist.barrier()
    if rank != 0:
        dist.destroy_process_group()
        return

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cpu-cluster.yaml").write_text(yaml.safe_dump(cluster_to_file_dict(clus), sort_keys=False))
    (args.out / f"{name}.json").write_text(json.dumps(s0.to_dict()))
    report(args.out, clus, measured)
    dist.destroy_process_group()


def report(out: Path, clus, measured: dict[str, list[float]], name: str = "transfer.json") -> None:
    """Fit the calibration from OUT/trace, price every layout with and without it against its measured runs."""
    s0 = CALIBRATE_ON[1]
    trace_dir = out / "trace"
    cal = calibrate(sorted(trace_dir.glob("**/rank*.json")), strategy=s0, model=MODEL, cluster=clus, engine="bandwise").calibration
    (out / name.replace("transfer", "calibration").replace(".json", ".yaml")).write_text(cal.to_yaml())
    rows = []
    print(f"{len(sorted(trace_dir.glob('**/rank*.json')))} rank traces of {s0.describe()}")
    for label, s in (CALIBRATE_ON, *PREDICT, *ALSO):
        med = statistics.median(measured[label])
        before = priced(s, MODEL, clus, None, engine="bandwise")[3].step_time_s
        after = priced(s, MODEL, clus, None, engine="bandwise", calibration=cal)[3].step_time_s
        rows.append({"layout": label, "strategy": s.describe(), "runs_s": measured[label], "measured_median_s": med,
                     "target": label in dict(PREDICT), "spread": (max(measured[label]) - min(measured[label])) / med, "datasheet_s": before, "calibrated_s": after, "calibrated_error": after / med - 1, "datasheet_error": before / med - 1})
    traced = priced(s0, MODEL, clus, None, engine="bandwise", calibration=cal)[3].step_time_s
    result = {"calibrated_on": s0.describe(), "factors": {f.name: f.value for f in cal.factors}, "evidence": cal.evidence,
              "calibrated_plan_of_traced_layout_s": traced, "cluster": cluster_to_file_dict(clus), "rows": rows,
              "torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count()}
    (out / name).write_text(json.dumps(result, indent=1))
    print(f"calibrated on {s0.describe()}: {cal.evidence}")
    for f in cal.factors:
        print(f"  {f.name:24s} {f.value:8.3f}  {f.fitted_from}")
    print(f"calibrated plan of the traced layout: {traced:.3f} s")
    print(f"{'layout':12s} {'measured (median of 5)':>24s} {'datasheet plan':>15s} {'calibrated plan':>16s} {'error':>8s}")
    for r in rows:
        print(f"{r['layout']:12s} {r['measured_median_s']:24.3f} {r['datasheet_s']:15.3f} {r['calibrated_s']:16.3f} {r['calibrated_error']:+8.1%}"
              f"   runs: {', '.join(f'{x:.3f}' for x in r['runs_s'])} (spread {r['spread']:.0%} of the median)")


if __name__ == "__main__":
    main()
