"""The GEMM fractions of the Blackwell and CDNA presets against the one measurement they come from.

S. Bekman, "Machine Learning Engineering", compute/accelerator, "Maximum Achievable Matmul FLOPS
comparison table" (mamf-finder.py): the best-shape matmul TFLOPS of each chip, measured with one
method. The H100's modelled rate (peak x sustained_clock_ratio x gemm_efficiency) was checked against
a settled measurement at its power limit; every other chip's modelled rate must stand to the H100's in
the ratio of the two measured rates. The expected numbers are the table's and the datasheets', never
this code's output.
"""

from __future__ import annotations

import pytest

from bandwise.specs.registry import device_presets

DEVICES = device_presets()

# Published best-shape matmul TFLOPS (the table above): bf16, and fp8 (float8_e4m3fn) where measured.
MAMF_BF16 = {"h100-sxm": 794.5, "b200": 1745.0, "b300": 1769.0, "gb200": 1822.0,
             "mi300x": 668.4, "mi325x": 784.9, "mi355x": 1565.0}  # fmt: skip
MAMF_FP8 = {"h100-sxm": 1402.6, "b200": 3432.5, "b300": 3353.3, "gb200": 3615.6}
# Dense bf16 peaks in TFLOPS from the datasheets (HGX B200 / B300, GB200 NVL72, AMD CDNA3/CDNA4 docs).
DATASHEET_BF16_TFLOPS = {"h100-sxm": 989.4, "b200": 2250.0, "b300": 2250.0, "gb200": 2500.0,
                         "mi300x": 1307.4, "mi325x": 1307.4, "mi355x": 2516.6}  # fmt: skip
# AMD ROCm blog, "Measuring Max-Achievable FLOPs, Part 2", Table 1 (MI300X): fp8 48.7 % and bf16 54.2 % of peak.
AMD_FP8_OVER_BF16 = 48.7 / 54.2
ROUNDING = 0.004  # the presets carry three decimals


def modelled_tflops(name: str, precision: str) -> float:
    d = DEVICES[name]
    eff = d.fp8_gemm_efficiency if precision == "fp8" else d.gemm_efficiency
    return d.peak(precision) * d.sustained_clock_ratio * eff / 1e12


@pytest.mark.parametrize("name", sorted(DATASHEET_BF16_TFLOPS))
def test_peaks_are_the_datasheets(name):
    assert DEVICES[name].peak("bf16") / 1e12 == pytest.approx(DATASHEET_BF16_TFLOPS[name], rel=1e-3)


@pytest.mark.parametrize("name", sorted(set(MAMF_BF16) - {"h100-sxm"}))
def test_bf16_gemm_rate_stands_to_the_h100_as_measured(name):
    measured = MAMF_BF16[name] / MAMF_BF16["h100-sxm"]
    modelled = modelled_tflops(name, "bf16") / modelled_tflops("h100-sxm", "bf16")
    assert modelled == pytest.approx(measured, rel=ROUNDING)


# The fp8 bursts of MAMF_FP8 are quoted by the presets but no longer set a figure: the GB200 and GB300 take theirs from
# a sustained cuBLASLt run beside the H100's, and the B200 and B300 from those siblings (tests/unit/test_blackwell_gemms.py).
# The table assumed each chip settles from burst to sustained as the H100 does, which the GB200 run showed it does not.


@pytest.mark.parametrize("name", ["mi300x", "mi325x", "mi355x"])
def test_amd_fp8_keeps_amds_measured_ratio(name):
    d = DEVICES[name]
    assert d.fp8_gemm_efficiency / d.gemm_efficiency == pytest.approx(AMD_FP8_OVER_BF16, rel=ROUNDING)


@pytest.mark.parametrize("name", sorted(set(MAMF_BF16) - {"h100-sxm"}))
def test_the_source_quotes_the_measurement(name):
    src = DEVICES[name].source
    assert "maximum achievable matmul" in src.lower() and f"{MAMF_BF16[name]:.1f}" in src
    if name in MAMF_FP8:
        assert f"{MAMF_FP8[name]:.1f}" in src


def test_gb300_takes_the_fraction_measured_on_its_silicon_on_the_b300_board():
    # GB300 NVL72 and HGX B300 carry the same Blackwell Ultra GPU (NVIDIA Blackwell Ultra technical brief); the
    # table has no GB300 board, so GB300 must reach the B300's measured fraction of its datasheet peak at its own
    # datasheet peak (GB300 NVL72: dense BF16 2.5, FP8 5 PFLOPS per GPU; HGX B300: 2.25 and 4.5).
    datasheet = {"b300": {"bf16": 2250.0, "fp8": 4500.0}, "gb300": {"bf16": 2500.0, "fp8": 5000.0}}
    for precision, mamf in (("bf16", MAMF_BF16["b300"]),):  # its fp8: SUSTAINED_FP8
        assert DEVICES["gb300"].peak(precision) / 1e12 == pytest.approx(datasheet["gb300"][precision], rel=1e-3)
        expected = mamf / datasheet["b300"][precision] * datasheet["gb300"][precision] / MAMF_BF16["h100-sxm"]
        modelled = modelled_tflops("gb300", precision) / modelled_tflops("h100-sxm", "bf16")
        assert modelled == pytest.approx(expected, rel=ROUNDING)
    src = DEVICES["gb300"].source
    assert "Blackwell Ultra" in src and f"{MAMF_BF16['b300']:.1f}" in src and f"{MAMF_FP8['b300']:.1f}" in src
