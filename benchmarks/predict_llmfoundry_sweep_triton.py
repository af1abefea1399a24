"""Prediction for the llm-foundry 'Large Scale' H100 rows of 13B and 30B stating Triton attention, made before the data
changes.

The table 'H100 80GB BF16 (Large Scale, >= 128 GPUs)' was added with scripts/train/benchmarking/sweep.py in the same
commit (mosaicml/llm-foundry 5e85bd62d, 2024-01-06). sweep.py is its generator: its per-model micro-batch sizes (12, 8,
6, 16, 8, 8 for 1B, 3B, 7B, 13B, 30B, 70B) and shard strategies are the table's. It passes `--attn_impl flash` for
1B, 3B, 7B and 70B, and `--attn_impl triton` for 13B and 30B; the shipped rows name flash for all six and state no
kernel, so 13B and 30B are priced with the engine's FlashAttention-2.

What moves: the six 13B and 30B rows of that table (128, 256, 512 GPUs), downward (Triton's FlashAttention is slower).

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_llmfoundry_sweep_triton.py
"""

from __future__ import annotations

from error_figures import restated

TRITON = ("llmfoundry_h100_bf16_mpt13b_seq2048_", "llmfoundry_h100_bf16_mpt30b_seq2048_")
LARGE = ("_128gpu", "_256gpu", "_512gpu")


def state(run: dict) -> bool:
    rid = run["id"]
    if rid.startswith(TRITON) and rid.endswith(LARGE):
        run["attention"] = "triton"
        return True
    return False


if __name__ == "__main__":
    restated(state, "13B and 30B large-scale rows")
