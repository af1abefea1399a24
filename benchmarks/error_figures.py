"""The one line a prediction script prints for a set of errors: count, median and p90 of |error|, signed median.

Imported by the `predict_*.py` scripts, which run from this folder (`python3 benchmarks/predict_....py`)."""

from __future__ import annotations

import numpy as np


def fig(errs: list[float]) -> str:
    """'  n  median m%  p90 q%  signed s%' of predicted / measured - 1 errors."""
    a = np.abs(errs)
    return f"{len(a):4d}  median {np.median(a):6.1%}  p90 {np.percentile(a, 90):6.1%}  signed {np.median(errs):+6.1%}"


def compare(before: dict, after: dict, groups: dict[str, list[str]]) -> list[str]:
    """Print each run whose error moved (before -> after, `RunResult`s by id), then `fig` before and after over
    each named group of run ids and over every priced run; return the ids that moved."""
    moved = [k for k in before if before[k].error != after[k].error]
    for k in moved:
        print(f"{k:60s} {before[k].error:+7.1%} -> {after[k].error:+7.1%}")
    every = [k for k in before if before[k].error is not None]
    for name, ids in {**groups, "all priced runs": every}.items():
        ids = [k for k in ids if before[k].error is not None]
        print(f"{name}: {fig([before[k].error for k in ids])}  ->  {fig([after[k].error for k in ids])}")
    return moved
