"""A verdict is true or not given: --no-pp, nothing fits, compare/sweep headers, and the layout handed to train."""

from __future__ import annotations

import json
import re

import pytest

from bandwise.cli.main import main
from bandwise.specs.strategy import Strategy

PLAN = ["plan", "--model", "llama3-70b", "--cluster", "h100", "--devices", "64", "--global-batch", "512"]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_no_pp_gives_no_verdict_on_pp(capsys):
    code, out, _ = run([*PLAN, "--json"], capsys)
    full = json.loads(out)
    assert code == 0 and any(lay["strategy"]["pp"] > 1 for lay in full["top"])  # pipelined layouts do fit
    code, out, _ = run([*PLAN, "--no-pp", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["verdict"]["needs_pp"] is None
    assert "no pipelined layout fits" not in doc["verdict"]["reason"] and "--no-pp" in doc["verdict"]["reason"]
    code, out, _ = run([*PLAN, "--no-pp"], capsys)
    assert code == 0 and "PP not needed" not in out and "PP needed" not in out and "no verdict on PP" in out


@pytest.mark.parametrize("json_out", [False, True])
def test_nothing_fits_exits_3_without_a_verdict_and_says_what_fits(json_out, capsys):
    argv = ["plan", "--model", "llama3-70b", "--cluster", "h100", "--devices", "7"] + (["--json"] if json_out else [])
    code, out, err = run(argv, capsys)
    assert code == 3
    assert len(err.strip().splitlines()) == 1 and "nothing fits" in err and "--debug" not in err
    assert "PP not needed" not in out + err and "PP needed" not in out + err
    if json_out:
        doc = json.loads(out)
        assert doc["best"] is None and doc["verdict"]["needs_pp"] is None
    # following the advice works
    n = int(re.search(r"(\d+) devices would fit", err).group(1))
    code, out, _ = run(["plan", "--model", "llama3-70b", "--cluster", "h100", "--devices", str(n), "--json"], capsys)
    assert code == 0 and json.loads(out)["best"] is not None


@pytest.mark.parametrize(("engine", "model"), [("torchtitan", "llama4-scout"), ("maxtext", "deepseek-v3")])
def test_the_advice_when_nothing_fits_names_a_layout_of_the_engine(engine, model, capsys):
    """The layout the advice names is one the user's engine runs: its own plan at that device count,
    micro-batch 1 and full recomputation, lists it (TorchTitan has no ZeRO-1/2, MaxText no DualPipeV)."""
    base = ["plan", "--model", model, "--cluster", "h100", "--engine", engine]
    code, _, err = run([*base, "--devices", "16"], capsys)
    assert code == 3 and "nothing fits" in err
    advice = re.search(r"(\d+) devices would fit \(([^,]+),", err)
    n, layout = int(advice.group(1)), advice.group(2)
    code, out, _ = run([*base, "--devices", str(n), "--fix", "micro_batch=1,recompute=full", "--json", "--top", "50", "--all"], capsys)
    assert code == 0
    listed = {Strategy(**{**row["strategy"], "order": tuple(row["strategy"]["order"])}).describe() for row in json.loads(out)["top"]}
    assert layout in listed


def test_a_verdict_needs_a_fitting_layout_in_compare_and_sweep():
    from bandwise.plan.sweep import crossover
    from bandwise.plan.verdict import Verdict

    class P:
        def __init__(self, value, needs_pp):
            self.value, self.verdict = value, Verdict(needs_pp=needs_pp, reason="", gain=None)

    # a point where nothing fits is no "PP not needed" point: it ends the run of them
    assert crossover([P(1, True), P(2, False), P(3, None)]) is None
    assert crossover([P(1, None), P(2, False), P(3, False)]) == 2


def test_compare_header_claims_no_verdict_and_rows_match_json(capsys):
    argv = ["compare", "--model", "llama3-70b", "--devices", "64", "--global-batch", "512", "--clusters", "h100,gb200-nvl72"]
    code, out, _ = run([*argv, "--json"], capsys)
    assert code == 0
    verdicts = {p["cluster"]: p["verdict"]["needs_pp"] for p in json.loads(out)["clusters"]}
    assert True in verdicts.values()  # some row says PP needed: a header claiming otherwise would be false
    code, out, _ = run(argv, capsys)
    header = out.split("Best layout with and without")[0]
    assert "PP not needed" not in header.replace("'PP not needed' when", "")
    for cluster, needs in verdicts.items():
        row = next(line for line in out.splitlines() if line.startswith(cluster))
        assert ("PP needed" in row) == needs and ("PP not needed" in row) == (not needs)


def test_best_is_the_layout_the_verdict_recommends(tmp_path, capsys):
    """README's plan -> train example: when PP is not needed, `best` (what train runs) has no PP."""
    from bandwise.cli.train import load_strategy

    # an engine file of no behaviour of its own: the cost model's defaults, under which the fastest layout is pipelined
    engine = tmp_path / "defaults.yaml"
    engine.write_text("title: the cost model's defaults\nbehaviours: {}\n")
    # and a threshold the best layout without PP comes within (its gap is a few percent)
    args = ["plan", "--model", "debug-moe", "--cluster", "h100", "--devices", "2", "--global-batch", "16", "--engine", str(engine),
            "--threshold", "0.08"]
    code, out, _ = run([*args, "--json", "--all"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["top"][0]["strategy"]["pp"] > 1  # the fastest layout is pipelined ...
    assert doc["verdict"]["needs_pp"] is False  # ... but within the threshold of the best without PP
    assert doc["best"] == doc["best_without_pp"] and doc["best"]["strategy"]["pp"] == 1
    path = tmp_path / "plan.json"
    path.write_text(out)
    assert load_strategy(str(path), None).pp == 1
    code, out, _ = run(args, capsys)
    name = Strategy.from_dict(doc["best"]["strategy"]).describe()
    assert "PP not needed" in out and f"recommended: {name}" in out


def test_when_pp_is_needed_best_is_the_fastest(capsys):
    code, out, _ = run([*PLAN, "--json"], capsys)
    doc = json.loads(out)
    assert doc["verdict"]["needs_pp"] is True and doc["best"] == doc["top"][0] and doc["best"]["strategy"]["pp"] > 1


def test_a_margin_inside_the_ranking_error_is_called_close(monkeypatch):
    """The verdict names a close call only where its margin is within the median error of predicted
    throughput ratios between published layouts (`bands.compute_ranking`), and only with pairs behind it."""
    from bandwise.plan import verdict

    monkeypatch.setattr(verdict, "shipped_ranking", lambda: {"pairs": 22, "ordered_as_measured": 0.77, "median_ratio_error": 0.24})
    assert "close call: +10.0% is inside the 24% median error" in verdict.close_call(0.10)
    assert "22 pairs, 77% ordered as measured" in verdict.close_call(-0.05)
    assert verdict.close_call(0.30) == "" and verdict.close_call(-0.25) == ""
    monkeypatch.setattr(verdict, "shipped_ranking", lambda: {"pairs": 0, "median_ratio_error": None})
    assert verdict.close_call(0.01) == ""
