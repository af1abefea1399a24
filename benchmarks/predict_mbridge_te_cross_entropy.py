"""Prediction for Megatron-Bridge's performance rows, made before the data states their cross-entropy kernel: today
they are priced with Megatron-Core's, which keeps the fp32 softmax (4 bytes a logit at the loss).

What the source says (NVIDIA-NeMo/Megatron-Bridge): every performance script sets cross_entropy_fusion_impl = "te"
over GPTModelProvider's cross_entropy_loss_fusion = True: the 25.09 yamls (r0.1.0 scripts/performance/configs/*/
*_llm_pretrain.yaml), v0.2.0 scripts/performance/utils/helpers.py, v0.3.0 to v0.5.0 utils/overrides.py, v0.6.0
perf_recipes/_common.py `_benchmark_common(cfg, cross_entropy_impl="te")`. Megatron-Core then calls Transformer
Engine's parallel_cross_entropy, which writes the gradient over the bf16 logits in the forward
(`cost.params.CROSS_ENTROPY_KERNELS`). Only memory moves: where the rank that holds the output layer peaks at the
loss, by 2 bytes a logit; a completion may then fit a faster setting.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_mbridge_te_cross_entropy.py
"""

from __future__ import annotations

from error_figures import restated


def state(run: dict) -> bool:
    if run.get("source") != "megatron_bridge_perf":
        return False
    assert run.get("cross_entropy") is None, run["id"]
    run["cross_entropy"] = "te"
    return True


def main() -> None:
    restated(state, "the Megatron-Bridge rows")


if __name__ == "__main__":
    main()
