"""Planted-fault suite: each fault diagnosed live and from a profiler trace; the loader fix measured.

    python benchmarks/doctor_faults.py [--steps 10] [--repeats 3]

Prints one row per fault (expected finding, live findings, trace findings, samples/s), then
applies the `input_bound` finding's DataLoader settings to the slow-loader case and prints the
measured throughput ratio (median of `--repeats` paired runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings

from bandwise.doctor.faults import EXPECTED, FAULTS, FaultConfig, run_fault
from bandwise.doctor.rules import diagnose
from bandwise.doctor.signals import signals_from_live, signals_from_trace
from bandwise.doctor.trace import analyze_trace


def diagnose_fault(fault: str, steps: int, tmp: str) -> dict:
    live = run_fault(FaultConfig(fault=fault, steps=steps))
    d_live = diagnose(signals_from_live(live["summary"]), live["summary"]["breakdown"])
    path = os.path.join(tmp, f"{fault}.pt.trace.json")
    traced = run_fault(FaultConfig(fault=fault, steps=steps), trace_path=path)
    a = analyze_trace(path)
    d_trace = diagnose(signals_from_trace(a["signals"], bf16_available=traced["bf16_available"]), a["breakdown"])
    return {"live": d_live, "trace": d_trace, "samples_per_s": live["summary"]["medians"]["samples_per_s"]}


def loader_fix_speedup(steps: int, repeats: int) -> tuple[float, dict, list[float]]:
    ratios = []
    kwargs: dict = {}
    for _ in range(repeats):
        before = run_fault(FaultConfig(fault="slow_getitem", steps=steps))
        d = diagnose(signals_from_live(before["summary"]), before["summary"]["breakdown"])
        finding = next(f for f in d.findings if f.id == "input_bound")
        kwargs = finding.apply["dataloader"]
        after = run_fault(FaultConfig(fault="slow_getitem", steps=steps, loader_kwargs=kwargs))
        ratios.append(after["summary"]["medians"]["samples_per_s"] / before["summary"]["medians"]["samples_per_s"])
    return statistics.median(ratios), kwargs, ratios


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    ok = True
    print("| fault | expected | live findings | trace findings | samples/s | correct |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for fault in FAULTS:
            r = diagnose_fault(fault, args.steps, tmp)
            want = EXPECTED[fault]
            ids = {k: [f.id for f in r[k].findings] for k in ("live", "trace")}
            correct = all((not v) if want is None else (want in v) for v in ids.values())
            ok &= correct
            fmt = lambda d: ", ".join(f"{f.id} ({f.expected_speedup:.2f}x)" if f.expected_speedup else f.id for f in d.findings) or "healthy"
            print(f"| {fault} | {want or 'healthy'} | {fmt(r['live'])} | {fmt(r['trace'])} | {r['samples_per_s']:.0f} | {'yes' if correct else 'NO'} |")
    ratio, kwargs, ratios = loader_fix_speedup(args.steps, args.repeats)
    print(f"\nslow_getitem + DataLoader({', '.join(f'{k}={v}' for k, v in kwargs.items())}): "
          f"median throughput ratio {ratio:.2f}x over {args.repeats} paired runs ({', '.join(f'{x:.2f}' for x in ratios)})")
    ok &= ratio >= 1.8
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
