"""How often a narrowed search finds what the exhaustive search finds, and how much faster it is.

A search past `search.SEARCH_ROWS` candidates takes a coarse grid, then refines the best parallel
degrees (`plan.search.search`). This forces each coarse level on every case (the bound set to
that level's row count, so the level is the one taken) and compares with `max_rows=None`:
  - the best layout's tokens/s per device, and the best with and without PP (ratio, narrowed /
    exhaustive: 1.0 where the narrowed search found a layout as fast as the best);
  - the verdict (PP needed or not, at the planner's threshold);
  - the time of each, and the candidates evaluated.

    python benchmarks/search_budget.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bandwise.plan.search import COARSE_GRIDS, search, space_rows
from bandwise.plan.verdict import THRESHOLD, decide
from bandwise.specs.registry import get_cluster, get_model

MODELS = ("llama3-70b", "llama3-405b", "gpt3-175b", "mixtral-8x7b", "qwen3-235b-a22b", "deepseek-v3", "kimi-k2")
CLUSTERS = ("h100", "gb200-nvl72", "tpu-v5p")
DEVICES = (512, 4096)
SIDES = ("best", "best_with_pp", "best_without_pp")


def _tps(layout) -> float | None:  # noqa: ANN001
    return None if layout is None else layout.estimate.tokens_per_s_per_device


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write every case's figures here")
    args = ap.parse_args()
    rows = []
    for model in MODELS:
        m = get_model(model)
        for devices in DEVICES:
            batch = max((1 << 22) // m.seq_len, devices)
            for cluster in CLUSTERS:
                c = get_cluster(cluster)
                t0 = time.perf_counter()
                full = search(m, c, devices, batch, top=1, max_rows=None)
                t_full = time.perf_counter() - t0
                verdict = decide(full, c, THRESHOLD).needs_pp
                for level in range(1, len(COARSE_GRIDS) + 1):
                    bound = space_rows(m, devices, batch, coarse=level)
                    t0 = time.perf_counter()
                    narrow = search(m, c, devices, batch, top=1, max_rows=bound)
                    t_narrow = time.perf_counter() - t0
                    ratio = {s: (_tps(getattr(narrow, s)) / _tps(getattr(full, s)) if _tps(getattr(full, s)) else None) for s in SIDES}
                    rows.append({
                        "model": model, "devices": devices, "cluster": cluster, "level": level,
                        "searched_full": full.searched, "searched_narrow": narrow.searched,
                        "seconds_full": t_full, "seconds_narrow": t_narrow, "ratio": ratio,
                        "same_verdict": decide(narrow, c, THRESHOLD).needs_pp == verdict,
                    })
                    r = rows[-1]
                    print(f"{model:16s} {devices:5d} {cluster:12s} level {level}: best {ratio['best']!s:.8} "
                          f"with PP {ratio['best_with_pp']!s:.8} without {ratio['best_without_pp']!s:.8} "
                          f"verdict {'same' if r['same_verdict'] else 'DIFFERENT'}; {t_full:.2f} s -> {t_narrow:.2f} s", flush=True)
    for level in range(1, len(COARSE_GRIDS) + 1):
        at = [r for r in rows if r["level"] == level]
        print(f"\nlevel {level} ({len(at)} cases):")
        for side in SIDES:
            vals = [r["ratio"][side] for r in at if r["ratio"][side] is not None]
            exact = sum(v >= 1 - 1e-12 for v in vals)
            print(f"  {side}: found in {exact}/{len(vals)}; worst ratio {min(vals):.4f}")
        print(f"  verdict the same in {sum(r['same_verdict'] for r in at)}/{len(at)}")
        print(f"  candidates evaluated, median share {statistics.median(r['searched_narrow'] / r['searched_full'] for r in at):.3f}; "
              f"time, median ratio {statistics.median(r['seconds_narrow'] / r['seconds_full'] for r in at):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
