"""Prediction of the tied embedding's gradient all-reduce across a pipeline, made before the cost model prices it.

With tied input and output embeddings under pipeline parallelism the first stage holds the embedding and the last a
copy for the output layer; after the backward each sums its gradient with the other's so the two stay equal:
Megatron-Core `finalize_model_grads` -> `_allreduce_word_embedding_grads` (megatron/core/distributed/
finalize_model_grads.py, an all-reduce over the embedding group of the first and last stage), nanotron
`sync_tied_weights_gradients` (src/nanotron/parallel/tied_parameters.py, over each tied parameter's group), and
bandwise's trainer (`runtime/parallel/tied.py`). It runs after the last micro-batch's backward, before the optimizer,
and nothing overlaps it. Its size is the embedding's TP shard, vocab x hidden / TP elements, in the gradient's dtype.

The closed form here is the cost model's own all-reduce price (`cost.comm.all_reduce_time`) for two ranks (pp - 1)
pipeline strides apart, added to the step of every shipped run with tied embeddings and PP > 1. It prints each run's
error before and after.

    PYTHONPATH=src python3 benchmarks/predict_tied_embedding_sync.py

It reproduces the prediction at ccb12e9, before the change; from adb90b9 on the model prices the all-reduce itself
(`terms.pipeline.tied_embedding_sync`), so "after" counts it twice there.
"""

from __future__ import annotations

import numpy as np

from bandwise.cost import comm
from bandwise.cost.terms.placement import Groups
from bandwise.cost.terms.shape import Shape
from bandwise.plan import validate as V
from bandwise.plan.runs import convert, load_runs
from bandwise.specs.strategy import Layouts


def main() -> None:
    runs, sources = load_runs()
    for run in runs:
        try:
            case = convert(run, sources)
        except Exception:  # noqa: BLE001 - a run the planner cannot read has no step to add to
            continue
        if not case.model.tied_embeddings:
            continue
        res = V.predict(case)
        if res.predicted is None or res.strategy is None or res.strategy.pp <= 1:
            continue
        params = V.priced(case)
        c = Layouts.of([res.strategy])
        s = Shape.of(case.model, c, params.cp_shards_weights)
        g = Groups.of(res.strategy.order, c, s)
        nbytes = case.model.vocab * case.model.hidden / s.tp * params.grad_reduce_bytes
        added = float(comm.all_reduce_time(case.cluster, nbytes, g.pp * (s.pp - 1), np.array([2.0]))[0])
        step = res.estimate.step_time_s
        after = res.predicted * step / (step + added)
        print(f"{run['id']:40s} {res.strategy.pp:3d} stages, {nbytes[0] / 2**20:8.1f} MiB, +{added * 1e3:6.1f} ms on {step:8.3f} s:"
              f" {res.predicted / res.target - 1:+7.1%} -> {after / res.target - 1:+7.1%}")


if __name__ == "__main__":
    main()
