"""The planted-fault suite on CPU: every fault diagnosed live and from a recorded profiler trace,
the no-fault loop healthy, and the recommended DataLoader fix measured on the slow loader."""

from __future__ import annotations

import statistics
import warnings

import pytest

from bandwise.doctor.faults import EXPECTED, FAULTS, FaultConfig, run_fault
from bandwise.doctor.rules import diagnose
from bandwise.doctor.signals import signals_from_live, signals_from_trace
from bandwise.doctor.trace import analyze_trace
from bandwise.errors import BandwiseError

pytestmark = pytest.mark.slow  # trains the planted-fault loop twice per fault, live and traced

STEPS = 6


@pytest.fixture(scope="module")
def diagnoses(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fault-traces")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler warns about its own scheduling
        for fault in FAULTS:
            live = run_fault(FaultConfig(fault=fault, steps=STEPS))
            path = tmp / f"{fault}.pt.trace.json"
            traced = run_fault(FaultConfig(fault=fault, steps=STEPS), trace_path=path)
            a = analyze_trace(path)
            out[fault] = {
                "live": diagnose(signals_from_live(live["summary"]), live["summary"]["breakdown"]),
                "trace": diagnose(signals_from_trace(a["signals"], bf16_available=traced["bf16_available"]), a["breakdown"]),
            }
    return out


@pytest.mark.parametrize("mode", ["live", "trace"])
@pytest.mark.parametrize("fault", FAULTS)
def test_fault_is_diagnosed(diagnoses, fault, mode):
    d = diagnoses[fault][mode]
    ids = [f.id for f in d.findings]
    assert d.steps >= 3
    if EXPECTED[fault] is None:
        assert d.healthy, f"no-fault loop flagged: {ids}"
    else:
        # the planted fault is found, and no other fault's finding is raised
        assert EXPECTED[fault] in ids, ids
        others = {EXPECTED[f] for f in FAULTS if EXPECTED[f] not in (None, EXPECTED[fault])}
        assert not others & set(ids), ids


def test_findings_carry_evidence_fix_and_gain(diagnoses):
    f = next(f for f in diagnoses["slow_getitem"]["live"].findings if f.id == "input_bound")
    share = f.evidence["dataloader_share"]
    assert share >= 0.2 and f.severity == "critical"
    workers = f.apply["dataloader"]["num_workers"]
    assert f.expected_speedup == pytest.approx(1 / max(1 - share, share / workers))
    assert f"num_workers={workers}" in f.fix


@pytest.mark.filterwarnings("error:This DataLoader will create")  # the advice stays within the cores (issue 17, item 9)
def test_loader_fix_speeds_up_slow_getitem():
    """Apply the finding's DataLoader settings; median of paired throughput ratios >= 1.8x."""
    ratios = []
    for _ in range(3):  # batch 32: the loader's share is the same as at 64, the sleeps half as long
        before = run_fault(FaultConfig(fault="slow_getitem", steps=STEPS, batch=32))
        d = diagnose(signals_from_live(before["summary"]), before["summary"]["breakdown"])
        kwargs = next(f for f in d.findings if f.id == "input_bound").apply["dataloader"]
        after = run_fault(FaultConfig(fault="slow_getitem", steps=STEPS, batch=32, loader_kwargs=kwargs))
        ratios.append(after["summary"]["medians"]["samples_per_s"] / before["summary"]["medians"]["samples_per_s"])
    assert statistics.median(ratios) >= 1.8, ratios


def test_unknown_fault_is_a_user_error():
    with pytest.raises(BandwiseError, match="fault='nope'"):
        FaultConfig(fault="nope")
