"""The GB200's and GB300's fp8 GEMM figures against a published sustained measurement of them.

Azure's AI benchmarking guide ran one tool (superbench's cublaslt_gemm, fp8, 10,000 warmup iterations)
on the H100 SXM, GB200 and GB300 (benchmarks/data/azure_cublaslt_fp8_sustained_2025.json, the published
rows); the presets take the two Blackwell figures from the H100's in the ratio of those measurements.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bandwise.specs.registry import get_cluster

SUSTAINED = Path(__file__).parents[2] / "benchmarks" / "data" / "azure_cublaslt_fp8_sustained_2025.json"
SUSTAINED_CLUSTER = {"H100": "h100", "GB200": "gb200-nvl72", "GB300": "gb300-nvl72"}


@pytest.mark.parametrize("chip", ["GB200", "GB300"])
def test_blackwell_fp8_gemms_stand_to_the_h100_as_a_sustained_cublaslt_run_measured(chip):
    """The GB200's and GB300's fp8 GEMM figures are the H100's in the ratio of one tool's sustained
    measurements (10,000 warmup iterations, the mean of three large square GEMMs, as a fraction of each
    chip's fp8 peak): the model's fp8 GEMM rates over the H100's are the measured ones over its."""
    rows = {r["chip"]: r for r in json.loads(SUSTAINED.read_text())["rows"]}

    def fraction(name: str) -> float:
        dev = get_cluster(SUSTAINED_CLUSTER[name]).device
        return sum(rows[name]["tflops"].values()) / len(rows[name]["tflops"]) * 1e12 / dev.peak("fp8")

    def rate(name: str) -> float:
        dev = get_cluster(SUSTAINED_CLUSTER[name]).device
        return dev.peak("fp8") * dev.fp8_gemm_efficiency * dev.sustained_clock_ratio

    h100 = get_cluster("h100").device
    measured = fraction(chip) * get_cluster(SUSTAINED_CLUSTER[chip]).device.peak("fp8") / (fraction("H100") * h100.peak("fp8"))
    assert rate(chip) / rate("H100") == pytest.approx(measured, rel=0.01)


@pytest.mark.parametrize("board,sibling", [("b200", "gb200"), ("b300", "gb300")])
def test_the_lower_power_board_sustains_its_siblings_share_of_its_own_peak(board, sibling):
    """The B200 and B300 are the GB200's and GB300's dies on boards of a lower power limit, whose datasheet peaks
    carry their lower clocks; measured on neither, each sustains the sibling's share of its own peak, so its fp8
    rate stands to the sibling's as the two datasheet peaks do (and below the sibling's absolute rate)."""
    from bandwise.specs.registry import device_presets

    devices = device_presets()
    b, g = devices[board], devices[sibling]

    def rate(d) -> float:
        return d.peak("fp8") * d.fp8_gemm_efficiency * d.sustained_clock_ratio

    assert rate(b) / rate(g) == pytest.approx(b.peak("fp8") / g.peak("fp8"), rel=0.002)
    assert rate(b) < rate(g)
