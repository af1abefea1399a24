"""Layouts that ran must fit (issue 48, part 4, third pass): each memory mechanism against a closed form
taken from the engine's code.

MaxText's selective recomputation is its `minimal` policy: `checkpoint_dots_with_no_batch_dims` at
76bd53b0f (MaxText/layers/models.py), which keeps the layer input (the scan's carry) and the outputs of
the q/k/v, output and MLP-input projections, in bf16; the down projection's output is read by no
backward. The closed form below counts those tensors from the model's own dimensions.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bandwise.cost.memory import GIB
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.profiles import params_for
from bandwise.cost.step import estimate
from bandwise.specs.registry import get_cluster, get_engine, get_model
from bandwise.specs.strategy import Strategy

M = get_model("llama3-8b")  # hidden 4096, 32 heads of 128, 8 kv heads, gated ffn 14336


def _activations(params, recompute, tp=1, mb=4):
    s = Strategy(dp_shard=8 // tp, tp=tp, recompute=recompute, micro_batch=mb)
    return estimate(M, get_cluster("tpu-v5p"), s, params).memory_gib["activations"]


def test_maxtext_prices_its_selective_as_minimal_and_megatron_does_not():
    assert params_for(get_engine("maxtext"), get_cluster("tpu-v5p").device).selective_keeps_dots
    assert not params_for(get_engine("megatron"), get_cluster("h100").device).selective_keeps_dots


@pytest.mark.parametrize("tp", [1, 2])
def test_maxtext_selective_keeps_less_than_megatrons_by_the_norms_and_the_attention_output(tp):
    """Both keep q/k/v and the MLP's input projections. Megatron's selective (Korthikanti Sec. 5) also keeps
    both norms' inputs and outputs (8h bytes a token) and the attention output (2·H·d); MaxText's `minimal`
    keeps instead the layer input and the output projection's result (2h + 2h)."""
    megatron_like = replace(DEFAULT_PARAMS, selective_modules=("core_attn", "mlp_act"))
    maxtext_like = replace(megatron_like, selective_keeps_dots=True)
    d = M.hidden // M.heads
    per_token_layer = 8 * M.hidden + 2 * M.heads * d - 4 * M.hidden
    closed = M.layers * 4 * M.seq_len * per_token_layer / tp / GIB
    got = _activations(megatron_like, "selective", tp) - _activations(maxtext_like, "selective", tp)
    assert got == pytest.approx(closed, rel=1e-6)


@pytest.mark.parametrize("name, docs_gb, chip_gib", [("tpu-v6e", 32, 32), ("tpu-v5e", 16, 16)])
def test_tpu_capacity_is_what_the_runtime_allocates_between_the_docs_figure_and_the_chip(name, docs_gb, chip_gib):
    """The runtime's bytes_limit (JAX `memory_stats()`) keeps part of the chip's GiB for itself but is more than
    the decimal GB of Google's docs: a capacity outside that range is not a reported one."""
    hbm = get_cluster(name).device.hbm_bytes
    assert docs_gb * 1e9 < hbm < chip_gib * 2**30
    assert chip_gib * 2**30 - hbm < 2**30  # the runtime keeps under 1 GiB (0.75 GiB on v6e, 0.25 GiB on v5e)


# ---- MaxText's vocabulary tiling ----------------------------------------------------------------
@pytest.mark.parametrize("tiles", [4, 16])
def test_vocabulary_tiling_keeps_one_tile_of_the_fp32_logits(tiles):
    """With no recomputation the loss's moment holds the logits, 4·V bytes a token (fp32), beside every layer's
    kept tensors: n tiles leave 1/n of them (MaxText docs/explanations/tiling.md at 50bafeb98299)."""
    s = Strategy(dp_replicate=8, recompute="none", micro_batch=1)
    whole = estimate(M, get_cluster("h100"), s, DEFAULT_PARAMS).memory_gib["activations"]
    tiled = estimate(M, get_cluster("h100"), s, replace(DEFAULT_PARAMS, vocab_tiles=tiles)).memory_gib["activations"]
    logits = M.seq_len * 4 * M.vocab / GIB
    assert whole - tiled == pytest.approx(logits * (1 - 1 / tiles), rel=1e-6)


def test_a_run_stating_num_vocab_tiling_is_read_and_a_bad_count_is_one_line():
    from bandwise.errors import BandwiseError
    from bandwise.plan.run_stated import read_stated

    def stated(flags):
        run = {"id": "r", "precision": "bf16", "parallelism": {"flags": flags}}
        return read_stated(run, "", None, [])

    assert stated("reuse_example_batch=1; num_vocab_tiling=16").vocab_tiles == 16
    assert stated("num_vocab_tiling=4; attention=flash").apply(DEFAULT_PARAMS).vocab_tiles == 4
    assert stated("num_vocab_tiling=1").vocab_tiles is None  # MaxText's default: no tiling
    assert stated("attention=flash").vocab_tiles is None
    with pytest.raises(BandwiseError, match="num_vocab_tiling"):
        stated("num_vocab_tiling=many")


# ---- XLA's FSDP gathers weight by weight ------------------------------------------------------
def test_xla_fsdp_holds_two_of_the_largest_weight_and_two_of_its_gradients_not_a_layers_units():
    """FSDP2-like units hold a layer gathered twice and its gradient, (2 + 2 + g) bytes a layer parameter; XLA
    (one all-gather and one reduce-scatter in flight, openxla latency_hiding_scheduler.h) holds the largest
    weight twice and its gradient twice, (2 + 2 + 2g) bytes a parameter of it. Four micro-batches, so the
    peak sums every term; a small vocabulary, so a layer, not the output head, sets FSDP's buffers."""
    m = replace(M, vocab=1024)
    s = Strategy(dp_shard=8, recompute="full", micro_batch=1, global_batch=32)
    cluster = get_cluster("tpu-v5p")
    units = estimate(m, cluster, s, DEFAULT_PARAMS).memory_gib["buffers"]
    xla = estimate(m, cluster, s, replace(DEFAULT_PARAMS, fsdp_gathers_per_weight=True)).memory_gib["buffers"]
    g = DEFAULT_PARAMS.grad_reduce_bytes
    d = M.hidden // M.heads
    layer = 4 * M.hidden * M.heads * d // 1 - 2 * M.hidden * (M.heads - M.kv_heads) * d + 3 * M.hidden * M.ffn  # q, k, v, o; 3 MLP
    largest = M.hidden * M.ffn  # an MLP matrix (4096 x 14336) is larger than the query projection (4096 x 4096)
    assert units - xla == pytest.approx(((4 + g) * layer - (4 + 2 * g) * largest) / GIB, rel=1e-3)


@pytest.mark.parametrize("engine, per_weight", [("maxtext", True), ("deepspeed", True), ("torchtitan", False), ("megatron", False)])
def test_engines_that_gather_weight_by_weight(engine, per_weight):
    """XLA (MaxText) and DeepSpeed's ZeRO-3 (fetch_sub_module) gather weight by weight; FSDP2 (TorchTitan) and
    Megatron-FSDP gather units of a layer."""
    assert params_for(get_engine(engine), get_cluster("h100").device).fsdp_gathers_per_weight is per_weight


# ---- XLA on TPU: compile-time allocation ------------------------------------------------------
@pytest.mark.parametrize("static, fits", [(True, True), (False, False)])
def test_a_statically_allocated_step_fits_up_to_the_whole_capacity(static, fits):
    """A peak at 95% of the device's capacity: within it where the compiler assigns every buffer (XLA on TPU),
    outside the 90% the caching allocator's headroom leaves (PyTorch)."""
    s = Strategy(dp_shard=8, recompute="full", micro_batch=1)
    cluster = get_cluster("tpu-v5p")
    params = replace(DEFAULT_PARAMS, static_allocation=static)
    total = estimate(M, cluster, s, params).memory_gib_per_device * GIB
    device = replace(cluster.device, hbm_bytes=total / 0.95)
    assert estimate(M, replace(cluster, device=device), s, params).fits is fits


def test_maxtext_allocates_statically_on_tpu_only():
    maxtext = get_engine("maxtext")
    assert params_for(maxtext, get_cluster("tpu-v6e").device).static_allocation
    assert not params_for(maxtext, get_cluster("h100").device).static_allocation


# ---- MaxText's bf16 weights ------------------------------------------------------------------
@pytest.mark.parametrize("zero, per_param", [(3, 8.0 / 64), (0, 8.0)])
def test_bf16_weights_without_a_master_copy_keep_eight_bytes_a_parameter(zero, per_param):
    """optax's AdamW on bf16 parameters (MaxText weight_dtype=bfloat16): the weights, their gradients, mu (its
    dtype inherits weight_dtype) and nu (zeros_like the parameters), 2 bytes each, sharded over 64 under FSDP."""
    from bandwise.cost.memory import StateBytes

    states = StateBytes.of(np.array([zero]), grad_bytes=2, moment_bytes=2, master_bytes=0)
    assert states.of_params(np.array([1.0]), np.array([64.0]))[0] == pytest.approx(per_param)
    with_master = StateBytes.of(np.array([zero]), grad_bytes=2, moment_bytes=2)
    assert with_master.of_params(np.array([1.0]), np.array([64.0]))[0] == pytest.approx(per_param * 12 / 8)


@pytest.mark.parametrize("precision, flags, stated", [
    ("bf16 (weight_dtype=bfloat16)", "", True), ("bf16 (dtype=bfloat16, weight_dtype=bfloat16)", None, True),
    ("bf16", "weight_dtype=float32 megablox=False", False), ("bf16 (dtype=bfloat16; weight_dtype default float32)", None, False)])
def test_a_run_stating_bf16_weights_prices_them_without_a_master(precision, flags, stated):
    from bandwise.plan.run_stated import read_stated

    read = read_stated({"id": "r", "precision": precision, "parallelism": {"flags": flags}}, "", None, [])
    params = read.apply(DEFAULT_PARAMS)
    assert read.bf16_weights is stated
    assert (params.master_weight_bytes, params.grad_reduce_bytes, params.adam_moment_bytes) == ((0, 2, 2) if stated else (4, 4, 4))


# ---- runs that publish their peak memory ran within it -------------------------------------------
def test_no_run_that_publishes_its_peak_memory_is_called_nothing_fits():
    """A run that publishes what it held per device ran in that memory: the cost model's fit rule must let it
    run (the BLOOM prequel's dp24·tp8·pp2 row reserved 76.0 of its 80 GiB, over the 90% the headroom leaves,
    which DeepSpeed's once-allocated states, `persistent_state`, spare)."""
    from published import RUNS, SOURCES

    from bandwise.plan.runs import published_memory
    from bandwise.plan.validate import run_all

    with_memory = [r for r in RUNS if published_memory(r) is not None]
    assert len(with_memory) > 100
    results = run_all(with_memory, sources=SOURCES)
    assert len(results) == len(with_memory)
    called = [r.id for r in results if any("nothing fits" in n for n in r.notes)]
    assert called == []


# ---- bf16 resident parameters under torch's Adam (NeMo AutoModel) ------------------------------
def test_bf16_resident_parameters_keep_eight_bytes_a_parameter_and_reduce_in_fp32():
    """AutoModel's guide: unset torch_dtype leaves bf16 resident parameters and bf16 Adam state; FSDP2 reduces in
    fp32 and stores the shard's gradient in the parameter's dtype. The model states fall from 16 to 8 bytes a parameter over the FSDP ranks; FSDP's unit buffers (fp32 unsharded
    gradients) do not move."""
    from bandwise.plan.run_stated import read_stated

    stated = read_stated({"id": "r", "precision": "BF16", "parallelism": {
        "flags": "model torch_dtype: bfloat16 (resident FSDP2 shards); optimizer torch.optim.Adam"}}, "", None, [])
    assert stated.bf16_resident
    s = Strategy(dp_shard=8, recompute="full", micro_batch=1, global_batch=32)
    fp32 = estimate(M, get_cluster("h100"), s, DEFAULT_PARAMS).memory_gib
    bf16 = estimate(M, get_cluster("h100"), s, stated.apply(DEFAULT_PARAMS)).memory_gib
    states = lambda g: g["params"] + g["grads_optimizer"]  # noqa: E731
    assert states(bf16) == pytest.approx(states(fp32) / 2, rel=1e-9)
    assert bf16["buffers"] == pytest.approx(fp32["buffers"], rel=1e-12)
    assert states(fp32) == pytest.approx(16 * M.total_params / 8 / GIB, rel=0.02)  # fp32 shards, grads, moments


# ---- a stated activation offload is priced, and said so ----------------------------------------
def test_a_stated_activation_offload_is_priced_and_named_as_stated():
    from published import shipped_run

    from bandwise.plan.runs import convert
    from bandwise.plan.validate import predict

    run = shipped_run("mbridge_gb200_llama3_70b_fsdp_2511")  # cpu_offloading_num_layers: 40 of 80
    case = convert(run, SOURCES_)
    assert case.stated.offloaded_layers == 40 and case.stated.unpriced == ()
    res = predict(case)
    assert any("cpu_offloading_num_layers" in n for n in res.notes)
    assert all("; not priced:" not in n for n in res.notes)  # nothing left unpriced beside "nothing fits"
    del run["parallelism"]["cpu_offloading_num_layers"]
    assert convert(run, SOURCES_).stated.offloaded_layers == 0


def _sources():
    from published import SOURCES

    return SOURCES


SOURCES_ = _sources()
