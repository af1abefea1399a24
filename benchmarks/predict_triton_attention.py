"""Prediction of llm-foundry's Triton FlashAttention, made before the cost model prices the kernel.

llm-foundry's benchmark tables do not name their attention implementation; the script that made them does.
`scripts/train/benchmarking/submit_benchmarks.py` sets `model.attn_config.attn_impl` from `--attn_impl`, whose
default is `triton` at 300cc5c (2023-05-03, when the A100 80GB and 40GB tables were in the README) and at b2a43a1
(2023-10-19, the commit that added the H100 80GB BF16 and FP8 tables); the README's example command passes none.
The H100 large-scale table (5e85bd6, 2024-01-06) was made by `sweep.py`, which passes `--attn_impl flash` and
installs `.[gpu-flash2]` (flash-attn 2.4.2). The FP8 rows install flash-attn 1.0.7 ("Required for flash-attn
and FP8 training") and were left out here; `sweep.sh` at b2a43a1 shows they passed no `--attn_impl` either, so
they state `triton` too since 98e8ab9 (predicted with a trial runs file, benchmarks/RESULTS.md).

`attn_impl: triton` is llm-foundry's `flash_attn_triton.py`, FlashAttention written in Triton. FlashAttention-2's
paper: "FlashAttention-2 is 1.7-3.0x faster than FlashAttention, 1.3-2.5x faster than FlashAttention in Triton"
(Dao 2023, Sec. 4.1). The kernel is priced at FlashAttention-2's efficiency and fill over 1.3, the end of that
range nearest FlashAttention-2: the smallest slowdown the source supports.

Before the kernel exists this emulates it: the A100 and H100-BF16 tables' runs state FlashAttention 1.x, whose
price is FlashAttention-2's over `FA2_OVER_FA1`, set here to 1.3 for them. Prints each table's figures and each
moved run's error before and after.

    PYTHONPATH=src python3 benchmarks/predict_triton_attention.py

It reproduces the prediction at 910d38e, the commit that adds it. From abbff50 on, the runs state `attention:
triton` and the cost model prices it through `cost.params.FA2_SLOWDOWN`, which this emulation does not patch:
there its "after" is FlashAttention 1.x at 2.0, not the prediction. Check that commit out to run it.
"""

from __future__ import annotations

import numpy as np

import bandwise.cost.terms.compute as compute
from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs

SOURCE = "llmfoundry_mpt"
TRITON_TABLES = ("A100 80GB with 1600 Gbps node-node interconnect (RoCE)", "A100 40GB with 1600 Gbps node-node interconnect (RoCE)",
                 "H100 80GB BF16")
FA2_OVER_TRITON = 1.3


def table(run: dict) -> str:
    return run["source_ref"].split("table '")[1].split("'")[0]


def error(run: dict, sources: dict, triton: bool) -> float:
    if triton:
        run, compute.FA2_OVER_FA1 = {**run, "attention": "fa1"}, FA2_OVER_TRITON
    try:
        res = V.predict(V.convert(run, sources))
    finally:
        compute.FA2_OVER_FA1 = 2.0
    return res.predicted / res.target - 1


def main() -> None:
    runs, sources = load_runs()
    chosen = [r for r in runs if r["source"] == SOURCE]
    rows = [(table(r), r["id"], error(r, sources, False), error(r, sources, table(r) in TRITON_TABLES)) for r in chosen]
    for name in sorted({t for t, *_ in rows}) + ["all"]:
        b = np.array([x for t, _, x, _ in rows if name in ("all", t)])
        a = np.array([y for t, _, _, y in rows if name in ("all", t)])
        print(f"{name[:40]:40s} {len(b):4d} runs: median {np.median(abs(b)):5.1%} -> {np.median(abs(a)):5.1%}, "
              f"p90 {np.percentile(abs(b), 90):5.1%} -> {np.percentile(abs(a), 90):5.1%}, signed {np.median(b):+6.1%} -> {np.median(a):+6.1%}")
    for t, rid, b, a in rows:
        if abs(a - b) > 1e-9:
            print(f"  {rid:60s} {b:+7.1%} -> {a:+7.1%}")


if __name__ == "__main__":
    main()
