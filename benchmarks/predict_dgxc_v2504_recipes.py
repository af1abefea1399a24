"""Prediction for DGX Cloud Benchmarking's release v25.04 NeMo rows (H100), made before the data states the
gradient dtype and recomputation their recipes set: today they leave both unset, so they take Megatron's fp32 main
gradients and the completion picks the fastest recomputation the cost model fits.

What the source says (NVIDIA/dgxc-benchmarking at 741c886025a7):
- grok1/cfg/grok1_314b.yaml and nemo_megatron/cfg/gpt3_175b_hydra.yaml (NeMo Launcher): `grad_sync_dtype: bf16`,
  `activations_checkpoint_granularity: null` (no recomputation), as the v24.11.1 rows of the same recipes already state;
- llama3.1/pretrain_llama31.py: for fp8, `recipe.trainer.plugins = bf16_with_fp8_mixed()` then
  `grad_reduce_in_fp32 = False`; bf16 keeps `bf16_mixed`'s fp32 reduction. Its recipes (NeMo at d2b21556f245, the
  commit llama3.1/setup.sh checks out: nemo/collections/llm/recipes/llama3_8b.py, llama3_70b.py, llama31_405b.py) and
  NeMo's scripts/performance/utils.py `set_primary_perf_configs` there set no recomputation.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_dgxc_v2504_recipes.py
"""

from __future__ import annotations

from error_figures import restated


def stated(run_id: str) -> dict | None:
    """The fields the v25.04 recipe of `run_id` sets: {'grad_reduce': ..., 'recompute': ...}."""
    if not run_id.startswith("dgxc_v2504_h100_") or "_maxtext_" in run_id:
        return None
    if "_grok1_" in run_id or "_gpt3_" in run_id:
        return {"grad_reduce": "bf16", "recompute": "none"}
    if "_llama3" in run_id:
        return {"grad_reduce": "bf16" if "_fp8_" in run_id else None, "recompute": "none"}
    return None


def state(run: dict) -> bool:
    fields = stated(run["id"])
    if fields is None:
        return False
    run["parallelism"]["recompute"] = fields["recompute"]
    if fields["grad_reduce"] is not None:
        run["grad_reduce"] = fields["grad_reduce"]
    return True


def main() -> None:
    restated(state, "the v25.04 NeMo rows")


if __name__ == "__main__":
    main()
