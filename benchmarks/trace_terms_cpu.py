"""Trace each layout of the CPU/gloo transfer check and set its classes beside the plan calibrated from FSDP4's trace.

Run after `benchmarks/trace_transfer_cpu.py --out OUT` (which leaves OUT/trace, OUT/cpu-cluster.yaml), under torchrun:

    PYTHONPATH=src torchrun --nproc-per-node 4 benchmarks/trace_terms_cpu.py --out OUT

Each predicted layout is trained with `train --profile` (3 profiled steps a rank) into OUT/trace-<layout>; then, with
`--compare` and no torchrun, rank 0's table: the trace's classes (median rank, ms a step: GEMM, attention,
memory-bound, idle, and each kind of collective's exposed time) beside the calibrated plan's terms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trace_transfer_cpu import CALIBRATE_ON, MODEL, PREDICT, _config  # noqa: E402


def trace(out: Path) -> None:
    import torch.distributed as dist

    from bandwise.runtime.train import train
    from bandwise.specs.registry import get_model

    dist.init_process_group("gloo")
    spec = get_model(MODEL)
    for label, s in PREDICT:
        train(spec, s, _config(6, profile=str(out / f"trace-{label}")))
        dist.barrier()
    dist.destroy_process_group()


def compare(out: Path) -> None:
    from bandwise.api.calibrating import calibrate
    from bandwise.api.doctoring import priced, read_traces
    from bandwise.doctor.measured import StepClasses, median_classes
    from bandwise.specs.registry import get_cluster

    clus = get_cluster(str(out / "cpu-cluster.yaml"))
    s0 = CALIBRATE_ON[1]
    cal = calibrate(sorted((out / "trace").glob("**/rank*.json")), strategy=s0, model=MODEL, cluster=clus, engine="bandwise").calibration
    for f in cal.factors:
        print(f"  {f.name:16s} {f.value:8.3f}")
    for label, s in (("fsdp4", s0), *PREDICT):
        d = out / ("trace" if label == "fsdp4" else f"trace-{label}")
        paths = sorted(d.glob("**/rank*.json"))
        ranks = [StepClasses.of(a["signals"]) for a in read_traces(paths, 1 << 34, 1)]
        m = median_classes(ranks)
        est = priced(s, MODEL, clus, None, engine="bandwise", calibration=cal)[3]
        comm = ", ".join(f"{k} {v:.1f}" for k, v in sorted(m.comm_exposed_ms.items()))
        print(f"{label}: measured step {m.step_ms:.1f} (ranks {', '.join(f'{r.step_ms:.0f}' for r in ranks)}): gemm {m.gemm_ms:.1f} "
              f"attn {m.attention_ms:.1f} mem {m.memory_ms:.1f} idle {m.idle_ms:.1f} | {comm}")
        terms = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in est.breakdown.items() if abs(v) > 1e-6)
        print(f"   plan {est.step_time_s * 1e3:.1f}: {terms}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--compare", action="store_true")
    a = ap.parse_args()
    compare(a.out) if a.compare else trace(a.out)
