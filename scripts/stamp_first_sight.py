"""Record the first-sight predictions of the runs added to the runs file since the last commit.

    PYTHONPATH=src python scripts/stamp_first_sight.py [RUNS.yaml]     # the shipped runs by default

Add a source's runs to the file, then run this on a tree whose code is committed, before changing
anything for them; commit the file alone. Each added run gets `first_sight`: the tokens/s per device
the committed code predicts (or the refusal, as its reason), the commit and the date
(`plan.first_sight.stamp`). Only runs that the committed file does not hold are stamped: the runs
that were in the data before first sights were recorded have none, and must not get one (the model
was adjusted on them); a run that has one keeps it.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import yaml

from bandwise.plan.first_sight import record, stamp
from bandwise.plan.runs import default_runs_path, load_runs
from bandwise.plan.validate import run_all

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def main(argv: list[str]) -> int:
    path = Path(argv[0]).resolve() if argv else default_runs_path()
    if git("diff", "--quiet", "HEAD", "--", "src", ":!src/bandwise/data").returncode != 0:
        print("src/ has uncommitted changes to code: the first sight must be predicted by committed code", file=sys.stderr)
        return 2
    committed = git("show", f"HEAD:{path.relative_to(ROOT)}")
    before = {r.get("id") for r in (yaml.safe_load(committed.stdout) or {}).get("runs", [])} if committed.returncode == 0 else set()
    commit = git("rev-parse", "--short=10", "HEAD").stdout.strip()
    runs, sources = load_runs(path)
    todo = [r for r in runs if r.get("id") not in before and r.get("first_sight") is None]
    records = {r.id: record(r.predicted, r.reason, commit, datetime.date.today().isoformat()) for r in run_all(todo, sources=sources)}
    print(f"{stamp(path, records)} first sights recorded in {path.name} at {commit}, of {len(todo)} runs added since it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
