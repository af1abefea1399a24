"""Prediction for the norms and residual adds of a TP job without sequence parallelism, priced on the whole sequence on
every TP rank, made before the model changes.

`layer_compute` divides all of a layer's element-wise traffic by TP. Only part of it is split by tensor parallelism:
RoPE over the rank's heads, the activation over its share of the MLP. The norms, dropouts and residual adds sit
outside the TP regions; Megatron's sequence parallelism splits them along the sequence, and without it each TP rank
runs them on all s·b·h elements (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", Sec. 4.2.2 and Fig. 5; the memory side is their Eq. 2, already priced by `CostParams.sequence_parallel`).
So those bytes, each block's norm and residual add (`cost.flops`: 4 + 6 bytes an element fused, 36 + 6 eager), are
TP times the sequence-parallel figure. The same holds for selective recomputation's re-run norms.

What moves: TP > 1 jobs that state no sequence parallelism (`parallelism.sp: false`): Narayanan et al. 2021's Megatron
runs, and the Megatron-DeepSpeed long-sequence rows.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_norms_whole_without_sp.py
"""

from __future__ import annotations

import numpy as np

import bandwise.cost.terms.compute as compute
import bandwise.cost.terms.keyed as keyed
from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from error_figures import compare


def main() -> None:
    runs, sources = load_runs()
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    layer, hybrid, uniform_bytes, hybrid_bytes = (compute.layer_compute, compute.hybrid_layer_compute,
                                                  compute.elementwise_bytes_per_token, compute.hybrid_elementwise_bytes_per_token)
    ctx = {"extra_tp": None}

    def whole(m, blocks, eager):  # each block's norm and residual add, times (TP - 1) more on each rank without SP
        if ctx["extra_tp"] is None:
            return 0.0
        return blocks * ((36 if eager else 4) + 6) * m.hidden * ctx["extra_tp"]

    def uniform(m, moe_layer, eager=False):
        return uniform_bytes(m, moe_layer, eager) + whole(m, 2.0, eager)

    def mixed(m, mixer_bytes, eager=False):
        blocks = (m.layers - m.mixer_free_layers + m.mlp_layers) / m.layers
        return hybrid_bytes(m, mixer_bytes, eager) + whole(m, blocks, eager)

    def with_ctx(f):
        def run(m, dev, s, rates, P):
            ctx["extra_tp"] = None if P.sequence_parallel else np.asarray(s.tp, dtype=float) - 1.0
            try:
                return f(m, dev, s, rates, P)
            finally:
                ctx["extra_tp"] = None
        return run

    compute.elementwise_bytes_per_token, compute.hybrid_elementwise_bytes_per_token = uniform, mixed
    compute.hybrid_layer_compute, keyed.layer_compute = with_ctx(hybrid), with_ctx(layer)
    after = {r.id: r for r in V.run_all(runs, sources=sources)}
    moved = [k for k in before if before[k].error != after[k].error]
    compare(before, after, {"moved runs": moved})


if __name__ == "__main__":
    main()
