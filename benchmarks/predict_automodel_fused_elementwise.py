"""Prediction for NeMo AutoModel's MoE rows, made before the data states their element-wise kernels: today they are
priced as their source's engine preset, TorchTitan, runs them: eager norms, RoPE and activations.

What the source says (NVIDIA-NeMo/Automodel at e45812012456, the commit of the performance summary): the six MoE
configs (examples/llm_benchmark/deepseek/deepseek_v3_te_deepep{,_1024}.yaml, kimi/kimi_k2_te_deepep.yaml,
qwen/qwen3_moe_30b_te_deepep.yaml, gpt_oss/gptoss_{20b,120b}_te_deepep.yaml) set `BackendConfig` rms_norm: te
(Transformer Engine's RMSNorm kernel) and rope_fusion: true (TE's fused RoPE); every expert class takes its
activation from `get_expert_activation_for_deepep` (nemo_automodel/components/moe/experts.py), whose swiglu,
geglu and quick_geglu are `torch.compile`d (components/moe/megatron/moe_utils.py, experts.py). So they state
`elementwise: fused`. The dense Llama 3.1 70B config keeps rms_norm: torch_fp32 (eager): not stated.
Not fused either way: the dense MLP of DeepSeek-V3's first three layers and the shared experts
(components/moe/layers.py, `F.silu(gate) * up`), which the one switch cannot tell apart.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_automodel_fused_elementwise.py
"""

from __future__ import annotations

from error_figures import restated


def state(run: dict) -> bool:
    if run.get("source") != "nemo_automodel_perf" or run["model"].get("type") != "moe":
        return False
    assert run.get("elementwise") is None, run["id"]
    run["elementwise"] = "fused"
    return True


def main() -> None:
    restated(state, "AutoModel's MoE rows")


if __name__ == "__main__":
    main()
