"""How validate orders pairs of published runs: the ranking over layouts (`bands.compute_ranking`), and the
pairs of one job (source, model, device, device count and parallel degrees) that differ only by precision or
float8 recipe, which issue 48 asks to be ordered as measured in 90% of cases.

    PYTHONPATH=src python benchmarks/recipe_pairs.py
"""

from __future__ import annotations

from bandwise.plan.bands import TIED, compute_ranking
from bandwise.plan.runs import load_runs
from bandwise.plan.validate import RunResult, run_all


def recipe_pairs(results: list[RunResult]) -> tuple[int, int, list[str]]:
    """(ordered as measured, pairs, the misses) over pairs that differ only by precision or recipe."""
    groups: dict[tuple, list[RunResult]] = {}
    for r in results:
        if r.error is None or r.strategy is None:
            continue
        s = r.strategy
        key = (r.source, r.model, r.device, r.devices, s.dp_replicate, s.dp_shard, s.tp, s.cp, s.pp, s.ep, s.micro_batch)
        groups.setdefault(key, []).append(r)
    ok, total, misses = 0, 0, []
    for rs in groups.values():
        for i, a in enumerate(rs):
            for b in rs[i + 1:]:
                pa, pb = (a.strategy.precision, a.fp8_recipe), (b.strategy.precision, b.fp8_recipe)
                measured, predicted = a.target / b.target, a.predicted / b.predicted
                if pa == pb or abs(measured - 1) <= TIED:
                    continue
                total += 1
                if (measured > 1) == (predicted > 1):
                    ok += 1
                else:
                    misses.append(f"{a.id} {pa} / {b.id} {pb}: measured {measured:.3f}, predicted {predicted:.3f}")
    return ok, total, misses


def main() -> None:
    runs, sources = load_runs()
    results = run_all(runs, sources=sources)
    print("ranking, all runs:", compute_ranking(results))
    print("ranking, first-sight runs:", compute_ranking([r for r in results if r.first_sight is not None]))
    ok, total, misses = recipe_pairs(results)
    for m in misses:
        print("  miss", m)
    print(f"pairs that differ only by precision or recipe, ordered as measured: {ok} of {total}")


if __name__ == "__main__":
    main()
