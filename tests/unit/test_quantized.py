"""NVFP4 (fp4) and int8 GEMMs: the peaks against their datasheets, the casts in closed form, the
readers' words, runs priced on the chips that have the peak and refused in one line elsewhere.

Expected peaks are the datasheets' (NVIDIA HGX B200/B300, GB200/GB300 NVL72; Google Cloud TPU docs;
the scaling book's TPU Specs), never our own output.
"""

from __future__ import annotations

import pytest
from test_new_devices import run

import bandwise
from bandwise.cost.quantized import QUANTIZED_CASTS
from bandwise.errors import BandwiseError
from bandwise.plan.run_fields import parse_precision
from bandwise.plan.runs import convert
from bandwise.plan.validate import predict
from bandwise.specs.registry import device_presets
from bandwise.specs.strategy import PRECISIONS

DEVICES = device_presets()


@pytest.mark.parametrize("name, sparse_total, gpus", [
    ("b200", 144e15, 8),      # HGX B200: FP4 144 PFLOPS with sparsity
    ("b300", 2 * 108e15, 8),  # HGX B300: FP4 108 PFLOPS dense (144 with sparsity)
    ("gb200", 1440e15, 72),   # GB200 NVL72: FP4 1,440 PFLOPS with sparsity
    ("gb300", 2 * 1080e15, 72),  # GB300 NVL72: FP4 1,080 PFLOPS dense
])
def test_fp4_peaks_are_the_datasheets_dense_figures(name, sparse_total, gpus):
    assert DEVICES[name].peak("fp4") == pytest.approx(sparse_total / 2 / gpus)
    assert DEVICES[name].peak("fp4") > DEVICES[name].peak("fp8")


@pytest.mark.parametrize("name, int8", [("tpu-v4", 275e12), ("tpu-v5e", 394e12), ("tpu-v5p", 918e12), ("tpu-v6e", 1836e12)])
def test_tpu_int8_peaks(name, int8):
    # Google Cloud TPU v4 ("275 teraflops, bf16 or int8"), v5e (394 TOPS), v6e (1,836 TOPS); scaling book: v5p 9.18e14
    assert DEVICES[name].peak("int8") == pytest.approx(int8)


def test_casts_in_closed_form():
    # NVFP4: amax read (2) + cast read (2) + two fp4 layouts of half a byte, each with an E4M3 byte per 16 elements
    assert QUANTIZED_CASTS["fp4"].cast_bytes == pytest.approx(4 + 2 * (0.5 + 1 / 16))
    # AQT int8: amax read (2) + cast read (2) + one int8 write (1)
    assert QUANTIZED_CASTS["int8"].cast_bytes == pytest.approx(5)
    assert set(QUANTIZED_CASTS) <= set(PRECISIONS)


@pytest.mark.parametrize("text, precision", [
    ("NVFP4", "fp4"), ("NVFP4 (layers 0-26; layers 27-31 and lm_head bf16) + torch.compile", "fp4"),
    ("int8 (AQT; quantization=int8 in gpt3_175b_base.sh)", "int8"), ("MXFP8", "fp8"), ("bf16 (fp8: false)", "bf16"), ("FP16", "bf16"),
])
def test_readers_words(text, precision):
    assert parse_precision(text) == precision


def test_an_unknown_precision_is_one_line_naming_the_choices():
    with pytest.raises(BandwiseError, match="'fp6'.*nvfp4 or int8") as e:
        parse_precision("fp6")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("accelerator, precision", [("GB300", "NVFP4"), ("GB200", "NVFP4"), ("B300", "NVFP4"), ("TPU v6e", "int8 (AQT)"), ("TPU v5p", "int8")])
def test_a_run_in_each_precision_converts_and_is_priced(accelerator, precision):
    case = convert(run(hardware={"accelerator": accelerator, "count": 16}, precision=precision))
    assert case.fixed["precision"] == parse_precision(precision)
    res = predict(case)
    assert res.reason is None and res.predicted > 0


@pytest.mark.parametrize("accelerator, precision", [("H100", "NVFP4"), ("H100", "int8"), ("TPU7x (Ironwood)", "int8"), ("MI300X", "NVFP4")])
def test_a_precision_the_device_lacks_is_refused_in_one_line(accelerator, precision):
    res = predict(convert(run(hardware={"accelerator": accelerator, "count": 16}, precision=precision)))
    assert res.predicted is None and res.reason and "\n" not in res.reason
    assert parse_precision(precision) in res.reason


def test_lower_precision_gemms_are_faster_on_a_compute_bound_layer():
    # 8,192-wide layers: GEMM-bound, so the higher peak must show end to end (bf16 < fp8 < fp4)
    rates = [bandwise.estimate("llama3-8b", "gb300-nvl72", dp_shard=8, global_batch=64, precision=p).to_dict()["estimate"]["tokens_per_s_per_device"]
             for p in ("bf16", "fp8", "fp4")]
    assert rates[0] < rates[1] < rates[2]
