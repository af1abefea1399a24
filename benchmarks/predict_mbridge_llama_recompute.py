"""Prediction for Megatron-Bridge's Llama performance rows whose recomputation is not written in the data, made
before the data states it: today they leave `recompute` null and the completion picks the fastest setting the cost
model fits, which for four of them is full recomputation.

What the source says (NVIDIA-NeMo/Megatron-Bridge): the performance scripts build each Llama job from the library
recipe (src/megatron/bridge/recipes/llama/llama3.py: `llama3_8b_pretrain_config`, `llama3_70b_pretrain_config`,
`llama31_405b_pretrain_config`) and the workload's base configuration. At v0.4.2 (26.04.01) the recipes set
`recompute_granularity = None` and `recompute_modules = None`, and no pretraining V2 workload of llama3 or llama31
sets `recompute_num_layers` or `recompute_modules` (scripts/performance/configs/llama/*_workload_base_configs.py;
405B GB200 NVFP4's V1 sets `recompute_num_layers=1`, which its V2, the table's, resets to None). At v0.2.0 (25.11)
the recipes name no recomputation (TransformerConfig's default: none), and the only pretraining workload that sets
one is LLAMA3_8B_H100_FP8_CS (`recompute_num_layers=5`), whose row is left as it is.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_mbridge_llama_recompute.py
"""

from __future__ import annotations

from error_figures import restated

CONTAINERS = ("26.04.01 NeMo Container", "25.11 NeMo Container")


def state(run: dict) -> bool:
    if (run["source"] != "megatron_bridge_perf" or "llama" not in run["id"] or run["parallelism"].get("recompute") is not None
            or not str(run.get("source_ref", "")).startswith(CONTAINERS) or run["id"].startswith("mbridge_h100_llama3_8b_2511")):
        return False
    run["parallelism"]["recompute"] = "none"
    return True


def main() -> None:
    restated(state, "the Llama rows")


if __name__ == "__main__":
    main()
