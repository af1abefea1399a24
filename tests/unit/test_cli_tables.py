"""Tables fit a terminal without cutting a number, name layouts one way, and explain their words."""

from __future__ import annotations

import json
import re

import pytest

from bandwise.cli.main import main
from bandwise.specs.strategy import Strategy

PLAN = ["plan", "--model", "llama3-70b", "--cluster", "h100", "--devices", "64", "--global-batch", "512"]
OLD_NAMES = re.compile(r"\b(dp_replicate|dp_shard|rep|fsdp|tp|cp|pp|ep)\d+\b")  # 'rep2', 'dp_replicate8', 'fsdp4'


def run(argv: list[str], capsys, columns: int | None = None, monkeypatch=None) -> tuple[int, str]:
    if columns is not None:
        monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, _ = capsys.readouterr()
    return exc.value.code, out


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_one_name_for_a_layout():
    s = Strategy(dp_replicate=2, dp_shard=32, tp=8, pp=4, schedule="Interleaved1F1B", virtual_stages=2, global_batch=256)
    assert s.describe() == "DP2·FSDP32·TP8·PP4 Interleaved1F1B×2"
    assert Strategy(dp_replicate=8, tp=8, zero_stage=1).describe() == "DP8·TP8 ZeRO-1"
    assert Strategy(dp_shard=8, ep=8).describe() == "FSDP8·EP8"
    assert Strategy().describe() == "1 device"


@pytest.fixture(scope="module")
def plan_json():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "bandwise", *PLAN, "--json"], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("columns", [80, 120])
def test_plan_fits_the_terminal_and_cuts_no_number(columns, plan_json, capsys, monkeypatch):
    code, out = run(PLAN, capsys, columns, monkeypatch)
    assert code == 0
    assert "…" not in out
    too_long = [line for line in out.splitlines() if len(line) > columns]
    assert not too_long, too_long
    flat = _flat(out)
    for lay in plan_json["top"]:
        e, name = lay["estimate"], Strategy.from_dict(lay["strategy"]).describe()
        assert f"{e['tokens_per_s_per_device']:,.0f}" in flat and f"{e['mfu']:.1%}" in flat
        assert all(word in out for word in name.split())  # wrapped between words, never inside one
    assert not OLD_NAMES.search(out), OLD_NAMES.search(out)


def test_wide_adds_columns_and_still_cuts_no_number(plan_json, capsys, monkeypatch):
    code, out = run([*PLAN, "--wide"], capsys, 80, monkeypatch)
    assert code == 0 and "…" not in out and "HFU" in out and "step s" in out
    for lay in plan_json["top"]:
        assert f"{lay['estimate']['step_time_s']:.2f}" in out and f"{lay['estimate']['hfu']:.1%}" in out


@pytest.mark.parametrize("command", ["models", "clusters"])
def test_preset_tables_fit_80_columns(command, capsys, monkeypatch):
    code, out = run([command], capsys, 80, monkeypatch)
    assert code == 0 and "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    doc = json.loads(run([command, "--json"], capsys)[1])
    assert all(name in out for name in doc)  # every preset name whole


def test_near_duplicates_are_collapsed_unless_all(capsys):
    _, out = run([*PLAN, "--json", "--top", "10"], capsys)
    listed = json.loads(out)["top"]
    _, out = run([*PLAN, "--json", "--top", "60", "--all"], capsys)
    ranked = json.loads(out)["top"]

    def degrees(lay):
        return tuple(lay["strategy"][k] for k in ("dp_replicate", "dp_shard", "tp", "cp", "pp", "ep"))

    def tps(lay):
        return lay["estimate"]["tokens_per_s_per_device"]

    assert len(listed) == 10 and len({json.dumps(l["strategy"], sort_keys=True) for l in listed}) == 10
    # each listed layout is either the first of its degrees or more than 1% below the one above it
    last: dict = {}
    for lay in listed:
        if degrees(lay) in last:
            assert tps(lay) < 0.99 * last[degrees(lay)]
        last[degrees(lay)] = tps(lay)
    # and everything the full ranking holds above the last listed one is listed or is such a near-duplicate
    cut = tps(listed[-1])
    kept = {json.dumps(l["strategy"], sort_keys=True) for l in listed}
    above = [l for l in ranked if tps(l) > cut]
    hidden = [l for l in above if json.dumps(l["strategy"], sort_keys=True) not in kept]
    assert hidden, "this plan has near-duplicates to collapse"
    for lay in hidden:
        assert any(degrees(k) == degrees(lay) and tps(k) >= tps(lay) and tps(lay) >= 0.99 * tps(k) for k in listed)


def test_every_table_has_its_words_under_it_and_in_help(capsys, monkeypatch):
    from bandwise.report import glossary

    _, out = run(PLAN, capsys, 120, monkeypatch)
    for words in (glossary.LAYOUT, glossary.PLAN_COLUMNS, glossary.BREAKDOWN):
        assert _flat(words) in _flat(out.replace("│", " "))
    assert "contention" not in out and "overlap slowdown" in out
    _, helptext = run(["plan", "--help"], capsys, 200, monkeypatch)
    for words in (glossary.LAYOUT, glossary.PLAN_COLUMNS, glossary.BREAKDOWN):
        assert _flat(words) in _flat(helptext.replace("│", " "))
    for command, words in (("models", glossary.MODELS), ("clusters", glossary.CLUSTERS)):
        assert _flat(words) in _flat(run([command], capsys, 120, monkeypatch)[1])
        assert _flat(words) in _flat(run([command, "--help"], capsys, 200, monkeypatch)[1].replace("│", " "))


@pytest.mark.parametrize("argv", [
    ["schedule", "--schedule", "Interleaved1F1B", "--stages", "4", "--microbatches", "64"],
    ["compare", "--model", "llama3-8b", "--devices", "16", "--global-batch", "64", "--clusters", "h100,gb200-nvl72"],
    ["sweep", "--model", "llama3-8b", "--devices", "16", "--global-batch", "64", "--vary", "scale-out-bandwidth=5,50"],
])
def test_schedule_compare_and_sweep_fit_80_columns(argv, capsys, monkeypatch):
    code, out = run(argv, capsys, 80, monkeypatch)
    assert code == 0 and "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    if argv[0] == "schedule":  # one line per rank: the timeline is drawn to the terminal's width, not wrapped
        rows = [line for line in out.splitlines() if line.startswith("rank ") and "|" in line]
        assert len(rows) == 4 and all(line.endswith("|") for line in rows)
    else:
        doc = json.loads(run([*argv, "--json"], capsys)[1])
        points = doc.get("clusters") or doc["points"]
        for p in points:
            assert f"{p['mfu_best']:.1%}" in out
            assert all(word in out for word in Strategy.from_dict(p["best"]["strategy"]).describe().split())
