"""Prediction of pricing llm-foundry's Triton FlashAttention at FlashAttention 1.x's slowdown, made before the change.

The kernel is priced at FlashAttention-2's efficiency over `FA2_SLOWDOWN["triton"]`, 1.3 since abbff50: the end
of Dao 2023's "1.3-2.5x faster than FlashAttention in Triton" (Sec. 4.1) nearest FlashAttention-2. The kernel's own
header says more. llm-foundry ran `flash_attn_triton.py`, from flash-attn v1.0.3.post0 at 300cc5c (its `setup.py`
pins `flash-attn==v1.0.3.post0`; `attention.py` imports `from flash_attn import flash_attn_triton`, the A100
tables) and as its own copy of flash-attn's eff9fe6b (2023-05-12) from 4c94c2075 on (`llmfoundry/models/layers/
flash_attn_triton.py` at b2a43a1, the H100 tables). Both carry the same docstring: "Triton forward is generally
faster than CUDA forward, while Triton backward is generally slower than CUDA backward. Overall Triton forward +
backward is slightly slower than CUDA forward + backward." The CUDA kernel there is FlashAttention 1.x (flash-attn
2.0 came in July 2023), which the cost model prices at FlashAttention-2's over `FA2_OVER_FA1` = 2.0. So the
Triton kernel is at least that slow; "slightly" gives no figure, so it is priced at FlashAttention 1.x's own
slowdown, 2.0, the smallest the header supports (and inside Dao 2023's 1.3-2.5).

Prints, with `FA2_SLOWDOWN["triton"]` set to --before and then to --after: every priced run's median and p90,
the first-sight runs' current figures, llm-foundry per device and per sequence length, and the one-scalar pair
figure of llm-foundry's runs of one model on one device (calibrate from one run, predict the others).

    PYTHONPATH=src python3 benchmarks/predict_triton_as_fa1.py [--before 1.3 --after 2.0]

It sets the ratio itself, so it runs at any commit from abbff50; the recorded figures are those at c0688a8, where
the rest of the cost model stood as it did before the change.
"""

from __future__ import annotations

import argparse
import itertools
from collections import defaultdict

import numpy as np

from bandwise.cost.params import FA2_SLOWDOWN
from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from error_figures import fig

SOURCE = "llmfoundry_mpt"


def results_at(slowdown: float, runs: list[dict], sources: dict) -> list[V.RunResult]:
    saved = FA2_SLOWDOWN["triton"]
    FA2_SLOWDOWN["triton"] = slowdown
    try:
        return V.run_all(runs, sources=sources)
    finally:
        FA2_SLOWDOWN["triton"] = saved



def pairs(runs: list[dict], err: dict[str, float]) -> list[float]:
    """One-scalar errors over ordered pairs of llm-foundry runs of one model on one device."""
    groups = defaultdict(list)
    for r in runs:
        if r["source"] == SOURCE and r["id"] in err:
            groups[(r["hardware"]["accelerator"], r["model"]["name"])].append(r["id"])
    return [(1 + err[b]) / (1 + err[a]) - 1 for ids in groups.values() for a, b in itertools.permutations(ids, 2)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=float, default=1.3)
    ap.add_argument("--after", type=float, default=2.0)
    args = ap.parse_args()
    runs, sources = load_runs()
    by_id = {r["id"]: r for r in runs}
    out = {}
    for label, slowdown in (("before", args.before), ("after", args.after)):
        res = results_at(slowdown, runs, sources)
        err = {r.id: r.error for r in res if r.error is not None}
        out[label] = err
        seen = [r.error for r in res if r.first_sight is not None and r.error is not None]
        print(f"{label} (triton at FA2 / {slowdown}):")
        print(f"  all priced       {fig(list(err.values()))}")
        print(f"  first-sight runs {fig(seen)}")
        lf = {i: e for i, e in err.items() if by_id[i]["source"] == SOURCE}
        print(f"  {SOURCE}   {fig(list(lf.values()))}")
        for dev in sorted({by_id[i]['hardware']['accelerator'] for i in lf}):
            print(f"    {dev:18s} {fig([e for i, e in lf.items() if by_id[i]['hardware']['accelerator'] == dev])}")
        for s in sorted({by_id[i]['model']['seq_len'] for i in lf}):
            print(f"    seq {s:<14d} {fig([e for i, e in lf.items() if by_id[i]['model']['seq_len'] == s])}")
        print(f"  one-scalar pairs (same model and device) {fig(pairs(runs, err)).replace('runs', 'pairs')}")
    moved = [i for i in out["before"] if abs(out["before"][i] - out["after"].get(i, np.nan)) > 1e-9]
    print(f"{len(moved)} runs move; sources: {sorted({by_id[i]['source'] for i in moved})}")


if __name__ == "__main__":
    main()
