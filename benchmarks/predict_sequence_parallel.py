"""Prediction of tensor parallelism without sequence parallelism, made before the model prices it: the norms and
residual adds outside the TP regions run on the whole sequence on every TP rank.

Korthikanti et al. 2022 (arXiv 2205.05198, Sec. 4.2.2) split those regions (the two LayerNorms and the two
bias-dropout-adds of a layer) along the sequence, so that each TP rank runs 1/t of them; before it, each rank ran them
whole ("the layer-norm and dropouts ... are not parallelized ... replicated across tensor parallel ranks"). The cost
model already keeps their activations whole without it (`CostParams.sequence_parallel`, the paper's Eq. 2); their
element-wise time it divides by t either way (`cost.terms.compute.layer_compute`), so a stack without the option is
priced as if it had it. The stacks that ran without it:

    megatron@2021     Megatron-LM at 6985e58 (2021-08): the option came with the paper's code (2e90a34, 2022-05)
    deepspeed@2021    DeepSpeed ZeRO-3 as Narayanan et al. ran it: no TP (no run moves)
    deepspeed@2022    the BigScience fork of Megatron-DeepSpeed: no sequence parallelism at any commit
    deepspeed@2022-02 (bigscience-workshop/Megatron-DeepSpeed, megatron/model/transformer.py ParallelTransformerLayer
                      .forward at HEAD 8387ae17, 2023-12: input_layernorm, bias_dropout_add, post_attention_layernorm,
                      bias_dropout_add on [s, b, h], and no "sequence_parallel" anywhere under megatron/)
    metaseq           Megatron-derived model parallelism of 2021-2022, OPT-175B (Zhang et al. 2022)

Bytes per token outside the TP regions, as `cost.flops.elementwise_bytes_per_token` counts them: two norms (fused: 2 + 2
per element) and two residual adds (2 + 2 + 2), 2·4·h + 2·6·h = 20·h. Without sequence parallelism each TP rank moves
them for every token of the micro-batch, t times what it moves with it. The backward is priced at twice the forward's
element-wise time (the model's `bwd = 2·(fwd − attn)`), and a selective recomputation of the norms re-runs them whole.

The script wraps the cost model's `layer_compute` for the runs of those engines only (the switch keys on the engine,
as the engine behaviour will), sets `sequence_parallel` false for them (their activations whole, as it will), and
prints each moved run's error before and after and the sets' figures.

    PYTHONPATH=src python3 benchmarks/predict_sequence_parallel.py

It reproduces the prediction before the change; once the model prices it (`CostParams.sequence_parallel` in
`layer_compute`, and the engines' behaviour), "after" counts the extra bytes twice.
"""

from __future__ import annotations

import statistics as st
from dataclasses import replace

import numpy as np

import bandwise.cost.terms.keyed as keyed
from bandwise.plan import validate as V
from bandwise.plan.runs import convert, load_runs

ENGINES = ("megatron@2021", "deepspeed@2021", "deepspeed@2022", "deepspeed@2022-02", "metaseq")

_layer_compute = keyed.layer_compute
_active = False


def outside_bytes_per_token(m, eager: bool) -> float:
    """The norms' and residual adds' bytes per token of one layer (`cost.flops.elementwise_bytes_per_token`'s count)."""
    norm = 36 if eager else 4
    return 2 * norm * m.hidden + 2 * 6 * m.hidden


def _patched(m, dev, s, rates, P):
    layer = _layer_compute(m, dev, s, rates, P)
    if not _active or m.is_hybrid:
        return layer
    whole = 1.0 - 1.0 / np.asarray(s.tp, dtype=float)  # what each rank runs beyond its 1/t share
    extra = rates.streamed(outside_bytes_per_token(m, P.eager_elementwise) * s.tokens * whole)
    norms = rates.streamed(2 * 2 * 2 * m.hidden * s.tokens * whole) if "layernorm" in P.selective_modules else 0.0
    return replace(layer, dense_fwd=layer.dense_fwd + extra, moe_fwd=layer.moe_fwd + extra if m.moe_layers else layer.moe_fwd,
                   fwd=layer.fwd + extra, bwd=layer.bwd + 2 * extra,
                   selective=layer.selective + norms + P.selective_forward_share * extra)


_priced = V.priced


def _priced_patched(case, params=V.DEFAULT_PARAMS):
    p = _priced(case, params)
    return replace(p, sequence_parallel=False) if _active and case.engine in ENGINES and case.stated.sequence_parallel is None else p


def main() -> None:
    global _active
    keyed.layer_compute = _patched
    V.priced = _priced_patched
    runs, sources = load_runs()
    rows = []
    for run in runs:
        try:
            case = convert(run, sources)
        except V.BandwiseError:  # a run validate refuses (no batch): not one of these engines'
            continue
        if case.engine not in ENGINES:
            continue
        _active = False
        before = V.predict(case)
        _active = True
        after = V.predict(case)
        _active = False
        if before.predicted is None or after.predicted is None:
            print(f"  {run['id']}: not priced ({before.reason or after.reason})")
            continue
        rows.append((run["id"], run["source"], case.engine, before.error, after.error, before.fit, after.fit))
    moved = [r for r in rows if abs(r[4] - r[3]) > 1e-9]
    print(f"{len(rows)} runs of {', '.join(ENGINES)}; {len(moved)} move")
    for rid, src, eng, b, a, fb, fa in sorted(moved, key=lambda r: (r[1], r[3])):
        fit = "" if fb == fa else f"  ({fb} -> {fa})"
        print(f"  {rid[:64]:64s} {b:+7.1%} -> {a:+7.1%}{fit}")
    for src in sorted({r[1] for r in rows}):
        sel = [r for r in rows if r[1] == src]
        print(f"{src:24s} n={len(sel):3d} signed {st.median(r[3] for r in sel):+.3f} -> {st.median(r[4] for r in sel):+.3f}"
              f"  |err| {st.median(abs(r[3]) for r in sel):.3f} -> {st.median(abs(r[4]) for r in sel):.3f}"
              f"  p90 {np.percentile([abs(r[3]) for r in sel], 90):.3f} -> {np.percentile([abs(r[4]) for r in sel], 90):.3f}")


if __name__ == "__main__":
    main()
