"""Prediction for the NeMo 2 performance-summary rows of the 25.04 and 25.07 containers (FP8 current scaling on
GB200), made before the data states their gradient dtype: today they take the engine's default, fp32 main gradients.

What the source says: NeMo's performance scripts (scripts/performance/llm/pretrain_<model>.py) build every
pretraining job through one helper, which for FP8 sets `recipe.trainer.plugins.grad_reduce_in_fp32 = False` after
choosing the FP8 plugin: `set_primary_perf_configs` in scripts/performance/utils.py at v2.3.0 (the FP8 branch), and
`set_precision_configs` in scripts/performance/helpers.py at v2.4.0 (for every dtype). The 25.04 table's FP8 current
scaling came with r2.3.0 (CHANGELOG.md, "[NeMo 2.0] Interface for using MXFP8 and FP8 current scaling recipes",
cherry-picked into r2.3.0) and the 25.07 performance scripts are v2.4.0's ("perf scripts 25.07 refactor", v2.4.0's
CHANGELOG).

`--container 25.02`: the eight FP8 rows of 25.02 (B200). Before v2.3.0 the scripts lived in scripts/llm/performance,
and each pretrain_<model>.py at v2.2.0 sets, for fp8, `recipe.trainer.plugins = bf16_with_fp8_mixed()` and then
`grad_reduce_in_fp32 = False` (since "callbacks and bf16 grad", #11985, 2025-01-30, before the 25.02 container).

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_nemo2_grad_reduce.py [--container 25.02]
"""

from __future__ import annotations

import argparse

from error_figures import restated
from predict_mbridge_grad_reduce import bf16_grads

CONTAINERS = ("Container NeMo 25.04", "Container NeMo 25.07")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--container", choices=["25.02"], help="the 25.02 rows instead of 25.04 and 25.07")
    containers = ("Container NeMo 25.02",) if ap.parse_args().container else CONTAINERS
    restated(bf16_grads("nemo2_perf_summary", containers), "rows now stating bf16 gradients")


if __name__ == "__main__":
    main()
