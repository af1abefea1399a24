"""Each section reader of a published run, alone: `run_model`, `run_hardware`, `run_layout`, `run_stated`.

The expected values come from the run's own fields by the arithmetic the sources state (dp =
devices / (tp·pp·cp), Megatron's micro-batches, MaxText's per-chip batch), not from the readers.
"""

from __future__ import annotations

import pytest
import published

from bandwise.errors import BandwiseError
from bandwise.plan.run_hardware import read_cluster
from bandwise.plan.run_layout import SCHEDULE_CHOICES, read_layout
from bandwise.plan.run_model import GPT2_VOCAB, read_model
from bandwise.plan.run_stated import STATED, read_stated
from bandwise.specs.registry import get_engine


def run(**sections):
    """A run with a small dense GPT and the given sections replaced."""
    base = {
        "id": "r", "source": "s",
        "hardware": {"accelerator": "H100", "count": 64},
        "model": {"name": "m", "layers": 24, "hidden": 2048, "heads": 16, "kv_heads": 16, "ffn": 8192,
                  "ffn_type": "GELU", "vocab": 50304, "seq_len": 2048},
        "parallelism": {"tp": 2, "pp": 2, "cp": 1, "global_batch_seqs": 256},
        "precision": "bf16",
        "target": {"tokens_per_sec_per_device": 1000.0},
    }
    for key, value in sections.items():
        base[key] = value if not isinstance(value, dict) or key not in base else {**base[key], **value}
    return base


def layout_of(r, engine="megatron", conventions=""):
    notes: list[str] = []
    model = read_model(r, notes)
    return read_layout(r, model, r["hardware"]["count"], get_engine(engine), conventions, notes), notes


# ---- model ----------------------------------------------------------------------------------
def test_model_reads_the_stated_shape_and_names_each_default():
    notes: list[str] = []
    m = read_model(run(), notes)
    assert (m.layers, m.hidden, m.heads, m.ffn, m.vocab, m.seq_len) == (24, 2048, 16, 8192, 50304, 2048)
    assert not m.gated_mlp and notes == []
    notes = []
    r = run()
    r["model"] = {"name": "m", "layers": 2, "hidden": 64, "heads": 4}
    bare = read_model(r, notes)
    assert bare.ffn == 4 * 64 and bare.vocab == GPT2_VOCAB and bare.kv_heads in (0, 4)
    assert any("ffn not stated" in n for n in notes) and any("vocab not stated" in n for n in notes)


def test_model_without_a_needed_dimension_is_refused_by_name():
    with pytest.raises(BandwiseError, match="model.hidden"):
        read_model(run(model={"hidden": None}), [])


@pytest.mark.parametrize(
    "attention, layers, window, period",
    [
        # gpt-oss: layer_types alternate sliding and full attention (openai/gpt-oss-120b config.json)
        ("alternating full / sliding-window(128) with sinks", 36, 128, (1, 1)),
        ("alternating full / sliding-window(128) with sinks", 24, 128, (1, 1)),
        # Gemma 3: 5 local to 1 global from the first layer (Gemma 3 Technical Report, Sec. 2)
        ("interleaved local sliding-window(1024) / global layers (Gemma 3 pattern: 5 local then 1 global)", 48, 1024, (5, 1)),
        ("interleaved local sliding-window(1024) / global layers (Gemma 3 pattern: 5 local then 1 global)", 26, 1024, (5, 1)),
        ("interleaved sliding-window(4096) (3 local then 2 global)", 7, 4096, (3, 2)),
        ("full causal", 24, 0, None),
    ],
)
def test_model_reads_the_window_its_attention_names(attention, layers, window, period):
    m = read_model(run(model={"layers": layers, "attention": attention}), [])
    # counted layer by layer: a local layers, then b global, repeating from the first
    local = sum(i % sum(period) < period[0] for i in range(layers)) if period else 0
    assert (m.sliding_window, m.sliding_layers) == (window, local)
    assert m.attention_chunk == 0


@pytest.mark.parametrize("layers", [48, 47, 6])
def test_model_reads_llama4_chunked_layers(layers):
    # Llama 4: every no_rope_layer_interval-th (4th) layer global, the others chunked (transformers' Llama4TextConfig)
    text = "chunked attention (chunk 8192) on 3 of every 4 layers, NoPE global attention every 4th layer; qk-norm"
    m = read_model(run(model={"layers": layers, "attention": text, "seq_len": 32768}), [])
    assert (m.attention_chunk, m.chunked_layers) == (8192, sum((i + 1) % 4 != 0 for i in range(layers)))
    assert m.sliding_window == 0
    with pytest.raises(BandwiseError, match="model.chunked_layers"):
        read_model(run(model={"attention": "chunked attention (chunk 8192) here and there"}), [])


def test_model_reads_a_stated_window_and_refuses_one_without_its_layers():
    m = read_model(run(model={"sliding_window": 4096}), [])
    assert (m.sliding_window, m.windowed_layers) == (4096, 24)  # no count: every layer (Mistral 7B v0.1)
    m = read_model(run(model={"sliding_window": 512, "sliding_layers": 6, "attention": "alternating sliding-window(128)"}), [])
    assert (m.sliding_window, m.sliding_layers) == (512, 6)  # the stated fields win over the text
    with pytest.raises(BandwiseError, match=r"run 'r': model.attention .* names local attention but not its layers.*model.sliding_layers"):
        read_model(run(model={"attention": "sliding-window(128) on some layers"}), [])
    with pytest.raises(BandwiseError, match="model.sliding_window"):
        read_model(run(model={"sliding_window": -3}), [])


def test_model_reads_interleaved_moe_layers():
    # Llama 4 Maverick: interleave_moe_layer_step 2, every 2nd of 48 layers MoE (transformers' Llama4TextConfig)
    moe = {"num_experts": 128, "top_k": 1, "expert_ffn": 8192, "shared_experts": 1, "moe_layer_interval": 2}
    m = read_model(run(model={"layers": 48, "moe": moe, "ffn": 16384}), [])
    assert (m.dense_layers, m.interleaved_dense) == (24, True)
    m = read_model(run(model={"layers": 48, "moe": {**moe, "moe_layer_interval": 4, "dense_layers": 36}}), [])
    assert (m.dense_layers, m.interleaved_dense) == (36, True)
    with pytest.raises(BandwiseError, match=r"dense_layers=10 disagrees with moe_layer_interval=2 over 48 layers \(24 dense\)"):
        read_model(run(model={"layers": 48, "moe": {**moe, "dense_layers": 10}}), [])


# ---- hardware -------------------------------------------------------------------------------
def test_hardware_reads_a_stated_network_per_gpu():
    notes: list[str] = []
    completed: list[str] = []
    c = read_cluster(run(hardware={"accelerator": "A100-80GB", "count": 64, "gpus_per_node": 8,
                                   "inter_node": "8x 200 Gb/s HDR InfiniBand"}), 64, notes, completed)
    assert c.levels[1].bandwidth == pytest.approx(8 * 200e9 / 8 / 8)  # 8 NICs of 200 Gb/s shared by 8 GPUs
    assert completed == []


def test_hardware_unstated_network_across_nodes_is_left_to_complete():
    completed: list[str] = []
    read_cluster(run(), 64, [], completed)
    assert completed == ["interconnect"]
    completed = []
    read_cluster(run(hardware={"accelerator": "H100", "count": 8}), 8, [], completed)
    assert completed == []  # one node: no network to guess


def test_hardware_power_limit_is_read_in_watts_and_refused_otherwise():
    notes: list[str] = []
    c = read_cluster(run(hardware={"accelerator": "H100", "count": 8, "power": "500W"}), 8, notes, [])
    assert c.device.name.endswith("-500w") and any("power limit 500 W" in n for n in notes)
    with pytest.raises(BandwiseError, match="hardware.power"):
        read_cluster(run(hardware={"accelerator": "H100", "count": 8, "power": "lots"}), 8, [], [])


def test_grand_teton_h100_without_a_stated_limit_runs_at_its_platform_default():
    """TorchTitan's Grand Teton H100 (96 GB HBM2e) runs at "the default 500W power limit": a run on that part that
    states no limit is priced as one that states 500 W, and a stated limit still wins."""
    unstated = read_cluster(run(hardware={"accelerator": "H100 96GB HBM2e", "count": 8}), 8, [], [])
    stated = read_cluster(run(hardware={"accelerator": "H100 96GB HBM2e", "count": 8, "power": "500W"}), 8, [], [])
    raised = read_cluster(run(hardware={"accelerator": "H100 96GB HBM2e", "count": 8, "power": "700W"}), 8, [], [])
    assert unstated.device == stated.device
    assert raised.device.sustained_clock_ratio > unstated.device.sustained_clock_ratio
    stock = read_cluster(run(hardware={"accelerator": "H100", "count": 8}), 8, [], [])
    assert stock.device.name == "h100-sxm"  # the 80 GB part keeps its rated limit


@pytest.mark.parametrize("name", ["H100-SXM HBM2e 95GB (lower TDP)", "H100 HBM2e", "H100 (96GB HBM2e implied by log memory %)"])
def test_the_hbm2e_h100_is_read_however_it_is_named(name):
    # TorchTitan's Grand Teton H100: 96 GB HBM2e at 2.4 TB/s, 95 GiB as the device reports it (its H100 benchmark docs)
    c = read_cluster(run(hardware={"accelerator": name, "count": 8}), 8, [], [])
    assert c.device.hbm_bytes == 95 * 2**30 and c.device.hbm_bandwidth == pytest.approx(2.4e12)


def test_a_stated_memory_the_priced_board_does_not_hold_is_refused():
    # the H100 NVL has 94 GB: not the 80 GB SXM board, nor the 96 GB HBM2e one
    with pytest.raises(BandwiseError, match=r"names 94 GB, and the h100-sxm it prices has 80 GiB") as e:
        read_cluster(run(hardware={"accelerator": "H100 94GB", "count": 8}), 8, [], [])
    assert "\n" not in str(e.value)
    assert read_cluster(run(hardware={"accelerator": "H100-SXM5-80GB", "count": 8}), 8, [], []).device.name == "h100-sxm"


def test_a_stated_achieved_nvlink_rate_is_priced_as_stated():
    """DeepSeek-V3 quotes 160 GB/s achieved over H800 NVLink (Sec. 3.2.2): an achieved figure, so no protocol share
    is taken off it again."""
    c = read_cluster(run(hardware={"accelerator": "H800", "count": 8, "intra_node": "NVLink 160 GB/s achieved"}), 8, [], [])
    assert c.levels[0].effective_bandwidth == pytest.approx(160e9)


@pytest.mark.parametrize("system,gbps_for_gpus", [("A3 High (a3-highgpu-8g)", 800), ("A3 Mega (a3-megagpu-8g)", 1600)])
def test_a_named_cloud_machine_type_brings_its_network(system, gbps_for_gpus):
    """Google Cloud documents the GPU NICs of its A3 machines (A3 High: 4 x 200 Gbps for 8 GPUs; A3 Mega: 8 x 200):
    a run that names the machine type in `hardware.system` and states no network is priced on that, per GPU each
    way, and nothing is left to complete; a stated network still wins."""
    completed: list[str] = []
    notes: list[str] = []
    c = read_cluster(run(hardware={"accelerator": "H100", "count": 32, "gpus_per_node": 8, "system": system}), 32, notes, completed)
    assert c.levels[1].bandwidth == pytest.approx(gbps_for_gpus * 1e9 / 8 / 8)
    assert "interconnect" not in completed and any("network of a3-" in n for n in notes)
    stated = read_cluster(run(hardware={"accelerator": "H100", "count": 32, "gpus_per_node": 8, "system": system,
                                        "inter_node": "8 x 400 Gb/s InfiniBand per node"}), 32, [], [])
    assert stated.levels[1].bandwidth == pytest.approx(50e9)


def test_a_machine_type_is_matched_as_a_word_and_of_the_runs_device():
    from bandwise.specs.registry import cluster_named_in

    assert cluster_named_in("A3 Mega (a3-megagpu-8g)", "h100-sxm").name == "a3-megagpu-8g"
    assert cluster_named_in("A3 (h100-80gb-8)", "h100-sxm") is None  # "h100" inside a longer word is not the h100 preset
    assert cluster_named_in("NVIDIA DGX H100 80G", "h100-sxm") is None  # a preset named as the device says nothing of the network
    assert cluster_named_in("A3 Mega (a3-megagpu-8g)", "b200") is None
    assert cluster_named_in("", "h100-sxm") is None


# ---- layout ---------------------------------------------------------------------------------
def test_layout_data_parallel_degree_is_what_tp_pp_cp_leave():
    lay, _ = layout_of(run())
    f = lay.fixed
    assert f["dp_replicate"] * f["dp_shard"] == 64 // (2 * 2 * 1)
    assert lay.global_batch == 256 and lay.schedules == SCHEDULE_CHOICES and "schedule" in lay.completed


def test_layout_fully_sharded_with_a_stated_shard_group_is_hsdp():
    lay, _ = layout_of(run(parallelism={"tp": 1, "pp": 1, "cp": 1, "fsdp": 8, "zero_or_fsdp": "FSDP2", "global_batch_seqs": 128}))
    assert (lay.fixed["dp_shard"], lay.fixed["dp_replicate"], lay.fixed["zero_stage"]) == (8, 64 // 8, 0)
    assert lay.fixed["schedule"] == "1F1B" and lay.schedules == ("1F1B",)


def test_layout_stated_zero_2_shards_gradients_over_the_replicated_group():
    lay, _ = layout_of(run(parallelism={"zero_or_fsdp": "ZeRO-2 (Apex DistributedFusedAdam)"}))
    assert (lay.fixed["dp_shard"], lay.fixed["dp_replicate"], lay.fixed["zero_stage"]) == (1, 64 // (2 * 2), 2)


@pytest.mark.parametrize("wording, stage", [("ZeRO-0", 0), ("ZeRO-0 (nanotron zero_stage 0)", 0), ("none", 0),
                                             ("ZeRO-0 in the config, bf16 optimizer ZeRO-1-equivalent", 1)])
def test_layout_stated_zero_stage_is_read_not_searched(wording, stage):
    lay, _ = layout_of(run(parallelism={"zero_or_fsdp": wording}))
    assert (lay.fixed["dp_shard"], lay.fixed["dp_replicate"], lay.fixed["zero_stage"]) == (1, 64 // (2 * 2), stage)


def test_layout_maxtext_expert_axis_joins_a_stated_fsdp_degree_it_does_not_divide():
    """MaxText shards 'embed' over fsdp and expert (base.yml logical_axis_rules): FSDP 2 beside EP 8 is a
    16-way sharded group; Megatron-Core's EP (`ep_from: any`) leaves the stated FSDP degree as it is."""
    moe = {"name": "m", "type": "moe", "layers": 4, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn_type": "SwiGLU", "vocab": 32000,
           "seq_len": 2048, "moe": {"num_experts": 8, "top_k": 2, "expert_ffn": 2048}}
    par = {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "fsdp": 2, "dp": 64, "zero_or_fsdp": "FSDP over 2 nodes", "global_batch_seqs": 128}
    lay, notes = layout_of(run(model=moe, parallelism=par), engine="maxtext")
    assert (lay.fixed["dp_shard"], lay.fixed["dp_replicate"]) == (2 * 8, 64 // (2 * 8))
    assert any("expert axis 8" in n for n in notes)
    with pytest.raises(BandwiseError, match="ep=8 cannot be placed"):
        layout_of(run(model=moe, parallelism=par), engine="torchtitan")


def test_stated_expert_tensor_parallelism_is_read_above_one_only():
    notes: list[str] = []
    assert read_stated(run(parallelism={"etp": 4}), "", None, notes).expert_tp == 4
    assert read_stated(run(parallelism={"etp": 1}), "", None, notes).expert_tp is None
    assert read_stated(run(), "", None, notes).expert_tp is None


def test_layout_global_batch_from_tokens_and_rounded_to_dp():
    lay, notes = layout_of(run(parallelism={"tp": 8, "pp": 1, "cp": 1, "global_batch_seqs": None, "global_batch_tokens": 2048 * 101}))
    assert lay.global_batch == 104  # 101 sequences over dp = 64 / 8 = 8: the nearest multiple of 8
    assert any("global batch 101 is not a multiple of dp=8" in n for n in notes)


def test_layout_global_batch_from_a_per_device_batch_and_the_device_count():
    # micro-batch 2 x 4 micro-batches per step x dp = 64 / (2 * 2): Megatron's global batch
    lay, notes = layout_of(run(parallelism={"global_batch_seqs": None, "micro_batch": 2, "grad_accum": 4}))
    assert lay.global_batch == 2 * 4 * (64 // (2 * 2)) and lay.fixed["micro_batch"] == 2
    with pytest.raises(BandwiseError, match="not priced: the run states no batch size"):
        layout_of(run(parallelism={"global_batch_seqs": None, "micro_batch": 2}))  # micro-batches per step unknown


def test_layout_interleaved_schedule_from_megatron_wording():
    lay, _ = layout_of(run(parallelism={"pp_schedule": "interleaved, virtual-pipeline-stage 3"}))
    assert lay.fixed["schedule"] == "Interleaved1F1B" and lay.fixed["virtual_stages"] == 24 // (2 * 3)


def test_layout_sequence_padded_to_split_over_tp_cp():
    lay, notes = layout_of(run(model={"seq_len": 2047}, parallelism={"tp": 4, "pp": 1, "cp": 1}))
    assert lay.model.seq_len == 2048 and lay.token_scale == pytest.approx(2047 / 2048)


def test_layout_full_recompute_from_the_source_conventions():
    lay, notes = layout_of(run(), conventions="fp16, full ('uniform') activation checkpointing")
    assert lay.fixed["recompute"] == "full" and "recompute from the source's conventions: full" in notes


def test_layout_devices_not_a_multiple_of_the_degrees_is_refused():
    with pytest.raises(BandwiseError, match="not a multiple of tp·pp·cp"):
        layout_of(run(hardware={"accelerator": "H100", "count": 60}, parallelism={"tp": 8, "pp": 1, "cp": 1}))


# ---- what the run states --------------------------------------------------------------------
def test_stated_flags_are_applied_and_named():
    notes: list[str] = []
    s = read_stated(run(precision="Float8 + torch.compile", parallelism={"async_tp": True, "zero_or_fsdp": "none (no grad all-reduce overlap)"},
                        grad_reduce="bf16"), "", None, notes)
    assert s.precision == "fp8" and s.compiled and s.grad_reduce == "bf16"
    assert s.overlap == {"dp": False, "tp": True}
    assert set(s.names) == {"async_tp", "no_grad_overlap", "compiled", "grad_reduce"} <= set(STATED)


def test_stated_unstated_precision_is_bf16_and_noted():
    notes: list[str] = []
    s = read_stated(run(precision=None), "", None, notes)
    assert s.precision == "bf16" and notes == ["precision not stated: bf16"] and s.names == []


def test_stated_recompute_modules_need_selective():
    r = run(parallelism={"recompute": "selective", "recompute_modules": ["core_attn"]})
    assert read_stated(r, "", "selective", []).selective_modules == ("core_attn",)
    with pytest.raises(BandwiseError, match="needs recompute: selective"):
        read_stated(r, "", "full", [])


@pytest.mark.parametrize("key", ["sp", "sequence_parallel"])
def test_stated_sequence_parallelism_is_read_either_way_and_applied(key):
    from bandwise.cost.params import DEFAULT_PARAMS

    off, on, unstated = (read_stated(run(parallelism={key: v}), "", None, []) for v in (False, True, None))
    assert off.sequence_parallel is False and not off.apply(DEFAULT_PARAMS).sequence_parallel and "sequence_parallel" in off.names
    assert on.sequence_parallel is True and on.apply(DEFAULT_PARAMS).sequence_parallel
    assert unstated.sequence_parallel is None and "sequence_parallel" not in unstated.names


def test_stated_sequence_parallelism_that_is_not_a_boolean_or_disagrees_is_one_line():
    with pytest.raises(BandwiseError, match=r"parallelism\.sp .*write true or false"):
        read_stated(run(parallelism={"sp": "yes"}), "", None, [])
    with pytest.raises(BandwiseError, match="disagree"):
        read_stated(run(parallelism={"sp": True, "sequence_parallel": False}), "", None, [])


def test_stated_tp_overlap_from_the_source_conventions():
    s = read_stated(run(), published.SOURCES["megatron_h100_2024"]["conventions"], None, [])
    assert s.overlap.get("tp") is True and "tp_comm_overlap" in s.names


def test_layout_an_expert_axis_beside_fsdp_shards_like_fsdp():
    """MaxText's mesh: data 1 x fsdp 8 x expert 8 on 64 chips is 64-way sharded data parallelism with EP 8
    (its expert ranks shard the dense weights and the batch as FSDP ranks do), not 8 replicas of FSDP 8."""
    r = run(hardware={"accelerator": "H100", "count": 64},
            parallelism={"tp": 1, "pp": 1, "cp": 1, "dp": 1, "fsdp": 8, "ep": 8, "zero_or_fsdp": "FSDP", "global_batch_seqs": 64})
    r["model"]["moe"] = {"num_experts": 64, "top_k": 2, "expert_ffn": 1024}
    lay, _ = layout_of(r, engine="maxtext")
    assert (lay.fixed["dp_shard"], lay.fixed["dp_replicate"], lay.fixed["ep"]) == (64, 1, 8)
    # a Megatron-style run whose dp counts every data-parallel rank keeps FSDP 8 inside it
    r["parallelism"]["dp"] = 64
    lay, _ = layout_of(r)
    assert (lay.fixed["dp_shard"], lay.fixed["dp_replicate"]) == (8, 8)


@pytest.mark.parametrize("parallelism, expected", [
    ({"moe_path": "dense_matmul (capacity-factor dropping), capacity_factor=2"}, (2.0, True)),
    ({"flags": "megablox=False, sparse_matmul=False, capacity_factor=1.25"}, (1.25, True)),
    ({"flags": "capacity_factor=1.0 with padding to capacity"}, (1.0, False)),
    ({"flags": "capacity_factor=-1 (dropless)"}, (0.0, False)),
    ({}, (0.0, False)),
])
def test_stated_moe_capacity(parallelism, expected):
    s = read_stated(run(parallelism=parallelism), "", None, [])
    assert (s.moe_capacity_factor, s.moe_one_hot_dispatch) == expected
    assert ("moe_capacity" in s.names) == (expected[0] > 0)


def test_stated_float8_all_gather_turns_off_the_weight_casts_per_micro_batch():
    """torchao's Float8Linear skips the weight's cast when FSDP gathered it in float8 already
    (tensor_already_casted_to_fp8); with a bf16 all-gather it casts every micro-batch."""
    from bandwise.cost.params import DEFAULT_PARAMS

    titan = __import__("dataclasses").replace(DEFAULT_PARAMS, fp8_weight_cast_per_microbatch=True)
    gathered = read_stated(run(precision="float8 tensorwise (float8 all-gather) + torch.compile"), "", None, [])
    assert gathered.fp8_all_gather and "fp8_all_gather" in gathered.names
    assert not gathered.apply(titan).fp8_weight_cast_per_microbatch
    for text in ("float8 rowwise (bf16 all-gather) + torch.compile", "Float8 + torch.compile", "bf16 (float8 all-gather off)"):
        s = read_stated(run(precision=text), "", None, [])
        assert not s.fp8_all_gather and s.apply(titan).fp8_weight_cast_per_microbatch, text
