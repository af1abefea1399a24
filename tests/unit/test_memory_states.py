"""Model states and FSDP buffers against the frameworks' own closed forms."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bandwise.cost.memory import GIB, RECOMPUTE_MODULES, activation_bytes_per_token, model_state_bytes
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.step import estimate
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy


def one(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


@pytest.mark.parametrize("d", [1, 2, 8, 128])
def test_fp32_gradients_reproduce_megatrons_bytes_per_parameter(d):
    """Megatron-LM docs/source/api-guide/dist_optimizer.md, 'bf16 param, fp32 grads': 18 bytes per
    parameter without the distributed optimizer, 6 + 12/d with it."""
    assert one(model_state_bytes(1.0, d, 0, grad_bytes=4)) == pytest.approx(18)
    assert one(model_state_bytes(1.0, d, 1, grad_bytes=4)) == pytest.approx(6 + 12 / d)
    # FSDP2 with reduce_dtype fp32: fp32 shard (the master copy), fp32 gradient, two fp32 moments
    assert one(model_state_bytes(1.0, d, 3, grad_bytes=4)) == pytest.approx(16 / d)
    # bf16 AdamW moments (DeepSeek-V3): 4 bytes fewer in the sharded optimizer state
    assert one(model_state_bytes(1.0, d, 1, grad_bytes=4, moment_bytes=2)) == pytest.approx(6 + 8 / d)


def test_unknown_recompute_module_is_refused():
    with pytest.raises(ValueError, match="recompute modules"):
        activation_bytes_per_token(get_model("llama3-8b"), moe_layer=False, selective=True, modules=("moe",))


def test_fsdp_with_pipeline_keeps_the_stage_gathered_with_fp32_gradients():
    """FSDP x PP (TorchTitan's reshard_after_forward = not pp_enabled; torch pipelining's no-sync until
    the last backward): the stage's bf16 parameters and fp32 accumulated gradients, 6 bytes per
    parameter of the stage on top of its sharded states, and the bf16 weight gradient of its largest
    unit before its accumulation; without PP, two layers' buffers. The sharded
    fp32 gradients appear only with the last micro-batch's reduce-scatter, after the peak."""
    m, c = get_model("llama3-70b"), get_cluster("h100")
    s = Strategy(dp_shard=8, tp=8, pp=4, micro_batch=1, global_batch=64, recompute="full")
    on = estimate(m, c, s)
    off = estimate(m, c, s, replace(DEFAULT_PARAMS, fsdp_pp_unsharded=False))
    # the fullest rank: the first, with 20 of 80 layers and the embedding (as large as the output
    # layer) and the most micro-batches in flight, split over TP 8; its largest FSDP unit is a layer
    stage_params = (m.non_expert_layer_params / 4 + m.output_params) / 8
    assert on.memory_gib["params"] * GIB == pytest.approx(4 * stage_params / 8, rel=1e-3)  # fp32 shard over dp_shard 8
    largest_unit = m.non_expert_layer_params / m.layers / 8
    assert on.memory_gib["buffers"] * GIB - DEFAULT_PARAMS.reserved_bytes == pytest.approx(6 * stage_params + 2 * largest_unit, rel=1e-3)
    assert on.memory_gib["grads_not_at_peak"] * GIB == pytest.approx(-4 * stage_params / 8, rel=1e-3)
    assert on.memory_gib["buffers"] > off.memory_gib["buffers"] + 10
    # without PP the switch changes nothing: two layers gathered, one layer's gradient
    flat = Strategy(dp_shard=32, tp=8, micro_batch=1, global_batch=64, recompute="full")
    layer = (2 * 2 + 4) * m.non_expert_layer_params / m.layers / 8
    for params in (DEFAULT_PARAMS, replace(DEFAULT_PARAMS, fsdp_pp_unsharded=False)):
        assert estimate(m, c, flat, params).memory_gib["buffers"] * GIB - params.reserved_bytes == pytest.approx(layer, rel=1e-6)


def test_torch_tp_keeps_the_gathered_gemm_inputs_whole_on_every_rank():
    """torch's ColwiseParallel saves the all-gathered norm outputs (2 per layer and the final norm's,
    which the output projection reads; bf16, the whole sequence); Megatron keeps the 1/t shard. The
    difference is closed-form: (2·L + 1) · 2·h · (1 − 1/t) bytes per token."""
    from bandwise.cost.params import CostParams
    from bandwise.cost.step import estimate
    from bandwise.specs.registry import get_cluster, get_model
    from bandwise.specs.strategy import Strategy

    m = get_model("llama3-8b")
    s = Strategy(dp_shard=8, tp=8, micro_batch=1, global_batch=8)
    c = get_cluster("h100")
    megatron = estimate(m, c, s, CostParams()).memory_gib["activations"]
    torch_tp = estimate(m, c, s, CostParams(tp_gathered_inputs=True)).memory_gib["activations"]
    expected = (2 * m.layers + 1) * m.seq_len * 2 * m.hidden * (1 - 1 / s.tp) / 2**30
    assert abs((torch_tp - megatron) - expected) < 1e-9 * expected


def test_recomputed_layer_and_logits_are_not_alive_together():
    """Without pipeline stages the rank also computes the loss. Its logits (4 bytes each: bf16 values and
    gradient) and the head's two inputs (the final norm's and the projection's, 2·h bytes each a token)
    are freed in the head's backward before the last block is recomputed, so the peak holds the kept
    layer inputs plus the larger of one layer's full activations and the head's part, not both (the
    dry run of Llama 3 8B under full recomputation peaks in the loss: benchmarks/RESULTS.md)."""
    from bandwise.cli.dry_run import planner_memory

    for vocab in (128_256, 8_192):  # logits above, then below, one layer's activations
        m = replace(get_model("llama3-8b"), layers=2, vocab=vocab)
        tokens = m.seq_len
        head = 4 * tokens * vocab + 2 * tokens * 2 * m.hidden
        # two micro-batches: no moment accounting, the activations are the kept sum itself
        full = planner_memory(m, Strategy(dp_shard=8, micro_batch=1, global_batch=16, recompute="full"), "h100")["activations"]
        one_layer = tokens * activation_bytes_per_token(m, moe_layer=False)[0]
        kept = m.layers * tokens * 2 * m.hidden
        assert full == pytest.approx(kept + max(one_layer, head), rel=1e-9)
        assert full < kept + one_layer + head


def test_fsdp_buffers_are_those_of_the_peak_moment():
    """Under FSDP the output head is its own unit, kept gathered from its forward to its backward. One
    micro-batch, no pipeline: the peak is one moment, with that moment's FSDP buffers.
    - Llama 3 8B's shape peaks at the loss, where the head's bf16 weight stands gathered (2 bytes a
      head parameter; the dry run measures 0.98 GiB there, RESULTS.md).
    - A large vocabulary over short sequences and thin layers peaks in the head's backward: its
      gathered weight, all-gather buffer and fp32 gradient (8 bytes a head parameter) with the logits
      consumed.
    - With gradient accumulation every moment is counted at once: a layer's 8 bytes a parameter."""
    from bandwise.cli.dry_run import planner_memory

    s = Strategy(dp_shard=8, micro_batch=1, global_batch=8)
    thin = replace(get_model("llama3-8b"), layers=2, ffn=1024, vocab=262_144, seq_len=1024)
    head = thin.vocab * thin.hidden
    thin_mem = planner_memory(thin, s, "h100")
    assert thin_mem["buffers"] == pytest.approx(8 * head, rel=1e-9)
    assert thin_mem["activations"] < 4 * thin.seq_len * thin.vocab  # the logits are gone by then
    own = replace(get_model("llama3-8b"), layers=2)
    assert planner_memory(own, s, "h100")["buffers"] == pytest.approx(2 * own.vocab * own.hidden, rel=1e-9)
    layer_buffers = 8 * own.non_expert_layer_params / own.layers
    assert planner_memory(own, replace(s, global_batch=16), "h100")["buffers"] == pytest.approx(layer_buffers, rel=1e-9)


def test_one_micro_batch_under_fsdp_holds_no_gradient_at_its_activation_peak():
    """FSDP2, one micro-batch: `zero_grad(set_to_none=True)` leaves no gradient at the loss, where the
    kept activations and the logits peak (the dry run measures only the head's shard there). Llama 3 8B
    on 8 ranks: that peak is above the head's backward and the end of the backward, so the whole
    sharded fp32 gradient, 4 bytes x parameters / 8, is absent from it. With a second micro-batch,
    ZeRO-1, or the switch off, the first micro-batch's (or the persistent) gradients stand there."""
    m, c = get_model("llama3-8b"), get_cluster("h100")
    one_mb = Strategy(dp_shard=8, micro_batch=1, global_batch=8)
    est = estimate(m, c, one_mb)
    assert est.memory_gib["grads_not_at_peak"] * GIB == pytest.approx(-4 * m.total_params / 8, rel=1e-6)
    assert est.memory_gib_per_device == pytest.approx(sum(est.memory_gib.values()), rel=1e-9)
    for other, params in ((replace(one_mb, global_batch=16), DEFAULT_PARAMS),
                          (Strategy(dp_replicate=8, zero_stage=1, micro_batch=1, global_batch=8), DEFAULT_PARAMS),
                          (one_mb, replace(DEFAULT_PARAMS, fsdp_grads_freed=False))):
        assert estimate(m, c, other, params).memory_gib["grads_not_at_peak"] == 0.0
    off = estimate(m, c, one_mb, replace(DEFAULT_PARAMS, fsdp_grads_freed=False))
    assert off.memory_gib_per_device - est.memory_gib_per_device >= 4 * m.total_params / 8 / GIB


def test_deepseek_v3_low_precision_storage_by_hand():
    """DeepSeek-V3's MoE layer under its own recomputation and storage (report Sec. 3.2.3, 3.3.3): the
    norms and MLA up-projections re-run, so the layer keeps the two residual-stream inputs (2·2h),
    the attention output in E5M6 (1.5 bytes a value), each routed copy's fp8 GEMM input (h) and fp8
    SwiGLU input (2 per expert-FFN element, its output re-run), the shared expert's SwiGLU input,
    fp32 router scores; and, on every TP rank, MLA's bf16 latents."""
    m = get_model("deepseek-v3")
    h, H = m.hidden, m.heads
    by_hand = (4 * h + 1.5 * H * m.d_value + 2 * m.shared_experts * m.shared_ffn
               + m.top_k * (h + 2 * m.expert_ffn) + 4 * m.experts)
    latents = 2 * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim)
    kw = dict(moe_layer=True, selective=True, modules=RECOMPUTE_MODULES, fp8=True)
    assert activation_bytes_per_token(m, fp8_act_cache=True, **kw) == (by_hand, latents)
    # without the low-precision cache the SwiGLU inputs and the attention output are bf16
    plain, _ = activation_bytes_per_token(m, **kw)
    assert plain - by_hand == 0.5 * H * m.d_value + 2 * m.shared_experts * m.shared_ffn + m.top_k * 2 * m.expert_ffn


@pytest.mark.parametrize("vocab, fullest", [(1_000_000, "first"), (129280, "inner"), (1024, "inner")])
def test_v_shaped_peak_is_one_ranks_states_and_activations(vocab, fullest):
    """DualPipeV over 16 ranks cuts DeepSeek-V3's 61 layers into 32 stages of 2 (the last three of 1):
    rank 0 holds stage 0 and stage 31, 3 layers with the embedding, head and any MTP module; rank 3 holds
    stages 3 and 28, 4 layers and neither edge. The peak is one of these ranks, states and activations
    together: with a vocabulary of a million rank 0 (its embedding and head outweigh a layer's
    activations), with the real one (129,280) or a tiny one rank 3. The bf16 weights of the fullest
    rank, counted here from the spec, name which it is."""
    m = replace(get_model("deepseek-v3"), vocab=vocab)
    s = Strategy(dp_replicate=128, pp=16, ep=64, zero_stage=1, schedule="DualPipeV", virtual_stages=2,
                 micro_batch=1, global_batch=15360, recompute="selective")
    e = estimate(m, get_cluster("h800"), s)
    per_layer = m.non_expert_layer_params / m.layers + m.routed_expert_params_total / m.layers / 64
    edges = m.embedding_params + m.output_params + m.mtp_depth * (m.mtp_module_params - m.mtp_expert_params + m.mtp_expert_params / 64)
    by_hand = {"first": 3 * per_layer + edges, "inner": 4 * per_layer}[fullest]
    assert e.memory_gib["params"] * GIB == pytest.approx(2 * by_hand, rel=1e-9)


def test_fsdp_pp_gradients_stand_beside_the_micro_batches_after_the_first_backward():
    """FSDP × PP: the stage's unsharded fp32 gradients appear with its first backward. Under 1F1B with
    m = p micro-batches rank 0 holds p of them before that backward and p - 1 after it, so the peak
    is lower than with m = 2p (where p are in flight again beside the gradients) by one micro-batch
    of the stage's activations, or by the gradients where they are smaller (the dry run of Llama 3
    70B at PP 4 measures no gradient at its peak: benchmarks/RESULTS.md)."""
    from bandwise.cli.dry_run import planner_memory

    m = replace(get_model("llama3-70b"), layers=8)
    kw = dict(dp_shard=8, tp=8, pp=4, schedule="1F1B", micro_batch=1)
    short = planner_memory(m, Strategy(**kw, global_batch=32), "h100")  # m = 4 = p
    long = planner_memory(m, Strategy(**kw, global_batch=64), "h100")  # m = 8
    assert short["activations"] == pytest.approx(long["activations"], rel=1e-12)  # p in flight either way
    grads_unsharded = short["params"] * 8  # the fp32 shard of the stage's weights, gathered
    one_micro_batch = short["activations"] / 4
    assert long["total"] - short["total"] == pytest.approx(min(grads_unsharded, one_micro_batch), rel=1e-9)


@pytest.mark.parametrize("schedule,held", [("GPipe", 3), ("1F1B", 0)])
def test_all_forward_schedules_keep_every_micro_batchs_loss_on_the_last_stage(schedule, held):
    """torch's pipeline schedules run the loss in the last stage's forward. Under GPipe the last stage
    keeps what the loss keeps of the logits for all m micro-batches before its first backward; 1F1B
    runs each one's backward next. With 4 micro-batches, what 2 more kept bytes a logit add is
    closed-form: (m - 1) · s · 2 · V, and nothing under 1F1B."""
    m, c = get_model("llama3-8b"), get_cluster("h100")
    s = Strategy(dp_shard=4, pp=2, micro_batch=1, global_batch=16, schedule=schedule)
    two, four = (estimate(m, c, s, replace(DEFAULT_PARAMS, loss_kept_bytes_per_logit=k)) for k in (2.0, 4.0))
    assert (four.memory_gib["activations"] - two.memory_gib["activations"]) * GIB == pytest.approx(held * m.seq_len * 2 * m.vocab, abs=1.0)


@pytest.mark.parametrize("tp,cp,mb", [(1, 2, 1), (2, 1, 2), (1, 1, 1), (8, 1, 4)])
def test_persistent_state_takes_the_headroom_only_on_what_a_step_allocates_and_frees(tp, cp, mb):
    """`CostParams.persistent_state` (Megatron-Core's flat param/grad buffers): a layout fits when
    persistent + the rest / (1 - headroom) <= HBM; without it, when the whole peak <= (1 - headroom) x HBM."""
    model, cluster = get_model("llama3-8b"), get_cluster("h100")
    dp = 8 // (tp * cp)
    s = Strategy(dp_replicate=dp, tp=tp, cp=cp, zero_stage=1, micro_batch=mb, global_batch=8 * dp * mb, recompute="none")
    hbm = cluster.device.hbm_bytes / GIB
    for persistent in (False, True):
        P = replace(DEFAULT_PARAMS, persistent_state=persistent)
        e = estimate(model, cluster, s, P)
        states = e.memory_gib["params"] + e.memory_gib["grads_optimizer"] + e.memory_gib["grads_not_at_peak"]
        rest = e.memory_gib_per_device - states
        limit = states + rest / (1 - P.headroom) if persistent else e.memory_gib_per_device / (1 - P.headroom)
        assert e.fits == (limit <= hbm), (persistent, limit, hbm)
        assert e.memory_gib_per_device == pytest.approx(states + rest)  # the reported peak is the same either way


def test_persistent_state_lets_nemos_llama3_8b_run_as_its_recipe_did():
    """NeMo 24.07's llama3_8b recipe (NeMo-Framework-Launcher conf/training/llama/llama3_8b.yaml at tag
    24.07: CP 2, micro-batch 1, no activation checkpointing) on 8 H100s: 73 GiB by the cost model, over
    the 72 GiB that a 10% headroom leaves, inside it once the 56 GiB of flat buffers need none."""
    model, cluster = get_model("llama3-8b"), get_cluster("h100")
    s = Strategy(dp_replicate=4, cp=2, zero_stage=1, micro_batch=1, global_batch=128, recompute="none")
    kept = estimate(model, cluster, s, replace(DEFAULT_PARAMS, persistent_state=True))
    freed = estimate(model, cluster, s, DEFAULT_PARAMS)
    assert kept.memory_gib_per_device == pytest.approx(freed.memory_gib_per_device)
    assert kept.fits and not freed.fits
