"""TPU7x (Ironwood), B300, V100 and MI350X presets against their datasheets, closed form, and a synthetic
run on each that converts and is priced.

Expected numbers are the datasheets' own (Google Cloud TPU7x docs' system-architecture table, NVIDIA
HGX/DGX B300 datasheets, the Tesla V100 and DGX-2 datasheets), never our own output.
"""

from __future__ import annotations

import math

import pytest

from bandwise.errors import BandwiseError
from bandwise.plan.runs import convert
from bandwise.plan.validate import predict
from bandwise.specs.registry import cluster_for_accelerator, cluster_presets, device_presets

DEVICES = device_presets()
CLUSTERS = cluster_presets()


def test_tpu7x_matches_google_clouds_table():
    # Google Cloud TPU7x docs: 2,307 TFLOPS bf16, 4,614 fp8, 192 GiB HBM at 7,380 GBps per chip;
    # 1,200 GBps bidirectional ICI per chip; 100 Gbps DCN per chip; 9,216 chips per pod.
    dev = DEVICES["tpu7x"]
    assert dev.peak("bf16") == pytest.approx(2307e12)
    assert dev.peak("fp8") == pytest.approx(4614e12) == pytest.approx(2 * dev.peak("bf16"))
    assert dev.hbm_bytes == 192 * 2**30
    assert dev.hbm_bandwidth == pytest.approx(7380e9)
    ici, dcn = CLUSTERS["tpu7x"].levels
    assert ici.size == 9216 == math.prod(ici.torus_dims) and len(ici.torus_dims) == 3
    assert all(d % 4 == 0 for d in ici.torus_dims)  # whole 4x4x4 cubes
    assert 2 * len(ici.torus_dims) * 2 * ici.bandwidth == pytest.approx(1200e9)  # 6 links, both directions
    assert dcn.bandwidth == pytest.approx(100e9 / 8)


def test_tpu7x_host_link_is_the_scaling_books_per_tpu_pcie_figure():
    # "How to Think About TPUs" (jax-ml/scaling-book tpus.md, 2026-05): "PCIe bandwidth is typically around
    # 1.6e10 bytes / second per TPU (3.2e10 for TPU v6e)"; TPU7x has no exception there. A host offload on
    # TPU7x is priced, not refused.
    assert DEVICES["tpu7x"].host_link_bandwidth == pytest.approx(1.6e10)


def test_b300_matches_the_hgx_b300_datasheet():
    # HGX B300 (8 GPUs): FP8 72 and BF16 36 PFLOPS with sparsity (dense = half), up to 2.3 TB HBM3e,
    # 8 TB/s per GPU, NVLink 1.8 TB/s per GPU bidirectional; one ConnectX-8 800 Gb/s per GPU.
    dev = DEVICES["b300"]
    assert 8 * dev.peak("bf16") == pytest.approx(36e15 / 2)
    assert 8 * dev.peak("fp8") == pytest.approx(72e15 / 2)
    assert 8 * dev.hbm_bytes == pytest.approx(2.3e12, rel=0.01)
    assert dev.hbm_bandwidth == pytest.approx(8e12)
    nvlink, net = CLUSTERS["b300"].levels
    assert nvlink.size == 8 and nvlink.bandwidth == pytest.approx(1.8e12 / 2)
    assert net.bandwidth == pytest.approx(800e9 / 8)


def test_v100_matches_the_v100_and_dgx2_datasheets():
    # Tesla V100 SXM2: 125 TFLOPS fp16 tensor, 32 GB HBM2 at 900 GB/s, NVLink 300 GB/s per GPU;
    # DGX-2: 16 GPUs on NVSwitch, 8 x 100 Gb/s InfiniBand.
    dev = DEVICES["v100-sxm2"]
    assert dev.peak("bf16") == pytest.approx(125e12) and "fp8" not in dev.peak_flops
    assert dev.hbm_bytes == pytest.approx(32e9) and dev.hbm_bandwidth == pytest.approx(900e9)
    nvlink, net = CLUSTERS["v100-dgx2"].levels
    assert nvlink.size == 16 and nvlink.bandwidth == pytest.approx(300e9 / 2)
    assert nvlink.size * net.bandwidth == pytest.approx(8 * 100e9 / 8)


def test_mi350x_is_the_mi355x_silicon_at_its_own_clock():
    # ROCm docs, GPU hardware specifications: MI350X and MI355X both CDNA4 gfx950, 256 CUs, 288 GiB; AMD's MI350X
    # peak engine clock 2200 MHz against the MI355X's 2400 MHz; one CDNA4 CU's bf16 matrix rate (4 x 1024 FLOPs a
    # clock, the mi355x preset's rule) is the same on both, so the peaks stand in the clocks' ratio
    mi350, mi355 = DEVICES["mi350x"], DEVICES["mi355x"]
    assert mi350.peak("bf16") == pytest.approx(256 * 1024 * 4 * 2.2e9, rel=1e-4)
    assert mi350.peak("bf16") / mi355.peak("bf16") == pytest.approx(2200 / 2400, rel=1e-4)
    assert mi350.peak("fp8") == pytest.approx(2 * mi350.peak("bf16"), rel=1e-4)
    assert mi350.hbm_bytes == mi355.hbm_bytes and 287 * 2**30 < mi350.hbm_bytes <= 288 * 2**30
    assert mi350.hbm_bandwidth == mi355.hbm_bandwidth == pytest.approx(8e12)
    assert [lv.bandwidth for lv in CLUSTERS["mi350x"].levels] == [lv.bandwidth for lv in CLUSTERS["mi355x"].levels]


@pytest.mark.parametrize(
    "accelerator, cluster",
    [("TPU7x (Ironwood)", "tpu7x"), ("B300", "b300"), ("GB300", "gb300-nvl72"), ("DGX B300", "b300"),
     ("V100 (DGX-2)", "v100-dgx2"), ("B200", "b200"), ("MI350X", "mi350x"), ("AMD Instinct MI350X", "mi350x")],
)
def test_accelerator_names_reach_their_preset(accelerator, cluster):
    assert cluster_for_accelerator(accelerator).name == cluster


@pytest.mark.parametrize(
    "accelerator, cluster",
    [("8xH100", "h100"), ("8x H100", "h100"), ("72 GB200 (NVL72)", "gb200-nvl72"), ("H100, NVLink 900 GB/s", "h100"), ("A100 40GB", "a100-40g"), ("A100-40GB", "a100-40g"), ("A100 80GB", "a100-80g"),
     ("H200 141GB", "h200"), ("MI300X 192GB", "mi300x"), ("GB200 NVL72", "gb200-nvl72"), ("TPU v5p 95GB", "tpu-v5p")],
)
def test_a_name_with_a_count_or_its_memory_reaches_its_preset(accelerator, cluster):
    # datasheet memories: A100 40/80 GB, H200 141 GB, MI300X 192 GB, TPU v5p 95 GB
    assert cluster_for_accelerator(accelerator).name == cluster


@pytest.mark.parametrize(
    "accelerator, match",
    [("GH200", "no preset device"),  # Grace Hopper: not an H200 board
     ("H100 PCIe", "a PCIe card"), ("H100-PCIE-80GB", "a PCIe card"), ("A100-PCIE-40GB", "a PCIe card"),
     ("H100 NVL", "an NVL card")],
)
def test_a_card_the_presets_do_not_hold_is_refused_in_one_line(accelerator, match):
    with pytest.raises(BandwiseError, match=match) as e:
        cluster_for_accelerator(accelerator)
    assert "\n" not in str(e.value) and "--cluster PATH" in str(e.value)


def run(**sections):
    """A small dense GPT run, its sections replaced."""
    base = {
        "id": "synthetic", "source": "s",
        "hardware": {"accelerator": "H100", "count": 16},
        "model": {"name": "m", "layers": 8, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn": 4096,
                  "ffn_type": "GELU", "vocab": 32000, "seq_len": 2048},
        "parallelism": {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "global_batch_seqs": 64, "micro_batch": 1, "recompute": "full"},
        "precision": "bf16",
        "target": {"tokens_per_sec_per_device": 1000.0},
    }
    for key, value in sections.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) else value
    return base


@pytest.mark.parametrize(
    "hardware, precision",
    [({"accelerator": "TPU7x (Ironwood)", "count": 16}, "bf16"),
     ({"accelerator": "TPU7x (Ironwood)", "count": 16}, "fp8"),
     ({"accelerator": "B300", "count": 16}, "fp8"),
     ({"accelerator": "V100 (DGX-2)", "count": 16}, "fp16"),
     ({"accelerator": "MI350X", "count": 16}, "bf16")],
)
def test_a_run_on_each_new_device_converts_and_is_priced(hardware, precision):
    r = run(hardware=hardware, precision=precision)
    case = convert(r)
    assert case.cluster.device.name == cluster_for_accelerator(hardware["accelerator"]).device.name
    res = predict(case)
    assert res.reason is None and res.predicted > 0
    # no faster than every GEMM at the device's peak: 6 N FLOPs per token (non-embedding weights)
    m = case.model
    flops = 6 * m.layers * (4 * m.hidden**2 + 2 * m.hidden * m.ffn)
    peak = case.cluster.device.peak_flops.get(precision, case.cluster.device.peak("bf16"))
    assert res.predicted < peak / flops


def test_tpu7x_degrees_in_jax_devices_are_read_per_chip():
    # 16 chips shown as 32 JAX devices (two TensorCores per chip): fsdp=32 over JAX devices is 16 chips
    r = run(hardware={"accelerator": "TPU7x (Ironwood)", "count": 16, "jax_devices": 32},
            parallelism={"fsdp": 32, "zero_or_fsdp": "FSDP", "tp": 1, "pp": 1})
    case = convert(r)
    assert case.fixed["dp_shard"] * case.fixed.get("dp_replicate", 1) == 16
    assert any("JAX devices per chip" in n for n in case.assumptions)


def test_jax_devices_not_a_multiple_of_the_chips_is_one_line():
    r = run(hardware={"accelerator": "TPU7x (Ironwood)", "count": 16, "jax_devices": 24})
    with pytest.raises(BandwiseError, match="jax_devices=24") as e:
        convert(r)
    assert "\n" not in str(e.value)
