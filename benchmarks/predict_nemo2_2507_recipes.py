"""Prediction for the NeMo 25.07 GB200 rows whose layout matches NeMo's recommended configuration, made before the
data states the recomputation and activation offload that configuration sets: today both rows leave `recompute`
null, and the completion picks the fastest setting the cost model fits.

What the source says: NeMo's performance scripts take whatever the command line leaves unset from
scripts/performance/recommended_model_configs/model_configs_gb200.csv (v2.4.0, the release of the 25.07 scripts,
"perf scripts 25.07 refactor" in its CHANGELOG.md). Its pre-training FP8 rows:
- llama3 70b: TP1 PP1, mcore FSDP, micro-batch 1, global batch 128, `recompute_layers` 0, `activation_offload_layers`
  0: the table's layout, so no recomputation;
- llama31 405b: TP2 PP1, mcore FSDP, micro-batch 1, `recompute_layers` 0, `activation_offload_layers` 95 (global batch
  256 where the table says 64; the table's is kept): no recomputation, 95 of the 126 layers' activations offloaded
  (scripts/performance/helpers.py: `cpu_offloading_num_layers`).
The 8B row is left: its table micro-batch (2) is the CSV's bf16 row's, not its fp8 row's (4). The 25.04 rows are left:
v2.3.0's CSV gives the 405B fp8 row TP4 FSDP where the 25.04 table gives TP4 PP8 CP2.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_nemo2_2507_recipes.py
"""

from __future__ import annotations

from error_figures import restated

STATED = {
    "nemo2_2507_gb200_llama3_70b": {"recompute": "none"},
    "nemo2_2507_gb200_llama31_405b": {"recompute": "none", "cpu_offloading_num_layers": 95},
}


def state(run: dict) -> bool:
    if run["id"] not in STATED:
        return False
    run["parallelism"].update(STATED[run["id"]])
    return True


def main() -> None:
    restated(state, "the two rows")


if __name__ == "__main__":
    main()
