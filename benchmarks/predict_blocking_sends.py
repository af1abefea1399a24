"""Closed-form prediction of DeepSpeed's blocking pipeline sends from the cost model's own parts, made before the
engine behaviour existed: per deepspeed run with PP, the step with every schedule step's exchange exposed
(2 sends and a TP all-gather each) in place of the warm-up and cool-down hops.

    PYTHONPATH=src python3 benchmarks/predict_blocking_sends.py
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

runs, sources = load_runs()
out = {}
for run in runs:
    if not engine_of(run, sources).startswith("deepspeed"):
        continue
    case = convert(run, sources)
    if not case.engine.startswith("deepspeed"):
        continue
    res = V.predict(case)
    if res.predicted is None or res.strategy is None or res.strategy.pp <= 1:
        continue
    s0 = res.strategy
    c = Layouts.of([s0]); params = V.priced(case)
    s = Shape.of(case.model, c, params.cp_shards_weights); g = Groups.of(s0.order, c, s)
    p2p = float(comm.p2p_time(case.cluster, s.tokens * case.model.hidden * BF16 / s.tp, g.pp)[0])
    gather = float(comm.all_gather_time(case.cluster, s.tokens * case.model.hidden * BF16, g.tp, s.tp)[0]) if s0.tp > 1 else 0.0
    m, p = res.estimate.microbatches, s0.pp
    steps = 2 * (m + p - 1) if p >= 3 else (m + 1)
    new_sends = steps * (2 * p2p + gather)
    old_sends = res.estimate.breakdown["pp"]
    step = res.estimate.step_time_s
    new_step = step - old_sends + new_sends
    pred = res.predicted * step / new_step
    out[run["id"]] = dict(source=run["source"], before=res.predicted / res.target - 1, after=pred / res.target - 1, added_s=new_sends - old_sends, step=step)
by = {}
for k, v in out.items(): by.setdefault(v["source"], []).append(v)
for src, vs in by.items():
    print(f"{src:26s} n={len(vs):3d} signed before {st.median([v['before'] for v in vs]):+.3f} after {st.median([v['after'] for v in vs]):+.3f}"
          f"  |err| {st.median([abs(v['before']) for v in vs]):.3f} -> {st.median([abs(v['after']) for v in vs]):.3f}  added share of step {st.median([v['added_s']/v['step'] for v in vs]):.3f} (max {max(v['added_s']/v['step'] for v in vs):.3f})")
json.dump(out, open("/tmp/predict_blocking_sends.json", "w"), indent=1)
