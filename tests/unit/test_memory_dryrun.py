"""The planner's per-rank peak against the dry run's measurement: the CI subset of
benchmarks/memory_dryrun.py (issue 16).

Each layout runs real training steps of the real-width model (two or four layers) at its true
world size on fake tensors, measured by torch's memory tracker. The goal the issue sets is every
layout within 10% and the model states equal; these are the layouts of the table in
benchmarks/RESULTS.md ("Dry run against the memory model") that meet it, kept here so that a
change to the cost model or the runtime that breaks the agreement fails CI. The layouts that do
not yet meet it are listed there with the mechanism that separates them.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

_spec = importlib.util.spec_from_file_location("memory_dryrun", Path(__file__).resolve().parents[2] / "benchmarks" / "memory_dryrun.py")
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)
LAYOUTS, run_one = _bench.LAYOUTS, _bench.run_one

pytestmark = pytest.mark.slow  # real training steps of full-width models on fake tensors, 3-6 s a layout

GOAL = 0.10
"""Issue 16: every layout's analytical peak within 10% of the measured one."""

CI_SUBSET = [
    # each row misses the goal with the runtime as it was before one of its fixes (RESULTS.md):
    ("llama3-8b", 2, 8192, "FSDP8", 2, "none"),
    ("llama3-8b", 2, 8192, "FSDP64", 1, "none"),  # root FSDP unit kept the embedding and head gathered: +18.1%
    ("llama3-8b", 2, 8192, "FSDP8·TP2", 1, "none"),
    ("llama3-70b", 2, 8192, "FSDP16·TP8", 1, "none"),  # torch's TP embedding gradient, whole V x h a rank: +21.2%
    ("llama3-8b", 4, 8192, "FSDP4·PP2 1F1B", 1, "none"),  # last stage kept a global batch of logits
    ("gpt3-175b", 8, 2048, "FSDP8·TP8·PP4 1F1B", 2, "selective"),
    ("mixtral-8x7b", 4, 4096, "FSDP8·PP2·EP4 1F1B", 1, "none"),
    ("deepseek-v3", 4, 4096, "FSDP64·EP64", 1, "full"),  # MLA fell back to math attention, T x T fp32 scores a head
]


def _layout(model, layers, seq, describe, mb, recompute):
    for name, n, t, s in LAYOUTS:
        if (name, n, t, s.describe(), s.micro_batch, s.recompute) == (model, layers, seq, describe, mb, recompute):
            return name, n, t, s
    raise LookupError(f"{model} {describe} mb {mb} {recompute} is not in benchmarks/memory_dryrun.py")


@pytest.mark.parametrize("row", CI_SUBSET, ids=[f"{r[0]}-{r[3]}-mb{r[4]}-{r[5]}" for r in CI_SUBSET])
def test_planner_peak_within_the_goal_of_the_measured_peak(row):
    name, layers, seq, s = _layout(*row)
    r = run_one(name, layers, seq, s, "h100")
    assert abs(r["states_error"]) < 5e-3, r["states_error"]
    assert abs(r["error"]) <= GOAL, (r["measured_peak"] / 2**30, r["planner"]["total"] / 2**30)
