"""Prediction of pricing DeepSpeed's fp16 runs with autograd's gradient accumulation, made before the change.

The deepspeed engine prices each micro-batch's gradient accumulation as its bf16 optimizer runs it,
`hp_grad.add_(lp.grad.to(fp32))` after every backward (runtime/bf16_optimizer.py, update_hp_grads): 18 bytes a
local parameter, every micro-batch. That optimizer exists only under bf16: DeepSpeed builds it where the config's
`bf16.enabled` is set (runtime/engine.py, `_configure_bf16_optimizer` under `bfloat16_enabled()`, at v0.5.10 and
v0.9.x); an fp16 job gets the FP16 optimizer (ZeRO stage 0, or ZeRO-1/2's `DeepSpeedZeroOptimizer` with fp16 weights),
whose gradients pile up in each fp16 parameter's `.grad` through autograd's AccumulateGrad until the boundary
reduction: an in-place add, 2 + 2 bytes read and 2 written, skipping the first micro-batch (whose gradient the
accumulator keeps). BigScience's notes say the same of the BLOOM search: "from now on the testing is happening
with BF16 optimizer ... compared to fp16 which grad accumulates in fp16" (chronicles-prequel.md, '## Rebalancing
layers'), so the rows before that section accumulated in fp16.

Prints, for the deepspeed runs that state fp16 (not bf16), the figures now and with `grad_accumulation_bytes` 6 and
`grad_accumulation_skips_first` on, per source, and the whole data set's.

    PYTHONPATH=src python3 benchmarks/predict_deepspeed_fp16_accumulation.py

It reproduces the recorded prediction at 5f7edf4, before the engine prices it (774b16b); from there on both columns
accumulate through autograd.
"""

from __future__ import annotations

from dataclasses import replace

from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from error_figures import fig


def fp16(run: dict) -> bool:
    text = str(run.get("precision") or "").lower()
    return ("fp16" in text or "float16" in text) and "bf16" not in text and "bfloat16" not in text



def main() -> None:
    runs, sources = load_runs()
    by_id = {r["id"]: r for r in runs}
    base = {r.id: r for r in V.run_all(runs, sources=sources)}
    orig = V.priced
    chosen = {r["id"] for r in runs if str(sources[r["source"]].get("engine", "")).startswith("deepspeed") and fp16(r)}

    def autograd(case, params=V.DEFAULT_PARAMS):
        P = orig(case, params)
        return replace(P, grad_accumulation_bytes=6.0, grad_accumulation_skips_first=True) if case.id in chosen else P

    V.priced = autograd
    try:
        after = {r.id: r for r in V.run_all(runs, sources=sources)}
    finally:
        V.priced = orig
    for label, res in (("now", base), ("autograd accumulation", after)):
        errs = {i: r.error for i, r in res.items() if r.error is not None}
        print(f"{label}:\n  all priced runs   {fig(list(errs.values()))}")
        print(f"  first-sight runs  {fig([e for i, e in errs.items() if res[i].first_sight is not None])}")
        for src in sorted({by_id[i]['source'] for i in chosen}):
            print(f"  {src:24s} fp16 {fig([errs[i] for i in chosen if i in errs and by_id[i]['source'] == src])}")
    for label, res in (("now", base), ("autograd accumulation", after)):
        errs = {i: r.error for i, r in res.items() if r.error is not None}
        groups: dict[tuple, list[str]] = {}
        for i in errs:
            r = by_id[i]
            if str(sources[r["source"]].get("engine", "")).startswith("deepspeed"):
                groups.setdefault((r["source"], r["hardware"]["accelerator"], r["model"]["name"]), []).append(i)
        pairs = [(1 + errs[b]) / (1 + errs[a]) - 1 for ids in groups.values() for a in ids for b in ids if a != b]
        print(f"one-scalar pairs of one model in one deepspeed source, {label}: {fig(pairs).replace('signed', 'signed')}")
    moved = [i for i in chosen if base[i].error is not None and abs(base[i].error - after[i].error) > 1e-9]
    print(f"{len(moved)} runs move (of {len(chosen)} fp16 deepspeed runs)")
    for i in sorted(moved, key=lambda i: base[i].error):
        print(f"  {i[-60:]:60s} {base[i].error:+7.1%} -> {after[i].error:+7.1%}")


if __name__ == "__main__":
    main()
