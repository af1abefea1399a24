"""docs/adding-a-term.md, applied: a new cost is one term module, one StepTime field and its seconds
in the step, and every output that lists the terms shows it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
from bandwise.cost.step import estimate
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy
e = estimate(get_model("llama3-8b"), get_cluster("h100"), Strategy(dp_shard=8, tp=1, micro_batch=1, global_batch=16))
print(json.dumps({"step": e.step_time_s, "breakdown": e.breakdown}))
"""


def _patch() -> str:
    return re.search(r"```diff\n(.*?)```", (ROOT / "docs" / "adding-a-term.md").read_text(), re.S).group(1)


def _run(src: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, *args], env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                         check=True, cwd=src.parent)
    return out.stdout


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the walkthrough's patch is applied with git apply")
    root = tmp_path_factory.mktemp("term")
    shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (root / "term.diff").write_text(_patch())
    subprocess.run(["git", "apply", "-p1", "term.diff"], cwd=root, check=True, capture_output=True)
    return root / "src"


def test_the_walkthrough_touches_one_module_one_field_and_the_sum(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (tmp_path / "term.diff").write_text(_patch())
    stat = subprocess.run(["git", "apply", "-p1", "--numstat", "term.diff"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    touched = {line.split("\t")[2]: (int(line.split("\t")[0]), int(line.split("\t")[1])) for line in stat.splitlines()}
    assert set(touched) == {"src/bandwise/cost/terms/host.py", "src/bandwise/cost/results.py", "src/bandwise/cost/step.py"}
    assert touched["src/bandwise/cost/results.py"] == (1, 0)  # one field
    assert touched["src/bandwise/cost/step.py"][1] <= 2  # the sum and StepTime's arguments, nothing rewritten


def test_the_new_term_is_priced_and_listed(patched):
    before = json.loads(_run(ROOT / "src", "-c", PROBE))
    after = json.loads(_run(patched, "-c", PROBE))
    host = float(re.search(r"HOST_STEP_S = ([0-9.e-]+)", (patched / "bandwise/cost/terms/host.py").read_text()).group(1))
    assert "host" not in before["breakdown"]
    assert after["breakdown"]["host"] == pytest.approx(host)
    assert after["step"] == pytest.approx(before["step"] + host, rel=1e-12)
    assert {k: v for k, v in after["breakdown"].items() if k != "host"} == pytest.approx(before["breakdown"], rel=1e-12)
    table = _run(patched, "-m", "bandwise", "estimate", "--model", "llama3-8b", "--cluster", "h100", "--dp-shard", "8",
                 "--micro-batch", "1", "--global-batch", "16")
    assert "host overhead" in table
