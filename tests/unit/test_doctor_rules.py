"""Rules: threshold bands at their edges, Amdahl gains by hand, missing signals reported, ordering."""

from __future__ import annotations

import pytest

from bandwise.doctor.rules import (
    MIN_STEPS,
    amdahl,
    diagnose,
    input_bound,
    memory_pressure,
    no_mixed_precision,
    overlap_speedup,
    small_batch,
    suggest_workers,
)


def test_amdahl_closed_forms():
    assert amdahl(0.25) == pytest.approx(4 / 3)  # removing a quarter of the step
    assert amdahl(0.5, 2.0) == pytest.approx(1 / 0.75)  # halving half of it
    assert overlap_speedup(0.6, 4) == pytest.approx(1 / 0.4)  # compute-bound after the fix
    assert overlap_speedup(0.9, 4) == pytest.approx(1 / (0.9 / 4))  # still loader-bound with 4 workers


@pytest.mark.parametrize("share,severity", [(0.0999, None), (0.10, "warning"), (0.1999, "warning"), (0.20, "critical"), (0.6, "critical")])
def test_input_bound_bands(share, severity):
    f = input_bound({"data_wait_share": share, "device": "cpu"}, [])
    assert (f.severity if f else None) == severity
    if f:
        n = f.apply["dataloader"]["num_workers"]
        assert 4 <= n <= 8 and n == suggest_workers(share)


def test_missing_signals_are_reported_not_zero():
    missing: list[str] = []
    assert input_bound({}, missing) is None and missing == ["data_wait_share"]
    missing = []
    assert memory_pressure({"memory_fraction": None}, missing) is None and missing == ["memory_fraction"]
    missing = []
    # fp32 GEMMs but unknown bf16 support: no verdict, and the gap is named
    assert no_mixed_precision({"gemm_fp32_fraction": 1.0, "bf16_available": None}, missing) is None
    assert missing == ["bf16_available"]


def test_mixed_precision_gain_from_gemm_share():
    f = no_mixed_precision({"gemm_fp32_fraction": 1.0, "bf16_available": True, "gemm_share": 0.5, "lowp_peak_ratio": 16.0}, [])
    assert f.expected_speedup == pytest.approx(1 / (0.5 + 0.5 / 4))  # ratio capped at 4x
    assert no_mixed_precision({"gemm_fp32_fraction": 1.0, "bf16_available": False}, []) is None


def test_small_batch_needs_headroom_and_keeps_global_batch():
    s = {"optimizer_share": 0.3, "memory_fraction": 0.2, "micro_batch": 8, "global_batch": 256}
    f = small_batch(s, [])
    assert f is not None and "micro-batch 8 -> 32 with gradient accumulation 8 (global batch 256 kept)" in f.fix
    assert f.expected_speedup == pytest.approx(1 / (0.7 + 0.3 / 4))
    assert small_batch({**s, "memory_fraction": 0.6}, []) is None  # no room to grow


def test_memory_pressure_threshold():
    assert memory_pressure({"memory_fraction": 0.9}, []) is None
    assert memory_pressure({"memory_fraction": 0.95}, []).severity == "warning"


def test_diagnose_orders_by_gain_and_needs_steps():
    sig = {"steps": 10, "data_wait_share": 0.3, "preprocess_share": 0.12, "device": "cpu"}
    d = diagnose(sig, {"data_wait": 0.3, "compute": 0.7})
    assert [f.id for f in d.findings] == ["input_bound", "cpu_preprocessing"]
    gains = [f.expected_speedup for f in d.findings]
    assert gains == sorted(gains, reverse=True)
    few = diagnose({**sig, "steps": MIN_STEPS - 1}, {})
    assert few.findings == [] and few.missing[0].startswith("steps")


# -- advice that fits the device it ran on (issue 17, item 9) ------------------------------------
def test_cpu_mixed_precision_advice_is_cpu_advice():
    s = {"device": "cpu", "gemm_fp32_fraction": 1.0, "bf16_available": True, "gemm_share": None, "lowp_peak_ratio": None}
    f = no_mixed_precision(s, [])
    assert f is not None and f.expected_speedup is None
    assert f.severity == "warning"  # no gain estimate: not critical
    assert "allow_tf32" not in f.fix and "cuda" not in f.fix and "autocast('cpu'" in f.fix


def test_cuda_mixed_precision_keeps_cuda_advice():
    f = no_mixed_precision({"device": "gpu", "vendor": "nvidia", "gemm_fp32_fraction": 1.0, "bf16_available": True, "gemm_share": 0.6, "lowp_peak_ratio": 16.0}, [])
    assert f.severity == "critical" and "autocast('cuda'" in f.fix and "allow_tf32" in f.fix


@pytest.mark.parametrize("cpus", [1, 2, 3, 8, 64])
def test_workers_fit_the_cores(cpus):
    n = suggest_workers(0.6, cpus)
    assert 1 <= n <= cpus
    f = input_bound({"data_wait_share": 0.6, "device": "cpu", "cpus": cpus}, [])
    assert f.apply["dataloader"]["num_workers"] == n
    assert f"num_workers={n}," in f.fix


def test_live_two_core_machine_gets_two_workers():
    from bandwise.doctor.signals import signals_from_live

    summary = {"steps": 10, "medians": {"samples": 8}, "breakdown": {"data_wait": 0.5, "compute": 0.5}, "census": None}
    s = signals_from_live(summary)
    s["cpus"] = 2
    f = input_bound(s, [])
    assert f.apply["dataloader"]["num_workers"] == 2  # not the 4 torch warns about on 2 cores


def test_small_batch_on_cpu_without_memory_data():
    assert small_batch({"device": "cpu", "optimizer_share": 0.3}, []) is not None
    missing: list[str] = []
    assert small_batch({"device": "gpu", "gpu_busy_share": 0.3}, missing) is None and missing == ["memory_fraction"]
