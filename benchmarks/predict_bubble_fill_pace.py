"""Prediction for the pipeline bubble priced at the pace of a rank without the head, made before the model changes.

`cost.step._time` prices the bubble as the schedule's idle over busy time (`PipelineFactors.overhead`, simulated with
alike stages) times the busy time of the slowest rank, the one that also runs the output head and the loss. A
pipeline is a flow line: m alike micro-batches finish after sum_i t_i + (m - 1) max_i t_i, so the fill and drain
pass through the other ranks and only the steady state runs at the slow rank's pace. The event simulation of every
looped schedule with one slow stage gives exactly this (`simulate(..., stage_scale=...)`,
tests/unit/test_pipeline_sim.py, 8f0741a); for the V-shaped ones it is an upper bound.

What moves: pipelined runs whose head rank is slower than the others (large vocabularies over few layers per
stage: BLOOM's 250k tokens, the nanotron benchmark's 131k over 2 stages), upward (less bubble), by the bubble's
share of (slow rank - other rank) time.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_bubble_fill_pace.py

Both sides are priced with the fill forced to the slowest rank's time (the old pace), and "after" takes the spared
bubble off explicitly, so the script reads the same before the change (0ef5ee1) and after it (c2eefbd), where the
model prices the fill itself.
"""

from __future__ import annotations

from dataclasses import replace

import bandwise.cost.step as step
from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from error_figures import compare


def main() -> None:
    runs, sources = load_runs()
    timed = step._time
    fill_pace = {"on": False}

    def priced(m, dev, rows, ct, P):
        old_pace = replace(rows, stages=replace(rows.stages, fill=rows.stages.total))
        t = timed(m, dev, old_pace, ct, P)
        if not fill_pace["on"]:
            return t
        spared = rows.n_mb * (rows.stages.total - rows.stages.fill) * rows.overhead * rows.stages.chunk_ratio
        new = t.step_time_s - spared
        ratio = t.step_time_s / new
        return replace(t, step_time_s=new, tokens_per_s_per_device=t.tokens_per_s_per_device * ratio, mfu=t.mfu * ratio,
                       hfu=t.hfu * ratio, time=replace(t.time, bubble=t.time.bubble - spared))

    step._time = priced
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    fill_pace["on"] = True
    after = {r.id: r for r in V.run_all(runs, sources=sources)}
    moved = [k for k in before if before[k].error is not None and abs(before[k].error - after[k].error) > 1e-9]
    by_source: dict[str, list[str]] = {}
    for k in moved:
        by_source.setdefault(before[k].source, []).append(k)
    compare(before, after, {"moved runs": moved, **{f"moved, {s}": ids for s, ids in sorted(by_source.items())}})


if __name__ == "__main__":
    main()
