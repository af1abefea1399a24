"""Prediction for DGX Cloud Benchmarking's NeMo 2 rows, made before the data states their gradient dtype (and, for
v25.05, their recomputation): the BF16 rows of v25.04 and every row of v25.05 leave the gradients to the engine's
default (fp32), and v25.05's rows leave recomputation to completion.

What the source says (NVIDIA/NeMo at the commit each release's setup.sh checks out):
- Every NeMo 2 pretraining recipe's `pretrain_performance_optimizations`, applied by `pretrain_recipe(
  performance_mode=True)`, sets `recipe.trainer.plugins.grad_reduce_in_fp32 = False` (nemo/collections/llm/recipes/
  llama3_8b.py, llama3_70b.py, llama31_405b.py, nemotron4_340b.py at d2b21556f245, v25.04's NeMo; llama31_405b.py and
  nemotron4_340b.py at 7a8f1cc7bc, v25.05's; scripts/performance/llm/pretrain_grok1_314b.py's own recipe at
  7a8f1cc7bc), and MegatronStrategy copies the plugin's dtype config over the DDP config
  (nemo/lightning/pytorch/strategies/megatron_strategy.py, update_config_with_dtype_overrides). The performance
  scripts build with performance_mode=True (v25.04's llama3.1/pretrain_llama31.py; scripts/performance/llm/
  pretrain_{llama31_405b,nemotron4_340b,grok1_314b}.py at 7a8f1cc7bc) and replace the plugin only for FP8
  (bf16_with_fp8_mixed, then grad_reduce_in_fp32 = False again). So BF16 runs reduce in bf16 too; the earlier
  reading (RESULTS, "DGX Cloud Benchmarking v25.04's NeMo recipes") set only the FP8 rows.
- Recomputation at 7a8f1cc7bc: `set_primary_perf_configs` turns it on only for recompute_layers > 0 from
  recommended_model_configs/model_configs_gb200.csv or the command line; the CSV gives 0 for Llama 3.1 405B and
  Nemotron-4 340B, has no Grok-1 row (0), the launch scripts pass none, and no recipe sets any.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_nemo2_perf_mode_grads.py
"""

from __future__ import annotations

from error_figures import restated


def state(run: dict) -> bool:
    if run.get("source") != "dgxc_benchmarking" or run.get("grad_reduce") is not None:
        return False
    rid, framework = run["id"], str(run.get("framework", ""))
    if rid.startswith("dgxc_v2504_") and "NeMo 2.0" in framework and str(run.get("precision", "")).upper() == "BF16":
        run["grad_reduce"] = "bf16"
        return True
    if rid.startswith("dgxc_v2505_") and "NeMo 2.0" in framework:
        run["grad_reduce"] = "bf16"
        if run["parallelism"].get("recompute") is None:
            run["parallelism"]["recompute"] = "none"
        return True
    return False


def main() -> None:
    restated(state, "the dgxc NeMo 2 rows")


if __name__ == "__main__":
    main()
