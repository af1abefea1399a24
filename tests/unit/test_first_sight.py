"""First-sight records: read strictly, stamped once and never rewritten, summarised beside the current error."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from published import shipped_run

from bandwise.errors import BandwiseError
from bandwise.plan.first_sight import first_sight_of, record, stamp
from bandwise.plan.validate import first_sight_summary, run_all

GOOD = {"tokens_per_sec_per_device": 1234.0, "reason": None, "commit": "eaa07e4", "date": "2026-12-06"}


def test_a_run_without_a_record_has_none():
    assert first_sight_of({"id": "r"}) is None


def test_a_record_is_read():
    fs = first_sight_of({"id": "r", "first_sight": GOOD})
    assert (fs.predicted, fs.reason, fs.commit, fs.date) == (1234.0, None, "eaa07e4", "2026-12-06")
    refused = first_sight_of({"id": "r", "first_sight": {**GOOD, "tokens_per_sec_per_device": None, "reason": "no slice shape"}})
    assert refused.predicted is None and refused.reason == "no slice shape"


@pytest.mark.parametrize("change, named", [
    ({"tokens_per_sec_per_device": -1.0}, "tokens_per_sec_per_device"),
    ({"tokens_per_sec_per_device": None}, "no reason"),
    ({"commit": "HEAD"}, "commit"),
    ({"date": "yesterday"}, "date"),
    ({"predicted": 1.0}, "first_sight.predicted is not a field"),
])
def test_a_bad_record_is_one_error_naming_the_field(change, named):
    with pytest.raises(BandwiseError, match=named):
        first_sight_of({"id": "r", "first_sight": {**GOOD, **change}})


def test_stamp_writes_each_record_once_and_keeps_the_rest_of_the_text(tmp_path):
    path = tmp_path / "runs.yaml"
    text = "# a comment that must survive\nsources: {}\nruns:\n- id: a\n  source: s\n  target:\n    tokens_per_sec_per_device: 10\n\n- id: b\n  source: s\n"
    path.write_text(text)
    assert stamp(path, {"a": record(11.23456, None, "eaa07e4", "2026-12-06"), "c": GOOD}) == 1
    runs = yaml.safe_load(path.read_text())["runs"]
    assert runs[0]["first_sight"] == {"tokens_per_sec_per_device": 11.23, "reason": None, "commit": "eaa07e4", "date": "2026-12-06"}
    assert "first_sight" not in runs[1] and path.read_text().startswith("# a comment that must survive\n")
    # a first sight is never rewritten
    assert stamp(path, {"a": record(99.0, None, "fffffff", "2027-01-01")}) == 0
    assert yaml.safe_load(path.read_text())["runs"][0]["first_sight"]["tokens_per_sec_per_device"] == 11.23
    assert stamp(path, {"b": record(None, "refused: no preset", "eaa07e4", "2026-12-06")}) == 1
    assert yaml.safe_load(path.read_text())["runs"][1]["first_sight"]["reason"] == "refused: no preset"


def test_the_summary_is_the_first_sight_error_beside_the_current_one():
    """The median, p90 and signed median of predicted/target - 1 over the first sights, by hand."""
    runs = [shipped_run(i) for i in ("korthikanti2022_22B", "korthikanti2022_175B", "korthikanti2022_530B")]
    targets = [r["target"]["tokens_per_sec_per_device"] for r in runs]
    firsts = [1.3 * targets[0], 0.9 * targets[1], None]
    for r, f in zip(runs, firsts):
        r["first_sight"] = record(f, None if f else "refused then", "eaa07e4", "2026-12-06")
    results = run_all(runs)
    got = first_sight_summary(results)
    errs = [f / t - 1 for f, t in zip(firsts, targets) if f]
    assert got["runs"] == 3 and got["refused"] == 1 and got["first_sight"]["predicted"] == 2
    assert got["first_sight"]["median_abs_error"] == pytest.approx(np.median(np.abs(errs)), abs=2e-3)  # records keep four figures
    assert got["first_sight"]["median_signed_error"] == pytest.approx(np.median(errs), abs=2e-3)
    now = [r.error for r in results]
    assert got["now"]["median_abs_error"] == pytest.approx(np.median(np.abs(now)))
    assert list(got["by_engine"]) == ["megatron / a100 / dense"]
