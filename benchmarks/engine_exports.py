"""What each engine loses on the reference verdicts: the plan, and the layout each engine's export runs.

    python benchmarks/engine_exports.py

For each reference case (`bandwise.plan.verdict.REFERENCE_CASES`), `bandwise plan ... --emit E`
for E in torchtitan, megatron, maxtext: the layout the job file runs (the plan where the engine
expresses it, else the nearest layout it does) and its predicted tokens/s per device against the
plan's, or the one-line refusal where the engine cannot run it. The engines' own code accepts
every one of these files (tests/interop/).
"""

from __future__ import annotations

import time

from bandwise.export import ENGINES, plan_and_export
from bandwise.plan.verdict import REFERENCE_CASES
from bandwise.specs.registry import get_cluster, get_model


def main() -> None:
    print("| case | plan | " + " | ".join(ENGINES) + " |")
    print("|---|---|" + "---|" * len(ENGINES))
    for model, cluster, n, seq, gb in REFERENCE_CASES:
        m, c = get_model(model).with_seq_len(seq), get_cluster(cluster)
        t0 = time.perf_counter()
        chosen, exports = plan_and_export(m, c, n, gb, model_source=model)
        dt = time.perf_counter() - t0
        planned = chosen.estimate.tokens_per_s_per_device
        cells = []
        for e in ENGINES:
            ex = exports[e]
            if isinstance(ex, Exception):  # the engine's job cannot run this plan: the one-line refusal
                cells.append(f"refused: {ex}")
                continue
            if ex.estimate is None:
                cells.append("as planned")
                continue
            fits = "" if ex.estimate.fits else ", does not fit"
            cells.append(f"{ex.strategy.describe()}, mb {ex.strategy.micro_batch}, {ex.strategy.recompute}, {ex.strategy.precision}: "
                         f"{ex.estimate.tokens_per_s_per_device:,.0f} ({ex.estimate.tokens_per_s_per_device / planned - 1:+.0%}{fits})")
        s = chosen.strategy
        print(f"| {model} on {n} x {cluster} ({dt:.0f} s) | {s.describe()}, mb {s.micro_batch}, {s.recompute}: {planned:,.0f} tok/s/dev | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
