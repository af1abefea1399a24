"""Closed-form prediction of DeepSpeed's blocking pipeline sends from the cost model's own parts, made before the
engine behaviour existed: per deepspeed run with PP, the step with every schedule step's exchange exposed
(2 sends and a TP all-gather each) in place of the warm-up and cool-down hops. It prints the signed and absolute
error by source before and after, and writes each run's to /tmp/predict_blocking_sends.json.

    PYTHONPATH=src python3 benchmarks/predict_blocking_sends.py

It reproduces the prediction at b57fd9f, before the change; from f97b1dc on the model prices these sends itself
(`CostParams.pipeline_sends_blocking`), so "before" and "after" read alike.
"""

from __future__ import annotations

import json
import statistics as st

from bandwise.cost import comm
from bandwise.cost.flops import BF16
from bandwise.cost.terms.placement import Groups
from bandwise.cost.terms.shape import Shape
from bandwise.plan import validate as V
from bandwise.plan.runs import convert, engine_of, load_runs
from bandwise.specs.strategy import Layouts


def exchanges(microbatches: int, stages: int) -> int:
    """The steps of DeepSpeed's TrainSchedule on which a middle stage exchanges: 2(m + p - 1); two stages exchange
    on alternate steps, m + 1 times."""
    return 2 * (microbatches + stages - 1) if stages >= 3 else microbatches + 1


def predicted(run: dict, sources: dict) -> dict | None:
    """The run's error before and with every step's exchange exposed; None for a run with no pipeline."""
    case = convert(run, sources)
    res = V.predict(case)
    if res.predicted is None or res.strategy is None or res.strategy.pp <= 1:
        return None
    strategy, est = res.strategy, res.estimate
    c = Layouts.of([strategy])
    s = Shape.of(case.model, c, V.priced(case).cp_shards_weights)
    g = Groups.of(strategy.order, c, s)
    activation = s.tokens * case.model.hidden * BF16
    p2p = float(comm.p2p_time(case.cluster, activation / s.tp, g.pp)[0])
    gather = float(comm.all_gather_time(case.cluster, activation, g.tp, s.tp)[0]) if strategy.tp > 1 else 0.0
    added = exchanges(est.microbatches, strategy.pp) * (2 * p2p + gather) - est.breakdown["pp"]
    after = res.predicted * est.step_time_s / (est.step_time_s + added)
    return dict(source=run["source"], before=res.predicted / res.target - 1, after=after / res.target - 1, added_s=added,
                step=est.step_time_s)


def main() -> None:
    runs, sources = load_runs()
    out = {run["id"]: p for run in runs if engine_of(run, sources).startswith("deepspeed") and (p := predicted(run, sources))}
    by: dict[str, list[dict]] = {}
    for v in out.values():
        by.setdefault(v["source"], []).append(v)
    for src, vs in by.items():
        share = [v["added_s"] / v["step"] for v in vs]
        print(f"{src:26s} n={len(vs):3d} signed before {st.median(v['before'] for v in vs):+.3f} after {st.median(v['after'] for v in vs):+.3f}"
              f"  |err| {st.median(abs(v['before']) for v in vs):.3f} -> {st.median(abs(v['after']) for v in vs):.3f}"
              f"  added share of step {st.median(share):.3f} (max {max(share):.3f})")
    with open("/tmp/predict_blocking_sends.json", "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
