"""Prediction of runs that state their attention kernel, made before a run can state one: the rows of Megatron-DeepSpeed's
July-2023 rebase README that compare kernels on one job (source `mds_rebase_2307`: GPT-125M without FlashAttention and
with FlashAttention 1.0.4, GPT-2.7B with FlashAttention 1.x and with FlashAttention-2, 8 A100) priced with the kernel each
states, where today all four are priced with the engine's (the A100's FlashAttention-2).

- without FlashAttention: Megatron's CoreAttention, the s x s scores in memory (`plan --attention materialized`);
- FlashAttention 1.x: "around 2x speedup compared to FlashAttention" (Dao 2023, "FlashAttention-2", abstract; Sec. 4.1:
  1.7-3.0x), so FlashAttention-2's efficiency over 2, with its fill;
- FlashAttention-2: the A100's own kernel (unchanged).

The script sets those prices through the cost model's existing override (`CostParams.attention_efficiency`, FA2's over 2)
and `flash_attention` off, and prints each row's error before and after.

    PYTHONPATH=src python3 benchmarks/predict_stated_attention.py

It reproduces the prediction at c609748, before the change; from aeef8ec on the rows state their kernels and the model
prices them itself, so "before" and "after" read alike.
"""

from __future__ import annotations

from dataclasses import replace

from bandwise.plan import validate as V
from bandwise.plan.runs import convert, load_runs

FA2_OVER_FA1 = 2.0
STATED = {
    "mds_rebase_gpt_125m_8a100_nofa": "materialized",
    "mds_rebase_gpt_125m_8a100_fa1": "fa1",
    "mds_rebase_gpt_2p7b_8a100_fa1": "fa1",
    "mds_rebase_gpt_2p7b_8a100_fa2": "fa2",
}


def main() -> None:
    runs, sources = load_runs()
    out = {}
    for run in runs:
        kernel = STATED.get(run["id"])
        if kernel is None:
            continue
        case = convert(run, sources)
        base = V.priced(case)
        dev = case.cluster.device
        if kernel == "materialized":
            params = replace(base, flash_attention=False)
        elif kernel == "fa1":
            fa2 = dev.fa2_attention_efficiency or dev.attention_efficiency
            params = replace(base, attention="fa2", attention_efficiency=fa2 / FA2_OVER_FA1)
        else:
            params = replace(base, attention="fa2")
        before = V.predict(case)
        after = V.predict(case, params)  # predict() re-applies the engine and the run's statements over `params`; the override survives both
        out[run["id"]] = (kernel, before.predicted, after.predicted, before.target)
        print(f"{run['id']:42s} {kernel:12s} {before.predicted:8.0f} -> {after.predicted:8.0f} tokens/s (measured {before.target:.0f}):"
              f" {before.predicted / before.target - 1:+.1%} -> {after.predicted / after.target - 1:+.1%}")
    pairs = (("mds_rebase_gpt_125m_8a100_fa1", "mds_rebase_gpt_125m_8a100_nofa"), ("mds_rebase_gpt_2p7b_8a100_fa2", "mds_rebase_gpt_2p7b_8a100_fa1"))
    for fast, slow in pairs:
        _, fb, fa, ft = out[fast]
        _, sb, sa, st = out[slow]
        print(f"{fast} / {slow}: measured {ft / st:.3f}, predicted {fb / sb:.3f} -> {fa / sa:.3f}")


if __name__ == "__main__":
    main()
