"""The planner's verdict for the reference cases of the planner issue, as a Markdown table.

    python benchmarks/planner_verdicts.py

Each case is one exhaustive search (`bandwise plan` with the same arguments); the table gives
the best layout, the best without pipeline parallelism, and the verdict with its reason.
"""

from __future__ import annotations

import time

from bandwise.plan.search import search
from bandwise.plan.verdict import REFERENCE_CASES as CASES, decide
from bandwise.specs.registry import get_cluster, get_model


def layout(lay) -> str:  # noqa: ANN001
    s, e = lay.strategy, lay.estimate
    extra = f", mb {s.micro_batch}, {s.recompute} recompute" + ("" if "ZeRO" in s.describe() else f", ZeRO-{s.zero}")
    return f"{s.describe()}{extra}: {e.tokens_per_s_per_device:,.0f} tok/s/dev, MFU {e.mfu:.1%}, {e.memory_gib_per_device:.0f} GiB"


def main() -> None:
    print("| case | searched (s) | best layout | best without PP | verdict |")
    print("|---|---|---|---|---|")
    for model, cluster, n, seq, gb in CASES:
        m, c = get_model(model).with_seq_len(seq), get_cluster(cluster)
        t0 = time.perf_counter()
        r = search(m, c, n, gb)
        dt = time.perf_counter() - t0
        v = decide(r, c)
        nopp = layout(r.best_without_pp) if r.best_without_pp else "none fits"
        best = layout(r.best) if r.best else "none fits"
        print(f"| {model} on {n} x {cluster}, seq {seq}, batch {gb} | {r.searched:,} ({dt:.1f}) | {best} | {nopp} | "
              f"**{'PP needed' if v.needs_pp else 'PP not needed'}**: {v.reason} |")


if __name__ == "__main__":
    main()
