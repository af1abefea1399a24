"""A third memory verdict between fitting and fitting nothing: "tight", a peak above the headroom but within the
device (`Estimate.tight`). The headroom is a planning margin; published runs reserve up to 97.6% of HBM."""

from __future__ import annotations

import dataclasses

import pytest

from bandwise.cost.memory import GIB
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.results import Estimate
from bandwise.cost.step import estimate
from bandwise.plan.search import SearchResult
from bandwise.plan.verdict import decide
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy


def _est(peak_gib: float, fits: bool, device_gib: float | None = 80.0) -> Estimate:
    terms = dict.fromkeys(("compute", "tp", "cp", "ep", "fsdp", "dp", "pp"), 0.0)
    return Estimate(step_time_s=1.0, tokens_per_s_per_device=1.0, mfu=0.4, hfu=0.4, memory_gib_per_device=peak_gib, fits=fits,
                    breakdown=terms, device_gib=device_gib)


@pytest.mark.parametrize(("peak", "fits", "device", "tight"), [
    (70.0, True, 80.0, False),   # fits: never tight
    (75.0, False, 80.0, True),   # above the headroom, within the device
    (80.0, False, 80.0, True),   # exactly the device
    (80.5, False, 80.0, False),  # above the device: fits nothing
    (75.0, False, None, False),  # no device known: no claim
])
def test_tight_is_above_the_headroom_and_within_the_device(peak, fits, device, tight):
    e = _est(peak, fits, device)
    assert e.tight is tight
    assert e.to_dict()["tight"] is tight
    words = e.fit_words()
    assert (words == "") is fits
    assert ("tight" in words) is tight and ("does not fit" in words) is (not fits and not tight)


def _one(model, cluster, strategy, headroom):
    return estimate(model, cluster, strategy, dataclasses.replace(DEFAULT_PARAMS, headroom=headroom))


def test_an_estimate_knows_its_device_and_the_headroom_decides_between_fits_and_tight():
    """The same layout at two headrooms: its peak does not move; it fits under the smaller one where its peak
    is within (1 - headroom) of HBM, and is tight under a headroom that leaves less than its peak."""
    model, cluster = get_model("llama3-8b"), get_cluster("h100")
    s = Strategy(dp_shard=8, micro_batch=1, global_batch=64, recompute="none")
    hbm = cluster.device.hbm_bytes / GIB
    peak = _one(model, cluster, s, 0.0).memory_gib_per_device
    assert peak < hbm  # the layout is within the device
    share = 1.0 - peak / hbm  # the headroom at which it exactly fits
    loose, strict = _one(model, cluster, s, share / 2), _one(model, cluster, s, min(0.9, share + 0.05))
    assert loose.device_gib == pytest.approx(hbm) and strict.device_gib == pytest.approx(hbm)
    assert loose.memory_gib_per_device == pytest.approx(strict.memory_gib_per_device)
    assert loose.fits and not loose.tight
    assert not strict.fits and strict.tight


def test_the_nothing_fits_verdict_says_when_the_least_layout_is_tight():
    cluster = get_cluster("h100")
    hbm = cluster.device.hbm_bytes / GIB

    def verdict(least: float) -> str:
        r = SearchResult(searched=10, fitting=0, seconds=0.1, top=[], best_without_pp=None, min_memory_gib=least,
                         min_memory_gib_without_pp=least, capacity_gib=0.9 * hbm)
        return decide(r, cluster).reason

    tight = verdict(hbm - 4.0)
    assert "nothing fits" in tight and "tight" in tight
    share = float(tight.split("--headroom ")[1].split(" ")[0])
    assert share <= 4.0 / hbm and share > 4.0 / hbm - 0.01  # floored: it admits the layout
    assert "tight" not in verdict(hbm + 1.0)
    assert "tight" not in verdict(float("inf"))  # no valid layout priced: no share to name, and no crash


def test_validate_calls_a_run_above_the_headroom_but_within_its_device_tight():
    """A shipped run that ran near its device's limit: Llama 3.1 405B on 256 GB200 (Megatron-Bridge 26.04.01's
    LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_V2, no recomputation or offload)."""
    from published import SOURCES, shipped_run

    from bandwise.plan.runs import convert
    from bandwise.plan.validate import predict

    res = predict(convert(shipped_run("mbridge_gb200_llama31_405b_fp8_260401"), SOURCES))
    est = res.estimate
    assert not est.fits
    assert res.fit == ("tight" if est.memory_gib_per_device <= est.device_gib else "nothing fits")
    note = next(n for n in res.notes if n.startswith("memory:"))
    assert ("tight" in note) is (res.fit == "tight")
    assert f"{est.device_gib:.1f} GiB" in note
