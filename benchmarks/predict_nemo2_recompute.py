"""Prediction for NeMo 2's performance-summary rows of 25.02 (B200) and 25.04 (GB200) whose recomputation the data
leaves unstated (the completion picks the fastest setting the cost model fits), made before the data states it.

What the source says (NVIDIA/NeMo):
- v2.2.0 (25.02): scripts/llm/performance sets no recomputation anywhere (neither its utils nor its argument parser
  name one), and the pretraining recipes it builds on (nemo/collections/llm/recipes/{gpt3_175b, llama3_8b, llama3_70b,
  llama31_405b, nemotron4_15b, nemotron4_340b, mixtral_8x7b, mixtral_8x22b}.py) and the GPT model configs set none
  (Megatron-Core's default: no recomputation).
- v2.3.0 (25.04): scripts/performance/utils.py `set_primary_perf_configs` turns on full recomputation only where
  the recommended configuration (recommended_model_configs/model_configs_gb200.csv) or the command line gives
  recompute_layers > 0, and offloading only for activation_offload_layers > 0. The CSV's rows of the table's
  layouts give 0 and 0 for GPT-3 175B, Llama 3 70B (FP8, Megatron-FSDP), Nemotron-4 15B and 340B (FP8) and
  Mixtral 8x7B. Left as they are: Llama 3 8B (the table's MBS 2 against the CSV's FP8 MBS 4), Llama 3.1 405B (the
  table's TP4 PP8 CP2 VP8 against the CSV's FP8 TP4 FSDP row) and Mixtral 8x22B (no GB200 row in the CSV).

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_nemo2_recompute.py
"""

from __future__ import annotations

from error_figures import restated

RUNS = [
    "nemo2_2502_b200_gpt3_175b", "nemo2_2502_b200_llama3_8b", "nemo2_2502_b200_llama3_70b", "nemo2_2502_b200_llama31_405b",
    "nemo2_2502_b200_nemotron4_15b", "nemo2_2502_b200_nemotron4_340b", "nemo2_2502_b200_mixtral_8x7b", "nemo2_2502_b200_mixtral_8x22b",
    "nemo2_2504_gb200_gpt3_175b", "nemo2_2504_gb200_llama3_70b", "nemo2_2504_gb200_nemotron4_15b", "nemo2_2504_gb200_nemotron4_340b",
    "nemo2_2504_gb200_mixtral_8x7b",
]


def state(run: dict) -> bool:
    if run["id"] not in RUNS:
        return False
    assert run["parallelism"].get("recompute") is None, run["id"]
    run["parallelism"]["recompute"] = "none"
    return True


def main() -> None:
    restated(state, "the NeMo 2 rows")


if __name__ == "__main__":
    main()
