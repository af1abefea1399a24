"""Calibrate from one measured run, predict the others: the published runs' figure for `bandwise calibrate --runs`.

For every model with runs at two or more scales or layouts in one source, on one device: calibrate from
each run alone (`plan.calibrate.fit_runs`, one factor for the stack) and predict each of the model's other
runs; beside it, the uncalibrated prediction and one scalar (the prediction times the calibrating run's
measured / predicted). Then across models: calibrate on one model, predict the other models of the same
source, device and engine. Prints median and p90 |error| over all (calibrating, predicted) pairs.

    PYTHONPATH=src python3 benchmarks/calibration_runs.py [--runs FILE]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np

from bandwise.plan.calibrate import Measured, fit_runs, predict_calibrated
from bandwise.plan.validate import convert, load_runs, predict


def stats(errors: list[float]) -> str:
    e = np.abs(errors)
    return f"{len(e):4d} pairs  median {np.median(e):6.1%}  p90 {np.percentile(e, 90):6.1%}"


FIELDS = ("tp", "pp", "cp", "ep", "dp_shard", "dp_replicate", "zero", "precision", "micro_batch", "recompute", "fp8_recipe", "virtual_stages", "schedule")
"""The stated fields of a run's layout (`Case.fixed`) that a pair of runs may differ in."""


def differs(i, j) -> tuple[str, ...]:
    """What differs between two runs of one model: the stated layout fields, the device count, the global batch, the sequence."""
    out = [k for k in FIELDS if i.fixed.get(k) != j.fixed.get(k)]
    out += [name for name, a, b in (("devices", i.devices, j.devices), ("global_batch", i.global_batch, j.global_batch),
                                    ("seq_len", i.model.seq_len, j.model.seq_len)) if a != b]
    return tuple(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default=None, help="A runs file in the published_runs schema (default: the shipped runs).")
    args = ap.parse_args()
    start = time.perf_counter()
    runs, sources = load_runs(args.runs)
    cases = []
    for run in runs:
        try:
            cases.append(convert(run, sources))
        except Exception:  # noqa: BLE001 - a run the planner cannot read is not a pair
            continue
    base = {c.id: predict(c) for c in cases}
    cases = [c for c in cases if base[c.id].predicted is not None]
    cals = {c.id: fit_runs([Measured(case=c, tokens_per_s_per_device=c.target)]) for c in cases}
    stack = lambda c: (c.source, c.cluster.device.name, c.engine)  # noqa: E731
    same_model, other_model, by_difference = defaultdict(list), defaultdict(list), defaultdict(list)
    for i in cases:
        for j in cases:
            if i is j or stack(i) != stack(j):
                continue
            scalar = base[j.id].predicted * i.target / base[i.id].predicted / j.target - 1
            calibrated = predict_calibrated(j, cals[i.id]).predicted / j.target - 1
            bucket = same_model if i.model.name == j.model.name else other_model
            bucket["none"].append(base[j.id].error)
            bucket["one scalar"].append(scalar)
            bucket["calibrated"].append(calibrated)
            if bucket is same_model:
                by_difference[differs(i, j)].append(calibrated)
    models = {(stack(c), c.model.name) for c in cases}
    pairs = {k for k in models if sum((stack(c), c.model.name) == k for c in cases) >= 2}
    print(f"{len(cases)} runs predicted; {len(pairs)} models with runs at two or more scales or layouts in one source, device and engine")
    for title, bucket in (("same model, other scale or layout", same_model), ("other model, same source, device and engine", other_model)):
        print(title)
        for name in ("none", "one scalar", "calibrated"):
            print(f"  {name:11s} {stats(bucket[name])}")
    print("same model, `calibrate --runs` from one run, by what differs between the calibrating run and the predicted one (30 pairs or more)")
    for key, errs in sorted(by_difference.items(), key=lambda kv: -len(kv[1])):
        if len(errs) >= 30:
            print(f"  {', '.join(key) or 'no stated field (recipe, dispatcher, version)':60s} {stats(errs)}")
    # two runs of a model at different scales (the smallest and the largest device count) identify more where
    # their communication weighs differently (`fit_runs`); predict the model's other runs
    two = defaultdict(list)
    fitted_apart = 0
    for key in sorted(pairs):
        runs_of = sorted((c for c in cases if (stack(c), c.model.name) == key), key=lambda c: c.devices)
        if len(runs_of) < 3 or runs_of[0].devices == runs_of[-1].devices:
            continue
        ends = [runs_of[0], runs_of[-1]]
        cal = fit_runs([Measured(case=c, tokens_per_s_per_device=c.target) for c in ends])
        fitted_apart += any(not f.confounded_with for f in cal.factors)
        for j in runs_of[1:-1]:
            two["none"].append(base[j.id].error)
            two["two runs"].append(predict_calibrated(j, cal).predicted / j.target - 1)
            one = cals[ends[0].id]
            two["one run (the smallest)"].append(predict_calibrated(j, one).predicted / j.target - 1)
    print(f"same model, calibrated from its smallest and largest scale, predicting the scales between "
          f"(a factor fitted apart from the speed in {fitted_apart} of the models)")
    for name in ("none", "one run (the smallest)", "two runs"):
        print(f"  {name:22s} {stats(two[name])}")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
