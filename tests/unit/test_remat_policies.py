"""MaxText remat policies (`cost/remat.py`): the reader's mapping of each wording, what each policy
keeps in HBM against a closed form of the layer's tensors, what it re-runs and what its host copies
cost, and a synthetic run priced end to end.

References: MaxText's `Decoder.get_remat_policy` and `get_save_and_offload_names` (e591f30cb) for
which names each policy saves or offloads; the tensors' widths from the model's own dimensions
(q: heads·head_dim, k and v: kv_heads·head_dim, the input and the output projection: hidden, each
MLP input projection: ffn), in bf16.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bandwise.cost.memory import GIB
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.remat import MAXTEXT_POLICIES, RematPolicy, exposed_transfer_s
from bandwise.cost.step import estimate
from bandwise.errors import BandwiseError
from bandwise.plan.run_fields import parse_recompute, parse_remat_policy
from bandwise.plan.runs import convert
from bandwise.plan.validate import predict
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

M = get_model("llama3-8b")  # hidden 4096, 32 heads of 128, 8 kv heads, ffn 14336
H, Q, KV, F = M.hidden, M.heads * (M.hidden // M.heads), M.kv_heads * (M.hidden // M.heads), M.ffn


# ---- the reader -------------------------------------------------------------------------------
@pytest.mark.parametrize("text, device, offload", [
    ("remat_policy: custom; decoder_layer_input, query_proj, key_proj, value_proj = offload (host)",
     set(), {"decoder_layer_input", "query_proj", "key_proj", "value_proj"}),
    ("remat_policy: custom; context=offload, mlpwo=offload (host)", {"decoder_layer_input"}, {"context", "mlpwo"}),
    ("remat_policy: custom; decoder_layer_input=offload, out_proj=offload (host)", set(), {"decoder_layer_input", "out_proj"}),
    ("remat_policy: custom; query_proj, key_proj, value_proj = remat", {"decoder_layer_input"}, set()),
    ("remat_policy: custom; query_proj, out_proj = device (saved)", {"decoder_layer_input", "query_proj", "out_proj"}, set()),
])
def test_a_custom_policy_places_each_named_tensor_and_keeps_the_input_on_the_device_by_default(text, device, offload):
    policy = parse_remat_policy(text)
    assert (set(policy.device), set(policy.offload)) == (device, offload)
    assert parse_recompute(text) == "full"


def test_named_presets_are_read_and_full_minimal_stay_the_planners_own():
    assert parse_remat_policy("remat_policy: qkv_proj_offloaded").offload == {"query_proj", "value_proj", "key_proj", "kv_proj"}
    assert "mlpwo" in parse_remat_policy("remat_policy: save_dot_except_mlpwi").device
    assert "context" in parse_remat_policy("remat_policy: save_dot_with_context_except_mlp").device
    for text, planner in (("remat_policy: full", "full"), ("remat_policy: minimal", "selective"), ("full activation checkpointing", "full")):
        assert parse_remat_policy(text) is None and parse_recompute(text) == planner


@pytest.mark.parametrize("text, word", [
    ("remat_policy: save_everything", "save_everything"),
    ("remat_policy: custom; query_proj = elsewhere", "place"),
    ("remat_policy: custom; query_proj, key_proj", "without a place"),
    ("remat_policy: custom; router_logits = offload", "router_logits"),
])
def test_a_policy_the_reader_cannot_price_is_one_line_naming_it(text, word):
    with pytest.raises(BandwiseError, match=word):
        parse_remat_policy(text)


# ---- what each policy keeps -------------------------------------------------------------------
def test_bytes_kept_and_offloaded_per_token_match_the_layer_tensors_widths():
    p = MAXTEXT_POLICIES
    assert p["qkv_proj_offloaded"].bytes_per_token(M, False, "device") == 2 * H
    assert p["qkv_proj_offloaded"].bytes_per_token(M, False, "offload") == 2 * (Q + 2 * KV)
    # every dot and the attention output: input, q, k, v, context, out, both MLP inputs (mlpwo is read by no backward)
    assert p["minimal_with_context"].bytes_per_token(M, False, "device") == 2 * (H + Q + 2 * KV + Q + H + 2 * F)
    assert p["save_dot_except_mlpwi"].bytes_per_token(M, False, "device") == 2 * (H + Q + 2 * KV + H)
    # a fused name covers the separate projections once, not twice
    assert RematPolicy(name="custom", device=frozenset({"qkv_proj", "query_proj"})).bytes_per_token(M, False, "device") == 2 * (Q + 2 * KV)


def _est(policy, cluster="tpu-v5p", tp=1, mb=1):
    s = Strategy(dp_shard=8 // tp, tp=tp, recompute="full", micro_batch=mb)
    return estimate(M, get_cluster(cluster), s, replace(DEFAULT_PARAMS, remat_policy=policy))


def test_a_policy_that_keeps_only_the_input_is_full_recomputation():
    full, policy = _est(None), _est(RematPolicy(name="custom"))
    assert policy.step_time_s == pytest.approx(full.step_time_s, rel=1e-12)
    assert policy.memory_gib["activations"] == pytest.approx(full.memory_gib["activations"], rel=1e-12)


@pytest.mark.parametrize("tp", [1, 2])
def test_tensors_kept_on_the_device_add_their_bytes_for_every_layer_of_the_micro_batch(tp):
    """pp = 1, one micro-batch in flight: every layer holds its kept tensors for all the micro-batch's
    tokens (4 sequences, so that the peak is the backward's, not the optimizer step's)."""
    full, saved = _est(None, tp=tp, mb=4), _est(MAXTEXT_POLICIES["save_qkv_proj"], tp=tp, mb=4)
    assert full.memory_gib["grads_not_at_peak"] < 0  # the peak is in the backward
    closed = M.layers * 4 * M.seq_len * 2 * (Q + 2 * KV) / tp / GIB
    assert saved.memory_gib["activations"] - full.memory_gib["activations"] == pytest.approx(closed, rel=1e-9)


def test_offloaded_tensors_leave_hbm_and_are_not_re_run():
    full, off = _est(None), _est(MAXTEXT_POLICIES["qkv_proj_offloaded"])
    assert off.memory_gib["activations"] == pytest.approx(full.memory_gib["activations"], rel=1e-12)
    assert off.breakdown["recompute"] < full.breakdown["recompute"]
    assert off.breakdown["compute"] == pytest.approx(full.breakdown["compute"], rel=1e-12)


def test_offloading_on_a_device_without_a_host_link_figure_is_refused():
    with pytest.raises(BandwiseError, match="host_link_bandwidth"):
        _est(MAXTEXT_POLICIES["qkv_proj_offloaded"], cluster="h100")


def test_a_host_copy_costs_only_what_outlasts_the_pass_it_hides_behind():
    moved, bw = np.array([3e9, 3e9]), 1.5e10  # 0.2 s of copy
    assert exposed_transfer_s(moved, bw, np.array([0.5, 0.05])) == pytest.approx([0.0, 0.15])


# ---- a synthetic run --------------------------------------------------------------------------
def test_a_run_stating_an_offloading_policy_is_priced_and_says_so():
    run = {
        "id": "synthetic_offload", "source": "synthetic",
        "hardware": {"accelerator": "TPU v5p", "count": 8},
        "model": {"name": "m", "layers": 8, "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn": 5632, "ffn_type": "SwiGLU",
                  "vocab": 32000, "seq_len": 2048},
        "parallelism": {"tp": 1, "pp": 1, "cp": 1, "fsdp": 8, "zero_or_fsdp": "FSDP", "global_batch_seqs": 16,
                        "recompute": "remat_policy: custom; decoder_layer_input, query_proj, key_proj, value_proj = offload (host)"},
        "precision": "bf16", "target": {"tokens_per_sec_per_device": 1000.0},
    }
    case = convert(run, None)
    assert case.fixed["recompute"] == "full" and case.stated.remat_policy.offload == {"decoder_layer_input", "query_proj", "key_proj", "value_proj"}
    res = predict(case)
    assert res.reason is None and res.predicted > 0
    assert any("remat policy" in n for n in res.notes)


# ---- expert tensor parallelism (the same issue's memory terms) --------------------------------
def test_a_stated_expert_tensor_parallelism_splits_each_expert_over_its_ranks_too():
    """Megatron-Core's expert ranks are pp x etp x ep x edp: with ETP = TP = 2 and EP 4 a device holds
    1/8 of the routed experts' bf16 weights, not 1/4 (closed form over the model's own count)."""
    m = get_model("debug-moe")
    s = Strategy(dp_replicate=4, tp=2, ep=4, zero_stage=1, micro_batch=1)
    base = estimate(m, get_cluster("h100"), s, DEFAULT_PARAMS)
    split = estimate(m, get_cluster("h100"), s, replace(DEFAULT_PARAMS, expert_tensor_parallel=2))
    closed = m.routed_expert_params_total * 2 * (1 / 4 - 1 / 8) / GIB
    assert base.memory_gib["params"] - split.memory_gib["params"] == pytest.approx(closed, rel=1e-9)
    assert split.breakdown["compute"] == pytest.approx(base.breakdown["compute"], rel=1e-12)


def test_selective_checkpointing_that_regathers_keeps_only_the_sequence_shard_of_the_gemm_inputs():
    """torch TP keeps the two norm outputs all-gathered (2 x 2h bytes a token, whole on every TP rank);
    an op-level SAC that recomputes the all-gather keeps their shard, 2 x 2h / tp: the difference over
    every layer of one micro-batch (pp = 1) is layers x tokens x 4h x (1 - 1/tp)."""
    tp, mb = 4, 4
    s = Strategy(dp_shard=8 // tp, tp=tp, recompute="selective", micro_batch=mb)
    kept = replace(DEFAULT_PARAMS, tp_gathered_inputs=True)
    base = estimate(M, get_cluster("h100"), s, kept)
    regathered = estimate(M, get_cluster("h100"), s, replace(kept, selective_regathers_inputs=True))
    assert base.memory_gib["grads_not_at_peak"] < 0  # the peak is in the backward
    closed = M.layers * mb * M.seq_len * 4 * H * (1 - 1 / tp) / GIB
    assert base.memory_gib["activations"] - regathered.memory_gib["activations"] == pytest.approx(closed, rel=1e-9)
    full = Strategy(dp_shard=8 // tp, tp=tp, recompute="none", micro_batch=mb)  # without recomputation nothing changes
    assert (estimate(M, get_cluster("h100"), full, kept).memory_gib["activations"]
            == estimate(M, get_cluster("h100"), full, replace(kept, selective_regathers_inputs=True)).memory_gib["activations"])


def test_an_engine_that_shards_over_its_cp_ranks_keeps_the_states_of_fsdp_over_as_many_ranks():
    """TorchTitan's FSDP spans dp_shard x cp (`cp_shards_weights`): CP8 with dp_shard 1 keeps the
    weights, gradients and optimizer states that FSDP8 keeps; without it CP8 keeps them whole."""
    P = replace(DEFAULT_PARAMS, cp_shards_weights=True)
    cp8, fsdp8 = estimate(M, get_cluster("h100"), Strategy(cp=8), P), estimate(M, get_cluster("h100"), Strategy(dp_shard=8), P)
    for part in ("params", "grads_optimizer"):
        assert cp8.memory_gib[part] == pytest.approx(fsdp8.memory_gib[part], rel=1e-12)
    whole = estimate(M, get_cluster("h100"), Strategy(cp=8), DEFAULT_PARAMS)
    assert whole.memory_gib["params"] == pytest.approx(M.total_params * 2 / GIB, rel=1e-2)  # bf16 weights, whole
    assert cp8.memory_gib["params"] == pytest.approx(M.total_params * 4 / 8 / GIB, rel=1e-2)  # the fp32 shard (master copy) over 8
