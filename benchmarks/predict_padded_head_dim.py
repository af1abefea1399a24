"""Prediction for pricing the FlashAttention kernels at the head dimension they compute, made before it is applied:
today the attention core of every kernel costs its FLOPs at the model's head dimension d.

What the sources say:
- FlashAttention in Triton (flash-attn's flash_attn/flash_attn_triton.py, which llm-foundry's `attn_impl: triton` and
  Megatron-DeepSpeed's `--use-flash-attn-triton` run) tiles the head dimension as BLOCK_HEADDIM =
  max(next_power_of_2(d), 16), loading Q, K and V masked to d with zeros beyond it and multiplying the whole tile
  (`tl.dot(q, tl.trans(k))`, `tl.dot(p, v)`): a head of 96 or 80 costs a head of 128.
- FlashAttention-2 (csrc/flash_attn/flash_api.cpp, `head_size_rounded = head_size <= 192 ? round_multiple(head_size,
  32) : 256`) dispatches the kernel instantiated for the rounded dimension: a head of 80 costs a head of 96.
The chip's own kernels (cuDNN, FlashAttention-3) and FlashAttention 1.x are left as priced.

So the attention core of a run on those two kernels costs padded(d) / d of its FLOPs' time. The shipped runs it
touches: Megatron-DeepSpeed's GPT-30B long-sequence rows (Triton, d = 96: x 4/3) and its GPT-2.7B FlashAttention-2 row
(d = 80: x 1.2). The script wraps `terms.compute.attention_core` with the factor and prints the moved runs. Applied
since (`params.padded_head_dim`), the rule is the code's; the script now prices the runs without it (the wrapper
divides the factor out) against the code, which prints the same moves (08a4199 holds the prediction as made).

    PYTHONPATH=src python3 benchmarks/predict_padded_head_dim.py
"""

from __future__ import annotations

from error_figures import compare

from bandwise.cost.params import padded_head_dim
from bandwise.cost.terms import compute
from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs

padded = compute.attention_core


def at_head_dim(m, dev, s, rates, P):
    """The attention core at the model's head dimension: the code's, with the padding divided out."""
    fwd, bwd = padded(m, dev, s, rates, P)
    if not P.flash_attention or not m.d_head:
        return fwd, bwd
    factor = padded_head_dim(P.attention, m.d_head) / m.d_head
    return fwd / factor, bwd / factor


def main() -> None:
    runs, sources = load_runs()
    compute.attention_core = at_head_dim
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    compute.attention_core = padded
    after = {r.id: r for r in V.run_all(runs, sources=sources)}
    moved = compare(before, after, {})
    print(f"{len(moved)} runs moved")


if __name__ == "__main__":
    main()
