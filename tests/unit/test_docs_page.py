"""docs/bandwidth-simplicity.md stays true: its tables are the ones docs/bandwidth_simplicity.py
makes from the commands' kept documents, and (slow) a command run again prints what was kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs"))
import bandwidth_simplicity as page


def test_the_pages_tables_are_its_documents():
    assert page.differences(page.PAGE.read_text(encoding="utf-8"), page.tables(json.loads(page.DATA.read_text()))) == []


def test_a_table_edited_by_hand_is_caught():
    made = page.tables(json.loads(page.DATA.read_text()))
    text = page.PAGE.read_text(encoding="utf-8")
    one = made["compare_deepseek-v3"].splitlines()[2]
    assert page.differences(text.replace(one, one.replace("%", "0%", 1)), made) == ["compare_deepseek-v3: the page's table differs from the one its documents give"]


def test_every_command_is_cited_on_the_page():
    text = page.PAGE.read_text(encoding="utf-8")
    assert all(f"`{c['command']}`" in text for c in json.loads(page.DATA.read_text())["commands"].values())


@pytest.mark.slow
def test_the_current_model_still_prints_the_kept_comparison():
    """DeepSeek-V3 on the four clusters, planned again: the same table (a cost-model change that
    moves a layout, an MFU to the tenth of a point or a verdict fails here: run the script again)."""
    kept = json.loads(page.DATA.read_text())["commands"]["compare_deepseek-v3"]
    argv = [a for a in page.COMMANDS["compare_deepseek-v3"] if not a.endswith(".png") and a != "--png"]
    done = subprocess.run([sys.executable, "-m", "bandwise", *argv, "--json"], capture_output=True, text=True, check=False, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr
    assert page.compare_table(json.loads(done.stdout)) == page.compare_table(kept["json"]), (
        "the cost model moved: run `python docs/bandwidth_simplicity.py run` and say on the page what changed")
