"""Prediction for the GEMMs replicated across tensor-parallel ranks (MLA's down-projections, the MoE router), priced
on each rank's sequence shard where sequence parallelism leaves the input sharded, made before the model changes.

`cost.terms.compute.gemms_time` prices a GEMM of split "none" over every token of the micro-batch on each TP rank.
Megatron-Core runs MLA's `linear_q_down_proj` and `linear_kv_down_proj` either as TELinear with parallel_mode
"duplicated", whose input under sequence parallelism is the rank's [s/TP, b, h] shard, or as a ColumnParallelLinear,
which gathers the sequence and splits the output's q_lora_rank over TP (megatron/core/transformer/
multi_latent_attention.py, `_qkv_down_projection`, "[s / TP, b, q_lora_rank]"); either way a rank does 1/TP of the
work. Its router's gating GEMM reads the same [s/TP, b, h] hidden states. Without sequence parallelism the
duplicated GEMM reads the whole sequence on every rank, and where torch's ColwiseParallel gathers the sequence before
the block (TorchTitan, bandwise's trainer: `CostParams.tp_gathered_inputs`) the replicated GEMM runs on it whole;
neither moves. Under XLA (MaxText) the sharded compiler divides the work as well: priced like Megatron-Core.

What moves: MLA models and MoE routers under TP > 1 with sequence parallelism, on engines that do not gather the
sequence before the block.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_replicated_gemms_sp_local.py
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import bandwise.cost.terms.compute as compute
import bandwise.cost.terms.keyed as keyed
from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from error_figures import compare


def main() -> None:
    runs, sources = load_runs()
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    priced, layer, hybrid = compute.gemms_time, compute.layer_compute, compute.hybrid_layer_compute
    local = {"on": False}

    def gemms_time(gemms, m, s, rates):
        if not local["on"]:
            return priced(gemms, m, s, rates)
        shard = [replace(g, rows_per_token=g.rows_per_token / np.asarray(s.tp, dtype=float)) if g.split == "none" else g for g in gemms]
        return priced(shard, m, s, rates)

    def with_flag(f):
        def run(m, dev, s, rates, P):
            local["on"] = P.sequence_parallel and not P.tp_gathered_inputs
            try:
                return f(m, dev, s, rates, P)
            finally:
                local["on"] = False
        return run

    compute.gemms_time = gemms_time
    compute.hybrid_layer_compute = with_flag(hybrid)  # layer_compute calls it by its module name
    keyed.layer_compute = with_flag(layer)  # the step prices through keyed's import
    after = {r.id: r for r in V.run_all(runs, sources=sources)}
    moved = [k for k in before if before[k].error != after[k].error]
    compare(before, after, {"moved runs": moved})


if __name__ == "__main__":
    main()
