"""The grouped expert kernel under expert parallelism and in the trainer, against the loop.

On 2 and 4 gloo ranks: the all-to-all dispatch with `grouped_mm` experts and with the per-expert
loop, each against the experts run in one process on every rank's rows, for a random routing, one
with empty and one-row experts, and one that sends every row to a single expert (the other ranks
then run their experts on no rows at all). Then whole training runs: the same layout trained with
either kernel (FSDP2, expert parallelism with experts inside and outside FSDP, bf16 with fp32
experts cast per use) must give the same losses and gradient norms.
"""

from __future__ import annotations

import json

import pytest
from _train_harness import spawn

pytestmark = pytest.mark.dist

ROUTINGS = ["random", "sparse", "one_expert"]


def _check_dispatch(results: list[dict], world: int) -> None:
    for rank, res in enumerate(results):
        for routing in ROUTINGS:
            for kernel in ("grouped_mm", "loop"):
                for name, (diff, scale) in res[f"{routing}/{kernel}"].items():
                    assert scale > 1e-3 or (routing == "one_expert" and rank > 0 and name.startswith("w")), f"{routing}/{kernel}/{name} is trivially zero"
                    assert diff <= 1e-6 * max(scale, 1e-12), f"rank {rank}, {routing}, {kernel}, {name}: {diff:.2e} at scale {scale:.2e}"
        # the single-expert routing leaves every rank but the first without rows to run
        assert res["one_expert/grouped_mm/received"] == (1 if rank == 0 else 0)


@pytest.mark.parametrize("world", [2, 4])
def test_ep_dispatch_grouped_equals_loop(tmp_path, world):
    _check_dispatch(spawn("grouped_vs_loop_ep", world, tmp_path, routings=ROUTINGS), world)


GB = 4
LAYOUTS = {
    2: [
        ({"dp_shard": 2, "micro_batch": 1, "global_batch": GB}, "fp32"),  # FSDP2
        ({"dp_shard": 2, "ep": 2, "micro_batch": 2, "global_batch": GB}, "fp32"),  # EP, experts outside FSDP
        ({"dp_shard": 2, "ep": 2, "micro_batch": 2, "global_batch": GB, "recompute": "selective"}, "bf16"),  # fp32 experts cast per use
    ],
    4: [
        ({"dp_shard": 4, "ep": 2, "micro_batch": 1, "global_batch": GB}, "fp32"),  # EP, experts FSDP-sharded outside the group
        ({"dp_shard": 4, "ep": 4, "micro_batch": 1, "global_batch": GB}, "fp32"),  # EP 4
    ],
}


@pytest.mark.parametrize("world", [2, 4])
def test_training_grouped_equals_loop(tmp_path, world):
    runs = []
    for layout, dtype in LAYOUTS[world]:
        for kernel in ("grouped_mm", "loop"):
            runs.append(("train_layouts", {"model": "debug-moe", "layouts": [layout], "train": {"dtype": dtype, "expert_kernel": kernel, "steps": 3}}))
    res = spawn("in_turn", world, tmp_path, runs=runs)[0]
    for i, (layout, dtype) in enumerate(LAYOUTS[world]):
        key = json.dumps(layout, sort_keys=True)
        grouped, loop = res[str(2 * i)][key], res[str(2 * i + 1)][key]
        assert sorted(grouped) == sorted(loop)
        tol = 1e-6 if dtype == "fp32" else 1e-2  # bf16: within its own rounding (2^-8 relative) over 3 steps
        for k, ref in loop.items():
            pairs = zip(grouped[k], ref, strict=True) if isinstance(ref, list) else [(grouped[k], ref)]
            for a, b in pairs:  # MaxVio lists hold None for the dense layer
                assert (a is None) == (b is None), f"{layout} {dtype} {k}"
                if b is not None:
                    assert abs(a - b) <= tol * max(1.0, abs(b)), f"{layout} {dtype} {k}: grouped {a} vs loop {b}"
