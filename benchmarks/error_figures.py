"""The one line a prediction script prints for a set of errors: count, median and p90 of |error|, signed median.

Imported by the `predict_*.py` scripts, which run from this folder (`python3 benchmarks/predict_....py`)."""

from __future__ import annotations

import numpy as np


def fig(errs: list[float]) -> str:
    """'  n  median m%  p90 q%  signed s%' of predicted / measured - 1 errors."""
    a = np.abs(errs)
    return f"{len(a):4d}  median {np.median(a):6.1%}  p90 {np.percentile(a, 90):6.1%}  signed {np.median(errs):+6.1%}"
