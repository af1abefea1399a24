"""`train --compile` on two gloo ranks: FSDP and expert parallelism around compiled blocks.

An MoE block whose experts are an FSDP unit of their own, or whose experts expert parallelism dispatches, cannot
be one graph (`runtime/parallel/apply.py`, `_compile_blocks`): the pieces around the experts are compiled instead.
Each layout's compiled losses must be the eager run's, step by step. Traced with "aot_eager" (the graphs inductor
gets, eager kernels), which fails the same way inductor does where a block cannot be traced whole."""

from __future__ import annotations

import json

import pytest

from _train_harness import spawn

pytestmark = [pytest.mark.dist, pytest.mark.slow]

LAYOUTS = [
    {"dp_shard": 2, "micro_batch": 1, "global_batch": 4},  # the experts an FSDP unit of their own
    {"dp_shard": 2, "ep": 2, "micro_batch": 2, "global_batch": 4},  # the EP all-to-all around them
]


def test_compiled_fsdp_and_ep_steps_give_the_eager_losses(tmp_path, monkeypatch):
    import bandwise.runtime.parallel.apply as apply

    monkeypatch.setattr(apply, "COMPILE_BACKEND", "aot_eager")  # forked ranks inherit it
    runs = {}
    for compiled in (False, True):
        (rank0, _) = spawn("train_layouts", 2, tmp_path / str(compiled), model="debug-moe", layouts=LAYOUTS,
                           train={"steps": 3, "compile": compiled, "dtype": "fp32"})
        runs[compiled] = rank0
    for layout in LAYOUTS:
        key = json.dumps(layout, sort_keys=True)
        eager, compiled = runs[False][key], runs[True][key]
        for step in ("1", "2", "3"):
            assert compiled[step] == pytest.approx(eager[step], rel=1e-9), (layout, step)
