"""Published whole runs predicted stage by stage: each stage planned as `bandwise plan` plans it, and
its best layout priced for the stage's tokens with the cluster's default operations (goodput included)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bandwise.api.planning import estimate, plan
from bandwise.errors import BandwiseError
from bandwise.plan.run_budget import RunAsk, price_run
from bandwise.plan.whole_runs import StagePrediction, WholeRun, WholeRunPrediction, load_whole_runs
from bandwise.specs.strategy import Strategy


def predict_whole_run(run: WholeRun) -> WholeRunPrediction:
    """`run` as bandwise would plan and price each of its stages."""
    out = WholeRunPrediction(run=run)
    for st in run.stages:
        if st.strategy is not None:  # the published layout, priced as trained
            layout = Strategy.from_dict({**st.strategy, "global_batch": st.global_batch or st.global_batch_tokens // st.seq_len, "precision": run.precision},
                                        where=f"whole run {run.id!r} stage {st.name!r} strategy")
            priced = estimate(run.model, run.cluster, run.devices, strategy=layout, engine=run.engine, seq_len=st.seq_len)
            cost = price_run(RunAsk(tokens=st.tokens, steps=st.steps), priced.model, priced.cluster, run.devices, priced.layout, priced.params)
            out.stages.append(StagePrediction(stage=st, layout=f"{priced.strategy.describe()} (as trained)", run=cost))
            continue
        planned = plan(run.model, run.cluster, run.devices, engine=run.engine, seq_len=st.seq_len, global_batch=st.global_batch,
                       global_batch_tokens=st.global_batch_tokens, precision=run.precision, top=1, must_fit=False)
        best = planned.best
        priced = None if best is None else price_run(RunAsk(tokens=st.tokens, steps=st.steps), planned.model, planned.cluster, run.devices,
                                                     best, planned.params)
        out.stages.append(StagePrediction(stage=st, layout=best.strategy.describe() if best else "nothing fits", run=priced))
    return out


def whole_runs(only: str | None = None, on_run: Callable[[WholeRunPrediction], None] | None = None,
               path: str | Path | None = None) -> list[WholeRunPrediction]:
    """The shipped whole runs, or a run file's (`path`), or the comma-separated ids in `only` of them, predicted."""
    runs, _ = load_whole_runs(None if path is None else Path(path))
    if only:
        ids = [i.strip() for i in only.split(",") if i.strip()]
        unknown = [i for i in ids if i not in {r.id for r in runs}]
        if unknown:
            raise BandwiseError(f"--only {','.join(unknown)}: no such whole run; known: {', '.join(r.id for r in runs)}")
        runs = [r for r in runs if r.id in ids]
    out = []
    for r in runs:
        out.append(predict_whole_run(r))
        if on_run:
            on_run(out[-1])
    return out
