"""Prediction for nanotron's pipeline stages placed by weight, made before its engine entry names them.

nanotron's engine entry reads `layouts.stages: layout`, which prices equal stages wherever the layers divide over
pp (the head's rank paying for the head on top of its share) and a time-balanced split only where they do not.
nanotron itself places its pipeline blocks by cumulative weight count whatever the layers divide into: a decoder
layer weighs 4·heads·(hidden/heads)·hidden + 3·ffn·hidden, the output head vocab·hidden, and each rank takes blocks
until the running total passes (r + 1)/pp of the whole (src/nanotron/models/base.py build_model and
models/llama.py get_block_compute_costs at c2528430; `cost.terms.stages.weight_counts`, b28b3ce). For the
benchmark's 1.34B over PP 2 that is 11 layers, then 5 and the head, where the cost model priced 8 and 8 + head.

What moves: the nanotron benchmark's pipelined rows (PP 2, 4, 16, 32).

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_nanotron_stages_by_weight.py
"""

from __future__ import annotations

from dataclasses import replace

import bandwise.cost.profiles as profiles
from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from error_figures import compare


def main() -> None:
    runs, sources = load_runs()
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    priced = profiles.params_for

    def by_weight(engine, device=None, base=profiles.DEFAULT_PARAMS):
        p = priced(engine, device, base)
        return replace(p, stages_by_weights=True, balanced_when_uneven=False) if engine.name == "nanotron" else p

    profiles.params_for = by_weight
    V.params_for = by_weight  # validate prices through its own import
    after = {r.id: r for r in V.run_all(runs, sources=sources)}
    nanotron = [k for k in before if before[k].source == "nanotron_bench_2502"]
    compare(before, after, {"nanotron benchmark": nanotron})


if __name__ == "__main__":
    main()
