"""Record the first-sight predictions of the runs that have none, in the runs file itself.

    PYTHONPATH=src python scripts/stamp_first_sight.py SOURCE [SOURCE ...] [--runs RUNS.yaml]

Only the runs of the named sources are stamped: the runs that were in the data before first sights
were recorded have none, and must not get one (the model was adjusted on them). Run it on a clean tree at the commit whose code should make the prediction, right after adding a
source's runs and before changing anything for them; then commit the file alone. Each run gets
`first_sight` (the tokens/s per device predicted, or the refusal as its reason; the commit; the
date); a run that has one keeps it (`plan.first_sight.stamp`).
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

from bandwise.plan.first_sight import record, stamp
from bandwise.plan.runs import default_runs_path, load_runs
from bandwise.plan.validate import run_all


def main(argv: list[str]) -> int:
    path = default_runs_path()
    if "--runs" in argv:
        i = argv.index("--runs")
        path, argv = Path(argv[i + 1]), argv[:i] + argv[i + 2:]
    names = set(argv)
    if not names:
        print("name the sources whose runs to stamp", file=sys.stderr)
        return 2
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src"], cwd=Path(__file__).parents[1]).returncode != 0:
        print("src/ has uncommitted changes: the first sight must be predicted by committed code", file=sys.stderr)
        return 2
    commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    today = datetime.date.today().isoformat()
    runs, sources = load_runs(path)
    unknown = names - {str(r.get("source")) for r in runs}
    if unknown:
        print(f"no run has the source {sorted(unknown)[0]!r}", file=sys.stderr)
        return 2
    todo = [r for r in runs if r.get("first_sight") is None and r.get("source") in names]
    records = {r.id: record(r.predicted, r.reason, commit, today) for r in run_all(todo, sources=sources)}
    print(f"{stamp(path, records)} first sights recorded in {path} at {commit} ({len(todo)} of the named sources' runs had none)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
