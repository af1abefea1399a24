"""`doctor trace` on a real H200 trace of bandwise's MoE trainer (tests/data/traces/h200_moe1b/README.md):
the step, the idle time and the kernel count against the events read independently, the grouped
expert GEMM counted as a GEMM, and the launch-bound step named first."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest
from entry import json_of

HERE = Path(__file__).parents[1] / "data" / "traces" / "h200_moe1b"
TRACE, MODEL = HERE / "trace_moe-1b.json.gz", HERE / "model.yaml"


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@pytest.fixture(scope="module")
def events() -> dict:
    """Step windows, device busy time, kernel count and GEMM time, read straight from the JSON."""
    with gzip.open(TRACE) as f:
        ev = json.loads(f.read())["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")]
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in steps]
    device = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    busy = sum(_union([(max(a, e["ts"]), min(b, e["ts"] + e["dur"])) for e in device if e["ts"] < b and e["ts"] + e["dur"] > a])
               for a, b in windows)
    kernels = [e for e in device if e["cat"] == "kernel" and any(a <= e["ts"] < b for a, b in windows)]
    gemm = sum(e["dur"] for e in kernels if e["name"].startswith("nvjet") or "cutlass" in e["name"])
    return {"steps": len(steps), "step_ms": statistics.median(e["dur"] for e in steps) / 1e3,
            "idle": 1 - busy / sum(b - a for a, b in windows), "kernels_per_step": len(kernels) / len(steps),
            "grouped_us": sum(e["dur"] for e in kernels if "cutlass" in e["name"]), "gemm_us": gemm}


def doctor(argv: list[str], capsys) -> dict:
    return json_of(capsys, "doctor", "trace", str(TRACE), "--json", *argv)


def test_step_idle_and_kernels_match_the_events(events, capsys) -> None:
    s = doctor([], capsys)["signals"]
    assert events["steps"] == s["steps"] == 3
    assert s["step_ms"] == pytest.approx(events["step_ms"], rel=1e-3)
    assert s["kernels_per_step"] == events["kernels_per_step"]
    assert s["idle_share"] == pytest.approx(events["idle"], abs=0.02)


def test_the_grouped_expert_gemm_is_a_gemm(events, capsys) -> None:
    s = doctor([], capsys)["signals"]
    assert events["grouped_us"] > 0.2 * events["gemm_us"]  # the experts' CUTLASS kernels are a good part of the GEMMs
    assert s["gemm_us"] == pytest.approx(events["gemm_us"], rel=1e-3)


def test_the_launch_bound_step_is_named_first(events, capsys) -> None:
    findings = doctor([], capsys)["findings"]
    assert findings[0]["id"] == "host_bound" and findings[0]["severity"] == "critical"
    assert findings[0]["expected_speedup"] == max(f["expected_speedup"] for f in findings)


def test_against_the_plan_the_idle_is_the_gap(tmp_path, events, capsys) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(json_of(capsys, "estimate", "--model", str(MODEL), "--cluster", "h200",
                                       "--micro-batch", "8", "--global-batch", "8", "--json")))
    ap = doctor(["--strategy", str(plan), "--model", str(MODEL), "--cluster", "h200"], capsys)["signals"]["against_plan"]
    terms = {t["name"]: t for t in ap["terms"]}
    idle = terms["idle (bubble + host)"]
    assert idle["predicted_ms"] == 0 and idle["off"]
    assert idle["measured_ms"] == pytest.approx(events["idle"] * events["step_ms"], rel=0.05)
