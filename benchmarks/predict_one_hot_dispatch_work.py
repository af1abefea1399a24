"""Prediction for MaxText's one-hot MoE dispatch priced at its whole work per device, made before the model changes.

`cost.terms.compute.capacity_gemms` prices MaxText's `dense_matmul` dispatch and combine (src/maxtext/layers/moe.py:
"BSM,BSEC -> EBCM" and "EBCM,BSEC -> BSM", the mask from `generate_masks` with E·C = S·k·capacity_factor slots per
sequence) as GEMMs of each device's tokens against its sequence's slots, and divided the slots by the expert-parallel
degree, assuming that sharding the einsum's expert dimension divides its work. It does not: the einsum's work is
2·B·S·E·C·M over the job whichever axis is sharded. Shard E over the EP ranks and each must hold the EP group's
batch (B/(dp·fsdp) sequences rather than B/(dp·fsdp·ep)); shard B over them and each holds every expert's slots.
Either way a device does 2·(its tokens)·E·C·M, the slots not divided by EP. Under EP = 1 nothing changes.

What moves: the capacity-factor rows of a MaxText MoE job with EP > 1 (the ROCm dropless blog's dense-matmul rows,
EP 8), each one-hot GEMM EP times wider.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_one_hot_dispatch_work.py
"""

from __future__ import annotations

import numpy as np

import bandwise.cost.terms.compute as compute
from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from error_figures import compare


def main() -> None:
    runs, sources = load_runs()
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    priced = compute.gemms_time

    def whole_slots(gemms, m, s, rates):
        slots = [g for g in gemms if g.split == "expert_slots"]
        rest = [g for g in gemms if g.split != "expert_slots"]
        # the slots as the current rule divides them by EP, so EP times as many give the whole width
        widened = [compute.replace(g, n=g.n * np.maximum(s.ep, 1)) for g in slots] if slots else []
        return priced(rest, m, s, rates) + (priced(widened, m, s, rates) if widened else 0.0)

    compute.gemms_time = whole_slots
    after = {r.id: r for r in V.run_all(runs, sources=sources)}
    stated = [k for k, r in before.items() if "capacity" in " ".join(r.notes or []) or "dense_cf" in k]
    compare(before, after, {"capacity-factor rows": stated})


if __name__ == "__main__":
    main()
