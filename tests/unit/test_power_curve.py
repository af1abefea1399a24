"""A device under a lower power limit: the Hopper power curve against what an H200 measured at its
own 700 W limit (benchmarks/power_clock.py, data in benchmarks/data/h200_power_*_2026-11-27.json,
RESULTS.md "Hopper under a lower power limit"), and the user's way to ask for it, a cluster file's
`power_limit_w`."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bandwise.errors import BandwiseError
from bandwise.specs.hardware import PowerCurve
from bandwise.specs.registry import get_cluster, load_cluster_file

BENCH = Path(__file__).parents[2] / "benchmarks"
SWEEPS = sorted(str(p) for p in (BENCH / "data").glob("h200_power_*2026-11-27.json"))


def _script():
    spec = importlib.util.spec_from_file_location("power_clock", BENCH / "power_clock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("preset", ["h100", "h200", "h800"])
def test_presets_carry_the_measured_curve(preset: str) -> None:
    """The Hopper presets' curve is what the two shipped sweeps fit, not a figure typed beside them."""
    assert len(SWEEPS) == 2
    fit = _script().analyze(SWEEPS, [500.0])
    curve = get_cluster(preset).device.power_curve
    assert curve is not None and curve.rated_w == fit["cap_w"]
    assert curve.static_w == pytest.approx(fit["p0_w"], abs=0.05)
    assert curve.alpha == pytest.approx(fit["alpha"], abs=0.005)
    assert curve.clock_ratio(500, preset) == pytest.approx(fit["caps"]["500.0"]["clock_ratio"], abs=1e-3)


def test_each_sweep_alone_gives_the_same_clock_at_500_w() -> None:
    """Run in opposite orders (the chip 44-67 °C), the two sweeps agree on the 500 W clock within 2%."""
    alone = [_script().analyze([p], [500.0])["caps"]["500.0"]["clock_ratio"] for p in SWEEPS]
    assert max(alone) / min(alone) < 1.02
    assert all(0.8 < r < 0.9 for r in alone)


def test_clock_ratio_is_the_closed_form() -> None:
    curve = PowerCurve(rated_w=700, static_w=100, alpha=3)
    assert curve.clock_ratio(700, "x") == 1.0
    assert curve.clock_ratio(400, "x") == pytest.approx(0.5 ** (1 / 3))
    ratios = [curve.clock_ratio(w, "x") for w in (150, 300, 450, 600, 700)]
    assert ratios == sorted(ratios) and len(set(ratios)) == len(ratios)


@pytest.mark.parametrize("watts", [700.5, 100, 50, -1, math.nan, math.inf, "500W", True])
def test_a_limit_outside_the_curve_is_refused_by_name(watts: object) -> None:
    curve = PowerCurve(rated_w=700, static_w=100, alpha=3)
    with pytest.raises(BandwiseError, match="power_limit_w="):
        curve.clock_ratio(watts, "h100-sxm")  # type: ignore[arg-type]


def test_a_device_without_a_curve_refuses_a_limit() -> None:
    dev = get_cluster("a100-80g").device
    assert dev.power_curve is None
    with pytest.raises(BandwiseError, match=r"power_limit_w=300: device 'a100-sxm-80g' has no power_curve"):
        dev.power_limited(300)


def test_power_limited_scales_only_the_sustained_clock() -> None:
    dev = get_cluster("h100").device
    capped = dev.power_limited(500)
    assert capped.sustained_clock_ratio == pytest.approx(dev.sustained_clock_ratio * dev.power_curve.clock_ratio(500, dev.name))
    assert capped.sustained_clock_ratio < dev.sustained_clock_ratio
    assert (capped.peak_flops, capped.hbm_bandwidth, capped.gemm_efficiency) == (dev.peak_flops, dev.hbm_bandwidth, dev.gemm_efficiency)
    assert dev.power_limited(700) is dev
    assert capped.power_curve.rated_w == 500


def test_limits_compose() -> None:
    """A device written out at 500 W and limited again to 400 W is the device limited to 400 W at once."""
    dev = get_cluster("h100").device
    twice, once = dev.power_limited(500).power_limited(400), dev.power_limited(400)
    assert twice.sustained_clock_ratio == pytest.approx(once.sustained_clock_ratio, rel=1e-12)
    with pytest.raises(BandwiseError, match="at most 500 W"):
        dev.power_limited(500).power_limited(600)


def _cluster_file(tmp_path: Path, limit: object) -> Path:
    path = tmp_path / "capped.yaml"
    path.write_text(yaml.safe_dump({"name": "capped", "device": "h100-sxm", "power_limit_w": limit,
                                    "levels": [{"name": "nvlink", "size": 8, "bandwidth_bytes_per_s": 450e9, "latency_s": 3e-6},
                                               {"name": "ib", "size": 0, "bandwidth_bytes_per_s": 50e9, "latency_s": 1.4e-5}]}))
    return path


def test_a_cluster_file_states_its_power_limit(tmp_path: Path) -> None:
    capped = load_cluster_file(_cluster_file(tmp_path, 500))
    assert capped.device.name == "h100-sxm@500W"
    assert capped.device.sustained_clock_ratio == pytest.approx(get_cluster("h100").device.power_limited(500).sustained_clock_ratio)


def test_a_capped_plan_is_slower_by_the_clock_alone(tmp_path: Path) -> None:
    """`plan --cluster FILE` with a 500 W limit, as a user runs it: the step is longer, by at most the clock."""
    import json

    def step(cluster: str) -> float:
        out = subprocess.run([sys.executable, "-m", "bandwise", "estimate", "--model", "llama3-8b", "--cluster", cluster,
                              "--devices", "8", "--dp-shard", "8", "--json"], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["estimate"]["step_time_s"]

    ratio = get_cluster("h100").device.power_curve.clock_ratio(500, "h100")
    slow = step(str(_cluster_file(tmp_path, 500))) / step("h100")
    assert 1.0 < slow <= 1.0 / ratio + 1e-9


def test_a_bad_limit_in_a_cluster_file_is_one_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bandwise", "plan", "--model", "llama3-8b", "--cluster", str(_cluster_file(tmp_path, 900)),
                          "--devices", "8"], check=False, capture_output=True, text=True)
    assert out.returncode != 0
    assert "power_limit_w=900" in out.stderr and "at most 700 W" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_power_curve_given_as_anything_else_is_refused_by_name() -> None:
    """From Python a device may be built directly; a dict where the curve goes is one line, not a later AttributeError."""
    from dataclasses import replace

    with pytest.raises(BandwiseError, match="power_curve=.* must be a PowerCurve"):
        replace(get_cluster("h100").device, power_curve={"rated_w": 700, "static_w": 100, "alpha": 3})
