"""A plan as Megatron-LM arguments: `torchrun pretrain_gpt.py` with the layout's flags.

Megatron-LM builds most of its command line from Megatron-Core's config dataclasses: a field
`x_y` of TransformerConfig (ModelParallelConfig included) is the flag `--x-y`, a boolean field
that defaults to True is `--no-x-y`, and a field's `argparse_meta` may rename it
(megatron/training/argument_utils.py, ArgumentGroupFactory; `fp8` is `--fp8-format`). The rest
(batch sizes, the optimizer's sharding, the model's shape words) are hand-written in
megatron/training/arguments.py. Flags checked against Megatron-LM at commit d98e8a6 (2026-08-22)
and Megatron-Core 0.16.1.

What Megatron-LM's layout can hold:
- pipeline schedules: 1F1B and interleaved 1F1B (`--num-virtual-stages-per-pipeline-rank`); no
  all-forward-all-backward (GPipe), zero-bubble or DualPipeV schedule: the nearest is interleaved
  1F1B with the same stages per rank;
- an uneven split of layers over stages as an explicit `--pipeline-model-parallel-layout`
  ("Ett|tt|...|ttL": E the embedding, t a layer, m an MTP module, L the loss), stages listed in
  virtual order;
- ZeRO-1 as the distributed optimizer (`--use-distributed-optimizer`: optimizer states and fp32
  master weights sharded, gradient buffer whole: docs/source/api-guide/dist_optimizer.md), so
  ZeRO-2's sharded gradients are not expressed; ZeRO-3 as Megatron FSDP (`--use-megatron-fsdp
  --data-parallel-sharding-strategy optim_grads_params`) over the whole data-parallel group;
- expert parallelism carved from data · context · tensor ranks with experts not split by TP
  (`--expert-tensor-parallel-size 1`), the all-to-all overlapped with another micro-batch by
  `--overlap-moe-expert-parallel-comm`;
- TP communication overlap by `--tp-comm-overlap`; fp8 by `--fp8-format hybrid`.
"""

from __future__ import annotations

import shlex

from bandwise.export.common import TORCHRUN, Adapted, script_head, stage_layers
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy

NEAREST_SCHEDULE = {"GPipe": "1F1B", "LoopedBFS": "Interleaved1F1B", "InterleavedZeroBubble": "Interleaved1F1B",
                    "ZBVZeroBubble": "Interleaved1F1B", "DualPipeV": "Interleaved1F1B"}


SEARCHES: tuple[dict[str, object], ...] = (
    {"schedule": "Interleaved1F1B", "zero_stage": 1}, {"schedule": "1F1B", "zero_stage": 1}, {"pp": 1, "zero_stage": 1},
)
"""Searches for the best layout Megatron-LM expresses when the plan's is not one: its two
schedules or none, over the distributed optimizer."""


def adapt(model: ModelSpec, cluster: Cluster, s: Strategy, devices: int) -> Adapted:
    changes: list[str] = []
    if s.pp > 1 and s.schedule in NEAREST_SCHEDULE:
        to = NEAREST_SCHEDULE[s.schedule]
        changes.append(f"{s.schedule}: Megatron-LM has no such schedule; {to}"
                       + (f" with {s.virtual_stages} stages per rank" if to == "Interleaved1F1B" else ""))
        s = s.replace(schedule=to, virtual_stages=s.virtual_stages if to == "Interleaved1F1B" else 1)
    if s.dp_shard > 1 and s.dp_replicate > 1:
        changes.append(f"HSDP DP{s.dp_replicate}·FSDP{s.dp_shard}: exported as Megatron FSDP over all {s.dp} data-parallel ranks")
        s = s.replace(dp_shard=s.dp, dp_replicate=1)
    if s.dp_shard == 1 and s.zero_stage == 2:
        changes.append("ZeRO-2: Megatron's distributed optimizer shards optimizer states and master weights but keeps the "
                       "whole gradient buffer (ZeRO-1)")
        s = s.replace(zero_stage=1)
    return Adapted(s, changes)


def stage_layout(model: ModelSpec, pp: int, virtual: int) -> str | None:
    """Megatron's explicit layer layout when the layers do not divide over the pp · v stages, else
    None. Stages are listed in virtual order and hold the cost model's even split (`stage_layers`)."""
    stages = pp * virtual
    if model.layers % stages == 0 and model.mtp_depth == 0:
        return None
    words = ["t" * c for c in stage_layers(model.layers, stages)]
    words[0] = "E" + words[0]
    words[-1] += "m" * model.mtp_depth + "L"
    return "|".join(words)


def render(model: ModelSpec, cluster: Cluster, s: Strategy, devices: int) -> tuple[str, list[str]]:
    notes: list[str] = []
    args: list[tuple[str, object]] = _model_args(model)
    args += [("tensor-model-parallel-size", s.tp), ("pipeline-model-parallel-size", s.pp), ("context-parallel-size", s.cp)]
    if s.tp > 1:
        args.append(("sequence-parallel", None))
    if s.pp > 1:
        layout = stage_layout(model, s.pp, s.virtual_stages)
        if layout is not None:
            args.append(("pipeline-model-parallel-layout", layout))
        elif s.virtual_stages > 1:
            args.append(("num-virtual-stages-per-pipeline-rank", s.virtual_stages))
    if s.ep > 1:
        args += [("expert-model-parallel-size", s.ep), ("expert-tensor-parallel-size", 1)]
        if s.overlap_ep:
            args.append(("overlap-moe-expert-parallel-comm", None))
    args += [("micro-batch-size", s.micro_batch), ("global-batch-size", s.effective_global_batch)]
    if s.dp_shard > 1:
        # Megatron FSDP v1 runs on the distributed optimizer (arguments.py turns it on when missing)
        args += [("use-megatron-fsdp", None), ("data-parallel-sharding-strategy", "optim_grads_params"), ("use-distributed-optimizer", None)]
    elif s.zero_stage == 1:
        args.append(("use-distributed-optimizer", None))
    if s.overlap_dp and s.dp > 1:
        args.append(("overlap-grad-reduce", None))
        if s.dp_shard > 1 or s.zero_stage == 1:
            args.append(("overlap-param-gather", None))
    if s.recompute == "selective":
        modules = ["core_attn"] + (["moe_act"] if model.is_moe else [])
        args += [("recompute-granularity", "selective"), ("recompute-modules", modules)]
        notes.append("the plan's selective recomputation also recomputes the dense MLP's activation; Megatron's "
                     "recompute modules name no such unit ('mlp' recomputes the whole MLP), so activations differ slightly")
    elif s.recompute == "full":
        args += [("recompute-granularity", "full"), ("recompute-method", "uniform"), ("recompute-num-layers", 1)]
    args.append(("bf16", None))
    if s.precision == "fp8":
        args.append(("fp8-format", "hybrid"))
    if s.overlap_tp and s.tp > 1:
        args.append(("tp-comm-overlap", None))
    if cluster.levels[0].is_torus:
        notes.append(f"Megatron-LM runs on GPUs; {cluster.device.name} is not one: the layout is exported as planned")
    lines = script_head(devices) + ["ARGS=("]
    for k, v in args:
        if v is None:
            lines.append(f"  --{k}")
        elif isinstance(v, list):
            lines.append(f"  --{k} " + " ".join(shlex.quote(str(x)) for x in v))
        else:
            lines.append(f"  --{k} {shlex.quote(str(v))}")
    lines += [
        ")",
        TORCHRUN,
        '  pretrain_gpt.py "${ARGS[@]}" "$@"  # add data, tokenizer, optimizer and checkpoint flags after the file',
    ]
    return "\n".join(lines) + "\n", notes


def _model_args(m: ModelSpec) -> list[tuple[str, object]]:
    """The model's shape as Megatron-LM flags, from the model spec. Llama-style (gated MLP) models
    take RoPE, RMSNorm and no biases; the others GPT-style learned positions, LayerNorm and biases."""
    a: list[tuple[str, object]] = [
        ("num-layers", m.layers), ("hidden-size", m.hidden), ("ffn-hidden-size", m.ffn), ("num-attention-heads", m.heads),
        ("seq-length", m.seq_len), ("max-position-embeddings", m.seq_len), ("vocab-size", m.vocab),
    ]
    if m.is_mla:
        a += [("multi-latent-attention", None), ("kv-lora-rank", m.kv_lora_rank), ("qk-head-dim", m.qk_nope_head_dim),
              ("qk-pos-emb-head-dim", m.qk_rope_head_dim), ("v-head-dim", m.v_head_dim)]
        if m.q_lora_rank:
            a.append(("q-lora-rank", m.q_lora_rank))
    else:
        if m.n_kv_heads != m.heads:
            a += [("group-query-attention", None), ("num-query-groups", m.n_kv_heads)]
        if m.d_head != m.hidden // m.heads:
            a.append(("kv-channels", m.d_head))
    if m.gated_mlp:
        a += [("swiglu", None), ("position-embedding-type", "rope"), ("normalization", "RMSNorm"), ("disable-bias-linear", None)]
    if not m.tied_embeddings:
        a.append(("untie-embeddings-and-output-weights", None))
    if not m.dropout:
        a += [("hidden-dropout", 0.0), ("attention-dropout", 0.0)]
    if m.is_moe:
        a += [("num-experts", m.experts), ("moe-router-topk", m.top_k), ("moe-ffn-hidden-size", m.expert_ffn)]
        if m.shared_experts:
            a.append(("moe-shared-expert-intermediate-size", m.shared_experts * m.shared_ffn))
        if m.dense_layers:
            a.append(("moe-layer-freq", f"[0]*{m.dense_layers}+[1]*{m.layers - m.dense_layers}"))
        if m.expert_groups:
            a += [("moe-router-num-groups", m.expert_groups), ("moe-router-group-topk", m.groups_per_token)]
    if m.mtp_depth:
        a.append(("mtp-num-layers", m.mtp_depth))
    return a


def arguments(text: str) -> list[str]:
    """The flags of an emitted ARGS=( ... ) block, as argv."""
    block = text.split("ARGS=(", 1)[1].split("\n)", 1)[0]
    return shlex.split(block)
