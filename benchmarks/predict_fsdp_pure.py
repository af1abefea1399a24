"""Prediction for the llm-foundry rows that state Composer's FSDP mixed precision PURE, made before a run's PURE is
priced: today every llm-foundry row reduces its gradients in fp32, as the source's conventions say of its DEFAULT rows.

What the sources say:
- Composer's `get_mixed_precision` (mosaicml/composer composer/trainer/mosaic_fsdp_utils.py at v0.21.3, the release
  llm-foundry's benchmark commit pins): 'DEFAULT' keeps reduce_dtype fp32; 'PURE' sets param_dtype, reduce_dtype and
  buffer_dtype to the precision, here bf16. The gradients are reduce-scattered in bf16.
- FSDP (torch.distributed.fsdp, FSDP1, what Composer wrapped in 2024) casts each reduced shard back to its sharded flat
  parameter's dtype, fp32 under mixed precision (torch/distributed/fsdp/_runtime_utils.py,
  `_cast_grad_to_param_dtype`), so the stored gradient stays fp32.

So a PURE row prices `grad_reduce_bytes` 2 (the reduce-scatters) with `sharded_grad_bytes` 4 (the kept shard). The
script prices each PURE row so through `predict(case, params)` and prints the rows' errors before and after, and the
figures over the source and over every priced run.

    PYTHONPATH=src python3 benchmarks/predict_fsdp_pure.py
"""

from __future__ import annotations

from dataclasses import replace

from error_figures import compare

from bandwise.plan import validate as V
from bandwise.plan.runs import convert, load_runs

SOURCE = "llmfoundry_mpt"


def states_pure(run: dict) -> bool:
    return "mixed precision pure" in str(run.get("precision") or "").lower()


def main() -> None:
    runs, sources = load_runs()
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    after = dict(before)
    for run in runs:
        if run["source"] != SOURCE or not states_pure(run):
            continue
        case = convert(run, sources)
        after[run["id"]] = V.predict(case, replace(V.priced(case), grad_reduce_bytes=2, sharded_grad_bytes=4))
    pure = {r["id"] for r in runs if states_pure(r)}
    moved = compare(before, after, {"PURE rows": [k for k in before if k in pure],
                                    SOURCE: [k for k in before if before[k].source == SOURCE]})
    print(f"{len(moved)} runs moved")

if __name__ == "__main__":
    main()
