"""Prediction for Megatron-Bridge's 26.08 performance rows, made before the data states what their recipes set:
today they state the layout, the dispatcher and the CUDA graphs, and leave the gradient dtype to the engine (fp32),
recomputation to completion, and the expert all-to-all unoverlapped.

What the source says (NVIDIA-NeMo/Megatron-Bridge v0.6.0, 51885cf13, the release whose performance summary
carries the 26.08 tables; src/megatron/bridge/perf_recipes/):
- gradients: every flat performance recipe takes `_perf_precision(...)` (grad_reduce_in_fp32 = False) and calls
  `_benchmark_common` (_common.py: mixed_precision and ddp grad_reduce_in_fp32 = False); none of these eight
  recipes sets it back.
- recomputation: deepseek/gb200/deepseek_v3.py deepseek_v3_pretrain_256gpu_gb200_fp8mx_config re-runs
  ["mla_up_proj"] under `_deepseek_v3_common`'s selective granularity; its GB300 sibling sets recompute_modules = []
  (nothing re-run); gpt_oss/gb200 gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config ends on selective with
  recompute_modules = [] (nothing); gpt_oss/gb300's takes gpt_oss_120b_pretrain_config (recipes/gpt_oss/h100:
  recompute_granularity None); qwen/{gb200,gb300}/qwen3_moe.py set recompute_granularity = None.
- the expert all-to-all: `_enable_deepseek_full_iteration_mxfp8` (deepseek/common.py),
  `_apply_gpt_oss_120b_full_iter_fp8mx_configs` (gpt_oss/common.py) and `_enable_hybridep_full_iteration_mxfp8`
  (qwen/common.py) set comm_overlap.overlap_moe_expert_parallel_comm = True.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_mbridge_2608_recipes.py
"""

from __future__ import annotations

from error_figures import restated

RECOMPUTE = {
    "mbridge_gb200_deepseek_v3_mxfp8_2608": ("selective", ["mla_up_proj"]),
    "mbridge_gb300_deepseek_v3_mxfp8_2608": ("none", None),
    "mbridge_gb200_gptoss_120b_mxfp8_2608": ("none", None),
    "mbridge_gb300_gptoss_120b_mxfp8_2608": ("none", None),
    "mbridge_gb200_qwen3_30b_mxfp8_2608": ("none", None),
    "mbridge_gb300_qwen3_30b_mxfp8_2608": ("none", None),
    "mbridge_gb200_qwen3_235b_mxfp8_2608": ("none", None),
    "mbridge_gb300_qwen3_235b_mxfp8_2608": ("none", None),
}


def state(run: dict) -> bool:
    if run["id"] not in RECOMPUTE:
        return False
    par = run["parallelism"]
    assert par.get("recompute") is None and run.get("grad_reduce") is None and par.get("moe_a2a_overlap") is None, run["id"]
    par["recompute"], modules = RECOMPUTE[run["id"]]
    if modules:
        par["recompute_modules"] = modules
    par["moe_a2a_overlap"] = True
    run["grad_reduce"] = "bf16"
    return True


def main() -> None:
    restated(state, "the 26.08 rows")


if __name__ == "__main__":
    main()
