"""Prediction for the Megatron-Bridge performance rows whose gradient dtype is not written in the data, made before
the data states it: today 17 of the source's rows state `grad_reduce: bf16` and the rest take the engine's default,
Megatron's fp32 main gradients (`--accumulate-allreduce-grads-in-fp32`, forced on with bf16 by Megatron-LM's
arguments.py).

What the source says: every pretraining workload of the performance scripts calls its family's
`set_<family>_common_configs`, which sets `cfg.mixed_precision.grad_reduce_in_fp32 = False` and
`cfg.ddp.grad_reduce_in_fp32 = False` after the precision config is applied (NVIDIA-NeMo/Megatron-Bridge
scripts/performance/configs/<family>/<family>_llm_pretrain.py): llama3, llama31, gpt_oss, deepseek and qwen3 at
v0.2.0 (the 25.11 container's release), llama3, llama31, gpt_oss, deepseek, qwen3 and kimi at v0.4.2 (tagged the day
after the 26.04.01 table, which the rows' notes already read for their recipes), deepseek at v0.3.0 and v0.5.0 (the
releases either side of the 26.06 container). So those rows keep and reduce their gradients in bf16.
The 26.08 rows are left as they are: v0.6.0 moved the recipes into per-device files
(src/megatron/bridge/recipes/<family>/<device>/) that set the dtype per recipe, some True and some False.

The script states `grad_reduce: bf16` on those rows in a copy of the runs and prints the moved runs and the figures.

    PYTHONPATH=src python3 benchmarks/predict_mbridge_grad_reduce.py
"""

from __future__ import annotations

from collections.abc import Callable

from error_figures import restated

CONTAINERS = ("25.11 NeMo Container", "26.04.01 NeMo Container", "26.06 NeMo Container")
"""Containers whose Megatron-Bridge release sets grad_reduce_in_fp32 = False for every pretraining workload."""


def bf16_grads(source: str, containers: tuple[str, ...]) -> Callable[[dict], bool]:
    """A `restated` edit: the rows of `source` from `containers` (how their `source_ref` starts) that state no
    gradient dtype state bf16."""
    def state(run: dict) -> bool:
        if run["source"] != source or run.get("grad_reduce") is not None or not str(run.get("source_ref", "")).startswith(containers):
            return False
        run["grad_reduce"] = "bf16"
        return True
    return state


def main() -> None:
    restated(bf16_grads("megatron_bridge_perf", CONTAINERS), "rows now stating bf16 gradients")


if __name__ == "__main__":
    main()
