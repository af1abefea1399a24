"""Prediction for the runs whose recipes re-run Megatron-Core's "moe_act" or "mlp" modules, made before the data
states them: today each leaves `recompute` null (the modules were not priced) and the completion picks the fastest
setting the cost model fits.

What the sources say, run by run (each row's notes and comments carry the file):
- Megatron-Bridge v0.4.2 (26.04.01): GPT_OSS_120B_PRETRAIN_CONFIG_{GB200,B200,H100}_BF16_V2 inherit
  recompute_modules=["layernorm", "moe_act"] (scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py),
  and scripts/performance/utils/overrides.py sets recompute_granularity = "selective" with them;
  DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V2 ["mlp"], DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V2 ["mla_up_proj", "mlp"].
- Megatron-Bridge r0.1.0 (25.09): run_script.py (deepseek, h100) recompute_modules=[mla_up_proj, mlp] under the
  yaml's selective granularity.
- NVIDIA's DeepSeek-V3 on GB200 guide (Megatron-LM, Sec. 2.2.2): `--recompute-modules mlp moe_act` once the
  up-projection recomputation is removed.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_recompute_modules.py
    PYTHONPATH=src:benchmarks python3 benchmarks/predict_recompute_modules.py --rest   # the guide's two other rows

`--rest`: the same guide's baseline (Sec. 1, `--recompute-modules mlp up_proj`, MLA's up-projection) and final
configuration (the reproduce guide, `--recompute-modules moe_act mlp`), predicted after the eight above were applied.
"""

from __future__ import annotations

import sys

from error_figures import restated

MODULES = {
    "mbridge_gb200_gptoss_120b_bf16_260401": ["layernorm", "moe_act"],
    "mbridge_b200_gptoss_120b_bf16_260401": ["layernorm", "moe_act"],
    "mbridge_h100_gptoss_120b_bf16_260401": ["layernorm", "moe_act"],
    "mbridge_gb200_deepseek_v3_mxfp8_260401": ["mlp"],
    "mbridge_b200_deepseek_v3_mxfp8_260401": ["mla_up_proj", "mlp"],
    "mbridge_h100_deepseekv3_dropless_2509": ["mla_up_proj", "mlp"],
    "mlm_dsv3_gb200_mxfp8_deepep_no_upproj_recompute": ["mlp", "moe_act"],
    "mlm_dsv3_gb200_mxfp8_deepep_cudagraphs": ["mlp", "moe_act"],
}


REST = {
    "mlm_dsv3_gb200_mxfp8_baseline": ["mla_up_proj", "mlp"],
    "mlm_dsv3_gb200_mxfp8_hybridep_final": ["moe_act", "mlp"],
}


def state(run: dict) -> bool:
    modules = (REST if "--rest" in sys.argv else MODULES).get(run["id"])
    if modules is None:
        return False
    par = run["parallelism"]
    assert par.get("recompute") is None and par.get("recompute_modules") is None, run["id"]
    par["recompute"], par["recompute_modules"] = "selective", list(modules)
    return True


def main() -> None:
    restated(state, "the runs stating moe_act or mlp")


if __name__ == "__main__":
    main()
