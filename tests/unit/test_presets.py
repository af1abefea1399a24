"""Presets against published figures: parameter counts from model cards and papers, hardware
numbers against the scaling book's worked ratios, and the conventions clusters.yaml states.

Every expected number here is a published one (model card, paper, datasheet, the scaling book),
never a value copied from our own output.
"""

from __future__ import annotations

import json
import math

import pytest

from bandwise.errors import BandwiseError
from bandwise.specs.hardware import cluster_from_dict
from bandwise.specs.registry import cluster_presets, device_presets, get_cluster, get_model, model_presets

DEVICES = device_presets()
CLUSTERS = cluster_presets()
MODELS = model_presets()

REQUIRED_CLUSTERS = {
    "a100-80g", "h100", "h800", "h200", "b200", "gb200-nvl72", "gb300-nvl72",
    "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x", "b300", "v100-dgx2",
}  # fmt: skip
REQUIRED_DEVICES = {
    "a100-sxm-80g", "h100-sxm", "h800-sxm", "h200-sxm", "b200", "gb200", "gb300",
    "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x", "b300", "v100-sxm2",
}  # fmt: skip
REQUIRED_MODELS = {
    "gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b", "deepseek-v3", "kimi-k2",
    "mixtral-8x7b", "qwen3-235b-a22b", "palm-540b", "debug", "debug-moe",
}  # fmt: skip


# ----------------------------------------------------------------------------- loading
def test_every_required_preset_exists():
    assert REQUIRED_CLUSTERS <= set(CLUSTERS)
    assert REQUIRED_DEVICES <= set(DEVICES)
    assert REQUIRED_MODELS <= set(MODELS)


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_device_cites_a_source_and_fp8_is_faster(name):
    dev = DEVICES[name]
    assert dev.source.strip(), f"device {name} has no source"
    if "fp8" in dev.peak_flops:
        assert dev.peak_flops["bf16"] < dev.peak_flops["fp8"]


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_cluster_and_every_level_cite_a_source(name):
    cluster = CLUSTERS[name]
    assert cluster.source.strip() and cluster.description.strip()
    for level in cluster.levels:
        assert level.source.strip(), f"{name} level {level.name} has no source"


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_levels_get_slower_and_farther_outward(name):
    # Per-device bandwidth of a torus level is 2 links per axis; compare what one device can
    # move each way. Inner levels are the fast ones; the outermost (size 0) holds any count.
    levels = CLUSTERS[name].levels
    per_device = [lv.bandwidth * (2 * len(lv.torus_dims) if lv.is_torus else 1) for lv in levels]
    assert per_device == sorted(per_device, reverse=True)
    assert [lv.latency for lv in levels] == sorted(lv.latency for lv in levels)
    assert levels[-1].size == 0 and all(lv.size > 1 for lv in levels[:-1])


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_device_numbers_are_in_si_units(name):
    # Catches a GB-for-bytes or TFLOPS-for-FLOPS slip: every accelerator here has 10-400 GB (MI355X:
    # 288 GiB), 0.5-10 TB/s and 100 TFLOP/s - 3 PFLOP/s dense bf16.
    dev = DEVICES[name]
    assert 10e9 <= dev.hbm_bytes <= 400e9
    assert 0.5e12 <= dev.hbm_bandwidth <= 10e12
    assert 100e12 <= dev.peak_flops["bf16"] <= 3e15
    assert 0.5 <= dev.gemm_efficiency <= 0.95


def test_names_are_case_insensitive_and_unknown_names_list_the_valid_ones():
    assert get_cluster("H100") is CLUSTERS["h100"]
    assert get_model("Llama3-8B") is MODELS["llama3-8b"]
    with pytest.raises(BandwiseError) as exc:
        get_cluster("h1000")
    assert "'h1000'" in str(exc.value) and "tpu-v5p" in str(exc.value) and "gb200-nvl72" in str(exc.value)
    with pytest.raises(BandwiseError) as exc:
        get_model("llama9")
    assert "'llama9'" in str(exc.value) and "deepseek-v3" in str(exc.value)


def test_cluster_yaml_rejects_unknown_fields_and_devices():
    with pytest.raises(BandwiseError, match="bandwith"):
        cluster_from_dict("x", {"device": "h100-sxm", "levels": [{"name": "nv", "size": 0, "bandwith": 1e9, "latency": 0}]}, DEVICES)
    with pytest.raises(BandwiseError, match="'h999'.*h100-sxm"):
        cluster_from_dict("x", {"device": "h999", "levels": []}, DEVICES)
    with pytest.raises(BandwiseError, match="toplogy"):
        cluster_from_dict("x", {"device": "h100-sxm", "toplogy": []}, DEVICES)


# ------------------------------------------------------------- hardware vs published ratios
def test_v5p_critical_batch_matches_the_scaling_book():
    # Scaling book, "How to Parallelize a Transformer for Training": for DP on TPU v5p,
    # C / W_ici = 4.59e14 / 1.8e11 = 2550 (W_ici = bidirectional = 2 links x one-way).
    v5p = get_cluster("tpu-v5p")
    ici = v5p.levels[0]
    assert v5p.device.peak("bf16") / (2 * ici.bandwidth) == pytest.approx(2550, rel=0.01)
    assert ici.torus_dims == (16, 20, 28) and v5p.max_devices is None and ici.size == 8960


def test_gpu_arithmetic_intensity_matches_the_scaling_book():
    # Scaling book, "How to Think About GPUs", quiz 1 question 3: critical intensity
    # H100 990e12 / 3.35e12 = 295, B200 2250e12 / 8e12 = 281; fp8 exactly doubles both. The B200's HBM is
    # the bus its driver reports, 7,680 bits at 3,996 MHz DDR (pytorch/ao #4002), not the book's 8 TB/s.
    for name, expected in (("h100-sxm", 295), ("b200", 281 * 8e12 / (7680 / 8 * 3.996e9 * 2))):
        dev = DEVICES[name]
        assert dev.peak("bf16") / dev.hbm_bandwidth == pytest.approx(expected, rel=0.01)
        assert dev.peak("fp8") == pytest.approx(2 * dev.peak("bf16"), rel=0.001)


def test_node_egress_matches_the_scaling_book():
    # Scaling book, "How to Think About GPUs", node table: node egress H100 400e9, B200 400e9,
    # GB200 NVL72 3600e9 B/s; GPU egress in the NVLink domain 450e9 / 900e9 / 900e9.
    for name, gpu_egress, node_egress in (("h100", 450e9, 400e9), ("b200", 900e9, 400e9), ("gb200-nvl72", 900e9, 3600e9)):
        nvlink, network = CLUSTERS[name].levels
        assert nvlink.bandwidth == pytest.approx(gpu_egress)
        assert nvlink.size * network.bandwidth == pytest.approx(node_egress)


@pytest.mark.parametrize(
    "name, bidirectional_nvlink, nic_gbit",
    [
        # Datasheets quote NVLink bidirectional per GPU and NICs in Gb/s: DGX A100 (600 GB/s,
        # HDR 200), H800 (400 GB/s; DeepSeek-V3 Sec. 3.2.2 IB 50 GB/s = 400 Gb/s), DGX H200
        # (900 GB/s, 400), DGX B200 (1.8 TB/s, 400), GB300 NVL72 (1.8 TB/s, ConnectX-8 800).
        ("a100-80g", 600e9, 200),
        ("h800", 400e9, 400),
        ("h200", 900e9, 400),
        ("b200", 1800e9, 400),
        ("gb300-nvl72", 1800e9, 800),
    ],
)
def test_switched_levels_are_per_direction_bytes(name, bidirectional_nvlink, nic_gbit):
    nvlink, network = CLUSTERS[name].levels
    assert nvlink.bandwidth == pytest.approx(bidirectional_nvlink / 2)
    assert network.bandwidth == pytest.approx(nic_gbit * 1e9 / 8)


@pytest.mark.parametrize(
    "name, one_way, dims",
    [
        # Scaling book, TPU Specs: ICI one-way per link v4p 4.5e10, v5e 4.5e10, v6e 9e10.
        ("tpu-v4", 4.5e10, (16, 16, 16)),
        ("tpu-v5e", 4.5e10, (16, 16)),
        ("tpu-v6e", 9e10, (16, 16)),
    ],
)
def test_tpu_torus_levels(name, one_way, dims):
    ici, dcn = CLUSTERS[name].levels
    assert ici.bandwidth == pytest.approx(one_way)
    assert ici.torus_dims == dims and ici.size == math.prod(dims) and ici.wraparound
    assert not dcn.is_torus and dcn.bandwidth < ici.bandwidth


# ------------------------------------------------------------- models vs published counts
# Exact totals from the Hugging Face checkpoints' parameter counts (meta-llama/Meta-Llama-3.1-*
# model cards): ModelSpec leaves out the RMSNorm weights (2 per block + the final one, `hidden`
# each), so adding them must give the published count exactly.
@pytest.mark.parametrize(
    "name, published",
    [("llama3-8b", 8_030_261_248), ("llama3-70b", 70_553_706_496), ("llama3-405b", 405_853_388_800)],
)
def test_llama3_totals_are_exact_up_to_norms(name, published):
    m = MODELS[name]
    norms = (2 * m.layers + 1) * m.hidden
    assert m.total_params + norms == published


# Rounded published totals: (name, total, total's rounding step, active, active's rounding
# step, extra relative slack, why the slack). A published figure X with step u means the true
# count is within X +- u/2; the slack covers what ModelSpec leaves out on purpose.
PUBLISHED = [
    # GPT-3 Table 2.1 "175.0B": ModelSpec leaves out learned position embeddings (25M), biases
    # and LayerNorms (~15M) and the paper's own rounding; the count is 174.6B, 0.25% short.
    ("gpt3-175b", 175.0e9, 0.1e9, None, None, 0.005),
    # PaLM Table 1 "540.35B": no biases, norms are 0.004%.
    ("palm-540b", 540.35e9, 0.01e9, None, None, 0.0005),
    # Mixtral paper/model card: 46.7B total, 12.9B active per token.
    ("mixtral-8x7b", 46.7e9, 0.1e9, 12.9e9, 0.1e9, 0.001),
    # DeepSeek-V3 report: 671B total (MTP module excluded), 37B activated.
    ("deepseek-v3", 671e9, 1e9, 37e9, 1e9, 0.001),
    # Qwen3 report Table 2: 235B total, 22B activated.
    ("qwen3-235b-a22b", 235e9, 1e9, 22e9, 1e9, 0.001),
    # Kimi K2 report: 1.04T total, 32.6B activated. The same shape-based count reproduces
    # DeepSeek-V3's 671B to 0.01%, but gives 1.026T for K2's published config (61 layers,
    # 384 experts of 3 x 7168 x 2048): the report's total is 1.3% above its own config, which
    # norms (1.3M) cannot explain, so the slack is 1.5% and the active count is checked as usual.
    ("kimi-k2", 1.04e12, 0.01e12, 32.6e9, 0.1e9, 0.015),
]


@pytest.mark.parametrize("name, total, total_step, active, active_step, slack", PUBLISHED)
def test_parameter_counts_match_published_totals(name, total, total_step, active, active_step, slack):
    m = MODELS[name]
    assert abs(m.total_params - total) <= total_step / 2 + slack * total
    if active is None:
        return
    # Publishers differ on whether the input embedding (a lookup, no FLOPs) counts as activated:
    # DeepSeek and gpt-oss leave it out, Mixtral counts it. The published figure must lie
    # between the two conventions, widened by its rounding.
    low = m.active_nonembedding_params + m.output_params
    high = low + m.embedding_params
    assert low - active_step / 2 <= active <= high + active_step / 2, (low, active, high)


def test_dense_models_activate_everything_and_moe_models_do_not():
    for name, m in MODELS.items():
        non_embedding = m.total_params - m.embedding_params - (0 if m.tied_embeddings else m.output_params)
        if m.is_moe:
            assert m.active_nonembedding_params < non_embedding, name
        else:
            assert m.active_nonembedding_params == non_embedding, name


# ------------------------------------------------------ the listing commands, end to end
def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    from bandwise.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_models_json_through_the_entry_point(capsys):
    code, out, err = run_cli(capsys, "models", "--json")
    assert code == 0 and not err
    data = json.loads(out)
    assert REQUIRED_MODELS <= set(data)
    llama = data["llama3-8b"]
    # Published 8,030,261,248 parameters minus the 65 RMSNorm vectors of 4096 the count omits.
    assert llama["total_params"] == 8_030_261_248 - 65 * 4096
    assert llama["layers"] == 32 and llama["kv_heads"] == 8
    assert abs(data["deepseek-v3"]["total_params"] - 671e9) < 0.5e9


def test_clusters_json_through_the_entry_point(capsys):
    code, out, err = run_cli(capsys, "clusters", "--json")
    assert code == 0 and not err
    data = json.loads(out)
    assert set(data) == set(CLUSTERS) and REQUIRED_CLUSTERS <= set(data)
    h100 = data["h100"]
    assert h100["device"]["peak_flops"] == {"bf16": 989.4e12, "fp8": 1978.9e12}  # datasheet / 2
    assert [lv["name"] for lv in h100["levels"]] == ["nvlink", "infiniband"]
    assert data["tpu-v5p"]["levels"][0]["torus_dims"] == [16, 20, 28]
    assert all(lv["source"] for c in data.values() for lv in c["levels"])


def test_clusters_table_lists_every_preset(capsys):
    code, out, _ = run_cli(capsys, "clusters")
    assert code == 0
    assert all(name in out for name in REQUIRED_CLUSTERS)


@pytest.fixture
def broken_preset(monkeypatch):
    """clusters.yaml with a negative NVLink bandwidth, as a bad local edit would leave it."""
    from bandwise.specs import registry

    real = registry._load_yaml

    def load(name):
        data = real(name)
        if name == "clusters.yaml":
            data["clusters"]["h100"]["levels"][0] = {**data["clusters"]["h100"]["levels"][0], "bandwidth_bytes_per_s": -450.0e9}
        return data

    monkeypatch.setattr(registry, "_load_yaml", load)
    registry.cluster_presets.cache_clear()
    yield
    monkeypatch.undo()
    registry.cluster_presets.cache_clear()


def test_bad_preset_is_one_line_and_exit_2(capsys, broken_preset):
    code, out, err = run_cli(capsys, "clusters", "--json")
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert lines[0].startswith("bandwise: error: level 'nvlink': bandwidth_bytes_per_s=-450000000000.0 must be")
    assert len(lines) == 1 and "Traceback" not in err  # a user error names its fix; no --debug hint


def test_debug_shows_the_exception(capsys, broken_preset):
    from bandwise.cli.main import main

    with pytest.raises(BandwiseError, match="bandwidth_bytes_per_s=-450000000000.0"):
        main(["--debug", "clusters"])


def test_usage_errors_exit_2(capsys):
    code, _, err = run_cli(capsys, "clusters", "--jsn")
    assert code == 2 and "--jsn" in err
