"""Which factors several measured runs of one model and stack can identify, and whether fitting them predicts a held-out run better.

For every model with three or more runs in one source, device and engine (the shipped published runs),
the Jacobian of each run's log(predicted / measured) throughput in each factor's log: the stack's speed
(every term at once, `plan.calibrate._trial`), and apart from it the attention core, the memory-bound
kernels, the host gaps and the bandwidth of the outermost level the runs cross. Columns are finite
differences at `plan.calibrate.STEP`, from the model as `validate` prices it. A factor is identified
as `fit_runs` identifies the bandwidth today: it must move some run by `MIN_SENSITIVITY` per e-fold, and
its column must stand at least `MIN_ANGLE` off the span of the columns already chosen. Factors are chosen
greedily, the most independent first, and at most one fewer than the runs.

Leave one out: calibrate on the model's other runs, predict the held-out one. The fit uses the
linearised model (log error = e + J x, least squares), with the speed alone or with the identified
factors. It is a first-order estimate of what a full fit (`fit_runs`'s Gauss-Newton) gives, and is
reported as such.

    PYTHONPATH=src python3 benchmarks/calibration_identify.py          # linearised, every model (about 1 min)
    PYTHONPATH=src python3 benchmarks/calibration_identify.py --fit    # also fit_runs itself, models of 3 to 6 runs

`--fit` also holds out each run of the models with 3 to 6 runs and fits the others with `fit_runs` itself.
That is the full Gauss-Newton fit, with the factors `identify` chooses, set beside the speed alone
(`fit_speed`).
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter, defaultdict

import numpy as np

from bandwise.plan.calibrate import MIN_ANGLE, MIN_SENSITIVITY, STEP, reached
from bandwise.plan.calibrate import Measured, fit_runs, fit_speed, predict_calibrated
from bandwise.errors import BandwiseError
from bandwise.plan.validate import convert, load_runs, predict
from bandwise.specs.calibration import BANDWIDTH, TERM_FACTORS, Calibration, Factor

APART = ("attention", "elementwise", "host_gap")


def trial(case, name: str | None, levels: tuple[str, ...]) -> Calibration:
    """Every term at 1, `name` (a factor, or None: the whole stack) e^STEP faster."""
    up = math.exp(STEP)
    names = [*TERM_FACTORS, *(BANDWIDTH + lv for lv in levels)]
    return Calibration(device=case.cluster.device.name,
                       factors=tuple(Factor(name=n, value=up if name is None or n == name else 1.0) for n in names))


def log_error(case, cal) -> float:
    return math.log(predict_calibrated(case, cal).predicted / case.target)


def choose(J: np.ndarray, names: list[str], limit: int) -> list[int]:
    """Column 0 (the speed) and, greedily, the columns most independent of those chosen (MIN_ANGLE, MIN_SENSITIVITY)."""
    chosen = [0]
    while len(chosen) < limit:
        basis, _ = np.linalg.qr(J[:, chosen])
        best, best_off = None, 0.0
        for k in range(1, J.shape[1]):
            if k in chosen or np.max(np.abs(J[:, k])) < MIN_SENSITIVITY:
                continue
            off = J[:, k] - basis @ (basis.T @ J[:, k])
            angle = math.asin(min(1.0, float(np.linalg.norm(off)) / max(float(np.linalg.norm(J[:, k])), 1e-12)))
            if angle >= MIN_ANGLE and float(np.linalg.norm(off)) > best_off:
                best, best_off = k, float(np.linalg.norm(off))
        if best is None:
            break
        chosen.append(best)
    return chosen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true", help="also hold out runs of models of 3 to 6 runs and fit the rest with fit_runs")
    ap.add_argument("--spare", type=int, default=0, help="fit_runs(spare=): runs left over beyond the factors fitted")
    args = ap.parse_args()
    start = time.perf_counter()
    runs, sources = load_runs(None)
    cases = []
    for run in runs:
        try:
            cases.append(convert(run, sources))
        except Exception:  # noqa: BLE001 - a run the planner cannot read is not in a group
            continue
    cases = [c for c in cases if predict(c).predicted is not None]
    groups = defaultdict(list)
    for c in cases:
        groups[(c.source, c.cluster.device.name, c.engine, c.model.name)].append(c)
    groups = {k: v for k, v in groups.items() if len(v) >= 3}
    identified, loo, fit, chose = Counter(), defaultdict(list), defaultdict(list), Counter()
    failed = 0
    for key, group in sorted(groups.items()):
        levels = tuple(reached([Measured(case=c, tokens_per_s_per_device=c.target) for c in group]))
        names = ["speed", *APART, *([BANDWIDTH + levels[-1]] if levels else [])]
        e = np.array([log_error(c, trial(c, "__none__", levels)) for c in group])
        J = np.stack([np.array([log_error(c, trial(c, None if n == "speed" else n, levels)) for c in group]) - e for n in names], axis=1) / STEP
        chosen = choose(J, names, len(group) - 1)
        identified[tuple(sorted(names[k] for k in chosen[1:]))] += 1
        for i in range(len(group)):
            rest = [j for j in range(len(group)) if j != i]
            for label, cols in (("speed alone", [0]), ("identified factors", choose(J[rest], names, len(rest) - 1)),
                                ("identified, as many as runs", choose(J[rest], names, len(rest)))):
                x, *_ = np.linalg.lstsq(J[np.ix_(rest, cols)], -e[rest], rcond=None)
                loo[label].append(math.expm1(e[i] + J[i, cols] @ x))
            loo["none"].append(math.expm1(e[i]))
            if args.fit and len(group) <= 6:
                others = [Measured(case=group[j], tokens_per_s_per_device=group[j].target) for j in rest]
                speed, _ = fit_speed(others, tuple(reached(others)))
                one = Calibration(device=group[i].cluster.device.name, factors=tuple(
                    Factor(name=n, value=speed) for n in (*TERM_FACTORS, *(BANDWIDTH + lv for lv in reached(others)))))
                fit["none"].append(math.expm1(e[i]))
                fit["speed alone"].append(predict_calibrated(group[i], one).predicted / group[i].target - 1)
                try:
                    cal = fit_runs(others, spare=args.spare) if args.spare else fit_runs(others)
                except BandwiseError:  # a fit that cannot be written as a file: counted, and the speed alone stands in
                    failed += 1
                    cal = one
                fit["fit_runs"].append(predict_calibrated(group[i], cal).predicted / group[i].target - 1)
                fit["linearised, identified"].append(loo["identified factors"][-1])
                apart = sorted(f.name for f in cal.factors if not f.confounded_with and f.name != "gemm")
                chose[tuple(apart)] += 1
    print(f"{len(groups)} models with 3 or more runs in one source, device and engine; factors identified apart from the stack's speed:")
    for names, n in identified.most_common():
        print(f"  {', '.join(names) or '(speed only)':60s} {n:4d} models")
    print("leave one out (linearised fit on the model's other runs), |error| of the held-out run:")
    for label in ("none", "speed alone", "identified factors", "identified, as many as runs"):
        a = np.abs(loo[label])
        print(f"  {label:20s} {len(a):4d} runs  median {np.median(a):6.1%}  p90 {np.percentile(a, 90):6.1%}")
    if args.fit:
        print("held out from models of 3 to 6 runs, the others fitted by fit_runs (full fit), |error| of the held-out run:")
        for label in ("none", "speed alone", "linearised, identified", "fit_runs"):
            a = np.abs(fit[label])
            print(f"  {label:24s} {len(a):4d} runs  median {np.median(a):6.1%}  p90 {np.percentile(a, 90):6.1%}")
        print(f"  fit_runs refused {failed} of the fits (a factor past what a file may hold; the speed alone stands in)")
        print("  factors fit_runs fitted apart: " + "; ".join(f"{', '.join(k) or 'speed only'}: {n}" for k, n in chose.most_common()))
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
