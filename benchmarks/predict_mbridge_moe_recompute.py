"""Prediction for Megatron-Bridge's 25.11 and 26.04.01 MoE rows whose recomputation the data leaves unstated (the
completion picks the fastest setting the cost model fits), made before the data states what the recipes set.

What the source says (NVIDIA-NeMo/Megatron-Bridge):
- v0.2.0 (25.11): scripts/performance/configs/qwen3/qwen3_llm_pretrain.py `set_qwen3_common_configs` sets
  recompute_granularity = None and no Qwen3 workload base config sets a recompute field; the gpt-oss library
  recipe (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py) sets recompute_granularity = None, and where a gpt-oss
  base config names recompute_modules, utils/helpers.py `set_recompute_overrides` sets only the modules, which
  Megatron-Core re-runs under selective granularity alone (v0.2.1, 6afd5c74b, 2025-12-10, made it selective):
  no recomputation.
- v0.4.2 (26.04.01): `set_qwen3_common_configs` again None after the library recipe (whose 30B-A3B default is
  full), no Qwen3 workload config sets recomputation; GPT_OSS_120B_PRETRAIN_CONFIG_{GB300,B300}_BF16_V2 name
  none over the library recipe's None; KIMI_K2_PRETRAIN_CONFIG_GB300 re-runs ["mla_up_proj"] under
  kimi_llm_pretrain.py's selective granularity.

Left as they are: gpt-oss-120B on H100 and on B200 in 25.11, whose table layouts are not v0.2.0's base configs
(H100: MBS 4 against the base's 1; B200: EP8 against GPT_OSS_120B_B200_BF16_BASE_CONFIG's EP64), so what else their
jobs set is not known from the release.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_mbridge_moe_recompute.py
"""

from __future__ import annotations

from error_figures import restated

NONE = [
    "mbridge_gb300_gptoss_120b_bf16_2511", "mbridge_gb200_gptoss_120b_bf16_2511", "mbridge_gb300_qwen3_30b_fp8mx_2511", "mbridge_gb200_qwen3_30b_fp8mx_2511",
    "mbridge_b200_qwen3_30b_fp8mx_2511", "mbridge_gb300_qwen3_235b_bf16_2511", "mbridge_gb200_qwen3_235b_bf16_2511",
    "mbridge_b200_qwen3_235b_fp8mx_2511", "mbridge_h100_qwen3_235b_fp8cs_2511",
    "mbridge_gb300_qwen3_30b_mxfp8_260401", "mbridge_gb200_qwen3_30b_mxfp8_260401", "mbridge_b300_qwen3_30b_mxfp8_260401",
    "mbridge_b200_qwen3_30b_mxfp8_260401", "mbridge_h100_qwen3_30b_fp8_260401_16gpu",
    "mbridge_gb300_qwen3_235b_mxfp8_260401", "mbridge_gb200_qwen3_235b_mxfp8_260401", "mbridge_b300_qwen3_235b_mxfp8_260401",
    "mbridge_b200_qwen3_235b_mxfp8_260401", "mbridge_h100_qwen3_235b_fp8_260401",
    "mbridge_gb300_gptoss_120b_bf16_260401", "mbridge_b300_gptoss_120b_bf16_260401",
]
SELECTIVE = {"mbridge_gb300_kimi_k2_mxfp8_260401": ["mla_up_proj"]}


def state(run: dict) -> bool:
    rid = run["id"]
    if rid not in NONE and rid not in SELECTIVE:
        return False
    par = run["parallelism"]
    assert par.get("recompute") is None, rid
    if rid in SELECTIVE:
        par["recompute"], par["recompute_modules"] = "selective", list(SELECTIVE[rid])
    else:
        par["recompute"] = "none"
    return True


def main() -> None:
    restated(state, "the MoE rows")


if __name__ == "__main__":
    main()
