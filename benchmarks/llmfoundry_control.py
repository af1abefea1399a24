"""llm-foundry's MPT tables on H100 and on A100 (the control), on validate's path, grouped; optionally with
one cost-model field changed, to test a mechanism on both chips at once before it goes in.

    python benchmarks/llmfoundry_control.py [--set FIELD=VALUE ...]

FIELD is a `CostParams` field (e.g. eager_elementwise=True, attention_efficiency=0.35). The same
software ran both tables, so a mechanism that explains the H100 error must leave the A100 rows be.
"""

from __future__ import annotations

import argparse
import ast
import re
import statistics
from dataclasses import fields, replace
from bandwise.cost.params import DEFAULT_PARAMS, CostParams
from bandwise.plan.runs import load_runs
from bandwise.plan.validate import run_all

SOURCE = "llmfoundry_mpt"
"""llm-foundry's MPT tables in the shipped runs; each set is the runs whose accelerator names its chip."""
SETS = ("A100", "H100")


def _override(text: str) -> tuple[str, object]:
    name, _, value = text.partition("=")
    if name not in {f.name for f in fields(CostParams)}:
        raise SystemExit(f"--set {text!r}: {name!r} is not a CostParams field")
    return name, ast.literal_eval(value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    args = ap.parse_args()
    params = replace(DEFAULT_PARAMS, **dict(_override(t) for t in args.set))
    print(f"changed: {', '.join(args.set) or 'nothing'}\n")
    print("| set | runs | median abs error | signed median | sequence <= 2,048 | sequence > 2,048 |")
    print("|---|---:|---:|---:|---:|---:|")
    runs, sources = load_runs()
    for name in SETS:
        chosen = [r for r in runs if r["source"] == SOURCE and name in r["hardware"]["accelerator"]]
        ok = [r for r in run_all(chosen, sources=sources, params=params) if r.error is not None]
        seq = {r.id: int(re.search(r"seq(\d+)", r.id).group(1)) for r in ok}

        def signed(keep) -> str:  # noqa: ANN001
            e = [r.error for r in ok if keep(seq[r.id])]
            return f"{statistics.median(e):+.1%} ({len(e)})"

        print(f"| {name} | {len(ok)} | {statistics.median(abs(r.error) for r in ok):.1%} | {statistics.median(r.error for r in ok):+.1%} "
              f"| {signed(lambda s: s <= 2048)} | {signed(lambda s: s > 2048)} |")


if __name__ == "__main__":
    main()
